#!/usr/bin/env python3
"""Check canopy's --coco-out files with the real pycocotools.

Loads OUT/coco_truth.json with pycocotools.coco.COCO, the predictions with
COCO.loadRes(OUT/coco_predictions.json), runs COCOeval(iouType="bbox") on
the images that have truth boxes (the images DeepForest passes to
torchmetrics) and compares the 12 summary stats with the map/mar values in
OUT/report.json. Writes a fixture with pycocotools' stats, the sha256 of the
two files it read, the versions and this command.

  go run . eval --csv testdata/sets/coco/truth.csv \
      --predictions testdata/sets/coco/predictions.csv --out bin/coco-out --force --coco-out
  /opt/canopy-peers/venv/bin/python tools/coco/verify_coco_out.py --out bin/coco-out \
      --fixture testdata/golden/cocoout/coco.json

pycocotools' own recall thresholds are numpy's float64 linspace, torchmetrics'
(which canopy reproduces) torch's float32 one, so a stat may differ where a
recall lands exactly between them: the comparison runs COCOeval with torch's
thresholds (testdata/golden/coco/thresholds.json) set in its params, as
torchmetrics does, and the fixture also records the stats with the defaults.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import os
import platform
import shlex
import sys

import numpy as np
import pycocotools
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval

STATS = ["map", "map_50", "map_75", "map_small", "map_medium", "map_large",
         "mar_1", "mar_10", "mar_100", "mar_small", "mar_medium", "mar_large"]


def sha256(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def version(mod: str) -> str:
    try:
        from importlib.metadata import version as v
        return v(mod)
    except Exception:  # noqa: BLE001
        return "unknown"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True, help="canopy eval --coco-out folder")
    ap.add_argument("--fixture", help="write the fixture JSON here")
    ap.add_argument("--tolerance", type=float, default=1e-6)
    ap.add_argument("--canopy-command", default="go run . eval --csv testdata/sets/coco/truth.csv "
                    "--predictions testdata/sets/coco/predictions.csv --out bin/coco-out --force --coco-out --html=false",
                    help="the canopy command that wrote --out (recorded in the fixture)")
    ap.add_argument("--thresholds", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                                         "testdata", "golden", "coco", "thresholds.json"),
                    help="torch's IoU and recall thresholds (tools/coco/golden.py), which torchmetrics and canopy use")
    a = ap.parse_args()
    truth = os.path.join(a.out, "coco_truth.json")
    preds = os.path.join(a.out, "coco_predictions.json")
    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO(truth)
        dt = gt.loadRes(preds)
    img_ids = sorted({ann["image_id"] for ann in gt.dataset["annotations"]})
    with open(a.thresholds) as f:
        thr = json.load(f)

    def run(torch_thresholds: bool):
        ev = COCOeval(gt, dt, iouType="bbox")
        ev.params.imgIds = img_ids
        if torch_thresholds:
            ev.params.iouThrs = np.array(thr["iou_thresholds"], dtype=np.float64)
            ev.params.recThrs = np.array(thr["rec_thresholds"], dtype=np.float64)
        log = io.StringIO()
        with contextlib.redirect_stdout(log):
            ev.evaluate()
            ev.accumulate()
            ev.summarize()
        return [float(s) for s in ev.stats], log.getvalue()

    default_stats, log = run(False)
    stats, _ = run(True)
    with open(os.path.join(a.out, "report.json")) as f:
        canopy = json.load(f)["metrics"]
    diffs = {}
    for name, s in zip(STATS, stats):
        c = canopy.get(name)
        if c is None:
            print(f"{name}: canopy has no value", file=sys.stderr)
            return 1
        diffs[name] = abs(float(np.float32(s)) - c)
    worst = max(diffs.values())
    print(log)
    print(f"images {len(gt.dataset['images'])}, scored {len(img_ids)}, "
          f"annotations {len(gt.dataset['annotations'])}, detections {len(dt.dataset['annotations'])}")
    print(f"largest |pycocotools - canopy| over the 12 stats, with torch's thresholds: {worst:.3g}")
    dd = {n: abs(float(np.float32(s)) - canopy[n]) for n, s in zip(STATS, default_stats)}
    print(f"with pycocotools' own np.linspace recall thresholds: largest {max(dd.values()):.3g} ({max(dd, key=dd.get)})")
    if a.fixture:
        out = {
            "what": "pycocotools COCOeval (bbox) on canopy's --coco-out files, images with truth; "
                    "stats_torch_thresholds use torch's float32 linspace thresholds as torchmetrics passes them "
                    "(abs_diff_to_canopy is for these), stats_pycocotools_defaults numpy's float64 ones",
            "command": " ".join(shlex.quote(x) for x in sys.argv),
            "canopy_command": a.canopy_command,
            "python": platform.python_version(),
            "pycocotools": version("pycocotools"),
            "numpy": np.__version__,
            "truth_sha256": sha256(truth),
            "predictions_sha256": sha256(preds),
            "images": len(gt.dataset["images"]),
            "images_scored": len(img_ids),
            "stats_torch_thresholds": dict(zip(STATS, stats)),
            "stats_pycocotools_defaults": dict(zip(STATS, default_stats)),
            "abs_diff_to_canopy": diffs,
        }
        try:
            import torch
            out["torch"] = torch.__version__
            out["torch_cpu_capability"] = torch.backends.cpu.get_cpu_capability()
            out["torch_threads"] = torch.get_num_threads()
            import torchvision
            out["torchvision"] = torchvision.__version__
        except Exception:  # noqa: BLE001
            pass
        with open(a.fixture, "w") as f:
            json.dump(out, f, indent=1)
            f.write("\n")
    return 0 if worst <= a.tolerance else 1


if __name__ == "__main__":
    sys.exit(main())
