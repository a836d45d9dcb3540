"""Parity fixtures for canopy's crop classifier (infer/crop), made by the real
DeepForest 2.1.0, torch and torchvision on the CPU (the peers' venv):

  transform  DeepForest's crop transform (datasets/cropmodel.py
             bounding_box_transform: ToTensor, ImageNet Normalize, then
             torchvision's tensor Resize, antialiased bilinear) on seeded
             uint8 crops of many sizes, up and down, to several output
             sizes: the output float32 bits (hex, small cases) or their
             sha256 (large ones).
  models     a CropModel (ResNet-50, simple_resnet_50) built offline (the
             ImageNet download is skipped: torchvision's resnet50 is built
             with weights=None, then every tensor is overwritten with the
             test weights of tools/retinanet/weights.py, seed 36, but fc.bias,
             moved by minus each class's median logit over the raster's
             crops so that every class wins some crops: fc_bias records it),
             saved with
             DeepForest's own code as a Lightning checkpoint
             (trainer.save_checkpoint: on_save_checkpoint stores label_dict),
             as a hub folder (save_pretrained with the config
             push_to_hub_in_memory writes: cropmodel.label_dict), and as a
             bare state dict (torch.save(model.state_dict())); a ResNet-18
             classifier (1bad4419's create_crop_backbone("resnet18")) as a
             bare state dict. The files are 45-95 MB: with --skeleton DIR
             their data.pkl and the hub config.json are written to DIR, from
             which internal/testsupport/torchckpt rebuilds them.
  tile       predict_tile(raster, patch, overlap, iou, crop_model=M) with the
             R50 detector of tools/tile/merge.py (seed 0) and the checkpoint
             loaded back by CropModel.load_from_checkpoint: every row (box,
             label, score, cropmodel_label, cropmodel_score), and for the
             same crops (BoundingBoxDataset, DeepForest's reader) the
             softmax of both classifiers.

Usage (from the repository root):
  go run ./cmd/forestgen -n 1 -sizes 500x400 -seed 36 -out /tmp/crop36
  /opt/canopy-peers/venv/bin/python tools/cropmodel/parity.py --raster /tmp/crop36/img_0000.png \\
      --out /tmp/crop36/models --skeleton infer/crop/testdata/deepforest > infer/crop/testdata/parity.json
"""
import argparse
import hashlib
import importlib.metadata as md
import json
import os
import platform
import sys
import zipfile

import numpy as np
import torch
import torchvision

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "retinanet"))
sys.path.insert(0, os.path.join(HERE, "..", "tile"))
sys.path.insert(0, os.path.join(HERE, "..", "deepforest"))
sys.path.insert(0, os.path.join(HERE, ".."))
import weights  # noqa: E402
from peer_meta import peer_command, torch_meta  # noqa: E402

_resnet50 = torchvision.models.resnet50
_resnet18 = torchvision.models.resnet18


def _offline50(*a, **kw):
    kw["weights"] = None
    return _resnet50(*a, **kw)


torchvision.models.resnet50 = _offline50

import merge  # noqa: E402  (patches retinanet_resnet50_fpn offline)
from checkpoints import sha  # noqa: E402
from deepforest import model as dfmodel  # noqa: E402
from deepforest.datasets import cropmodel as dfcrop  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

LABELS = {"Alive": 0, "Dead": 1, "Snag": 2}
SEED = 36


def gen_u8(name, n):
    """Seeded bytes: the test-weight generator's uniforms, times 256."""
    return (weights.uniform01(name, n, SEED) * 256).astype(np.uint8)


def bits_hex(t):
    return t.detach().numpy().astype("<f4").tobytes().hex()


