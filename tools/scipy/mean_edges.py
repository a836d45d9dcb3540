"""np.mean at the edges of numpy's pairwise summation (a plain loop below 8
elements, 8-way unrolled blocks up to 128, halves above), on values whose
float64 sum depends on the order, for metrics/sum.go.

Run: /opt/canopy-peers/venv/bin/python tools/scipy/mean_edges.py testdata/golden/numpy/mean_edges.json
"""
import json
import sys

import numpy as np

rng = np.random.default_rng(30)
cases = []
for n in (7, 8, 9, 15, 16, 127, 128, 129, 136, 255, 256, 257):
    for _ in range(3):
        a = (rng.integers(1, 1000, size=n) / rng.integers(1, 997, size=n)) * 10.0 ** rng.integers(-8, 9, size=n)
        a = a.tolist()
        cases.append({"values": a, "mean": float(np.mean(a))})
cmd = "/opt/canopy-peers/venv/bin/python tools/scipy/mean_edges.py " + " ".join(sys.argv[1:])
with open(sys.argv[1], "w") as f:
    json.dump({"peer": "numpy", "version": np.__version__, "command": cmd, "cases": cases}, f)
    f.write("\n")
