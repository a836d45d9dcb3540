"""torch.sum of contiguous 1-D float32 tensors, the sums canopy's
metrics/torchsum.go reproduces (torchmetrics' IoU sums its float32 IoU
entries with it). Run with ATEN_CPU_CAPABILITY=avx2: torchsum.go follows
the 8-lane AVX2 kernel of the reference machine.

The vectors are generated, not stored: element i of vector v is
float32(((i * 2654435761 + v * 40503) mod 2^32) / 2^32 - 0.25) times the
vector's scale, exact in float64 before the one rounding to float32, so Go
regenerates the same bits.

Usage:
  ATEN_CPU_CAPABILITY=avx2 /opt/canopy-peers/venv/bin/python tools/metrics/torchsum.py \\
      --out testdata/golden/torch/sum.json
"""
import argparse
import json
import os
import platform
import sys

import numpy as np
import torch

SIZES = [1, 7, 8, 9, 31, 100, 127, 128, 129, 255, 1000, 4095, 4096, 5000, 20000, 32767]
SCALES = [1.0, 1000.0, 1e-3]


def vector(n, v, scale):
    i = np.arange(n, dtype=np.uint64)
    u = ((i * np.uint64(2654435761) + np.uint64(v * 40503)) % np.uint64(2 ** 32)).astype(np.float64) / 2.0 ** 32
    return ((u - 0.25) * scale).astype(np.float32)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.set_num_threads(1)
    cases = []
    for v, n in enumerate(SIZES):
        scale = SCALES[v % len(SCALES)]
        x = vector(n, v, scale)
        s = torch.from_numpy(x).sum()
        cases.append({"n": n, "v": v, "scale": scale, "sum_bits": int(np.float32(s.item()).view(np.uint32)),
                      "sum": float(s.item()), "float64_sum": float(x.astype(np.float64).sum())})
    out = {
        "peer": {"torch": torch.__version__, "cpu_capability": torch.backends.cpu.get_cpu_capability(),
                 "ATEN_CPU_CAPABILITY": os.environ.get("ATEN_CPU_CAPABILITY", "(unset)"),
                 "threads": torch.get_num_threads(), "python": platform.python_version()},
        "command": "ATEN_CPU_CAPABILITY=%s /opt/canopy-peers/venv/bin/python tools/metrics/torchsum.py %s"
        % (os.environ.get("ATEN_CPU_CAPABILITY", ""), " ".join(sys.argv[1:])),
        "generator": "x[i] = float32((((i*2654435761 + v*40503) mod 2^32) / 2^32 - 0.25) * scale)",
        "cases": cases,
    }
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
