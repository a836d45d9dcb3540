"""torchvision's RetinaNet end to end as a plain loop, the peer of
`canopy predict` in tools/gpu/check.sh's e2e section: every PNG of a folder
decoded by PIL (DeepForest's conversion: RGB, /255 in float64, then
float32, CHW), batches of --batch images moved to the GPU and run through
the r50 fixture network (tools/retinanet/golden.py: ResNet-50-FPN, one
class, torchvision's 800/1333 resize) with the generator's seed-0 weights
(tools/retinanet/weights.py, the same values as bin/testmodel -arch
resnet50 -classes 1 writes for canopy), and each batch's boxes, scores and
labels brought back to the host. One loop per mode, after one warm-up
batch; the wall time of the whole loop, decoding included.

Modes: tf32 sets torch.backends.cudnn.allow_tf32 and
torch.backends.cuda.matmul.allow_tf32 (PyTorch's default for convolutions);
bf16 adds torch.autocast("cuda", dtype=torch.bfloat16). cudnn.benchmark
stays False (PyTorch's default).

Usage:
  python3 tools/gpu/torch_e2e.py --images DIR --batch 8 --modes tf32,bf16 --out OUT.json
"""
import argparse
import contextlib
import glob
import json
import os
import platform
import sys
import time

import numpy as np
import torch
import torchvision
from PIL import Image

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "retinanet"))
import golden  # noqa: E402
import weights  # noqa: E402


def load(path):
    a = np.asarray(Image.open(path).convert("RGB"))
    return torch.from_numpy((a / 255.0).astype(np.float32)).permute(2, 0, 1).contiguous()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--images", required=True)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--modes", default="tf32,bf16")
    ap.add_argument("--out")
    ap.add_argument("--device", default="cuda", help="cuda (the check) or cpu (a dry run of this script)")
    a = ap.parse_args()
    dev = torch.device(a.device)
    cuda = a.device == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    files = sorted(glob.glob(os.path.join(a.images, "*.png")))
    if not files:
        raise SystemExit("no PNG files in " + a.images)
    model, _ = golden.build("r50")
    weights.fill(model, 0)
    model.eval().to(dev)
    res = {
        "peer": "torchvision %s, torch %s, python %s" % (torchvision.__version__, torch.__version__, platform.python_version()),
        "gpu": torch.cuda.get_device_name(0) if cuda else "none (cpu dry run)",
        "command": " ".join(sys.argv),
        "runs": [],
    }

    def run(fs, mode):
        ctx = torch.autocast(a.device, dtype=torch.bfloat16) if mode == "bf16" else contextlib.nullcontext()
        n = 0
        with torch.inference_mode(), ctx:
            for i in range(0, len(fs), a.batch):
                batch = [load(f).to(dev, non_blocking=True) for f in fs[i : i + a.batch]]
                for o in model(batch):
                    n += len(o["boxes"].float().cpu())
                    o["scores"].float().cpu()
                    o["labels"].cpu()
        sync()
        return n

    for mode in a.modes.split(","):
        torch.backends.cudnn.allow_tf32 = True
        torch.backends.cuda.matmul.allow_tf32 = True
        run(files[: a.batch], mode)
        t0 = time.perf_counter()
        dets = run(files, mode)
        dt = time.perf_counter() - t0
        r = {"mode": mode, "batch": a.batch, "images": len(files), "seconds": dt, "img_per_s": len(files) / dt, "detections": dets}
        res["runs"].append(r)
        print("torchvision %s batch %d: %d images in %.2f s, %.1f img/s" % (mode, a.batch, len(files), dt, len(files) / dt))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