def transform_part():
    cases = []
    sizes = [(1, 1, 3, 3), (2, 3, 5, 4), (5, 7, 3, 2), (13, 17, 7, 11), (9, 31, 20, 6), (40, 23, 17, 29),
             (64, 64, 16, 16), (31, 19, 31, 7), (12, 40, 12, 40), (7, 50, 7, 9), (100, 3, 11, 2), (1, 40, 224, 224), (900, 50, 224, 224),
             (37, 53, 224, 224), (480, 320, 224, 224), (224, 224, 224, 224), (225, 223, 224, 224),
             (300, 120, 224, 224), (3, 500, 224, 224)]
    for h, w, oh, ow in sizes:
        name = "crop%dx%d" % (h, w)
        u8 = gen_u8(name, h * w * 3).reshape(h, w, 3)
        out = dfcrop.bounding_box_transform(resize=[oh, ow])(u8)
        assert out.dtype == torch.float32 and tuple(out.shape) == (3, oh, ow)
        c = {"name": name, "h": h, "w": w, "oh": oh, "ow": ow}
        if oh * ow <= 1024:
            c["bits"] = bits_hex(out)
        c["sha256"] = hashlib.sha256(out.detach().numpy().astype("<f4").tobytes()).hexdigest()
        cases.append(c)
    return cases


def classifier(arch, n):
    m = (_resnet18 if arch == "resnet18" else _resnet50)(weights=None)
    m.fc = torch.nn.Linear(m.fc.in_features, n)
    weights.fill(m, SEED)
    return m.eval()


def center_bias(model, ds):
    """Moves fc.bias by minus the median logit of each class over the crops
    of ds (float32), so that the test weights' classifier, whose features
    barely change from crop to crop, gives every class to some crops.
    Returns the new bias (the fixture records it: the weight generator
    does not make it)."""
    with torch.no_grad():
        z = torch.cat([model(torch.stack([ds[j] for j in range(i, min(i + 4, len(ds)))])) for i in range(0, len(ds), 4)])
        med = z.median(dim=0).values
        model.fc.bias.copy_(model.fc.bias - med)
    return model.fc.bias.detach().clone()


def crop_model(r50):
    cm = dfmodel.CropModel(config_args={"resize": [224, 224]})
    cm.create_model(len(LABELS))
    cm.model = r50
    cm.label_dict = dict(LABELS)
    cm.numeric_to_label_dict = {v: k for k, v in LABELS.items()}
    return cm.eval()


def save_models(out, skeleton, r50, r18):
    os.makedirs(out, exist_ok=True)
    cm = crop_model(r50)
    cm.create_trainer(logger=False, enable_checkpointing=False, accelerator="cpu", devices=1)
    cm.trainer.strategy.connect(cm)
    ckpt = os.path.join(out, "crop.ckpt")
    cm.trainer.save_checkpoint(ckpt)
    hub = os.path.join(out, "crop-hub")
    config = OmegaConf.to_container(cm.config, resolve=True, enum_to_str=True)
    config["cropmodel"]["label_dict"] = cm.label_dict
    cm.save_pretrained(hub, config=config)
    torch.save(cm.model.state_dict(), os.path.join(out, "crop.pt"))
    torch.save(r18.state_dict(), os.path.join(out, "crop-r18.pt"))
    files = {n: sha(os.path.join(out, n)) for n in ["crop.ckpt", "crop.pt", "crop-r18.pt", "crop-hub/model.safetensors",
                                                    "crop-hub/config.json"]}
    if skeleton:
        os.makedirs(skeleton, exist_ok=True)
        for name in ["crop.ckpt", "crop.pt", "crop-r18.pt"]:
            with zipfile.ZipFile(os.path.join(out, name)) as z:
                pkl = [n for n in z.namelist() if n.endswith("/data.pkl")]
                with open(os.path.join(skeleton, name + ".data.pkl"), "wb") as f:
                    f.write(z.read(pkl[0]))
        hub_skeleton(hub, skeleton)
    return files


