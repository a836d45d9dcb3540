#!/usr/bin/env python3
"""Time DeepForest's own box metrics, for the side-by-side benchmark with canopy.

Given a truth CSV and a predictions CSV this times, with time.perf_counter,
the median of --repeat runs (default 3) of

  (a) "validation": a fresh deepforest.metrics.RecallPrecision (built as
      BaseModel builds it), update(preds, targets, image_names) with one
      prediction dict and one target dict per image, exactly as golden.py feeds
      it, then compute();
  (b) "evaluate_boxes": deepforest.evaluate.evaluate_boxes(predictions,
      ground_df, iou_threshold) on the DataFrames as golden.py reads them.

Reading the CSVs and building the per-image tensors happen once, before and
outside the timed regions (their times are recorded separately). Every
evaluate_boxes run gets its own copies of the frames, made outside the timing
(golden.py passes copies too). torch runs with 1 intra-op thread by default.

The loading and feeding code is golden.py's (imported as a module), so the
metric values recorded here are the ones golden.py would write.

  /opt/canopy-peers/venv/bin/python tools/deepforest/bench_metrics.py \
    --truth bin/bench-2000x30/truth.csv --predictions bin/bench-2000x30/predictions.csv

writes tools/deepforest/bench-result.json (see --out).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import shlex
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import torch  # noqa: E402

import golden  # noqa: E402  (tools/deepforest/golden.py)
from golden import REPO, num, rel  # noqa: E402
from deepforest.evaluate import evaluate_boxes  # noqa: E402
from deepforest.metrics import RecallPrecision  # noqa: E402


def loadavg():
    try:
        a, b, c = os.getloadavg()
        return {"1m": a, "5m": b, "15m": c}
    except OSError:
        return None


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def summary(times, n_images):
    med = statistics.median(times)
    return {
        "repetitions_s": times,
        "median_s": med,
        "min_s": min(times),
        "max_s": max(times),
        "median_s_per_image": med / n_images,
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--truth", required=True)
    ap.add_argument("--predictions", required=True)
    ap.add_argument("--label-dict", help="optional CSV of label,id (default: sorted union of labels)")
    ap.add_argument("--iou-threshold", type=float, default=0.4)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (default 1)")
    ap.add_argument("--dtype", choices=["float64", "float32"], default="float64",
                    help="coordinate dtype of the validation tensors (golden.py's 'validation' is float64)")
    ap.add_argument("--out", default=os.path.join(HERE, "bench-result.json"))
    a = ap.parse_args(argv)
    command = " ".join(shlex.quote(x) for x in
                       [sys.executable, os.path.relpath(os.path.abspath(sys.argv[0]), REPO)] + sys.argv[1:])

    torch.set_num_threads(a.threads)
    load_before = loadavg()
    source_check = golden.check_source()
    dtype = getattr(torch, a.dtype)

    # ---- preparation (not timed as part of the metrics)
    t0 = time.perf_counter()
    truth = golden.read_frame(a.truth, "truth")
    preds = golden.read_frame(a.predictions, "predictions")
    t_read = time.perf_counter() - t0
    if a.label_dict:
        label_map = golden.read_label_dict(a.label_dict)
    else:
        labels = sorted(set(truth.label) | set(preds.label))
        label_map = {lab: i for i, lab in enumerate(labels)}
    t0 = time.perf_counter()
    names, targets, predictions, dropped = golden.build_targets(truth, preds, label_map, dtype)
    t_build = time.perf_counter() - t0
    n_images = len(names)

    # ---- (a) RecallPrecision: fresh metric, update, compute
    val_times, val_out, val_state = [], None, None
    for _ in range(a.repeat):
        gc.collect()
        t0 = time.perf_counter()
        metric = RecallPrecision(iou_threshold=a.iou_threshold, label_dict=dict(label_map), task="box")
        metric.update(predictions, targets, names)
        out = metric.compute()
        val_times.append(time.perf_counter() - t0)
        val_out = {k: num(v) for k, v in out.items()}
        val_state = {
            "num_images": int(metric.num_images),
            "num_images_with_ground_truth": int(metric.num_images_with_ground_truth),
            "num_images_with_predictions": int(metric.num_images_with_predictions),
            "num_empty_frames": int(metric.num_empty_frames),
        }
        del metric, out

    # ---- (b) evaluate_boxes on the DataFrames
    ev_times, ev_out = [], None
    for _ in range(a.repeat):
        p_copy, t_copy = preds.copy(), truth.copy()
        gc.collect()
        t0 = time.perf_counter()
        ev = evaluate_boxes(predictions=p_copy, ground_df=t_copy, iou_threshold=a.iou_threshold)
        ev_times.append(time.perf_counter() - t0)
        ev_out = {"box_recall": num(ev["box_recall"]), "box_precision": num(ev["box_precision"])}
        del ev, p_copy, t_copy

    load_after = loadavg()
    result = {
        "peer": "DeepForest",
        "commit": golden.PEER_COMMIT,
        "source_check": source_check,
        "command": command,
        "cwd_relative_to": "repository root",
        "truth": rel(a.truth),
        "predictions": rel(a.predictions),
        "iou_threshold": a.iou_threshold,
        "label_map": label_map,
        "counts": {
            "truth_rows": int(len(truth)),
            "prediction_rows": int(len(preds)),
            "images": n_images,
            "truth_boxes_dropped_by_min_size": len(dropped),
        },
        "timer": "time.perf_counter",
        "repetitions": a.repeat,
        "statistic": "median of repetitions",
        "per_image_divisor": "number of truth images (first appearance order, as golden.py)",
        "threads": {
            "torch_set_num_threads": a.threads,
            "torch_get_num_threads": torch.get_num_threads(),
            "torch_get_num_interop_threads": torch.get_num_interop_threads(),
            "env": {k: os.environ.get(k) for k in
                    ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")},
            "python_process": "single-threaded Python (pandas/shapely/scipy code paths)",
        },
        "machine": {
            "os_cpu_count": os.cpu_count(),
            "sched_getaffinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
            "cpu_model": cpu_model(),
            "platform": platform.platform(),
            "loadavg_before": load_before,
            "loadavg_after": load_after,
        },
        "versions": golden.versions(),
        "preparation_untimed": {
            "read_csvs_s": t_read,
            "build_tensors_s": t_build,
            "note": "done once, outside the timed regions",
        },
        "validation": {
            "what": ("RecallPrecision(iou_threshold, label_dict, task='box') constructed, "
                     "update(preds, targets, image_names) with per-image dicts, compute()"),
            "coordinate_dtype": a.dtype,
            **summary(val_times, n_images),
            "values": val_out,
            "state": val_state,
        },
        "evaluate_boxes": {
            "what": "evaluate_boxes(predictions=DataFrame, ground_df=DataFrame, iou_threshold)",
            **summary(ev_times, n_images),
            "values": ev_out,
        },
    }
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(result, f, indent=1, allow_nan=False)
        f.write("\n")
    v, e = result["validation"], result["evaluate_boxes"]
    print(f"wrote {rel(a.out)}")
    print(f"validation:     median {v['median_s']:.3f} s  ({v['median_s_per_image'] * 1e3:.3f} ms/image)  "
          f"{val_out}")
    print(f"evaluate_boxes: median {e['median_s']:.3f} s  ({e['median_s_per_image'] * 1e3:.3f} ms/image)  "
          f"{ev_out}")
    print(f"load before {load_before}  after {load_after}")


if __name__ == "__main__":
    main()
