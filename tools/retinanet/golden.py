"""Parity fixtures for canopy's native RetinaNet (infer/retinanet).

Builds torchvision's RetinaNet as DeepForest does, fills every parameter and
buffer from the deterministic generator in weights.py (canopy's Go tests
regenerate the same weights bit for bit, so no weights are stored), runs it on
the given images one image per batch (canopy pads each image on its own) in
float32 on the CPU, and writes detections plus per-level feature summaries.

Models:
  r50  torchvision retinanet_resnet50_fpn v1 as DeepForest builds it: ResNet-50
       with FrozenBatchNorm2d (eps 1e-5), FPN 256 + LastLevelP6P7(256, 256),
       1 class, default transform (min_size 800, max_size 1333).
  r18  the demo variant: ResNet-18 (BasicBlock) with nn.BatchNorm2d in eval
       mode, BackboneWithFPN 64 channels, 2 classes, min_size = max_size = 400
       (as config.json keys).
Both use DeepForest's thresholds: score 0.1, NMS 0.05, 300 detections,
top-k 1000.

Usage (the venv with current torch/torchvision, as DeepForest 2.x runs;
the fixtures of testdata/golden/retinanet/torch1.13 were made with Debian's
torch 1.13 / torchvision 0.14, the float32 resize rule):
  /opt/canopy-peers/venv/bin/python tools/retinanet/golden.py --model r50 --out testdata/golden/retinanet/r50.json IMAGE...
  (make golden-retinanet generates the images with cmd/forestgen and
  runs the three models on them)
"""
import argparse
import hashlib
import json
import os
import platform
import sys
import time

import numpy as np
import torch
import torchvision
from PIL import Image
from torchvision.models import resnet18, resnet34, resnet50
from torchvision.models.detection import RetinaNet
from torchvision.models.detection.backbone_utils import BackboneWithFPN, _resnet_fpn_extractor
from torchvision.ops.feature_pyramid_network import LastLevelP6P7
from torchvision.ops import boxes as box_ops
from torchvision.ops.misc import FrozenBatchNorm2d

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import weights  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from peer_meta import peer_command  # noqa: E402

THRESH = dict(score_thresh=0.1, nms_thresh=0.05, detections_per_img=300, topk_candidates=1000)
SAMPLES = 16  # feature values sampled per level
TOP = 5  # highest scores per level, decoded whatever the threshold


def build(kind):
    if kind == "r50":
        body = resnet50(weights=None, norm_layer=FrozenBatchNorm2d)
        bb = _resnet_fpn_extractor(body, 5, returned_layers=[2, 3, 4], extra_blocks=LastLevelP6P7(256, 256))
        return RetinaNet(bb, num_classes=1, **THRESH), {}
    if kind == "r18":
        body = resnet18(weights=None)
        bb = BackboneWithFPN(
            body,
            return_layers={"layer2": "0", "layer3": "1", "layer4": "2"},
            in_channels_list=[128, 256, 512],
            out_channels=64,
            extra_blocks=LastLevelP6P7(64, 64),
        )
        # config.json-style overrides, so canopy's handling of them is tested:
        # sizes, and a score threshold that keeps the top-k cut-off of P3 away
        # from a dense band of near-equal scores.
        cfg = {"min_size": 400, "max_size": 400, "score_thresh": 0.2}
        th = dict(THRESH, score_thresh=0.2)
        return RetinaNet(bb, num_classes=2, min_size=400, max_size=400, **{k: v for k, v in th.items()}), cfg
    raise SystemExit("unknown model " + kind)


def load(path):
    # DeepForest's dataset: PIL RGB, /255 in float64, then float32, CHW.
    a = np.asarray(Image.open(path).convert("RGB"))
    return torch.from_numpy((a / 255.0).astype(np.float32)).permute(2, 0, 1).contiguous()


def sample_idx(n):
    # Fixed flat indices into a level's [C, H, W] features (documented for Go:
    # idx_k = (k * 2654435761) mod n, k = 0..SAMPLES-1).
    return [(k * 2654435761) % n for k in range(SAMPLES)]


def summarise(t):
    a = t.detach().double().numpy()
    flat = t.detach().reshape(-1)
    idx = sample_idx(flat.numel())
    return {
        "shape": list(t.shape),
        "sum": float(a.sum()),
        "abs_sum": float(np.abs(a).sum()),
        "samples": [float(flat[i]) for i in idx],
    }


def read_safetensors(path):
    """A minimal safetensors reader (F32/F16/BF16), so that no extra package
    is needed: 8-byte little-endian header size, JSON header, raw data."""
    import struct

    b = open(path, "rb").read()
    (n,) = struct.unpack("<Q", b[:8])
    head = json.loads(b[8 : 8 + n])
    data = b[8 + n :]
    sd = {}
    for k, v in head.items():
        if k == "__metadata__":
            continue
        lo, hi = v["data_offsets"]
        raw = data[lo:hi]
        if v["dtype"] == "F32":
            a = np.frombuffer(raw, dtype="<f4")
        elif v["dtype"] == "F16":
            a = np.frombuffer(raw, dtype="<f2").astype(np.float32)
        elif v["dtype"] == "BF16":
            a = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        elif v["dtype"] == "I64":
            continue  # num_batches_tracked
        else:
            raise SystemExit("%s: dtype %s of %s not handled" % (path, v["dtype"], k))
        sd[k[len("model.") :] if k.startswith("model.") else k] = torch.from_numpy(a.copy()).reshape(v["shape"])
    return sd