def hub_skeleton(hub, skeleton):
    """Keeps a save_pretrained folder's config.json and its safetensors
    header in skeleton (hub-config.json, hub-header.json), from which
    internal/testsupport/torchckpt rebuilds model.safetensors."""
    os.makedirs(skeleton, exist_ok=True)
    with open(os.path.join(hub, "config.json")) as src, open(os.path.join(skeleton, "hub-config.json"), "w") as dst:
        dst.write(src.read())
    with open(os.path.join(hub, "model.safetensors"), "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        hdr = f.read(n)
    with open(os.path.join(skeleton, "hub-header.json"), "wb") as f:
        f.write(hdr)


def probs(model, ds):
    out = []
    with torch.no_grad():
        for i in range(0, len(ds), 4):
            x = torch.stack([ds[j] for j in range(i, min(i + 4, len(ds)))])
            out.append(torch.softmax(model(x), 1))
    return torch.cat(out).numpy() if out else np.zeros((0, 0), np.float32)


def detect(args):
    det = merge.offline_deepforest()
    got = det.predict_tile(path=args.raster, patch_size=args.patch, patch_overlap=args.overlap,
                           iou_threshold=args.iou, dataloader_strategy="single")
    df = got[["image_path", "xmin", "ymin", "xmax", "ymax"]].copy()
    return det, dfcrop.BoundingBoxDataset(df, root_dir=os.path.dirname(args.raster), resize=[224, 224])


def tile_part(args, det, ckpt, r18):
    cm = dfmodel.CropModel.load_from_checkpoint(ckpt)
    cm.eval()
    got = det.predict_tile(path=args.raster, patch_size=args.patch, patch_overlap=args.overlap,
                           iou_threshold=args.iou, dataloader_strategy="single", crop_model=cm)
    rows = []
    for r in got.itertuples():
        rows.append([float(r.xmin), float(r.ymin), float(r.xmax), float(r.ymax), str(r.label), float(r.score),
                     str(r.cropmodel_label), float(r.cropmodel_score)])
    df = got[["image_path", "xmin", "ymin", "xmax", "ymax"]].copy()
    ds = dfcrop.BoundingBoxDataset(df, root_dir=os.path.dirname(args.raster), resize=[224, 224])
    p50 = probs(cm.model, ds)
    p18 = probs(r18, ds)
    from PIL import Image
    width, height = Image.open(args.raster).size
    return {"raster": os.path.basename(args.raster), "width": width, "height": height,
            "raster_sha256": sha(args.raster), "patch": args.patch, "overlap": args.overlap, "iou": args.iou,
            "rows": rows, "probs_resnet50": [[float(v) for v in p] for p in p50],
            "probs_resnet18": [[float(v) for v in p] for p in p18]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--raster", required=True)
    ap.add_argument("--out", required=True, help="folder for the model files (not committed)")
    ap.add_argument("--skeleton", help="folder for their pickles and the hub config (committed)")
    ap.add_argument("--patch", type=int, default=300)
    ap.add_argument("--overlap", type=float, default=0.25)
    ap.add_argument("--iou", type=float, default=0.15)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    stdout = sys.stdout
    sys.stdout = sys.stderr  # DeepForest and Lightning print
    torch.manual_seed(0)
    det, ds = detect(args)
    r50 = classifier("resnet50", len(LABELS))
    r18 = classifier("resnet18", 2)
    bias = {"resnet50": bits_hex(center_bias(r50, ds)), "resnet18": bits_hex(center_bias(r18, ds))}
    files = save_models(args.out, args.skeleton, r50, r18)
    fx = {
        "peer": dict({"deepforest": md.version("deepforest"), "pytorch_lightning": md.version("pytorch_lightning"),
                      "python": platform.python_version(),
                      "ATEN_CPU_CAPABILITY": os.environ.get("ATEN_CPU_CAPABILITY", "(unset)")}, **torch_meta()),
        "command": peer_command(),
        "labels": LABELS, "seed": SEED,
        "files_sha256": files,
        "fc_bias": bias,
        "transform": transform_part(),
        "tile": tile_part(args, det, os.path.join(args.out, "crop.ckpt"), r18),
    }
    sys.stdout = stdout
    json.dump(fx, sys.stdout, separators=(",", ":"))
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
