#!/usr/bin/env python3
"""DeepForest's evaluate_boxes on one large generated tile, for canopy's
big-tile peer check and benchmark.

The tile comes from canopy's generator (the same bytes for the same flags):

  go run ./cmd/bigtile -crowns 6000 -out bin/bigtile-6000

Then, with DeepForest 1bad4419 on the path:

  PYTHONPATH=/tmp/deepforest/src /opt/canopy-peers/venv/bin/python \
    tools/deepforest/bigtile.py --dir bin/bigtile-6000 --crowns 6000 \
    --out testdata/golden/bigtile/deepforest-6000.json

reads the two CSVs as golden.py does (by header name, numbers by float()),
runs deepforest.evaluate.evaluate_boxes(predictions, ground_df,
iou_threshold) once, timed (wall with perf_counter, CPU with process_time,
peak RSS from getrusage), and writes a small JSON fixture: the peer's
versions, the command, ATEN_CPU_CAPABILITY, the metrics, the results
table's row count, a SHA-256 digest of its assignment (one line
"truth_id,prediction_id,match" per row in truth_id order, prediction_id
empty when unassigned, match True/False) and its first --rows rows in
full. --time-only skips nothing but writes only the timing (for the
benchmark's repeated runs).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import shlex
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import golden  # noqa: E402  (tools/deepforest/golden.py)
from golden import REPO, num  # noqa: E402
from deepforest.evaluate import evaluate_boxes  # noqa: E402


def assignment_digest(results) -> tuple[str, int]:
    rows = sorted(golden.results_records(results), key=lambda r: r["truth_id"])
    h = hashlib.sha256()
    for r in rows:
        pid = "" if r["prediction_id"] is None else str(r["prediction_id"])
        h.update(f"{r['truth_id']},{pid},{r['match']}\n".encode())
    return h.hexdigest(), len(rows)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", required=True, help="folder with truth.csv and predictions.csv")
    ap.add_argument("--crowns", type=int, required=True, help="the generator's -crowns (recorded)")
    ap.add_argument("--seed", type=int, default=1, help="the generator's -seed (recorded)")
    ap.add_argument("--iou-threshold", type=float, default=0.4)
    ap.add_argument("--rows", type=int, default=20)
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    golden.SOURCE_CHECK = golden.check_source()
    truth = golden.read_frame(os.path.join(a.dir, "truth.csv"), "truth")
    preds = golden.read_frame(os.path.join(a.dir, "predictions.csv"), "predictions")
    t0, c0 = time.perf_counter(), time.process_time()
    ev = evaluate_boxes(predictions=preds, ground_df=truth, iou_threshold=a.iou_threshold)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    digest, n = assignment_digest(ev["results"])
    rows = sorted(golden.results_records(ev["results"]), key=lambda r: r["truth_id"])[: a.rows]
    out = {
        "generator": f"go run ./cmd/bigtile -crowns {a.crowns} -seed {a.seed}",
        "crowns": a.crowns,
        "truth_rows": len(truth),
        "prediction_rows": len(preds),
        "iou_threshold": a.iou_threshold,
        "peer": golden.versions(),
        "source_check": golden.SOURCE_CHECK,
        "command": " ".join(shlex.quote(x) for x in [sys.executable, os.path.relpath(os.path.abspath(sys.argv[0]), REPO)] + sys.argv[1:]),
        "pythonpath": os.environ.get("PYTHONPATH", ""),
        "ATEN_CPU_CAPABILITY": os.environ.get("ATEN_CPU_CAPABILITY", "(unset)"),
        "box_recall": num(ev["box_recall"]),
        "box_precision": num(ev["box_precision"]),
        "class_recall": golden.class_recall_records(ev["class_recall"]),
        "results_rows": n,
        "results_digest": digest,
        "results_head": rows,
        "evaluate_boxes_seconds": {"wall": wall, "cpu": cpu},
        "peak_rss_bytes": peak,
        "loadavg": list(os.getloadavg()),
    }
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print(f"{a.out}: {n} rows, digest {digest[:12]}, evaluate_boxes {wall:.1f} s wall, {cpu:.1f} s CPU, "
          f"peak RSS {peak / 2**30:.2f} GiB, load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
