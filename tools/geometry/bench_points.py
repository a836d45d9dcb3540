"""Point matching cost, DeepForest against canopy, on one image of N points.

For each N: writes DIR/N/truth.csv and preds.csv (one point per 400 px²,
85% of the trees found within a few pixels, 10% false positives), runs
DeepForest 1bad4419's IoU.match_points on them (its dense double loop of
shapely distances, then scipy), and `canopy eval --semantics evaluate_boxes`
on the same files, and prints CPU seconds (user+sys) and peak RSS of each.

  PYTHONPATH=/tmp/deepforest/src /opt/canopy-peers/venv/bin/python \
      tools/geometry/bench_points.py --canopy bin/canopy --dir /tmp/pointbench --n 1500 5000
  (--no-peer runs canopy only: DeepForest at 20,000 points takes ~40 min)
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import time

import numpy as np
import pandas as pd


def make(d, n):
    rng = np.random.default_rng(n)
    side = (400 * n) ** 0.5
    t = rng.uniform(0, side, (n, 2))
    found = rng.random(n) < 0.85
    p = t[found] + rng.normal(0, 3, (found.sum(), 2))
    p = np.vstack([p, rng.uniform(0, side, (n // 10, 2))])
    os.makedirs(d, exist_ok=True)
    pd.DataFrame({"image_path": "big.png", "x": t[:, 0], "y": t[:, 1], "label": "Tree"}).to_csv(os.path.join(d, "truth.csv"), index=False)
    pd.DataFrame({"image_path": "big.png", "x": p[:, 0], "y": p[:, 1], "label": "Tree",
                  "score": np.round(rng.random(len(p)), 3)}).to_csv(os.path.join(d, "preds.csv"), index=False)


def peer(d):
    code = """
import resource, time, sys
from deepforest import utilities, IoU
t = utilities.read_file(sys.argv[1] + '/truth.csv', root_dir=sys.argv[1])
p = utilities.read_file(sys.argv[1] + '/preds.csv', root_dir=sys.argv[1])
r0 = resource.getrusage(resource.RUSAGE_SELF)
w0 = time.time()
res = IoU.match_points(t, p)
r1 = resource.getrusage(resource.RUSAGE_SELF)
print((r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime), time.time() - w0, r1.ru_maxrss, int((res.distance < 10).sum()))
"""
    out = subprocess.run([sys.executable, "-c", code, d], capture_output=True, text=True, check=True).stdout.split()
    return {"cpu_s": float(out[0]), "wall_s": float(out[1]), "maxrss_kb": int(out[2]), "matched": int(out[3])}


def canopy(binary, d):
    # /usr/bin/time reports the canopy process alone (RUSAGE_CHILDREN's
    # maxrss would be the largest child ever waited for, the peer's)
    out = os.path.join(d, "out")
    w0 = time.time()
    r = subprocess.run(["/usr/bin/time", "-f", "%U %S %M", binary, "eval", "--csv", os.path.join(d, "truth.csv"),
                        "--predictions", os.path.join(d, "preds.csv"), "--semantics", "evaluate_boxes", "--out", out, "--force"],
                       check=True, capture_output=True, text=True)
    u, s, m = r.stderr.strip().splitlines()[-1].split()
    with open(os.path.join(out, "results.csv")) as f:
        rows = pd.read_csv(f)
    return {"cpu_s": float(u) + float(s), "wall_s": time.time() - w0, "maxrss_kb": int(m), "matched": int(rows.match.sum())}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--canopy", required=True)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--n", type=int, nargs="+", default=[1500, 5000])
    ap.add_argument("--no-peer", action="store_true")
    a = ap.parse_args()
    for n in a.n:
        d = os.path.join(a.dir, str(n))
        make(d, n)
        rec = {"n": n, "load": os.getloadavg(), "canopy": canopy(a.canopy, d)}
        if not a.no_peer:
            rec["deepforest"] = peer(d)
        print(json.dumps(rec), flush=True)


if __name__ == "__main__":
    main()
