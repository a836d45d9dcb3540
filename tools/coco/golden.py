#!/usr/bin/env python3
"""Golden fixtures for canopy's COCO mAP/mAR and IoU metrics, made by the real peers.

For one dataset (truth CSV, predictions CSV, optional label map) this feeds,
exactly as DeepForest (commit 1bad4419, main.py validation_step) does in
validation, only the images whose target is not empty (target["boxes"] has
>= 1 box and not every coordinate is 0), together with their predictions
(possibly none), in dataset order, one update() per image, into

  * torchmetrics MeanAveragePrecision(backend="faster_coco_eval", iou_type="bbox")
    with class_metrics=False (what DeepForest logs) and class_metrics=True;
  * the same with backend="pycocotools" (for comparison);
  * torchmetrics IntersectionOverUnion(class_metrics=True, iou_threshold=T);
  * faster_coco_eval COCOeval_faster and pycocotools COCOeval directly, on the
    COCO objects built by torchmetrics' own CocoBackend._get_coco_datasets
    (xywh from the float32 boxes, area w*h, iscrowd 0, image ids 0..n-1,
    categories = union of labels), with torchmetrics' iouThrs/recThrs/maxDets,

and writes one JSON file. See tools/coco/README.md.

  /opt/canopy-peers/venv/bin/python tools/coco/golden.py --all
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import glob
import io
import json
import math
import os
import platform
import shlex
import subprocess
import sys

import numpy as np
import pandas as pd
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
GOLDEN_DIR = os.path.join(REPO, "testdata", "golden", "coco")
SETS_DIR = os.path.join(REPO, "testdata", "sets")
DEEPFOREST_COMMIT = "1bad4419b3e6f7b4981a367e85acc2dda29cfc7b"

COORDS = ["xmin", "ymin", "xmax", "ymax"]
STAT_NAMES = ["map", "map_50", "map_75", "map_small", "map_medium", "map_large",
              "mar_1", "mar_10", "mar_100", "mar_small", "mar_medium", "mar_large"]


# --------------------------------------------------------------------------- IO
# Same reading approach as tools/deepforest/golden.py: everything as text,
# numbers through Python float() (correctly rounded float64), then float32 tensors.


def read_frame(path: str, kind: str) -> pd.DataFrame:
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


def fnum(x):
    """Python float of a tensor/numpy scalar (full repr in JSON); NaN/inf -> None."""
    if isinstance(x, torch.Tensor):
        x = x.item()
    if isinstance(x, np.generic):
        x = x.item()
    x = float(x)
    return None if (math.isnan(x) or math.isinf(x)) else x


def tensor_out(v):
    """A result tensor: shape [] -> float (int for integer dtypes); otherwise a flat list."""
    if not isinstance(v, torch.Tensor):
        return v
    conv = fnum if v.dtype.is_floating_point else int
    vals = [conv(x) for x in v.reshape(-1).tolist()]
    return vals[0] if v.ndim == 0 else vals


def map_result(out: dict) -> tuple[dict, dict]:
    """MeanAveragePrecision.compute() dict -> JSON (scalar stats as floats, arrays as lists)."""
    res, shapes = {}, {}
    for k, v in out.items():
        shapes[k] = {"dtype": str(v.dtype).replace("torch.", ""), "shape": list(v.shape)}
        if k in STAT_NAMES:
            res[k] = fnum(v.reshape(-1)[0])  # float32 tensor of shape [1]
        else:
            res[k] = tensor_out(v) if v.ndim > 0 else [tensor_out(v)]
    return res, shapes


# ------------------------------------------------------------------- semantics


def build_images(truth, preds, label_map):
    """Per-image target/prediction dicts (float32 boxes/scores, int64 labels).

    images = unique truth image_path in first-appearance order; 0,0,0,0 truth
    rows are dropped (an image left with no rows is an empty frame, boxes (0,4));
    prediction rows for images not in the truth are ignored.
    """
    names = list(pd.unique(truth["image_path"]))
    by_t = {k: g for k, g in truth.groupby("image_path", sort=False)}
    by_p = {k: g for k, g in preds.groupby("image_path", sort=False)}
    items = []
    for name in names:
        g = by_t[name]
        zero = (g.xmin == 0) & (g.ymin == 0) & (g.xmax == 0) & (g.ymax == 0)
        g = g[~zero]
        tgt = {
            "boxes": torch.tensor(g[COORDS].to_numpy(np.float64), dtype=torch.float32).reshape(-1, 4),
            "labels": torch.tensor([label_map[x] for x in g.label], dtype=torch.int64),
        }
        p = by_p.get(name)
        if p is None:
            p = preds.iloc[0:0]
        prd = {
            "boxes": torch.tensor(p[COORDS].to_numpy(np.float64), dtype=torch.float32).reshape(-1, 4),
            "labels": torch.tensor([label_map[x] for x in p.label], dtype=torch.int64),
            "scores": torch.tensor(p.score.to_numpy(np.float64), dtype=torch.float32),
        }
        items.append((name, tgt, prd))
    return items


def deepforest_filter(items):
    """main.py validation_step (1bad4419): keep (pred, target) unless
    target["boxes"].numel() == 0 or torch.all(target["boxes"] == 0)."""
    kept = []
    for name, tgt, prd in items:
        if not (tgt["boxes"].numel() == 0 or torch.all(tgt["boxes"] == 0)):
            kept.append((name, tgt, prd))
    return kept


def run_map(kept, class_metrics, backend):
    from torchmetrics.detection import MeanAveragePrecision

    m = MeanAveragePrecision(backend=backend, iou_type="bbox", class_metrics=class_metrics)
    for _, tgt, prd in kept:  # one update per image, as validation_step with batch size 1
        m.update([prd], [tgt])
    with warnings_silenced():
        out = m.compute()
    return m, out


@contextlib.contextmanager
def warnings_silenced():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with contextlib.redirect_stdout(io.StringIO()):
            yield


def run_iou(kept, iou_threshold):
    from torchmetrics.detection import IntersectionOverUnion

    m = IntersectionOverUnion(class_metrics=True, iou_threshold=iou_threshold)
    for _, tgt, prd in kept:
        m.update([prd], [tgt])
    out = m.compute() if len(m.groundtruth_labels) > 0 else {}
    res = {k: fnum(v) for k, v in out.items()}
    nan_keys = [k for k, v in out.items() if bool(torch.isnan(v).any())]
    # Diagnostics (not metric outputs): the valid entries (!= -1) in float64.
    valid = [mat[mat != -1.0] for mat in m.iou_matrix]
    allv = torch.cat(valid) if valid else torch.zeros(0)
    n_noprd = sum(1 for _, _, prd in kept if prd["boxes"].numel() == 0)
    nan = torch.isnan(allv)
    fin = allv[~nan]
    diag = {
        "nan_keys_written_as_null": nan_keys,
        "nan_entries": int(nan.sum().item()),
        "nan_note": "a (pred, gt) pair that both have zero area gives 0/0 = NaN in torchvision box_iou; NaN is "
                    "not < threshold and not == -1, so it counts as valid: the pooled mean becomes NaN and "
                    "compute() replaces the global 'iou' by 0.0, while 'iou/cl_c' of that gt class stays NaN "
                    "(written as null)",
        "valid_finite_entries": int(fin.numel()),
        "valid_finite_mean_float64": float(fin.double().mean().item()) if fin.numel() else None,
        "images_updated": len(m.iou_matrix),
        "images_without_predictions": n_noprd,
        "zeros_from_images_without_predictions": int(sum(
            tgt["boxes"].shape[0] for _, tgt, prd in kept if prd["boxes"].numel() == 0)),
        "valid_entries": int(allv.numel()),
        "valid_sum_float64": float(allv.double().sum().item()) if allv.numel() else 0.0,
        "valid_mean_float64": float(allv.double().mean().item()) if allv.numel() else None,
        "note": "iou is torch's float32 mean (torch.cat(...).mean()) of the valid entries; "
                "iou/cl_c sums per image in float32 (tensor.sum()) then accumulates sum and count "
                "in float32 and divides in float32",
    }
    # Check a pure-Python emulation of torch's float32 cascade sum (torch_sum_f32.py) against torch.
    try:
        from torch_sum_f32 import torch_sum_f32

        lanes = 16 if torch.backends.cpu.get_cpu_capability() == "AVX512" else 8
        emu = {"lanes": lanes}
        if allv.numel():
            s32 = torch_sum_f32(allv.numpy(), lanes)
            emu["sum_float32"] = float(s32)
            emu["torch_sum_float32"] = float(allv.sum().item())
            emu["iou"] = float(np.float32(s32) / np.float32(allv.numel()))
            emu["iou_matches_torch"] = (emu["iou"] == res.get("iou")) or bool(nan.any())
        per = {}
        for key in res:
            if not key.startswith("iou/cl_"):
                continue
            cl = int(key[len("iou/cl_"):])
            acc, cnt = np.float32(0), np.float32(0)
            for mat, gl in zip(m.iou_matrix, m.groundtruth_labels):
                sc = mat[:, gl == cl]
                v = sc[sc != -1.0]
                acc = np.float32(acc + torch_sum_f32(v.numpy(), lanes)) if v.numel() else acc
                cnt = np.float32(cnt + np.float32(v.numel()))
            val = 0.0 if cnt == 0 else float(np.float32(acc / cnt))
            per[key] = None if math.isnan(val) else val
        emu["per_class"] = per
        emu["per_class_match_torch"] = all(per[k] == res[k] for k in per)
        emu["note"] = ("iou = float32(cascade_sum_f32(valid entries, image order, row-major pred x gt) / "
                       "float32(count)); iou/cl_c = float32 running sums of per-image cascade sums and "
                       "float32 counts, then float32 division")
        diag_emu = emu
    except Exception as e:  # noqa: BLE001
        diag_emu = {"error": repr(e)}
    for k in ("valid_sum_float64", "valid_mean_float64"):
        if diag[k] is not None and math.isnan(diag[k]):
            diag[k] = None
    diag["torch_float32_sum_emulation"] = diag_emu
    if allv.numel() and diag["valid_mean_float64"] is not None:
        diag["float32_of_mean_float64"] = float(np.float32(diag["valid_mean_float64"]))
    return res, diag


def coco_objects(m, backend):
    """COCO gt/dt objects exactly as torchmetrics builds them (macro average)."""
    from torchmetrics.detection.helpers import CocoBackend

    cb = CocoBackend(backend)
    with warnings_silenced():
        coco_preds, coco_target = cb._get_coco_datasets(
            m.groundtruth_labels, m.groundtruth_box, m.groundtruth_mask, m.groundtruth_crowds,
            m.groundtruth_area, m.detection_labels, m.detection_box, m.detection_mask,
            m.detection_scores, m.iou_type, average="macro")
    return cb, coco_preds, coco_target


def run_cocoeval(m, backend, cat_ids=None):
    """Raw COCOeval stats (float64) with torchmetrics' parameters."""
    cb, coco_preds, coco_target = coco_objects(m, backend)
    if len(coco_preds.imgs) == 0 or len(coco_target.imgs) == 0:
        return None
    out = {}
    with warnings_silenced():
        ev = cb.cocoeval(coco_target, coco_preds, iouType="bbox")
        ev.params.iouThrs = np.array(m.iou_thresholds, dtype=np.float64)
        ev.params.recThrs = np.array(m.rec_thresholds, dtype=np.float64)
        ev.params.maxDets = m.max_detection_thresholds
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
        out["stats"] = [float(x) for x in ev.stats]
        if hasattr(ev, "all_stats"):
            out["all_stats"] = [float(x) for x in ev.all_stats]
        rec = np.asarray(ev.eval["recall"], dtype=np.float64)  # [T, K, A, M]
        out["recall_TKAM"] = rec.tolist()
        out["catIds"] = [int(c) for c in ev.params.catIds]
        out["imgIds_count"] = len(ev.params.imgIds)
        per = {}
        for c in (cat_ids or []):
            ev.params.catIds = [c]
            ev.evaluate()
            ev.accumulate()
            ev.summarize()
            per[str(c)] = [float(x) for x in ev.stats][:12]
        if cat_ids:
            out["per_class_stats"] = per
    return out


