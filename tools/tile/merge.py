"""Merge parity fixture for canopy's infer/tile: DeepForest's own per-window
detections and its predict_tile output, so that canopy's merge can be fed
the same window detections (a replay) and must give the same rows.

Two parts, both run by the real DeepForest:
  tile   predict_tile(path, patch_size, patch_overlap, iou_threshold,
         dataloader_strategy="single") on a raster with DeepForest's
         RetinaNetHub (ResNet-50), built offline (the ImageNet backbone
         download is skipped: weights_backbone=None; every parameter is then
         overwritten) and filled with the r50 test weights of
         tools/retinanet/weights.py (seed 0). Every window's raw detections
         (float32 values, window coordinates, the model's order) are dumped
         from main._format_prediction_frame as predict_tile makes them.
  ties   predict.mosaic on crafted window detections full of exact score
         ties, equal boxes and boxes crossing window edges.

Usage (the peers' venv):
  go run ./cmd/forestgen -n 1 -sizes 900x700 -seed 27 -out /tmp/tile27   (see infer/tile/testdata/README.md)
  /opt/canopy-peers/venv/bin/python tools/tile/merge.py --raster /tmp/tile27/img_0000.png \
      --patch 300 --overlap 0.25 --iou 0.15 > infer/tile/testdata/merge.json
  --no-ties leaves out the crafted cases (e2e2000.json: the raster's case
  only, at predict_tile's defaults). The raster's case also records
  predict_tile's wall time and the load average around it.
"""
import argparse
import importlib.metadata as md
import json
import os
import platform
import sys
import time

import numpy as np
import pandas as pd
import shapely
import torch
import torchvision

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "retinanet"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import weights  # noqa: E402
from peer_meta import torch_meta  # noqa: E402

_orig = torchvision.models.detection.retinanet_resnet50_fpn


def _offline(*a, **kw):
    kw["weights_backbone"] = None
    return _orig(*a, **kw)


torchvision.models.detection.retinanet_resnet50_fpn = _offline

from deepforest import main, predict  # noqa: E402
from deepforest.datasets import prediction  # noqa: E402
from deepforest.models.retinanet import RetinaNetHub  # noqa: E402


# DeepForest 2.1.0 (PyPI) names its merge predict.mosiac (transform_coordinates,
# then apply_nms); commit 1bad4419 names it predict.mosaic (shapely translate,
# bounds.astype(int), reduce_boxes): the same arithmetic.
mosaic = getattr(predict, "mosaic", None) or getattr(predict, "mosiac")


def offline_deepforest():
    """DeepForest's model object around RetinaNetHub (ResNet-50) built offline
    and filled with the r50 test weights (seed 0); tools/tile/bench.py uses
    it too."""
    hub = RetinaNetHub(num_classes=1, nms_thresh=0.05, score_thresh=0.1, label_dict={"Tree": 0})
    weights.fill(hub, 0)
    m = main.deepforest(model=hub, config_args={"workers": 0, "accelerator": "cpu", "devices": 1,
                                                "score_thresh": 0.1, "nms_thresh": 0.05})
    m.model.score_thresh = 0.1
    m.label_dict = {"Tree": 0}
    m.numeric_to_label_dict = {0: "Tree"}
    m.model.nms_thresh = 0.05
    return m


