"""DeepForest's predict_tile timed on a raster, for make bench-tile's side by
side with canopy predict --tile (same raster, same R50 test weights, same
threads). Prints one JSON line: seconds per run and windows/s.

Usage (the peers' venv):
  /opt/canopy-peers/venv/bin/python tools/tile/bench.py --raster R --threads 2 --repeat 1 [--patch 400 --overlap 0.05]
"""
import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from merge import offline_deepforest, torch_meta  # noqa: E402
from deepforest.datasets import prediction  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--raster", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--patch", type=int, default=400)
    ap.add_argument("--overlap", type=float, default=0.05)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    stdout, sys.stdout = sys.stdout, sys.stderr
    m = offline_deepforest()
    n = len(prediction.SingleImage(path=a.raster, patch_size=a.patch, patch_overlap=a.overlap))
    secs = []
    rows = 0
    for _ in range(a.repeat):
        t = time.perf_counter()
        out = m.predict_tile(path=a.raster, patch_size=a.patch, patch_overlap=a.overlap, iou_threshold=0.15,
                             dataloader_strategy="single")
        secs.append(time.perf_counter() - t)
        rows = 0 if out is None else len(out)
    sys.stdout = stdout
    print(json.dumps(dict({"peer": "deepforest predict_tile single", "windows": n, "rows": rows, "seconds": secs,
                           "windows_per_s": n / min(secs), "load": os.getloadavg()}, **torch_meta())))


if __name__ == "__main__":
    main()