def coverage(kept):
    """Checks on what the data exercises: areas exactly at the COCO bounds, score ties."""
    gt_areas, dt_areas, ties = [], [], 0
    for _, tgt, prd in kept:
        for b in tgt["boxes"]:
            w, h = float(b[2] - b[0]), float(b[3] - b[1])  # float32 subtraction, as box_convert
            gt_areas.append(w * h)
        for b in prd["boxes"]:
            w, h = float(b[2] - b[0]), float(b[3] - b[1])
            dt_areas.append(w * h)
    # score ties within (image, label) and across images within a label
    within, across = 0, 0
    per_label = {}
    for _, _, prd in kept:
        seen = {}
        for s, lab in zip(prd["scores"].tolist(), prd["labels"].tolist()):
            seen.setdefault((lab, s), 0)
            seen[(lab, s)] += 1
            per_label.setdefault(lab, {}).setdefault(s, 0)
            per_label[lab][s] += 1
        within += sum(n - 1 for n in seen.values() if n > 1)
    across = sum(n - 1 for d in per_label.values() for n in d.values() if n > 1)
    return {
        "gt_area_eq_1024": sum(1 for a in gt_areas if a == 1024.0),
        "gt_area_eq_9216": sum(1 for a in gt_areas if a == 9216.0),
        "dt_area_eq_1024": sum(1 for a in dt_areas if a == 1024.0),
        "dt_area_eq_9216": sum(1 for a in dt_areas if a == 9216.0),
        "gt_area_small_le_1024": sum(1 for a in gt_areas if a <= 1024.0),
        "gt_area_large_ge_9216": sum(1 for a in gt_areas if a >= 9216.0),
        "score_ties_within_image_and_label": within,
        "score_ties_within_label_all_images": across,
        "images_with_more_than_100_predictions": sum(1 for _, _, p in kept if p["boxes"].shape[0] > 100),
    }