def tile_part(args):
    m = offline_deepforest()
    wins = []
    orig = prediction.SingleImage.postprocess

    def grab(self, batch, idx):
        b = batch["boxes"].detach().cpu().numpy().astype(np.float32)
        s = batch["scores"].detach().cpu().numpy().astype(np.float32)
        lab = batch["labels"].detach().cpu().numpy()
        wins.append({"window": [int(x) for x in self.get_crop_bounds(idx)],
                     "dets": [[float(b[i, 0]), float(b[i, 1]), float(b[i, 2]), float(b[i, 3]), int(lab[i]), float(s[i])]
                              for i in range(len(s))]})
        return orig(self, batch, idx)

    prediction.SingleImage.postprocess = grab
    load = os.getloadavg()
    t = time.perf_counter()
    out = m.predict_tile(path=args.raster, patch_size=args.patch, patch_overlap=args.overlap,
                         iou_threshold=args.iou, dataloader_strategy="single")
    secs = time.perf_counter() - t
    res = [] if out is None else [[float(r.xmin), float(r.ymin), float(r.xmax), float(r.ymax), str({"Tree": 0}.get(r.label, r.label)), float(r.score)]
                                  for r in out.itertuples()]
    from PIL import Image
    width, height = Image.open(args.raster).size
    return {"raster": os.path.basename(args.raster), "width": width, "height": height, "patch": args.patch, "overlap": args.overlap, "iou": args.iou,
            "windows": wins, "predict_tile": res,
            "predict_tile_seconds": secs, "load_before": list(load), "load_after": list(os.getloadavg())}


def ties_part(iou, seed):
    """Crafted windows: scores from a set of 4 values, boxes on a coarse
    grid, so that exact ties in score and IoU happen everywhere."""
    rng = np.random.default_rng(seed)
    frames = []
    wins = []
    for wx, wy in [(0, 0), (0, 80), (80, 0), (80, 80)]:
        n = 40
        x0 = rng.integers(0, 90, n).astype(np.float32) + rng.choice([0, 0.25, 0.5, 0.75], n).astype(np.float32)
        y0 = rng.integers(0, 90, n).astype(np.float32) + rng.choice([0, 0.5], n).astype(np.float32)
        w = rng.choice([10, 20, 30], n).astype(np.float32)
        h = rng.choice([10, 20, 30], n).astype(np.float32)
        s = rng.choice(np.array([0.9, 0.5, 0.5000001, 0.3], dtype=np.float32), n)
        lab = rng.integers(0, 2, n)
        df = pd.DataFrame({"xmin": x0, "ymin": y0, "xmax": x0 + w, "ymax": y0 + h, "label": lab, "score": s})
        if hasattr(predict, "mosaic"):
            df["geometry"] = shapely.box(df.xmin, df.ymin, df.xmax, df.ymax)
        df["window_xmin"] = wx
        df["window_ymin"] = wy
        frames.append(df)
        wins.append({"window": [wx, wy, 100, 100],
                     "dets": [[float(a), float(b), float(c), float(d), int(e), float(f)]
                              for a, b, c, d, e, f in zip(df.xmin, df.ymin, df.xmax, df.ymax, df.label, df.score)]})
    allp = pd.concat(frames, ignore_index=True)
    out = mosaic(allp, iou_threshold=iou)
    res = [[float(r.xmin), float(r.ymin), float(r.xmax), float(r.ymax), str(int(float(r.label))), float(r.score)] for r in out.itertuples()]
    return {"raster": "ties", "iou": iou, "seed": seed, "windows": wins, "predict_tile": res}


def main_():
    ap = argparse.ArgumentParser()
    ap.add_argument("--raster", required=True)
    ap.add_argument("--patch", type=int, default=400)
    ap.add_argument("--overlap", type=float, default=0.05)
    ap.add_argument("--iou", type=float, default=0.15)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-ties", action="store_true", help="only the raster's case (e2e fixtures)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    stdout = sys.stdout
    sys.stdout = sys.stderr  # DeepForest prints
    fx = {
        "peer": dict({"deepforest": md.version("deepforest"), "python": platform.python_version()}, **torch_meta()),
        "command": "%s tools/tile/merge.py %s" % (sys.executable, " ".join(sys.argv[1:])),
        "cases": [tile_part(args)] + ([] if args.no_ties else [ties_part(t, s) for t, s in [(0.15, 1), (0.0, 2), (0.5, 3)]]),
    }
    sys.stdout = stdout
    json.dump(fx, sys.stdout, separators=(",", ":"))
    sys.stdout.write("\n")


if __name__ == "__main__":
    main_()
