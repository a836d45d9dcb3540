"""Loss fixtures for canopy's val_classification / val_bbox_regression /
val_loss (infer/retinanet loss.go, jobs eval --model).

Runs torchvision's RetinaNet in train mode under no_grad, with targets, as
DeepForest's validation_step does, on generated 400x400 images
(cmd/forestgen) with hand-written truth that covers the cases the loss
has to get right: an empty frame (DeepForest's 0,0,0,0 row), a box smaller
than the smallest anchor, overlapping boxes, a second class (the demo model
has two), a box on the border, fractional coordinates and a sliver narrower
than one pixel that DeepForest's dataset drops.

The truth goes through DeepForest's BoxDataset rules (datasets/training.py at
1bad4419) before it reaches the model: the boxes as float32; a frame whose
boxes sum to 0 becomes a (0, 4) target; boxes are clamped to the image and
those narrower or shorter than 1 px are dropped. (The validation Kornia
pipeline is empty; its box round trip is not reproduced here.)

Models:
  r50   the ResNet-50 FrozenBatchNorm2d test network of golden.py with the
        generated weights of weights.py (seed 0), 1 class, min 800 / max 1333:
        a 400x400 image resizes to 800x800 (scale exactly 2).
  demo  testdata/models/canopy-demo-r18 (ordinary BatchNorm2d, 2 classes,
        min = max = 400): a 400x400 image keeps its size (scale exactly 1).
Both sizes resize identically under torchvision's float32 size rule (before
0.16) and its Python-float rule (0.16 and later), so the fixture holds
whichever rule canopy follows.

BatchNorm: canopy uses the stored statistics. For r50 (FrozenBatchNorm2d)
train mode is exactly that. For the demo model (nn.BatchNorm2d) the values
canopy is compared with are computed with the BatchNorm modules in eval mode
(the rest of the model in train mode); the values of PyTorch's plain train
mode, which normalises with the batch's statistics, are recorded next to them
("train_mode_batch_statistics") to show the difference DeepForest would log.

Per image at batch 1: the peer's loss dict, and the foreground / ignored
anchor counts from the peer's own matcher. At batch 4 (the four images, all
one size, so the padding is the same): the loss dict (mean over the batch).

Usage:
  go run ./cmd/forestgen -out bin/loss-images -n 4 -seed 7 -sizes 400x400 -prefix loss_
  /opt/canopy-peers/venv/bin/python tools/retinanet/losses.py --images bin/loss-images \
      --out testdata/golden/retinanet/losses.json
(make golden-losses)
"""
import argparse
import copy
import hashlib
import os
import platform
import sys

import numpy as np
import torch
import torchvision
from torchvision.ops import boxes as box_ops

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import golden  # noqa: E402
import weights  # noqa: E402

SEED = 7  # forestgen seed of the images
N = 4
SIZE = 400

# Truth per image: (xmin, ymin, xmax, ymax, label) in original pixels.
TRUTH = [
    # 0: an empty frame, as DeepForest's CSVs encode it
    [(0, 0, 0, 0, 0)],
    # 1: a box smaller than any anchor (6x5 px; 12x10 at r50's scale 2) and
    #    an ordinary tree
    [(100, 100, 106, 105, 0), (220, 40, 290, 118, 0)],
    # 2: overlapping boxes (pairwise IoU about 0.3-0.6), both classes
    [(50, 60, 150, 160, 0), (80, 70, 170, 175, 1), (60, 100, 140, 190, 0), (300, 300, 360, 372, 1)],
    # 3: a stand: border boxes, fractional coordinates, a sliver DeepForest
    #    drops (0.5 px wide), a box reaching past the image (clamped)
    [
        (10.5, 20.25, 60.75, 80.5, 0),
        (370, 380, 400, 400, 1),
        (0, 0, 35, 28, 0),
        (200, 200, 200.5, 240, 0),
        (150.25, 250.5, 230.125, 330.75, 1),
        (240, 120, 330, 200, 0),
        (385, 10, 410, 60, 0),
        (120, 330, 170, 395, 1),
    ],
]


def deepforest_target(rows, w, h, classes):
    """BoxDataset.__getitem__'s target for rows (see the module doc)."""
    b = np.array([r[:4] for r in rows], dtype=np.float32)
    lab = np.array([r[4] if classes > 1 else 0 for r in rows], dtype=np.int64)
    if np.sum(b) == 0:
        return {"boxes": torch.zeros((0, 4), dtype=torch.float32), "labels": torch.zeros(0, dtype=torch.int64)}
    t = torch.from_numpy(b)
    t[:, 0].clamp_(0, w)
    t[:, 1].clamp_(0, h)
    t[:, 2].clamp_(0, w)
    t[:, 3].clamp_(0, h)
    keep = ((t[:, 2] - t[:, 0]) >= 1) & ((t[:, 3] - t[:, 1]) >= 1)
    return {"boxes": t[keep].clone(), "labels": torch.from_numpy(lab)[keep].clone()}


