#!/usr/bin/env python3
"""Golden fixtures for canopy's DeepForest box metrics, made by DeepForest's own code.

For one dataset (truth CSV, predictions CSV, label map) this runs

  * "validation": deepforest.metrics.RecallPrecision, updated exactly as
    BaseModel.validation_step does (one target dict and one prediction dict per
    image, in the order of the dataset, i.e. first appearance in the truth CSV),
    then compute();
  * "evaluate_boxes": deepforest.evaluate.evaluate_boxes(predictions, ground_df,
    iou_threshold) on DataFrames whose label columns pandas typed as
    utilities.read_file does (a column of numbers is numeric: SJER's 0 names
    its class "0.0_Recall");

and writes one JSON file. See tools/deepforest/README.md.

Run it with the peer venv made by tools/deepforest/setup.sh, e.g.

  /opt/canopy-peers/venv/bin/python tools/deepforest/golden.py --all
"""

from __future__ import annotations

import argparse
import csv
import glob
import json
import math
import os
import shlex
import sys

import numpy as np
import pandas as pd
import torch

import deepforest
from deepforest.evaluate import evaluate_boxes
from deepforest.metrics import RecallPrecision

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
SHARED_DF = os.path.normpath(os.path.join(REPO, "..", "shared", "data", "deepforest"))
GOLDEN_DIR = os.path.join(REPO, "testdata", "golden", "deepforest")
SETS_DIR = os.path.join(REPO, "testdata", "sets")

PEER_COMMIT = "1bad4419b3e6f7b4981a367e85acc2dda29cfc7b"
SOURCE_CHECK: dict = {}
RESULTS_LIMIT = 2000  # per-truth results tables only for sets with <= this many truth rows

COORDS = ["xmin", "ymin", "xmax", "ymax"]


# --------------------------------------------------------------------------- IO


def read_frame(path: str, kind: str) -> pd.DataFrame:
    """Read a DeepForest CSV by header name.

    Coordinates and scores are parsed with Python's float() (correctly
    rounded, like Go's strconv.ParseFloat) and kept as float64. image_path and label are
    kept as strings exactly as written.
    """
    # Everything as text first; numbers via Python float() (correctly rounded).
    df = pd.read_csv(path, dtype=str, keep_default_na=False)
    if kind == "predictions" and "score" not in df.columns and "scores" in df.columns:
        df = df.rename(columns={"scores": "score"})
    need = ["image_path"] + COORDS + ["label"] + (["score"] if kind == "predictions" else [])
    missing = [c for c in need if c not in df.columns]
    if missing:
        raise SystemExit(f"{path}: missing columns {missing}")
    df = df[need].copy()
    for c in COORDS + (["score"] if kind == "predictions" else []):
        df[c] = np.array([float(v) for v in df[c]], dtype=np.float64)
    return df.reset_index(drop=True)


def read_label_dict(path: str) -> dict[str, int]:
    """label_dict CSV: rows of (label, id); an optional header row is skipped."""
    out: dict[str, int] = {}
    with open(path, newline="") as f:
        for i, row in enumerate(csv.reader(f)):
            if not row or all(not c.strip() for c in row):
                continue
            if len(row) < 2:
                raise SystemExit(f"{path}: row {i + 1} needs label,id")
            try:
                ident = int(row[1])
            except ValueError:
                if i == 0:
                    continue  # header
                raise
            out[row[0]] = ident
    return out


def rel(path: str) -> str:
    return os.path.relpath(os.path.abspath(path), REPO)


def num(x):
    """JSON-safe number: tensors/numpy to Python, NaN/inf to null."""
    if x is None:
        return None
    if isinstance(x, torch.Tensor):
        x = x.item()
    if isinstance(x, (np.generic,)):
        x = x.item()
    if isinstance(x, bool):
        return x
    if isinstance(x, float):
        return None if (math.isnan(x) or math.isinf(x)) else x
    if isinstance(x, int):
        return x
    try:
        if pd.isna(x):
            return None
    except (TypeError, ValueError):
        pass
    return x


def dtype_name(x) -> str | None:
    if isinstance(x, torch.Tensor):
        return str(x.dtype).replace("torch.", "")
    if isinstance(x, np.generic):
        return str(x.dtype)
    return type(x).__name__


def results_records(df: pd.DataFrame | None, label_of=None) -> list[dict] | None:
    if df is None:
        return None
    cols = ["image_path", "truth_id", "prediction_id", "IoU", "score", "match",
            "true_label", "predicted_label"]
    recs = []
    for row in df.itertuples(index=False):
        r = row._asdict()
        rec = {}
        for c in cols:
            v = num(r.get(c))
            if c in ("truth_id", "prediction_id") and v is not None:
                v = int(v)
            if c == "match":
                v = bool(v) if v is not None else False
            if c in ("true_label", "predicted_label") and v is not None:
                v = str(v)
            rec[c] = v
        recs.append(rec)
    return recs


