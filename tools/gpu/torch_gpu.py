"""Times torchvision's RetinaNet on a GPU with the weights of canopy's r50
parity fixture (tools/retinanet/golden.py builds the network, weights.py
fills it with the generator internal/testsupport/testweights reproduces), at batch 1
and 8 of the 400x400 fixture images, FP32 and TF32, and, given canopy's
BenchmarkGPUDetect output, prints the ratio canopy/torchvision in images/s.

Precision settings, stated in the output: fp32 sets
torch.backends.cudnn.allow_tf32 = False and torch.backends.cuda.matmul.allow_tf32
= False; tf32 sets both True (PyTorch's default for cuDNN convolutions is
True, for matmul False). cudnn.benchmark stays False (PyTorch's default).
One call = one batch (a list of tensors), under torch.inference_mode(),
after --warmup calls; sync() around the timed loop; the
median of --count loops of --repeat calls.

Usage (tools/gpu/check.sh):
  python3 tools/gpu/torch_gpu.py --repeat 20 --count 3 --go OUT/bench-canopy.txt \
      --out OUT/bench-torch.json bin/retinanet-images/forest_0000.png bin/retinanet-images/forest_0001.png
"""
import argparse
import json
import os
import platform
import re
import statistics
import sys
import time

import torch
import torchvision

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "retinanet"))
import golden  # noqa: E402
import weights  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--count", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--go", help="canopy's BenchmarkGPUDetect output")
    ap.add_argument("--out")
    ap.add_argument("--device", default="cuda", help="cuda (the check) or cpu (a dry run of this script)")
    ap.add_argument("images", nargs=2)
    a = ap.parse_args()
    dev = torch.device(a.device)
    cuda = a.device == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    model, _ = golden.build("r50")
    weights.fill(model, 0)
    model.eval().to(dev)
    imgs = [golden.load(p).to(dev) for p in a.images]
    res = {
        "peer": "torchvision %s, torch %s, python %s" % (torchvision.__version__, torch.__version__, platform.python_version()),
        "gpu": torch.cuda.get_device_name(0) if cuda else "none (cpu dry run)",
        "cudnn": torch.backends.cudnn.version() if cuda else None,
        "cudnn_benchmark": torch.backends.cudnn.benchmark,
        "runs": [],
    }
    go = {}
    if a.go:
        pat = re.compile(r"^BenchmarkGPUDetect/r50/(fp32|tf32)/batch=(\d+)\S*\s+\d+\s+[\d.]+ ns/op\s+([\d.]+) images/s")
        for line in open(a.go):
            m = pat.match(line)
            if m:
                go.setdefault((m.group(1), int(m.group(2))), []).append(float(m.group(3)))
        go = {k: statistics.median(v) for k, v in go.items()}
    for prec in ("fp32", "tf32"):
        torch.backends.cudnn.allow_tf32 = prec == "tf32"
        torch.backends.cuda.matmul.allow_tf32 = prec == "tf32"
        for bs in (1, 8):
            batch = [imgs[i % 2] for i in range(bs)]
            with torch.inference_mode():
                for _ in range(a.warmup):
                    model(batch)
                rates = []
                for _ in range(a.count):
                    sync()
                    t = time.perf_counter()
                    for _ in range(a.repeat):
                        model(batch)
                    sync()
                    rates.append(bs * a.repeat / (time.perf_counter() - t))
            r = {"precision": prec, "batch": bs, "allow_tf32": {"cudnn": torch.backends.cudnn.allow_tf32,
                 "matmul": torch.backends.cuda.matmul.allow_tf32}, "torch_images_per_s": statistics.median(rates)}
            if (prec, bs) in go:
                r["canopy_images_per_s"] = go[(prec, bs)]
                r["ratio_canopy_over_torch"] = go[(prec, bs)] / r["torch_images_per_s"]
            res["runs"].append(r)
            print(json.dumps(r), flush=True)
    print(json.dumps({k: v for k, v in res.items() if k != "runs"}))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
