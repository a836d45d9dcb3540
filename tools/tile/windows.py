"""Window-list fixture for canopy's infer/tile: the windows DeepForest's own
preprocess.compute_windows (slidingwindow) cuts for many (width, height,
patch_size, patch_overlap) cases, in its order.

The image is a zero-stride view of the requested shape (channels first, as
compute_windows wants), so large rasters cost no memory.

Usage (the peers' venv):
  /opt/canopy-peers/venv/bin/python tools/tile/windows.py > infer/tile/testdata/windows.json
"""
import importlib.metadata as md
import json
import platform
import sys

import numpy as np
from deepforest import preprocess

CASES = []
for w, h in [(1, 1), (7, 5), (399, 400), (400, 400), (401, 400), (760, 760), (761, 1141),
             (800, 600), (1000, 1000), (1234, 567), (2000, 2000), (4001, 3999), (20000, 20000)]:
    for patch in [1, 50, 100, 255, 400, 401, 512, 1000, 5000]:
        for ov in [0.0, 0.05, 0.1, 0.15, 0.25, 0.333, 0.5, 0.75, 0.9, 0.999]:
            n = 1
            for dim in (w, h):
                win = min(patch, dim)
                step = win - int(win * ov // 1)
                n *= (dim - win) // step + 2
            if n <= 200:
                CASES.append((w, h, patch, ov))


def main():
    out = {
        "peer": {"deepforest": md.version("deepforest"), "slidingwindow": md.version("slidingwindow"),
                 "numpy": np.__version__, "python": platform.python_version()},
        "command": "/opt/canopy-peers/venv/bin/python tools/tile/windows.py",
        "cases": [],
    }
    for w, h, patch, ov in CASES:
        img = np.broadcast_to(np.zeros((1, 1, 1), dtype=np.uint8), (3, h, w))
        wins = preprocess.compute_windows(img, patch, ov)
        out["cases"].append({"width": w, "height": h, "patch": patch, "overlap": ov,
                             "windows": [list(x.getRect()) for x in wins]})
    json.dump(out, sys.stdout, separators=(",", ":"))
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
