"""How torch's bilinear resize blends, per CPU setting: the resized tensors of
GeneralizedRCNNTransform (normalize, interpolate bilinear, pad to 32) for
three images, computed by torch under several settings, each in its own
process:
  avx2-2t     the CPU capability torch picks here (AVX2 on the machine that
              made the fixture), 2 threads
  avx2-1t     the same, 1 thread
  default-2t  ATEN_CPU_CAPABILITY=default (ATen's scalar kernels), 2 threads
The fixture records, per image and setting, the sha256 of the padded float32
tensor (little-endian, CHW) and, per pair of settings, how many elements
differ and by how much. canopy's transform test compares its own tensor's
sha256 with these (infer/retinanet TestBlendFixture).

Usage (the venv with current torch/torchvision):
  /opt/canopy-peers/venv/bin/python tools/retinanet/blend.py --out testdata/golden/retinanet/blend.json \\
      forest_0003.png forest_0004.png forest_0005.png
"""
import argparse
import hashlib
import itertools
import json
import os
import platform
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from peer_meta import peer_command  # noqa: E402

SETTINGS = [
    ("avx2-2t", {}, 2),
    ("avx2-1t", {}, 1),
    ("default-2t", {"ATEN_CPU_CAPABILITY": "default"}, 2),
]


def child(args):
    import numpy as np
    import torch
    import torchvision
    from torchvision.models.detection.transform import GeneralizedRCNNTransform

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from golden import load  # noqa: E402  DeepForest's image loading

    torch.set_num_threads(args.threads)
    t = GeneralizedRCNNTransform(args.min_size, args.max_size, [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]).eval()
    info = {
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "images": [],
    }
    for i, path in enumerate(args.images):
        with torch.no_grad():
            il, _ = t([load(path)])
        a = il.tensors[0].contiguous().numpy().astype("<f4")
        np.save(os.path.join(args.child, "%d.npy" % i), a)
        info["images"].append({"resized": list(il.image_sizes[0]), "padded": list(a.shape[1:])})
    json.dump(info, open(os.path.join(args.child, "info.json"), "w"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--min-size", type=int, default=800)
    ap.add_argument("--max-size", type=int, default=1333)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--threads", type=int, default=2, help=argparse.SUPPRESS)
    ap.add_argument("images", nargs="+")
    args = ap.parse_args()
    if args.child:
        return child(args)
    import numpy as np

    tensors, infos = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, env, threads in SETTINGS:
            d = os.path.join(tmp, name)
            os.makedirs(d)
            cmd = [sys.executable, os.path.abspath(__file__), "--child", d, "--threads", str(threads),
                   "--min-size", str(args.min_size), "--max-size", str(args.max_size)] + args.images
            subprocess.run(cmd, check=True, env=dict(os.environ, **env))
            infos[name] = json.load(open(os.path.join(d, "info.json")))
            tensors[name] = [np.load(os.path.join(d, "%d.npy" % i)) for i in range(len(args.images))]
    out = {
        "command": peer_command(),
        "min_size": args.min_size,
        "max_size": args.max_size,
        "settings": {name: {k: v for k, v in infos[name].items() if k != "images"} for name, _, _ in SETTINGS},
        "images": [],
    }
    for i, path in enumerate(args.images):
        e = {
            "path": os.path.basename(path),
            "sha256_png": hashlib.sha256(open(path, "rb").read()).hexdigest(),
            "resized": infos[SETTINGS[0][0]]["images"][i]["resized"],
            "padded": infos[SETTINGS[0][0]]["images"][i]["padded"],
            "elements": int(tensors[SETTINGS[0][0]][i].size),
            "sha256": {n: hashlib.sha256(tensors[n][i].tobytes()).hexdigest() for n, _, _ in SETTINGS},
            "differ": {},
        }
        for (a, _, _), (b, _, _) in itertools.combinations(SETTINGS, 2):
            x, y = tensors[a][i], tensors[b][i]
            if x.shape != y.shape:
                raise SystemExit("%s: %s and %s resize to other shapes" % (path, a, b))
            d = np.abs(x.astype(np.float64) - y.astype(np.float64))
            e["differ"]["%s/%s" % (a, b)] = {"elements": int((x != y).sum()), "max_abs": float(d.max())}
        out["images"].append(e)
        print(path, e["differ"], file=sys.stderr)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
