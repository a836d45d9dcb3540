"""The resize size table for canopy's transform (infer/retinanet, ResizeRule).

Draws seeded random image sizes and (min_size, max_size) settings and asks
torchvision's own GeneralizedRCNNTransform what it resizes each to, on meta
tensors (no pixels are computed; 5,000 sizes, each eager and scripted, took
7 minutes on the loaded 2-core VM):
  resized     the transform in eager mode (torchvision >= 0.16: the scale in
              Python floats), canopy's --resize torchvision;
  resized_015 the same transform under torch.jit.script (the float32-tensor
              scale of torchvision <= 0.15, which scripted and traced models
              still use), canopy's --resize torchvision-0.15.

Usage (the venv with current torch/torchvision):
  /opt/canopy-peers/venv/bin/python tools/retinanet/sizes.py --out testdata/golden/retinanet/sizes.json
"""
import argparse
import json
import platform
import random
import sys
import warnings

import torch
import torchvision
from torchvision.models.detection.transform import GeneralizedRCNNTransform

# (min_size, max_size): torchvision's and DeepForest's default, the demo's
# 400 tiles, and two others so the max_size bound is exercised too.
SETTINGS = [(800, 1333), (400, 400), (600, 1000), (512, 2048)]
MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--n", type=int, default=5000)
    ap.add_argument("--seed", type=int, default=14)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    eager = {s: GeneralizedRCNNTransform(s[0], s[1], MEAN, STD).eval() for s in SETTINGS}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scripted = {s: torch.jit.script(t) for s, t in eager.items()}
    rows, differ = [], 0
    for i in range(args.n):
        s = SETTINGS[i % len(SETTINGS)]
        if i % 5 == 4:  # a fifth of the sizes small, up to 400
            h, w = rng.randint(16, 400), rng.randint(16, 400)
        else:
            h, w = rng.randint(16, 4000), rng.randint(16, 4000)
        if max(h, w) > 40 * min(h, w):
            w = h  # keep the resized size above 0 for every setting
        x = torch.empty(3, h, w, device="meta")
        with torch.no_grad():
            a = eager[s]([x])[0].image_sizes[0]
            b = scripted[s]([x])[0].image_sizes[0]
        differ += tuple(a) != tuple(b)
        rows.append([h, w, s[0], s[1], int(a[0]), int(a[1]), int(b[0]), int(b[1])])
    out = {
        "peer": "torchvision %s, torch %s, python %s" % (torchvision.__version__, torch.__version__, platform.python_version()),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "threads": torch.get_num_threads(),
        "command": "/opt/canopy-peers/venv/bin/python tools/retinanet/sizes.py " + " ".join(sys.argv[1:]),
        "seed": args.seed,
        "columns": ["h", "w", "min_size", "max_size", "resized_h", "resized_w", "resized_015_h", "resized_015_w"],
        "rules_differ": differ,
        "rows": rows,
    }
    with open(args.out, "w") as f:
        # one row a line: small diffs when remade
        head = json.dumps({k: v for k, v in out.items() if k != "rows"}, indent=1)[:-2]
        f.write(head + ',\n "rows": [\n')
        f.write(",\n".join("  " + json.dumps(r) for r in rows))
        f.write("\n ]\n}\n")
    print("%d sizes, the two rules differ on %d" % (len(rows), differ), file=sys.stderr)


if __name__ == "__main__":
    main()