def class_recall_records(cr: pd.DataFrame | None) -> list[dict] | None:
    """class_recall rows, the label as DeepForest's scripts/evaluate.py names
    it: f"{row['label']}" over iterrows(), which upcasts a numeric label to
    float beside the float recall (0 -> "0.0")."""
    if cr is None:
        return None
    return [
        {"label": f"{row['label']}", "recall": num(row["recall"]), "precision": num(row["precision"]),
         "size": int(row["size"])}
        for _, row in cr.iterrows()
    ]


def typed_labels(path: str) -> pd.Series:
    """The label column as utilities.read_file gets it from a CSV: pandas'
    own type inference (all numbers -> int64/float64, else text)."""
    return pd.read_csv(path, usecols=["label"])["label"]


# ------------------------------------------------------------------- semantics


def image_order(truth: pd.DataFrame) -> list[str]:
    # BoxDataset.image_names = annotations.image_path.unique(): first appearance.
    return list(pd.unique(truth["image_path"]))


def build_targets(truth, preds, label_map, dtype, min_size=1.0):
    """Per-image target/prediction dicts as validation_step hands them over.

    BoxDataset.__getitem__: an image whose boxes sum to 0 (all rows 0,0,0,0)
    becomes a target with zero boxes; otherwise BoxDataset.filter_boxes clamps
    the boxes to the image and keeps only boxes with width >= 1 and height >= 1
    (min_size=1), which also removes a 0,0,0,0 row beside real rows. Here:
    0,0,0,0 rows are dropped, then (unless min_size is None) truth boxes with
    xmax-xmin < min_size or ymax-ymin < min_size (computed in `dtype`) are
    dropped; no clamping (canopy's sets carry no image sizes). An image left
    with no boxes is an empty frame. Predictions are passed as given.
    """
    names = image_order(truth)
    by_img_t = {k: g for k, g in truth.groupby("image_path", sort=False)}
    by_img_p = {k: g for k, g in preds.groupby("image_path", sort=False)}
    targets, predictions, dropped = [], [], []
    for name in names:
        g = by_img_t[name]
        zero = (g.xmin == 0) & (g.ymin == 0) & (g.xmax == 0) & (g.ymax == 0)
        g = g[~zero]
        boxes = torch.tensor(g[COORDS].to_numpy(np.float64), dtype=dtype).reshape(-1, 4)
        labels = torch.tensor([label_map[x] for x in g.label], dtype=torch.int64)
        if min_size is not None and len(boxes):
            keep = ((boxes[:, 2] - boxes[:, 0]) >= min_size) & ((boxes[:, 3] - boxes[:, 1]) >= min_size)
            dropped.extend((name, int(i)) for i in torch.nonzero(~keep).flatten())
            boxes, labels = boxes[keep], labels[keep]
        targets.append({"boxes": boxes, "labels": labels})
        p = by_img_p.get(name)
        if p is None:
            p = preds.iloc[0:0]
        predictions.append({
            "boxes": torch.tensor(p[COORDS].to_numpy(np.float64), dtype=dtype).reshape(-1, 4),
            "labels": torch.tensor([label_map[x] for x in p.label], dtype=torch.int64),
            "scores": torch.tensor(p.score.to_numpy(np.float64), dtype=dtype),
        })
    return names, targets, predictions, dropped


def run_validation(truth, preds, label_map, iou_threshold, dtype, with_results, min_size=1.0):
    names, targets, predictions, dropped = build_targets(truth, preds, label_map, dtype, min_size)
    metric = RecallPrecision(iou_threshold=iou_threshold, label_dict=dict(label_map), task="box")
    # validation_step: self.precision_recall_metric.update(preds, targets, image_names)
    metric.update(predictions, targets, names)
    out = metric.compute()
    res = {k: num(v) for k, v in out.items()}
    meta = {
        "coordinate_dtype": str(dtype).replace("torch.", ""),
        "truth_min_size": min_size,
        "truth_boxes_dropped_by_min_size": [
            {"image_path": n, "index_after_zero_rows_removed": i} for n, i in dropped],
        "value_dtypes": {k: dtype_name(v) for k, v in out.items()},
        "state": {
            "num_images": int(metric.num_images),
            "num_images_with_ground_truth": int(metric.num_images_with_ground_truth),
            "num_images_with_predictions": int(metric.num_images_with_predictions),
            "num_empty_frames": int(metric.num_empty_frames),
            "correct_empty_predictions": int(metric.correct_empty_predictions),
            "recall_sum": num(metric.recall),
            "precision_sum": num(metric.precision),
            "state_dtype": dtype_name(metric.recall),
        },
    }
    if with_results:
        r = metric.get_results()
        meta["results"] = results_records(r) if len(r) else []
    return res, meta


