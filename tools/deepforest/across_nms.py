"""DeepForest 2.1.0's predict_image with a two-label model: the rows it
returns and the detections its across_class_nms step was given, the
fixture of canopy's across-class NMS (infer/tile TestAcrossClassNMSDeepForest, jobs TestPredictAcrossClassNMSDeepForest).

The model is the r50 test network (tools/retinanet/weights.py, seed 0) with
two classes, {"Alive": 0, "Dead": 1}, in DeepForest's own RetinaNetHub
inside a deepforest LightningModule, built offline as
tools/deepforest/checkpoints.py builds it (weights_backbone=None). canopy's
test builds the same network (testweights.StateDict("resnet50", 2, 256)).

For each image, deepforest.predict.across_class_nms is wrapped so that the
frame predict_image hands it (the model's detections after its per-class
NMS and top 300) and the frame it returns are recorded; predict_image
itself runs unchanged (main.deepforest.predict_image(path=...)), and its
result is recorded as returned, labels already names.

    ATEN_CPU_CAPABILITY=avx512 /opt/canopy-peers/venv/bin/python \\
        tools/deepforest/across_nms.py --out infer/tile/testdata/across_nms.json IMAGE...

The images are DeepForest's NEON samples: ../shared/data/deepforest's
OSBS_029.png and the deepforest package's own
2019_YELL_2_541000_4977000_image_crop.png (1249x1035).
"""
import argparse
import functools
import hashlib
import json
import os
import platform
import sys

import numpy as np
import torch
import torchvision

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "retinanet"))
sys.path.insert(0, os.path.join(HERE, ".."))
import weights  # noqa: E402
from peer_meta import peer_command, torch_meta  # noqa: E402

LABELS = {"Alive": 0, "Dead": 1}


def build():
    import deepforest
    from deepforest import main as dfmain
    from deepforest.models import retinanet as dfretina

    orig = torchvision.models.detection.retinanet_resnet50_fpn
    torchvision.models.detection.retinanet_resnet50_fpn = functools.partial(orig, weights_backbone=None)
    try:
        net = dfretina.RetinaNetHub(backbone_weights=None, num_classes=2, nms_thresh=0.05, score_thresh=0.1,
                                    label_dict=LABELS, detections_per_img=300, topk_candidates=1000)
    finally:
        torchvision.models.detection.retinanet_resnet50_fpn = orig
    weights.fill(net, seed=0)
    net.eval()
    module = dfmain.deepforest(model=net, config_args={"model": {"name": None}, "num_classes": 2,
                                                       "label_dict": LABELS, "log_root": os.environ.get("TMPDIR", "/tmp")})
    module.set_labels(LABELS)
    return deepforest.__version__, module


def f32bits(v):
    return int(np.float32(v).view(np.uint32))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("images", nargs="+")
    a = ap.parse_args()
    torch.manual_seed(0)
    version, module = build()
    from deepforest import predict as dfpredict

    calls = []
    orig = dfpredict.across_class_nms

    def wrapped(df, iou_threshold=0.15):
        out = orig(df, iou_threshold=iou_threshold)
        calls.append({"iou_threshold": iou_threshold, "in": df.copy(), "out": out.copy()})
        return out

    dfpredict.across_class_nms = wrapped
    cases = []
    for path in a.images:
        calls.clear()
        res = module.predict_image(path=path)
        with open(path, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        case = {"image": os.path.basename(path), "sha256": digest, "nms_thresh": module.config.nms_thresh,
                "labels_in_raw": None, "raw": [], "rows": []}
        if len(calls) != 1:
            raise SystemExit("%s: across_class_nms ran %d times; the case needs a two-label image" % (path, len(calls)))
        raw = calls[0]["in"]
        case["iou_threshold"] = calls[0]["iou_threshold"]
        case["labels_in_raw"] = sorted(int(v) for v in raw.label.unique())
        # The model's float32 detections, exactly (the frame holds float32 columns).
        for r in raw.itertuples():
            case["raw"].append([f32bits(r.xmin), f32bits(r.ymin), f32bits(r.xmax), f32bits(r.ymax), int(r.label), f32bits(r.score)])
        case["raw_dtypes"] = {c: str(raw[c].dtype) for c in ["xmin", "ymin", "xmax", "ymax", "label", "score"]}
        case["rows_dtypes"] = {c: str(res[c].dtype) for c in ["xmin", "ymin", "xmax", "ymax", "score"]}
        for r in res.itertuples():
            case["rows"].append([float(r.xmin), float(r.ymin), float(r.xmax), float(r.ymax), str(r.label), float(r.score)])
        case["columns"] = list(res.columns)
        cases.append(case)
        print("%s: %d raw rows (labels %s), predict_image %d rows" % (path, len(case["raw"]), case["labels_in_raw"], len(case["rows"])))
    out = {"peer": {"deepforest": version, "numpy": np.__version__, "python": platform.python_version(),
                    "ATEN_CPU_CAPABILITY": os.environ.get("ATEN_CPU_CAPABILITY", "(unset)"), **torch_meta()},
           "command": peer_command(),
           "model": "r50 test weights (tools/retinanet/weights.py seed 0), 2 classes " + json.dumps(LABELS) +
                    ", score_thresh 0.1, nms_thresh 0.05, 300 detections, top-k 1000",
           "cases": cases}
    with open(a.out, "w") as f:
        json.dump(out, f, indent=None, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