# ------------------------------------------------------------------------ env


def cpu_avx_flags() -> list[str]:
    try:
        out = subprocess.run("grep -o 'avx[^ ]*' /proc/cpuinfo | sort -u", shell=True,
                             capture_output=True, text=True).stdout
        return [x for x in out.split() if x]
    except Exception:
        return []


def versions() -> dict:
    import faster_coco_eval
    import torchmetrics
    import torchvision
    from importlib.metadata import version

    return {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
        "torchmetrics": torchmetrics.__version__,
        "faster_coco_eval": faster_coco_eval.__version__,
        "pycocotools": version("pycocotools"),
        "numpy": np.__version__,
        "pandas": pd.__version__,
        "deepforest_semantics_from_commit": DEEPFOREST_COMMIT,
    }


def machine() -> dict:
    return {
        "cpu_avx_flags": cpu_avx_flags(),
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "platform": platform.platform(),
        "processor": platform.processor(),
    }


def above_below(thr):
    return {
        "i_where_thr_gt_i_over_100": [i for i in range(len(thr)) if thr[i] > i / 100],
        "i_where_thr_lt_i_over_100": [i for i in range(len(thr)) if thr[i] < i / 100],
        "i_where_thr_eq_i_over_100": [i for i in range(len(thr)) if thr[i] == i / 100],
    }


