"""Reference values for canopy's point and polygon metrics, from the peers.

Generates small cases (seeded) into OUT/<case>/ (truth.csv, preds.csv and,
for point validation, PNG images of known sizes) and records in
OUT/<case>/deepforest.json what DeepForest at commit 1bad4419 gives:

  - evaluate.evaluate_geometry(geometry_type="point" | "polygon") on the
    frames utilities.read_file makes of the CSVs: precision, recall, the
    class table and the results frame;
  - for points, the point model's validation: PointDataset (its float32
    tensors, empty-frame rule and filter_points; validate_coordinates off so
    points outside the image are filtered rather than refused) feeding
    metrics.RecallPrecision(task="point") and torchmetrics'
    MeanAbsoluteError of the counts, batch by batch as main.py does;
  - for polygons, faster-coco-eval's COCOeval(iou_type="segm") (coco_segm).

Run (from the repository root, 1bad4419's sources on PYTHONPATH):
  PYTHONPATH=/tmp/deepforest/src /opt/canopy-peers/venv/bin/python \
      tools/geometry/peer.py --out jobs/testdata/geometry
"""
import argparse
import json
import math
import os
import sys

import numpy as np
import pandas as pd

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from peer_meta import peer_command, torch_meta  # noqa: E402


def point_cases(rng):
    cases = {}
    # ties and duplicates, points exactly 10 px apart, an image without
    # predictions, an empty frame (0,0) with and without predictions,
    # points outside the image (validation filters them), two labels
    t = [("a.png", 10, 10, "Tree"), ("a.png", 20, 10, "Tree"), ("a.png", 30, 10, "Snag"),
         ("a.png", 10, 10, "Tree"), ("a.png", 50, 50, "Tree"), ("a.png", 250, 20, "Tree"),
         ("b.png", 5, 5, "Tree"), ("b.png", 15, 5, "Snag"),
         ("c.png", 0, 0, "Tree"), ("d.png", 0, 0, "Tree"),
         ("e.png", 40, 40, "Tree"), ("e.png", 0, 0, "Tree"), ("e.png", 60, 160, "Snag"),
         ("f.png", -3, 0, "Tree"), ("f.png", 3, 0, "Tree"),  # float32 sum 0: an empty frame
         ("g.png", 100, 100, "Tree"), ("g.png", 20, 20, "Tree")]
    p = [("a.png", 15, 10, "Tree", 0.9), ("a.png", 25, 10, "Snag", 0.8), ("a.png", 10, 10, "Tree", 0.7),
         ("a.png", 10, 10, "Tree", 0.7), ("a.png", 60, 50, "Tree", 0.6), ("a.png", 40, 10, "Snag", 0.5),
         ("c.png", 3, 3, "Tree", 0.5), ("e.png", 40, 30, "Tree", 0.4), ("e.png", 1, 1, "Snag", 0.3),
         ("e.png", 60, 150, "Snag", 0.2), ("zzz.png", 1, 1, "Tree", 0.1),
         ("f.png", 3, 1, "Tree", 0.3), ("g.png", 110, 100, "Tree", 0.3), ("g.png", 20, 29.5, "Tree", 0.3)]
    cases["points_edge"] = (t, p, {"a.png": (200, 100), "b.png": (50, 50), "c.png": (20, 20),
                                   "d.png": (20, 20), "e.png": (100, 155), "f.png": (20, 20), "g.png": (200, 200)})
    # many points, two labels, predictions jittered around the truth with
    # misses and false positives; coordinates on a 0.5 grid make ties
    t, p, sizes = [], [], {}
    for k in range(6):
        name = "img%d.png" % k
        sizes[name] = (300, 200)
        n = int(rng.integers(150, 400))
        xs = np.round(rng.uniform(-5, 305, n) * 2) / 2
        ys = np.round(rng.uniform(-5, 205, n) * 2) / 2
        for x, y in zip(xs, ys):
            lab = "Tree" if rng.random() < 0.7 else "Snag"
            t.append((name, float(x), float(y), lab))
            if rng.random() < 0.85:
                dx, dy = np.round(rng.normal(0, 6, 2) * 2) / 2
                q = "Tree" if rng.random() < 0.7 else "Snag"
                p.append((name, float(x + dx), float(y + dy), q, float(np.round(rng.random(), 3))))
        for _ in range(int(rng.integers(5, 40))):
            p.append((name, float(np.round(rng.uniform(0, 300) * 2) / 2), float(np.round(rng.uniform(0, 200) * 2) / 2),
                      "Tree", float(np.round(rng.random(), 3))))
    cases["points_many"] = (t, p, sizes)
    return cases


