#!/usr/bin/env python3
"""Crowd regions (iscrowd: 1) in COCO mAP, as the real peers count them.

A small dataset with crowd annotations (testdata/golden/cococrowd/crowd.json,
"dataset" and "detections") is evaluated by

  * pycocotools COCOeval and faster_coco_eval COCOeval_faster directly
    (iou_type "bbox"; gt area = w*h, as canopy computes it);
  * torchmetrics MeanAveragePrecision (backend faster_coco_eval and
    pycocotools), one update() per image as DeepForest feeds it, with each
    target's "iscrowd" tensor (DeepForest itself passes none: see README).

The 12 summary stats of each are written back into the same file with the
versions, the command and ATEN_CPU_CAPABILITY. canopy's test
(jobs.TestCOCOCrowdAsPeers) compares its COCO family with the torchmetrics
values bit for bit.

  ATEN_CPU_CAPABILITY=avx2 /opt/canopy-peers/venv/bin/python tools/coco/crowd.py
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import platform
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
OUT = os.path.join(REPO, "testdata", "golden", "cococrowd", "crowd.json")
STATS = ["map", "map_50", "map_75", "map_small", "map_medium", "map_large",
         "mar_1", "mar_10", "mar_100", "mar_small", "mar_medium", "mar_large"]

# Categories sorted by name in id order, so canopy's label ids (sorted
# names) keep the peers' category order. bbox is [x, y, w, h].
CATEGORIES = [{"id": 1, "name": "a_tree"}, {"id": 2, "name": "b_bird"}, {"id": 3, "name": "c_crowd_only"}]
IMAGES = [{"id": 1, "file_name": "one.png"}, {"id": 2, "file_name": "two.png"}, {"id": 3, "file_name": "three.png"}]
ANNOTATIONS = [
    # image 1: two regular trees (medium, small) and a large crowd region
    (1, 1, 1, [10, 10, 40, 40], 0), (2, 1, 1, [100, 100, 20, 20], 0), (3, 1, 1, [200, 200, 100, 100], 1),
    # image 2: a regular bird, and a crowd region a detection covers by
    # half its own area but under IoU 0.5
    (4, 2, 2, [50, 50, 60, 60], 0), (5, 2, 2, [0, 0, 30, 30], 1),
    # image 3: a crowd of trees with a detection, a tree nobody found,
    # and a class that has only a crowd region
    (6, 3, 1, [0, 0, 120, 120], 1), (7, 3, 1, [300, 300, 50, 50], 0), (8, 3, 3, [10, 200, 40, 40], 1),
]
DETECTIONS = [
    # image_id, category_id, bbox, score (scores exact in float32)
    (1, 1, [11, 10, 40, 40], 0.875), (1, 1, [101, 101, 20, 19], 0.75),
    (1, 1, [210, 210, 30, 30], 0.96875), (1, 1, [250, 250, 40, 40], 0.9375), (1, 1, [220, 270, 20, 20], 0.5),
    (1, 1, [400, 10, 30, 30], 0.25),
    (2, 2, [52, 50, 60, 58], 0.8125), (2, 2, [10, 10, 20, 20], 0.6875), (2, 2, [200, 200, 30, 30], 0.125),
    (3, 1, [5, 5, 100, 100], 0.5625), (3, 1, [130, 0, 40, 40], 0.3125),
    (3, 3, [12, 200, 40, 40], 0.4375),
]


def dataset():
    anns = [{"id": i, "image_id": im, "category_id": c, "bbox": b, "area": float(b[2] * b[3]), "iscrowd": z}
            for i, im, c, b, z in ANNOTATIONS]
    return {"images": IMAGES, "annotations": anns, "categories": CATEGORIES}


def detections():
    return [{"image_id": im, "category_id": c, "bbox": b, "score": s} for im, c, b, s in DETECTIONS]


def direct(module, crowd=True):
    """pycocotools or faster_coco_eval COCOeval on the dataset, bbox
    (crowd False: every iscrowd set to 0, to show what the rule changes)."""
    if module == "pycocotools":
        from pycocotools.coco import COCO
        from pycocotools.cocoeval import COCOeval as Eval
    else:
        from faster_coco_eval import COCO
        from faster_coco_eval import COCOeval_faster as Eval
    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO()
        gt.dataset = dataset()
        if not crowd:
            for a in gt.dataset["annotations"]:
                a["iscrowd"] = 0
        gt.createIndex()
        dt = gt.loadRes(detections())
        e = Eval(gt, dt, "bbox")
        e.evaluate()
        e.accumulate()
        e.summarize()
    return [float(v) for v in e.stats[:12]]


def torchmetrics_map(backend):
    from torchmetrics.detection import MeanAveragePrecision
    m = MeanAveragePrecision(box_format="xyxy", iou_type="bbox", backend=backend)
    for im in IMAGES:
        gts = [a for a in ANNOTATIONS if a[1] == im["id"]]
        dts = [d for d in DETECTIONS if d[0] == im["id"]]
        xyxy = lambda b: [b[0], b[1], b[0] + b[2], b[1] + b[3]]
        target = {"boxes": torch.tensor([xyxy(a[3]) for a in gts], dtype=torch.float32),
                  "labels": torch.tensor([a[2] for a in gts], dtype=torch.int64),
                  "iscrowd": torch.tensor([a[4] for a in gts], dtype=torch.int64)}
        pred = {"boxes": torch.tensor([xyxy(d[2]) for d in dts], dtype=torch.float32).reshape(-1, 4),
                "scores": torch.tensor([d[3] for d in dts], dtype=torch.float32),
                "labels": torch.tensor([d[1] for d in dts], dtype=torch.int64)}
        m.update([pred], [target])
    r = m.compute()
    return [float(r[k]) for k in STATS]


def version(name):
    from importlib.metadata import version as v
    return v(name)


def main():
    out = {
        "meta": {
            "command": "ATEN_CPU_CAPABILITY=avx2 /opt/canopy-peers/venv/bin/python tools/coco/crowd.py",
            "pycocotools": version("pycocotools"), "faster_coco_eval": version("faster-coco-eval"),
            "torchmetrics": version("torchmetrics"), "torch": torch.__version__, "numpy": np.__version__,
            "python": platform.python_version(),
            "ATEN_CPU_CAPABILITY": os.environ.get("ATEN_CPU_CAPABILITY", "") or torch.backends.cpu.get_cpu_capability(),
        },
        "stat_names": STATS,
        "dataset": dataset(),
        "detections": detections(),
        "pycocotools": direct("pycocotools"),
        "faster_coco_eval": direct("faster_coco_eval"),
        "torchmetrics_faster_coco_eval": torchmetrics_map("faster_coco_eval"),
        "torchmetrics_pycocotools": torchmetrics_map("pycocotools"),
    }
    # what the crowd rule changes here (every iscrowd 0)
    out["pycocotools_without_crowd"] = direct("pycocotools", crowd=False)
    f32 = lambda xs: [float(np.float32(x)) for x in xs]
    out["agree"] = (f32(out["pycocotools"]) == f32(out["faster_coco_eval"]) ==
                    out["torchmetrics_faster_coco_eval"] == out["torchmetrics_pycocotools"])
    with open(OUT, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print(json.dumps({k: out[k] for k in ("pycocotools", "torchmetrics_faster_coco_eval", "agree")}))


if __name__ == "__main__":
    sys.exit(main())