def thresholds_doc() -> dict:
    from torchmetrics.detection import MeanAveragePrecision

    m = MeanAveragePrecision(backend="faster_coco_eval")
    rec, iou = list(m.rec_thresholds), list(m.iou_thresholds)
    doc = {
        "source": "torchmetrics MeanAveragePrecision().rec_thresholds / .iou_thresholds "
                  "(torch.linspace float32 .tolist()) on this machine",
        "cpu_avx_flags": cpu_avx_flags(),
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "versions": {"torch": torch.__version__, "torchmetrics": versions()["torchmetrics"]},
        "rec_thresholds": rec,
        "iou_thresholds": iou,
        "rec_thresholds_vs_i_over_100": above_below(rec),
        "max_detection_thresholds": list(m.max_detection_thresholds),
    }
    # Same torch, forced lower kernel capabilities (ATEN_CPU_CAPABILITY), for reference.
    others = {}
    for cap in ("default", "avx2", "avx512"):
        code = ("import torch,json;r=torch.linspace(0.0,1.0,101).tolist();"
                "print(json.dumps([torch.backends.cpu.get_cpu_capability(), r]))")
        env = dict(os.environ, ATEN_CPU_CAPABILITY=cap)
        try:
            p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                               timeout=120)
            got_cap, r = json.loads(p.stdout.strip().splitlines()[-1])
            others[cap] = {"capability_reported": got_cap, "rec_thresholds": r,
                           "equal_to_default_run": r == rec, **above_below(r)}
        except Exception as e:  # noqa: BLE001
            others[cap] = {"error": str(e)}
    flags = cpu_avx_flags()
    for cap, v in others.items():
        if cap == "avx512" and not any(f.startswith("avx512") for f in flags):
            v["note"] = ("meaningless on this CPU (no avx512 flags): torch reports the requested capability "
                         "but cannot run AVX512 kernels; do not use this entry as the AVX512 table")
    doc["with_ATEN_CPU_CAPABILITY"] = others
    return doc