def square(x, y, s):
    return [(x, y), (x + s, y), (x + s, y + s), (x, y + s), (x, y)]


def ring_wkt(r):
    return "(" + ", ".join("%r %r" % (float(a), float(b)) for a, b in r) + ")"


def poly_wkt(rings):
    return "POLYGON (" + ", ".join(ring_wkt(r) for r in rings) + ")"


def multi_wkt(polys):
    return "MULTIPOLYGON (" + ", ".join("(" + ", ".join(ring_wkt(r) for r in rings) + ")" for rings in polys) + ")"


def blob(rng, cx, cy, r, n):
    """A valid polygon: the convex hull of n points around (cx, cy), a
    notch cut into it, coordinates rounded to 1e-3 (retried until valid)."""
    import shapely
    while True:
        ang = rng.uniform(0, 2 * math.pi, n)
        rad = r * rng.uniform(0.5, 1.0, n)
        hull = shapely.MultiPoint([(cx + a * math.cos(t), cy + a * math.sin(t)) for t, a in zip(ang, rad)]).convex_hull
        pts = [(round(x, 3), round(y, 3)) for x, y in hull.exterior.coords[:-1]]
        pts.insert(1, (round(cx, 3), round(cy, 3)))  # a notch to the centre: not convex
        pts.append(pts[0])
        if len(pts) >= 5 and shapely.Polygon(pts).is_valid:
            return pts


def polygon_cases(rng):
    cases = {}
    tri = [(0, 0), (10, 0), (0, 10), (0, 0)]
    t = [("a.png", poly_wkt([square(0, 0, 10)]), "Tree"),            # a rectangle among polygons
         ("a.png", poly_wkt([square(10, 0, 10)]), "Tree"),           # touches the first
         ("a.png", poly_wkt([[(30, 0), (40, 0), (35, 8), (30, 0)]]), "Snag"),
         ("a.png", multi_wkt([[square(50, 50, 5)], [square(60, 50, 5)]]), "Tree"),
         ("a.png", poly_wkt([square(70, 70, 20), square(75, 75, 5)]), "Tree"),  # with a hole
         ("b.png", poly_wkt([tri]), "Tree"),
         ("c.png", "POLYGON EMPTY", "Tree")]
    p = [("a.png", poly_wkt([square(5, 0, 10)]), "Tree", 0.9),           # overlaps both halves equally
         ("a.png", poly_wkt([square(20, 0, 5)]), "Tree", 0.8),           # touches, no area
         ("a.png", poly_wkt([[(30, 0), (40, 0), (35, 8), (30, 0)]]), "Snag", 0.7),
         ("a.png", poly_wkt([[(30, 0), (40, 0), (35, 8), (30, 0)]]), "Tree", 0.7),  # duplicate
         ("a.png", multi_wkt([[square(50, 50, 5)], [square(61, 50, 5)]]), "Tree", 0.6),
         ("a.png", poly_wkt([square(72, 72, 16)]), "Tree", 0.5),
         ("c.png", poly_wkt([square(0, 0, 3)]), "Tree", 0.5),
         ("zzz.png", poly_wkt([square(0, 0, 3)]), "Tree", 0.1)]
    cases["polygons_edge"] = (t, p, {"a.png": (100, 100), "b.png": (40, 30), "c.png": (10, 10)})
    t, p = [], []
    for k in range(4):
        name = "img%d.png" % k
        for _ in range(int(rng.integers(40, 120))):
            cx, cy = rng.uniform(0, 400, 2)
            r = rng.uniform(5, 20)
            lab = "Tree" if rng.random() < 0.7 else "Snag"
            t.append((name, poly_wkt([blob(rng, cx, cy, r, int(rng.integers(5, 12)))]), lab))
            if rng.random() < 0.85:
                dx, dy = rng.normal(0, r / 3, 2)
                q = "Tree" if rng.random() < 0.7 else "Snag"
                p.append((name, poly_wkt([blob(rng, cx + dx, cy + dy, r * rng.uniform(0.8, 1.2), int(rng.integers(5, 12)))]), q,
                          float(np.round(rng.random(), 3))))
    cases["polygons_many"] = (t, p, {"img%d.png" % k: (420, 410) for k in range(4)})
    return cases


