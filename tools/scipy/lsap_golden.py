"""Reference assignments from scipy.optimize.linear_sum_assignment and
float64 sums from numpy.mean, for canopy's metrics tests.

Run: python3 tools/scipy/lsap_golden.py testdata/golden/scipy/lsap.json testdata/golden/numpy/mean.json
Matrices are seeded; many contain ties (small integers, repeated values,
zero rows) so the tie rules, not only the optimum, are pinned.
"""
import json
import sys

import numpy as np
import scipy
from scipy.optimize import linear_sum_assignment

rng = np.random.default_rng(20261202)
cases = []
for trial in range(400):
    nr, nc = int(rng.integers(1, 8)), int(rng.integers(1, 8))
    kind = trial % 4
    if kind == 0:
        m = rng.integers(0, 4, size=(nr, nc)).astype(float)
    elif kind == 1:
        m = np.where(rng.random((nr, nc)) < 0.4, rng.integers(1, 50, size=(nr, nc)) * 4.0, 0.0)
    elif kind == 2:
        m = np.zeros((nr, nc))
        m[rng.integers(0, nr)] = 3.0
    else:
        m = rng.random((nr, nc)) * 100
    maximize = trial % 5 != 0
    r, c = linear_sum_assignment(m, maximize=maximize)
    col = [-1] * nr
    for i, j in zip(r.tolist(), c.tolist()):
        col[i] = j
    cases.append({"rows": nr, "cols": nc, "cost": m.flatten().tolist(), "maximize": maximize, "col_for_row": col})

means = []
for trial in range(40):
    n = int(rng.integers(0, 700))
    a = (rng.integers(0, 31, size=n) / rng.integers(1, 31, size=n)).tolist()
    with np.errstate(all="ignore"):
        mean = float(np.mean(a)) if n else None
    means.append({"values": a, "mean": mean})

cmd = "python3 tools/scipy/lsap_golden.py " + " ".join(sys.argv[1:])
with open(sys.argv[1], "w") as f:
    json.dump({"peer": "scipy", "version": scipy.__version__, "numpy": np.__version__, "command": cmd, "cases": cases}, f)
with open(sys.argv[2], "w") as f:
    json.dump({"peer": "numpy", "version": np.__version__, "command": cmd, "cases": means}, f)