def build_checkpoint(folder):
    """A model folder as its peer loads it. ResNet-50 bodies (a bn3 in the
    state dict) are DeepForest's RetinaNetHub: FrozenBatchNorm2d (eps 1e-5)
    and FPN 256. Other bodies are built as tools/demo/train.py builds the
    demo model: torchvision's resnet18/34 with nn.BatchNorm2d (eval mode),
    BackboneWithFPN of the checkpoint's width and LastLevelP6P7. DeepForest's
    thresholds; config.json's num_classes and any min_size/max_size."""
    cfg = json.load(open(os.path.join(folder, "config.json")))
    extra = {k: cfg[k] for k in ("min_size", "max_size") if k in cfg}
    sd = read_safetensors(os.path.join(folder, "model.safetensors"))
    if any(k.endswith(".bn3.weight") for k in sd):
        body = resnet50(weights=None, norm_layer=FrozenBatchNorm2d)
        bb = _resnet_fpn_extractor(body, 5, returned_layers=[2, 3, 4], extra_blocks=LastLevelP6P7(256, 256))
    else:
        body = (resnet34 if "backbone.body.layer1.2.conv1.weight" in sd else resnet18)(weights=None)
        fpn = sd["backbone.fpn.inner_blocks.0.0.weight"].shape[0]
        bb = BackboneWithFPN(
            body,
            return_layers={"layer2": "0", "layer3": "1", "layer4": "2"},
            in_channels_list=[128, 256, 512],
            out_channels=fpn,
            extra_blocks=LastLevelP6P7(fpn, fpn),
        )
    model = RetinaNet(bb, num_classes=int(cfg.get("num_classes", 1)), **THRESH, **extra)
    missing, unexpected = model.load_state_dict(sd, strict=False)
    missing = [k for k in missing if not k.endswith("num_batches_tracked")]
    if missing or unexpected:
        raise SystemExit("checkpoint does not fit: missing %s, unexpected %s" % (missing[:5], unexpected[:5]))
    return model, extra


def cpu_capability():
    # torch >= 2.0 names the ATen kernels' ISA (AVX2, AVX512, default: the
    # ATEN_CPU_CAPABILITY override); torch 1.13 has no such call.
    f = getattr(getattr(torch.backends, "cpu", None), "get_cpu_capability", None)
    return f() if f else "unknown"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=["r50", "r18"], help="a fixture network with generated weights")
    ap.add_argument("--checkpoint", help="or: a DeepForest model folder (model.safetensors + config.json), ResNet-50")
    ap.add_argument("--out", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("images", nargs="+")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if (args.model is None) == (args.checkpoint is None):
        raise SystemExit("give --model or --checkpoint")
    if args.checkpoint:
        model, cfg = build_checkpoint(args.checkpoint)
        model.eval()
    else:
        model, cfg = build(args.model)
        model.eval()
        weights.fill(model, args.seed)
    keys = [[k, list(v.shape)] for k, v in model.state_dict().items() if not k.endswith("num_batches_tracked")]

    out = {
        "peer": "torchvision %s, torch %s (CPU float32, %s, %d threads), python %s"
        % (torchvision.__version__, torch.__version__, cpu_capability(), torch.get_num_threads(), platform.python_version()),
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
        "cpu_capability": cpu_capability(),
        "threads": torch.get_num_threads(),
        "command": peer_command(),
        "model": args.model or args.checkpoint,
        "seed": args.seed,
        "config": dict(THRESH, num_classes=model.head.classification_head.num_classes, **cfg),
        "state_dict": keys,
        "images": [],
    }
    for path in args.images:
        x = load(path)
        with torch.no_grad():
            t0 = time.perf_counter()
            il, _ = model.transform([x])
            feats = model.backbone(il.tensors)
            fl = list(feats.values())
            head = model.head(fl)
            # anchors above the score threshold, per level (before top-k)
            sizes = [f.shape[2] * f.shape[3] * 9 for f in fl]
            logits = head["cls_logits"][0]
            above, start = [], 0
            for s in sizes:
                above.append(int((torch.sigmoid(logits[start : start + s]) > model.score_thresh).sum()))
                start += s
            # the TOP highest scores of every level, threshold or not, with
            # their anchors decoded and clipped: covers the anchors, strides
            # and head outputs of the levels no detection comes from
            anchors = model.anchor_generator(il, fl)[0]
            reg = head["bbox_regression"][0]
            K = logits.shape[1]
            tops, start = [], 0
            for s in sizes:
                sc = torch.sigmoid(logits[start : start + s]).flatten()
                v, idx = sc.topk(TOP)
                ai = idx // K + start
                bx = model.box_coder.decode_single(reg[ai], anchors[ai])
                bx = box_ops.clip_boxes_to_image(bx, il.image_sizes[0])
                tops.append({"scores": v.tolist(), "index": idx.tolist(), "boxes": bx.tolist()})
                start += s
            det = model([x])[0]
            secs = time.perf_counter() - t0
        rel = os.path.relpath(path)
        out["images"].append(
            {
                "path": rel,
                "sha256": hashlib.sha256(open(path, "rb").read()).hexdigest(),
                "size": [int(x.shape[1]), int(x.shape[2])],
                "resized": list(il.image_sizes[0]),
                "padded": list(il.tensors.shape[2:]),
                "levels": [summarise(f[0]) for f in fl],
                "above_thresh": above,
                "level_top": tops,
                "boxes": det["boxes"].tolist(),
                "scores": det["scores"].tolist(),
                "labels": det["labels"].tolist(),
            }
        )
        print("%s: %s -> %s, %d detections, anchors above %s, %.2f s" % (rel, list(x.shape[1:]), list(il.image_sizes[0]), len(det["boxes"]), above, secs), file=sys.stderr)
    write_json(args.out, out)


def write_json(path, obj):
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as f:
        json.dump(obj, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