# ------------------------------------------------------------------------ main


def make_golden(name, truth_path, preds_path, iou_threshold, out_path, command, label_dict_path=None,
                equivalent=None):
    truth = read_frame(truth_path, "truth")
    preds = read_frame(preds_path, "predictions")
    truth_images = set(truth.image_path)
    preds_in = preds[preds.image_path.isin(truth_images)]
    if label_dict_path:
        label_map = read_label_dict(label_dict_path)
        missing = sorted((set(truth.label) | set(preds_in.label)) - set(label_map))
        if missing:
            raise SystemExit(f"{label_dict_path}: labels {missing} missing")
        label_source = rel(label_dict_path)
    else:
        labels = sorted(set(truth.label) | set(preds_in.label))
        label_map = {lab: i for i, lab in enumerate(labels)}
        label_source = "sorted(unique(truth.label | labels of prediction rows whose image is in the truth))"

    items = build_images(truth, preds_in, label_map)
    kept = deepforest_filter(items)
    zero_rows = int(((truth.xmin == 0) & (truth.ymin == 0) & (truth.xmax == 0) & (truth.ymax == 0)).sum())
    degenerate = []
    for n, tgt, _ in items:
        b = tgt["boxes"]
        if b.numel():
            bad = ((b[:, 2] - b[:, 0]) < 1) | ((b[:, 3] - b[:, 1]) < 1)
            degenerate += [{"image_path": n, "index_after_zero_rows_removed": int(i)}
                           for i in torch.nonzero(bad).flatten()]

    m_false, out_false = run_map(kept, False, "faster_coco_eval")
    m_true, out_true = run_map(kept, True, "faster_coco_eval")
    _, out_pc = run_map(kept, True, "pycocotools")
    r_false, sh_false = map_result(out_false)
    r_true, sh_true = map_result(out_true)
    r_pc, _ = map_result(out_pc)
    iou_res, iou_diag = run_iou(kept, iou_threshold)

    classes = [int(c) for c in out_false["classes"].reshape(-1).tolist()]
    fce = run_cocoeval(m_false, "faster_coco_eval", classes)
    pyc = run_cocoeval(m_false, "pycocotools", classes)
    diff = None
    if fce and pyc:
        d = [abs(a - b) for a, b in zip(fce["stats"], pyc["stats"])]
        dpc = {c: max(abs(a - b) for a, b in zip(fce["per_class_stats"][c], pyc["per_class_stats"][c]))
               for c in fce["per_class_stats"]}
        drec = float(np.max(np.abs(np.array(fce["recall_TKAM"]) - np.array(pyc["recall_TKAM"]))))
        diff = {
            "stats_identical": fce["stats"] == pyc["stats"],
            "stats_max_abs_diff": max(d),
            "stats_abs_diff": d,
            "per_class_stats_max_abs_diff": dpc,
            "recall_array_max_abs_diff": drec,
            "torchmetrics_float32_results_identical": all(
                r_true[k] == r_pc[k] for k in r_true),
        }

    extra = {}
    if degenerate:
        # DeepForest's BoxDataset.filter_boxes keeps only truth boxes with width >= 1 and height >= 1
        # (before the metrics see them); the same metrics with that filter, for reference.
        items_f = []
        for n, tgt, prd in items:
            b = tgt["boxes"]
            keep = ((b[:, 2] - b[:, 0]) >= 1) & ((b[:, 3] - b[:, 1]) >= 1)
            items_f.append((n, {"boxes": b[keep].reshape(-1, 4), "labels": tgt["labels"][keep]}, prd))
        kept_f = deepforest_filter(items_f)
        _, o1 = run_map(kept_f, False, "faster_coco_eval")
        _, o2 = run_map(kept_f, True, "faster_coco_eval")
        i_f, i_fd = run_iou(kept_f, iou_threshold)
        extra["with_deepforest_truth_min_size_filter"] = {
            "note": "truth boxes with float32 width < 1 or height < 1 dropped first (BoxDataset.filter_boxes); "
                    "NOT canopy's rule, for reference only",
            "images_passed": [n for n, _, _ in kept_f],
            "map": map_result(o1)[0],
            "map_class_metrics": map_result(o2)[0],
            "iou": i_f,
            "iou_diagnostics": i_fd,
        }

    golden = {
        "peer": "torchmetrics MeanAveragePrecision(backend='faster_coco_eval') + IntersectionOverUnion, "
                "fed as DeepForest validation_step feeds them",
        "deepforest_commit": DEEPFOREST_COMMIT,
        "versions": versions(),
        "machine": machine(),
        "command": command,
        "name": name,
        "truth": rel(truth_path),
        "predictions": rel(preds_path),
        "iou_threshold": iou_threshold,
        "label_map": label_map,
        "label_map_source": label_source,
        "csv_float_parser": "python float() on the CSV text (correctly rounded float64), then torch float32",
        "feeding": "images in truth first-appearance order; 0,0,0,0 truth rows dropped; images whose target "
                   "has no box left (empty frames) are skipped (DeepForest main.py: target['boxes'].numel()==0 "
                   "or torch.all(target['boxes']==0)); every other image is passed with its predictions "
                   "(possibly none) via one update([pred],[target]) per image; image ids 0..n-1 in that order",
        "counts": {
            "truth_rows": int(len(truth)),
            "truth_zero_rows": zero_rows,
            "prediction_rows": int(len(preds)),
            "prediction_rows_ignored_not_in_truth": int(len(preds) - len(preds_in)),
            "truth_images": len(items),
            "empty_frames_skipped": len(items) - len(kept),
            "images_passed": len(kept),
            "images_passed_without_predictions": sum(1 for _, _, p in kept if p["boxes"].numel() == 0),
            "truth_boxes_passed": int(sum(t["boxes"].shape[0] for _, t, _ in kept)),
            "prediction_boxes_passed": int(sum(p["boxes"].shape[0] for _, _, p in kept)),
            "prediction_boxes_of_empty_frames_not_passed": int(
                sum(p["boxes"].shape[0] for _, t, p in items) - sum(p["boxes"].shape[0] for _, _, p in kept)),
        },
        "truth_boxes_degenerate_kept": {
            "note": "truth boxes with width<1 or height<1 (float32); canopy's rules keep them and so does "
                    "this tool; DeepForest's BoxDataset.filter_boxes would drop them before the metrics",
            "count": len(degenerate),
            "boxes": degenerate[:50],
        },
        "images_passed": [n for n, _, _ in kept],
        "coverage": coverage(kept),
        "map": r_false,
        "map_dtypes_shapes": sh_false,
        "map_class_metrics": r_true,
        "map_class_metrics_dtypes_shapes": sh_true,
        "map_class_metrics_pycocotools_backend": r_pc,
        "iou": iou_res,
        "iou_computed": bool(iou_res),
        "iou_diagnostics": iou_diag,
        "cocoeval_faster_coco_eval": fce,
        "cocoeval_pycocotools": pyc,
        "faster_vs_pycocotools": diff,
        "stat_names": STAT_NAMES,
        **extra,
        "rec_thresholds": list(m_false.rec_thresholds),
        "iou_thresholds": list(m_false.iou_thresholds),
    }
    if equivalent:
        golden["equivalent_command"] = equivalent
    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    with open(out_path, "w") as f:
        json.dump(nan_to_null(golden), f, indent=1, allow_nan=False)
        f.write("\n")
    print(f"{name}: wrote {rel(out_path)}  images={len(kept)}/{len(items)} map={r_false['map']} "
          f"map_50={r_false['map_50']} mar_100={r_false['mar_100']} iou={iou_res.get('iou')} "
          f"fce==pycocotools: {diff and diff['stats_identical']} (max diff {diff and diff['stats_max_abs_diff']})")