def run_evaluate_boxes(truth, preds, iou_threshold, with_results, truth_labels, pred_labels):
    """evaluate_boxes twice: on the frames with their label columns typed as
    read_file types them (truth_labels, pred_labels: typed_labels of each
    CSV, row for row), which gives the metrics and the class names; and on
    the text labels, which gives the results table with the CSV's label text
    (the match itself does not look at labels: both runs must agree)."""
    t, p = truth.copy(), preds.copy()
    t["label"], p["label"] = truth_labels.to_numpy(), pred_labels.to_numpy()
    ev = evaluate_boxes(predictions=p, ground_df=t, iou_threshold=iou_threshold)
    ev_text = evaluate_boxes(predictions=preds.copy(), ground_df=truth.copy(), iou_threshold=iou_threshold)
    for k in ("box_recall", "box_precision"):
        if num(ev[k]) != num(ev_text[k]):
            raise SystemExit(f"{k}: typed labels {ev[k]} != text labels {ev_text[k]}")
    out = {
        "label_dtypes": {"truth": str(t.label.dtype), "predictions": str(p.label.dtype)},
        "box_recall": num(ev["box_recall"]),
        "box_precision": num(ev["box_precision"]),
        "class_recall": class_recall_records(ev["class_recall"]),
    }
    if with_results:
        out["results"] = results_records(ev_text["results"])
    return out


# ------------------------------------------------------------------------ main


def versions() -> dict:
    import geopandas
    import scipy
    import shapely
    import pytorch_lightning
    import torchmetrics
    import torchvision

    v = {
        "deepforest": getattr(deepforest, "__version__", "?"),
        "deepforest_commit": PEER_COMMIT,
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
        "pytorch_lightning": pytorch_lightning.__version__,
        "torchmetrics": torchmetrics.__version__,
        "shapely": shapely.__version__,
        "geos": shapely.geos_version_string,
        "scipy": scipy.__version__,
        "pandas": pd.__version__,
        "numpy": np.__version__,
        "geopandas": geopandas.__version__,
    }
    return v


# Git blob ids of the files whose code the goldens run, at PEER_COMMIT.
PEER_BLOBS = {
    "IoU.py": "ba1524b3f96bb90fb7f5da34a0f5b37ed20e8c5a",
    "datasets/training.py": "b5158281e736b8bdc3cf03c5b02bf89f6a61bf33",
    "evaluate.py": "5743cafb8952241dbd1ef8e7be4716729d1e37b2",
    "main.py": "41da9ae76d44ae2a12cc01fa4e863699c9039b65",
    "metrics.py": "eabbeb49f98dd9d19d90205165a71fbd9c8566c2",
    "utilities.py": "57828881c708062ada412b394468612ad09798f5",
}


def check_source() -> dict:
    """Compare the installed deepforest files with PEER_COMMIT's blobs."""
    import hashlib

    root = os.path.dirname(deepforest.__file__)
    bad = []
    for rel_path, want in PEER_BLOBS.items():
        with open(os.path.join(root, rel_path), "rb") as f:
            data = f.read()
        got = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
        if got != want:
            bad.append(rel_path)
    if bad:
        raise SystemExit(f"installed deepforest ({root}) differs from {PEER_COMMIT} in {bad}; "
                         "run tools/deepforest/setup.sh on that checkout")
    return {"checked_files": sorted(PEER_BLOBS), "matches_commit": True}