def write_case(out, name, kind, truth, preds, sizes):
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    if kind == "point":
        tdf = pd.DataFrame(truth, columns=["image_path", "x", "y", "label"])
        pdf = pd.DataFrame(preds, columns=["image_path", "x", "y", "label", "score"])
    else:
        tdf = pd.DataFrame(truth, columns=["image_path", "geometry", "label"])
        pdf = pd.DataFrame(preds, columns=["image_path", "geometry", "label", "score"])
    tdf.to_csv(os.path.join(d, "truth.csv"), index=False)
    pdf.to_csv(os.path.join(d, "preds.csv"), index=False)
    from PIL import Image
    for img, (w, h) in sizes.items():
        Image.new("RGB", (w, h), (0, 0, 0)).save(os.path.join(d, img))
    return d


def frames(d, kind):
    """Both files as a user reads them: utilities.read_file (x,y columns
    become Point geometries; WKT is parsed by geopandas/shapely)."""
    from deepforest import utilities
    return (utilities.read_file(os.path.join(d, "truth.csv"), root_dir=d),
            utilities.read_file(os.path.join(d, "preds.csv"), root_dir=d))


def clean(v):
    if v is None:
        return None
    if isinstance(v, (float, np.floating)):
        v = float(v)
        if math.isnan(v):
            return None
        if math.isinf(v):
            return "inf"
        return v
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.bool_,)):
        return bool(v)
    return v


def evaluate_geometry(d, kind):
    from deepforest import evaluate
    tdf, pdf = frames(d, kind)
    r = evaluate.evaluate_geometry(predictions=pdf, ground_df=tdf, iou_threshold=0.4,
                                   distance_threshold=10.0, geometry_type=kind)
    col = "distance" if kind == "point" else "IoU"
    rows = []
    res = r["results"]
    if res is not None:
        for _, x in res.iterrows():
            rows.append({"image_path": x["image_path"], "truth_id": clean(x["truth_id"]),
                         "prediction_id": clean(x["prediction_id"]), col: clean(x.get(col)),
                         "score": clean(x["score"]), "match": bool(x["match"]),
                         "true_label": x["true_label"], "predicted_label": clean(x["predicted_label"])})
    classes = []
    if r["class_recall"] is not None:
        for _, x in r["class_recall"].iterrows():
            classes.append({"label": x["label"], "recall": float(x["recall"]), "precision": float(x["precision"])})
    return {"precision": clean(r[kind + "_precision"]), "recall": clean(r[kind + "_recall"]),
            "class_recall": classes, "results": rows}


def point_validation(d, labels):
    """main.py's point validation over a PointDataset of the case."""
    import torch
    import torchmetrics
    from deepforest.datasets.training import PointDataset
    from deepforest.metrics import RecallPrecision
    label_dict = {name: i for i, name in enumerate(sorted(labels))}
    ds = PointDataset(csv_file=os.path.join(d, "truth.csv"), root_dir=d, label_dict=label_dict,
                      validate_coordinates=False)
    pdf = pd.read_csv(os.path.join(d, "preds.csv"))
    metric = RecallPrecision(task="point", distance_threshold=10.0, label_dict={"Tree": 0})
    mae = torchmetrics.MeanAbsoluteError()
    batch = 2
    for start in range(0, len(ds), batch):
        preds, targets, names = [], [], []
        for idx in range(start, min(len(ds), start + batch)):
            _, target, name = ds[idx]
            sel = pdf[pdf.image_path == name]
            preds.append({"points": torch.tensor(sel[["x", "y"]].values, dtype=torch.float32).reshape(-1, 2),
                          "labels": torch.tensor([label_dict[x] for x in sel.label], dtype=torch.int64),
                          "scores": torch.tensor(sel.score.values, dtype=torch.float32)})
            targets.append(target)
            names.append(name)
        metric.update(preds, targets, names)
        mae.update(torch.tensor([float(len(p["points"])) for p in preds], dtype=torch.float32),
                   torch.tensor([float(len(t["points"])) for t in targets], dtype=torch.float32))
    # a one-entry label_dict: with more labels compute() fails (the
    # AttributeError canopy documents); the keys do not depend on it
    out = {k: clean(v.item() if hasattr(v, "item") else v) for k, v in metric.compute().items()}
    out["val_mae"] = clean(mae.compute().item())
    return out