def nan_to_null(o):
    """NaN/inf floats -> None everywhere (iou_diagnostics.nan_keys_written_as_null lists the metric keys)."""
    if isinstance(o, float):
        return None if (math.isnan(o) or math.isinf(o)) else o
    if isinstance(o, dict):
        return {k: nan_to_null(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [nan_to_null(v) for v in o]
    return o


def single_command(name, truth, preds, iou, out, label_dict=None):
    parts = [sys.executable, "tools/coco/golden.py", "--truth", rel(truth), "--predictions", rel(preds),
             "--iou-threshold", repr(iou), "--name", name, "--out", rel(out)]
    if label_dict:
        parts += ["--label-dict", rel(label_dict)]
    return " ".join(shlex.quote(p) for p in parts)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--truth")
    ap.add_argument("--predictions")
    ap.add_argument("--label-dict", help="optional CSV of label,id (default: sorted union of labels)")
    ap.add_argument("--iou-threshold", type=float, default=0.4, help="IntersectionOverUnion threshold")
    ap.add_argument("--name")
    ap.add_argument("--out")
    ap.add_argument("--all", action="store_true",
                    help="every testdata/sets/*/ -> testdata/golden/coco/<set>.json, plus thresholds.json")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    command = " ".join(shlex.quote(x) for x in
                       [sys.executable, os.path.relpath(os.path.abspath(sys.argv[0]), REPO)] + sys.argv[1:])

    if a.all:
        os.makedirs(GOLDEN_DIR, exist_ok=True)
        doc = thresholds_doc()
        doc["command"] = command
        with open(os.path.join(GOLDEN_DIR, "thresholds.json"), "w") as f:
            json.dump(doc, f, indent=1)
            f.write("\n")
        print(f"wrote {rel(os.path.join(GOLDEN_DIR, 'thresholds.json'))}: rec thr > i/100 at "
              f"{doc['rec_thresholds_vs_i_over_100']['i_where_thr_gt_i_over_100']}")
        for d in sorted(glob.glob(os.path.join(SETS_DIR, "*", ""))):
            setname = os.path.basename(os.path.normpath(d))
            t, p = os.path.join(d, "truth.csv"), os.path.join(d, "predictions.csv")
            if not (os.path.exists(t) and os.path.exists(p)):
                print(f"skip {setname}: no truth.csv/predictions.csv")
                continue
            ld = os.path.join(d, "label_dict.csv")
            ld = ld if os.path.exists(ld) else None
            out = os.path.join(GOLDEN_DIR, f"{setname}.json")
            make_golden(setname, t, p, a.iou_threshold, out, command, ld,
                        single_command(setname, t, p, a.iou_threshold, out, ld))
        return
    if not (a.truth and a.predictions and a.out):
        ap.error("--truth, --predictions and --out are required (or --all)")
    name = a.name or os.path.splitext(os.path.basename(a.out))[0]
    make_golden(name, a.truth, a.predictions, a.iou_threshold, a.out, command, a.label_dict)


if __name__ == "__main__":
    main()