def make_golden(name, truth_path, preds_path, iou_threshold, out_path, command,
                label_dict_path=None, equivalent=None):
    truth = read_frame(truth_path, "truth")
    preds = read_frame(preds_path, "predictions")
    if label_dict_path:
        label_map = read_label_dict(label_dict_path)
        missing = sorted((set(truth.label) | set(preds.label)) - set(label_map))
        if missing:
            raise SystemExit(f"{label_dict_path}: labels {missing} missing")
        label_source = rel(label_dict_path)
    else:
        labels = sorted(set(truth.label) | set(preds.label))
        label_map = {lab: i for i, lab in enumerate(labels)}
        label_source = "sorted(unique(truth.label | predictions.label))"
    with_results = len(truth) <= RESULTS_LIMIT

    val, val_meta = run_validation(truth, preds, label_map, iou_threshold, torch.float64, with_results)
    val32, val32_meta = run_validation(truth, preds, label_map, iou_threshold, torch.float32, False)
    extra = {}
    if val_meta["truth_boxes_dropped_by_min_size"]:
        # Also the metric on the truth as given (only 0,0,0,0 rows dropped).
        vu, vu_meta = run_validation(truth, preds, label_map, iou_threshold, torch.float64,
                                     with_results, min_size=None)
        extra = {"validation_unfiltered": vu, "validation_unfiltered_meta": vu_meta}
    ev = run_evaluate_boxes(truth, preds, iou_threshold, with_results,
                            typed_labels(truth_path), typed_labels(preds_path))

    golden = {
        "peer": "DeepForest",
        "commit": PEER_COMMIT,
        "source_check": SOURCE_CHECK,
        "versions": versions(),
        "command": command,
        "name": name,
        "truth": rel(truth_path),
        "predictions": rel(preds_path),
        "iou_threshold": iou_threshold,
        "label_map": label_map,
        "label_map_source": label_source,
        "counts": {
            "truth_rows": int(len(truth)),
            "prediction_rows": int(len(preds)),
            "truth_images": len(image_order(truth)),
        },
        "csv_float_parser": "python float() on the CSV text (correctly rounded float64)",
        "validation": val,
        "validation_meta": val_meta,
        "validation_float32": val32,
        "validation_float32_meta": val32_meta,
        **extra,
        "evaluate_boxes": ev,
    }
    if equivalent:
        golden["equivalent_command"] = equivalent
    if not with_results:
        golden["results_omitted"] = f"more than {RESULTS_LIMIT} truth rows"
    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    with open(out_path, "w") as f:
        json.dump(golden, f, indent=1, allow_nan=False)
        f.write("\n")
    print(f"{name}: wrote {rel(out_path)}  validation box_recall={val.get('box_recall')} "
          f"box_precision={val.get('box_precision')}  evaluate_boxes box_recall={ev['box_recall']} "
          f"box_precision={ev['box_precision']}")


def single_command(name, truth, preds, iou, out, label_dict=None):
    parts = [sys.executable, "tools/deepforest/golden.py", "--truth", rel(truth), "--predictions", rel(preds),
             "--iou-threshold", repr(iou), "--name", name, "--out", rel(out)]
    if label_dict:
        parts += ["--label-dict", rel(label_dict)]
    return " ".join(shlex.quote(p) for p in parts)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--truth")
    ap.add_argument("--predictions")
    ap.add_argument("--label-dict", help="optional CSV of label,id (default: sorted union of labels)")
    ap.add_argument("--iou-threshold", type=float, default=0.4)
    ap.add_argument("--name")
    ap.add_argument("--out")
    ap.add_argument("--all", action="store_true",
                    help="every testdata/sets/*/ plus the SJER pair -> testdata/golden/deepforest/")
    a = ap.parse_args(argv)
    global SOURCE_CHECK
    SOURCE_CHECK = check_source()
    command = " ".join(shlex.quote(x) for x in [sys.executable, os.path.relpath(os.path.abspath(sys.argv[0]), REPO)] + sys.argv[1:])

    if a.all:
        jobs = []
        sjer_t = os.path.join(SHARED_DF, "2018_SJER_3_252000_4107000_image_477_truth.csv")
        sjer_p = os.path.join(SHARED_DF, "2018_SJER_3_252000_4107000_image_477.csv")
        jobs.append(("sjer", sjer_t, sjer_p, 0.4, os.path.join(GOLDEN_DIR, "sjer.json"), None))
        jobs.append(("sjer_iou05", sjer_t, sjer_p, 0.5, os.path.join(GOLDEN_DIR, "sjer_iou05.json"), None))
        for d in sorted(glob.glob(os.path.join(SETS_DIR, "*", ""))):
            setname = os.path.basename(os.path.normpath(d))
            t, p = os.path.join(d, "truth.csv"), os.path.join(d, "predictions.csv")
            if not (os.path.exists(t) and os.path.exists(p)):
                print(f"skip {setname}: no truth.csv/predictions.csv")
                continue
            ld = os.path.join(d, "label_dict.csv")
            jobs.append((setname, t, p, a.iou_threshold, os.path.join(GOLDEN_DIR, f"{setname}.json"),
                         ld if os.path.exists(ld) else None))
        for name, t, p, iou, out, ld in jobs:
            make_golden(name, t, p, iou, out, command, ld, single_command(name, t, p, iou, out, ld))
        return
    if not (a.truth and a.predictions and a.out):
        ap.error("--truth, --predictions and --out are required (or --all)")
    name = a.name or os.path.splitext(os.path.basename(a.out))[0]
    make_golden(name, a.truth, a.predictions, a.iou_threshold, a.out, command, a.label_dict)


if __name__ == "__main__":
    main()