def counts(model, x, tgt):
    """Foreground and ignored anchors of one image, from the peer's own
    transform, anchor generator and matcher."""
    il, tt = model.transform([x], [copy.deepcopy(tgt)])
    feats = list(model.backbone(il.tensors).values())
    anchors = model.anchor_generator(il, feats)[0]
    boxes = tt[0]["boxes"]
    if boxes.numel() == 0:
        return 0, 0, int(anchors.shape[0])
    m = model.proposal_matcher(box_ops.box_iou(boxes, anchors))
    return int((m >= 0).sum()), int((m == -2).sum()), int(anchors.shape[0])


def losses(model, xs, tgts):
    with torch.no_grad():
        d = model(list(xs), [copy.deepcopy(t) for t in tgts])
    return {"classification": float(d["classification"]), "bbox_regression": float(d["bbox_regression"])}


def set_mode(model, stored_bn):
    model.train()
    if stored_bn:
        for mod in model.modules():
            if isinstance(mod, torch.nn.modules.batchnorm._BatchNorm):
                mod.eval()


def run(model, kind, xs, tgts, bn_note):
    entry = {"kind": kind, "batchnorm": bn_note, "images": [], "batch4": None}
    set_mode(model, True)
    for i, (x, t) in enumerate(zip(xs, tgts)):
        with torch.no_grad():
            fg, ign, na = counts(model, x, t)
        v = losses(model, [x], [t])
        v.update({"index": i, "foreground": fg, "ignored": ign, "anchors": na, "targets": t["boxes"].tolist(), "labels": t["labels"].tolist()})
        entry["images"].append(v)
        print("%s image %d: %s" % (kind, i, v), file=sys.stderr)
    entry["batch4"] = losses(model, xs, tgts)
    entry["batch1_mean"] = {
        k: float(sum(np.float32(im[k]) for im in entry["images"]) / np.float32(len(xs))) for k in ("classification", "bbox_regression")
    }
    print("%s batch 4: %s" % (kind, entry["batch4"]), file=sys.stderr)
    return entry


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--images", required=True, help="folder of forestgen's loss_0000.png .. loss_0003.png")
    ap.add_argument("--demo", default="testdata/models/canopy-demo-r18")
    ap.add_argument("--out", required=True)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    paths = [os.path.join(args.images, "loss_%04d.png" % i) for i in range(N)]
    xs = [golden.load(p) for p in paths]
    for x in xs:
        assert tuple(x.shape[1:]) == (SIZE, SIZE), x.shape
    out = {
        "peer": {
            "torch": torch.__version__,
            "torchvision": torchvision.__version__,
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "threads": torch.get_num_threads(),
            "python": platform.python_version(),
        },
        "command": "/opt/canopy-peers/venv/bin/python tools/retinanet/losses.py " + " ".join(sys.argv[1:]),
        "images_command": "go run ./cmd/forestgen -out DIR -n %d -seed %d -sizes %dx%d -prefix loss_" % (N, SEED, SIZE, SIZE),
        "size_rule_note": "400x400 resizes to 800x800 (r50, scale 2) and 400x400 (demo, scale 1) under both torchvision size rules",
        "seed": SEED,
        "images": [{"path": os.path.basename(p), "sha256": hashlib.sha256(open(p, "rb").read()).hexdigest()} for p in paths],
        "truth": [[list(r) for r in rows] for rows in TRUTH],
        "models": {},
    }

    r50, _ = golden.build("r50")
    weights.fill(r50, 0)
    tg = [deepforest_target(rows, SIZE, SIZE, 1) for rows in TRUTH]
    out["models"]["r50"] = run(r50, "r50", xs, tg, "FrozenBatchNorm2d: train mode uses the stored statistics")

    demo, _ = golden.build_checkpoint(args.demo)
    tg = [deepforest_target(rows, SIZE, SIZE, 2) for rows in TRUTH]
    entry = run(demo, "demo", xs, tg, "nn.BatchNorm2d in eval mode (stored statistics), the rest in train mode")
    # PyTorch's plain train mode: batch statistics (and updated running
    # statistics, hence a copy per call).
    tm = {"images": []}
    for x, t in zip(xs, tg):
        m = copy.deepcopy(demo)
        set_mode(m, False)
        tm["images"].append(losses(m, [x], [t]))
    m = copy.deepcopy(demo)
    set_mode(m, False)
    tm["batch4"] = losses(m, xs, tg)
    entry["train_mode_batch_statistics"] = tm
    out["models"]["demo"] = entry

    golden.write_json(args.out, out)


if __name__ == "__main__":
    main()
