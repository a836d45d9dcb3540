"""Saves one DeepForest model three ways with DeepForest's own code, offline:
the r50 test weights (tools/retinanet/weights.py, seed 0; the network of
`go run ./cmd/testmodel -arch resnet50`) in DeepForest's RetinaNetHub,
inside a deepforest LightningModule.

    /opt/canopy-peers/venv/bin/python tools/deepforest/checkpoints.py OUT [--skeleton DIR]

writes, in OUT:
  model.ckpt        deepforest.save_model() (trainer.save_checkpoint), after
                    create_trainer() and trainer.strategy.connect(module)
  model.pt          torch.save(module.model.state_dict())
  hub/              module.model.save_pretrained() (model.safetensors + config.json)
  model-bf16.ckpt   save_model() of the module cast to bfloat16
  model-bf16.pt     torch.save() of the bfloat16 state dict
  meta.json         versions, command, CPU capability, sha256 of each file

The files are some 140 MB each (ResNet-50 is the only backbone DeepForest
builds), so they are not committed. With --skeleton DIR the tool also
writes, for each .ckpt/.pt, DIR/NAME.data.pkl: its data.pkl as torch wrote
it (the part canopy's unpickler reads), and DIR/hub-config.json and
DIR/meta.json; canopy's tests rebuild the archives from these and the
weight generator (internal/testsupport/testweights), byte for byte the
storages torch wrote, and `make df-checkpoints` checks the rebuilt files
against the real ones.

Offline: RetinaNetHub builds retinanet_resnet50_fpn(weights=None), whose
default weights_backbone fetches ImageNet weights that are then
overwritten; the tool builds it with weights_backbone=None instead (so its
batch norms are BatchNorm2d, with num_batches_tracked buffers, which
canopy drops as torch's FrozenBatchNorm2d would not have them).
"""
import argparse
import functools
import hashlib
import json
import os
import sys
import zipfile

import torch
import torchvision

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "retinanet"))
sys.path.insert(0, os.path.join(HERE, ".."))
import weights  # noqa: E402
from peer_meta import torch_meta  # noqa: E402


def build():
    import deepforest
    from deepforest import main as dfmain
    from deepforest.models import retinanet as dfretina

    orig = torchvision.models.detection.retinanet_resnet50_fpn
    torchvision.models.detection.retinanet_resnet50_fpn = functools.partial(orig, weights_backbone=None)
    try:
        net = dfretina.RetinaNetHub(backbone_weights=None, num_classes=1, nms_thresh=0.05, score_thresh=0.1,
                                    label_dict={"Tree": 0}, detections_per_img=300, topk_candidates=1000)
    finally:
        torchvision.models.detection.retinanet_resnet50_fpn = orig
    weights.fill(net, seed=0)
    net.eval()
    module = dfmain.deepforest(model=net, config_args={"model": {"name": None}, "num_classes": 1,
                                                       "label_dict": {"Tree": 0}, "log_root": os.environ.get("TMPDIR", "/tmp")})
    module.set_labels({"Tree": 0})
    return deepforest.__version__, module


def save_ckpt(module, path):
    module.create_trainer()
    module.trainer.strategy.connect(module)
    module.save_model(path)


def sha(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--skeleton")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    torch.manual_seed(0)
    version, module = build()
    files = {}
    save_ckpt(module, os.path.join(a.out, "model.ckpt"))
    torch.save(module.model.state_dict(), os.path.join(a.out, "model.pt"))
    module.model.save_pretrained(os.path.join(a.out, "hub"))
    module.to(torch.bfloat16)
    save_ckpt(module, os.path.join(a.out, "model-bf16.ckpt"))
    torch.save(module.model.state_dict(), os.path.join(a.out, "model-bf16.pt"))
    for name in ["model.ckpt", "model.pt", "hub/model.safetensors", "hub/config.json", "model-bf16.ckpt", "model-bf16.pt"]:
        files[name] = sha(os.path.join(a.out, name))
    meta = {"deepforest": version, "pytorch_lightning": __import__("pytorch_lightning").__version__,
            "command": "python tools/deepforest/checkpoints.py " + " ".join(sys.argv[1:]),
            "weights": "tools/retinanet/weights.py seed 0 (go run ./cmd/testmodel -arch resnet50)",
            "sha256": files, **torch_meta()}
    with open(os.path.join(a.out, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1, sort_keys=True)
        f.write("\n")
    if a.skeleton:
        os.makedirs(a.skeleton, exist_ok=True)
        for name in ["model.ckpt", "model.pt", "model-bf16.ckpt", "model-bf16.pt"]:
            with zipfile.ZipFile(os.path.join(a.out, name)) as z:
                pkl = [n for n in z.namelist() if n.endswith("/data.pkl")]
                with open(os.path.join(a.skeleton, name + ".data.pkl"), "wb") as f:
                    f.write(z.read(pkl[0]))
        with open(os.path.join(a.out, "hub", "config.json")) as src, open(os.path.join(a.skeleton, "hub-config.json"), "w") as dst:
            dst.write(src.read())
        with open(os.path.join(a.skeleton, "meta.json"), "w") as f:
            json.dump(meta, f, indent=1, sort_keys=True)
            f.write("\n")


if __name__ == "__main__":
    main()