def coco_segm(d):
    """faster-coco-eval's COCOeval(iou_type="segm") on the case's polygons
    as COCO segmentations at the images' sizes: every ring of every part
    (holes too, merged by union as annToRLE merges a polygon list) without
    its closing repeat; each truth's area the mask's; predictions as the
    compressed RLE loadRes takes. Every truth image is an image; empty
    truth polygons and predictions of other images are left out."""
    import shapely
    from faster_coco_eval import COCO, COCOeval_faster
    from faster_coco_eval.core import mask as mask_util
    from PIL import Image
    tdf = pd.read_csv(os.path.join(d, "truth.csv"))
    pdf = pd.read_csv(os.path.join(d, "preds.csv"))
    labels = sorted(set(tdf.label) | set(pdf[pdf.image_path.isin(tdf.image_path)].label))
    cat = {name: i + 1 for i, name in enumerate(labels)}
    images, sizes = {}, {}
    for name in tdf.image_path.unique():
        with Image.open(os.path.join(d, name)) as im:
            sizes[name] = im.size
        images[name] = len(images) + 1

    def rings(wkt):
        g = shapely.from_wkt(wkt)
        parts = list(g.geoms) if g.geom_type == "MultiPolygon" else [g]
        out = []
        for p in parts:
            for r in [p.exterior] + list(p.interiors):
                out.append([float(v) for xy in r.coords[:-1] for v in xy])
        return out

    def rle(segm, name):
        w, h = sizes[name]
        return mask_util.merge(mask_util.frPyObjects(segm, h, w))

    anns = []
    for _, r in tdf.iterrows():
        g = shapely.from_wkt(r.geometry)
        if g.is_empty:
            continue
        segm = rings(r.geometry)
        m = rle(segm, r.image_path)
        anns.append({"id": len(anns) + 1, "image_id": images[r.image_path], "category_id": cat[r.label], "segmentation": segm,
                     "area": float(mask_util.area(m)), "bbox": [float(v) for v in mask_util.toBbox(m)], "iscrowd": 0})
    gt = COCO({"images": [{"id": i, "file_name": n, "width": sizes[n][0], "height": sizes[n][1]} for n, i in images.items()],
               "annotations": anns, "categories": [{"id": i, "name": n} for n, i in cat.items()]})
    dts = []
    for _, r in pdf.iterrows():
        if r.image_path not in images:
            continue
        m = rle(rings(r.geometry), r.image_path)
        dts.append({"image_id": images[r.image_path], "category_id": cat[r.label], "segmentation": m, "score": float(r.score)})
    ev = COCOeval_faster(gt, gt.loadRes(dts), "segm")
    ev.evaluate()
    ev.accumulate()
    ev.summarize()
    keys = ["map", "map_50", "map_75", "map_small", "map_medium", "map_large", "mar_1", "mar_10", "mar_100",
            "mar_small", "mar_medium", "mar_large"]
    return dict(zip(keys, [float(v) for v in ev.stats[:12]]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    import deepforest
    import geopandas
    import scipy
    import shapely
    import torchmetrics
    rng = np.random.default_rng(43)
    meta = {"deepforest": "1bad4419 (" + os.path.dirname(deepforest.__file__) + ")", "scipy": scipy.__version__,
            "shapely": shapely.__version__, "geos": ".".join(map(str, shapely.geos_version)),
            "geopandas": geopandas.__version__, "torchmetrics": torchmetrics.__version__,
            "python": sys.version.split()[0], "command": peer_command(),
            "ATEN_CPU_CAPABILITY": os.environ.get("ATEN_CPU_CAPABILITY", "(unset)")}
    meta.update(torch_meta())
    for kind, cases in (("point", point_cases(rng)), ("polygon", polygon_cases(rng))):
        for name, (t, p, sizes) in cases.items():
            d = write_case(args.out, name, kind, t, p, sizes)
            rec = {"meta": meta, "kind": kind, "evaluate_geometry": evaluate_geometry(d, kind)}
            if kind == "point":
                rec["validation"] = point_validation(d, {x[3] for x in t} | {x[3] for x in p})
            else:
                import faster_coco_eval
                rec["meta"] = dict(meta, faster_coco_eval=faster_coco_eval.__version__)
                rec["coco_segm"] = coco_segm(d)
            with open(os.path.join(d, "deepforest.json"), "w") as f:
                json.dump(rec, f, indent=1)
            print(name, rec["evaluate_geometry"]["precision"], rec["evaluate_geometry"]["recall"], rec.get("validation"))


if __name__ == "__main__":
    main()
