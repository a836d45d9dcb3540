"""Times torchvision's RetinaNet on a GPU with the weights of canopy's r50
parity fixture (tools/retinanet/golden.py builds the network, weights.py
fills it with the generator internal/testsupport/testweights reproduces), at batch 1,
8 and 32 of the 400x400 fixture images, in four modes, and, given canopy's
BenchmarkGPUDetect output (exact, fp32, tf32, bf16), prints every canopy
mode's images/s over every torchvision mode's.

Modes, stated in the output: fp32 sets torch.backends.cudnn.allow_tf32 =
False and torch.backends.cuda.matmul.allow_tf32 = False; tf32 sets both True
(PyTorch's default for cuDNN convolutions is True, for matmul False);
tf32-benchmark is tf32 with cudnn.benchmark = True; bf16-cl is tf32 under
torch.autocast("cuda", torch.bfloat16) with the model and the images
channels_last. cudnn.benchmark is False except in tf32-benchmark.
One call = one batch (a list of tensors), under torch.inference_mode(),
after --warmup calls; sync() around the timed loop; the
median of --count loops of --repeat calls.

Usage (tools/gpu/check.sh):
  python3 tools/gpu/torch_gpu.py --repeat 20 --count 3 --go OUT/bench-canopy.txt \
      --out OUT/bench-torch.json bin/retinanet-images/forest_0000.png bin/retinanet-images/forest_0001.png
"""
import argparse
import contextlib
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
        pat = re.compile(r"^BenchmarkGPUDetect/r50/(exact|kernel-tf32|fp32|tf32|bf16)/batch=(\d+)\S*\s+\d+\s+[\d.]+ ns/op\s+([\d.]+) images/s")
        for line in open(a.go):
            m = pat.match(line)
            if m:
                go.setdefault((m.group(1), int(m.group(2))), []).append(float(m.group(3)))
        go = {k: statistics.median(v) for k, v in go.items()}
    for mode in ("fp32", "tf32", "tf32-benchmark", "bf16-cl"):
        tf32 = mode != "fp32"
        torch.backends.cudnn.allow_tf32 = tf32
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.benchmark = mode == "tf32-benchmark"
        cl = mode == "bf16-cl"
        m = model.to(memory_format=torch.channels_last) if cl else model
        for bs in (1, 8, 32):
            batch = [imgs[i % 2] for i in range(bs)]
            if cl:
                batch = [x.unsqueeze(0).to(memory_format=torch.channels_last).squeeze(0) for x in batch]
            ctx = torch.autocast("cuda", dtype=torch.bfloat16) if cl and cuda else contextlib.nullcontext()
            with torch.inference_mode(), ctx:
                for _ in range(a.warmup):
                    m(batch)
                rates = []
                for _ in range(a.count):
                    sync()
                    t = time.perf_counter()
                    for _ in range(a.repeat):
                        m(batch)
                    sync()
                    rates.append(bs * a.repeat / (time.perf_counter() - t))
            r = {"torch_mode": mode, "batch": bs, "allow_tf32": {"cudnn": torch.backends.cudnn.allow_tf32,
                 "matmul": torch.backends.cuda.matmul.allow_tf32}, "cudnn_benchmark": torch.backends.cudnn.benchmark,
                 "torch_images_per_s": statistics.median(rates)}
            for (cmode, cbs), rate in sorted(go.items()):
                if cbs == bs:
                    r["canopy_%s_images_per_s" % cmode] = rate
                    r["ratio_canopy_%s_over_torch" % cmode] = rate / r["torch_images_per_s"]
            res["runs"].append(r)
            print(json.dumps(r), flush=True)
        torch.backends.cudnn.benchmark = False
    # The table: canopy's modes (rows) over torchvision's (columns), images/s ratios.
    print("batch  canopy mode   img/s   " + "  ".join("/%-14s" % r["torch_mode"] for r in res["runs"] if r["batch"] == 1))
    for bs in (1, 8, 32):
        runs = [r for r in res["runs"] if r["batch"] == bs]
        for cmode in ("exact", "fp32", "tf32", "bf16"):
            if (cmode, bs) not in go:
                continue
            print("%5d  %-11s %7.1f   %s" % (bs, cmode, go[(cmode, bs)], "  ".join(
                "%14.2fx" % (go[(cmode, bs)] / r["torch_images_per_s"]) for r in runs)))
        print("%5d  torchvision  %s" % (bs, "  ".join("%7.1f img/s" % r["torch_images_per_s"] for r in runs)))
    print(json.dumps({k: v for k, v in res.items() if k != "runs"}))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
