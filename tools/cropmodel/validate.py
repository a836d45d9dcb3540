"""DeepForest 2.1.0's CropModel validation table on an ImageFolder, the
fixture of canopy eval-crops (metrics.CropTable, jobs TestEvalCropsDeepForest).

  folder  (--make-folder) writes the committed ImageFolder: val/ with three
          class folders (Abies, Picea, Pinus; an upper-case .PNG, a
          notes.txt that ImageFolder skips, and nested sub-folders, whose
          files DeepForest's FixedClassImageFolder labels by their parent
          folder's name: dropped when it names no class, Pinus/Picea/q9.png
          counted as Picea) and train/
          with one image in each of four classes (Tsuga too), so that
          load_from_disk's label_dict (the sorted union of both) has a
          class absent from the validation targets. The pixels are seeded
          bytes (tools/retinanet/weights.py's uniforms times 256).
  table   builds a CropModel offline (torchvision's resnet50 with
          weights=None, every tensor then overwritten with the test weights
          of tools/retinanet/weights.py, seed 36; fc.weight uniform in
          ±8·sqrt(3/2048) as infer/crop's fixtures have it, fc.bias then
          moved by minus each class's median logit over the validation
          crops so that every class wins some: fc_bias records the float32
          bits), calls DeepForest's own load_from_disk(train, val), and runs
          Lightning's trainer.validate on one CPU device with DeepForest's
          val_dataloader (cropmodel.batch_size 4, no shuffle). It records
          the logged table (val_loss, Class Accuracy_<label>, Micro-Average
          Accuracy, Micro-Average Precision, Macro-Average Precision), each
          sample's path and target, and the logits of every crop (float32
          bits, captured from the network's forward), so canopy's metric
          code can be fed torch's own logits.

    ATEN_CPU_CAPABILITY=avx2 /opt/canopy-peers/venv/bin/python tools/cropmodel/validate.py \\
        --make-folder jobs/testdata/cropfolder
    ATEN_CPU_CAPABILITY=avx2 /opt/canopy-peers/venv/bin/python tools/cropmodel/validate.py \\
        --folder jobs/testdata/cropfolder --skeleton jobs/testdata/cropmodel > metrics/testdata/croptable.json

AVX2: torch's float32 sums (the log-softmax's exp sum, torch.sum) then run
8 lanes wide, the order metrics/torchsum.go follows.
"""
import argparse
import importlib.metadata as md
import json
import os
import platform
import sys

import numpy as np
import torch
import torchvision
from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "retinanet"))
sys.path.insert(0, os.path.join(HERE, ".."))
import weights  # noqa: E402
from peer_meta import peer_command, torch_meta  # noqa: E402

_resnet50 = torchvision.models.resnet50


def _offline50(*a, **kw):
    kw["weights"] = None
    return _resnet50(*a, **kw)


torchvision.models.resnet50 = _offline50

SEED = 36

# (relative path, width, height): the validation ImageFolder.
VAL = [
    ("Abies/a0.png", 40, 31), ("Abies/a1.PNG", 223, 97), ("Abies/a2.png", 17, 64), ("Abies/b/a3.png", 120, 120),
    ("Abies/a4.png", 300, 210), ("Abies/a5.png", 64, 64), ("Abies/a6.png", 90, 33),
    ("Picea/p0.png", 224, 224), ("Picea/x/p1.png", 51, 77), ("Picea/x-y/p2.png", 33, 45), ("Picea/x/z/p3.png", 150, 80),
    ("Picea/p4.png", 75, 160), ("Picea/p5.png", 28, 28), ("Picea/x-y/p6.png", 250, 260),
    ("Pinus/q0.png", 60, 45), ("Pinus/q1.png", 110, 140), ("Pinus/q2.png", 38, 90), ("Pinus/q3.png", 199, 101),
    ("Pinus/q4.png", 46, 46), ("Pinus/q5.png", 81, 57), ("Pinus/q6.png", 132, 66), ("Pinus/q7.png", 23, 39),
    ("Pinus/q8.png", 95, 95), ("Pinus/Picea/q9.png", 44, 70),
]
TRAIN = [("Abies/t.png", 30, 30), ("Picea/t.png", 30, 30), ("Pinus/t.png", 30, 30), ("Tsuga/t.png", 30, 30)]


def gen_u8(name, n):
    return (weights.uniform01(name, n, SEED) * 256).astype(np.uint8)


def make_folder(root):
    for sub, items in (("val", VAL), ("train", TRAIN)):
        for rel, w, h in items:
            path = os.path.join(root, sub, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            # 7x7-pixel blocks of seeded colours (small files; edges the resize must get right).
            bw, bh = (w + 6) // 7, (h + 6) // 7
            blocks = gen_u8(sub + "/" + rel, bw * bh * 3).reshape(bh, bw, 3)
            big = np.repeat(np.repeat(blocks, 7, axis=0), 7, axis=1)[:h, :w]
            Image.fromarray(np.ascontiguousarray(big), "RGB").save(path, format="PNG", optimize=True)
    with open(os.path.join(root, "val", "Pinus", "notes.txt"), "w") as f:
        f.write("not an image: ImageFolder skips files of other extensions\n")


def f32bits(a):
    return [int(v) for v in np.asarray(a, dtype=np.float32).view(np.uint32).ravel()]


def fill(net):
    sd = net.state_dict()
    with torch.no_grad():
        for name, t in sd.items():
            if name.endswith("num_batches_tracked"):
                continue
            if name == "fc.weight":
                b = 8.0 * np.sqrt(3.0 / t.shape[1])
                u = weights.uniform01(name, t.numel(), SEED)
                v = (-b + (2 * b) * u).astype(np.float32).reshape(list(t.shape))
            else:
                v = weights.tensor(name, list(t.shape), SEED, basic=False)
            t.copy_(torch.from_numpy(v))


def save_skeleton(m, skeleton):
    """The crop model as DeepForest's save_pretrained writes it (with the
    config push_to_hub_in_memory gives it: cropmodel.label_dict), kept as
    its safetensors header and config.json: internal/testsupport/torchckpt
    rebuilds model.safetensors from them, the weight generator (seed 36)
    and fc_bias."""
    import tempfile
    from omegaconf import OmegaConf

    config = OmegaConf.to_container(m.config, resolve=True, enum_to_str=True)
    config["cropmodel"]["label_dict"] = m.label_dict
    from parity import hub_skeleton

    with tempfile.TemporaryDirectory() as d:
        m.save_pretrained(d, config=config)
        hub_skeleton(d, skeleton)


def table(folder, skeleton=None):
    import pytorch_lightning as pl
    from deepforest import model as dfmodel

    m = dfmodel.CropModel()
    m.load_from_disk(train_dir=os.path.join(folder, "train"), val_dir=os.path.join(folder, "val"))
    fill(m.model)
    m.model.eval()
    m.eval()
    # fc.bias: minus each class's median logit over the validation crops.
    with torch.no_grad():
        xs = torch.stack([m.val_ds[i][0] for i in range(len(m.val_ds))])
        logits = m.model(xs)
        med = logits.median(dim=0).values
        m.model.fc.bias.sub_(med)
    captured = []
    m.model.register_forward_hook(lambda mod, inp, out: captured.append(out.detach().clone()))
    trainer = pl.Trainer(accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False)
    res = trainer.validate(m, dataloaders=m.val_dataloader(), verbose=False)[0]
    if skeleton:
        save_skeleton(m, skeleton)
    logits = torch.cat(captured)
    root = os.path.join(folder, "val")
    samples = [[os.path.relpath(p, root), int(t)] for p, t in m.val_ds.samples]
    out = {
        "peer": {"deepforest": md.version("deepforest"), "pytorch_lightning": md.version("pytorch_lightning"),
                 "torchmetrics": md.version("torchmetrics"), "python": platform.python_version(),
                 "ATEN_CPU_CAPABILITY": os.environ.get("ATEN_CPU_CAPABILITY", "(unset)"), **torch_meta()},
        "command": peer_command(),
        "model": "CropModel (simple_resnet_50, offline), test weights seed %d, fc.weight ±8·sqrt(3/2048), fc.bias moved by the median logits" % SEED,
        "label_dict": m.label_dict,
        "batch_size": m.config["cropmodel"]["batch_size"],
        "samples": samples,
        # torchvision's own ImageFolder listing (before FixedClassImageFolder's remap), every image file in order.
        "imagefolder_samples": [os.path.relpath(p, root) for p, _ in torchvision.datasets.ImageFolder(root).samples],
        "fc_bias": f32bits(m.model.fc.bias.detach().numpy()),
        "logits": f32bits(logits.numpy()),
        "table": {k: float(v) for k, v in res.items()},
        "table_f32": {k: f32bits([float(v)])[0] for k, v in res.items()},
        "cases": synthetic(),
        "log_softmax": log_softmax_cases(),
    }
    json.dump(out, sys.stdout, sort_keys=True, separators=(",", ":"))
    sys.stdout.write("\n")


def synthetic():
    """Crafted cases: DeepForest's own MetricCollection (CropModel.create_model)
    on given predictions and targets, classes absent from the targets, the
    predictions or both, 9 classes for torch.sum's vector path; and Lightning's
    val_loss of F.cross_entropy over seeded logits in batches of 4 (a module
    whose validation_step is DeepForest's loss line, logged as it logs it)."""
    import pytorch_lightning as pl
    from deepforest import model as dfmodel

    class LossOnly(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.p = torch.nn.Parameter(torch.zeros(1))

        def validation_step(self, batch, batch_idx):
            x, y = batch
            loss = torch.nn.functional.cross_entropy(x, y)
            self.log("val_loss", loss)
            return loss

    specs = [
        (5, [0, 1, 2, 3, 0, 1, 2, 3, 1, 1, 0], [0, 1, 2, 2, 1, 1, 0, 0, 2, 1, 0]),
        (3, [0, 1, 2, 2, 1, 0], [0, 1, 2, 2, 1, 0]),
        (4, [1, 1, 2, 3, 3, 2, 1], [0, 1, 2, 0, 3, 3, 0]),
        (9, [0, 1, 2, 3, 4, 5, 6, 7, 8, 8, 7, 6, 5, 4, 3, 2, 1, 0, 3, 3, 5, 5, 7, 1, 2],
            [0, 1, 2, 3, 4, 5, 6, 7, 8, 0, 7, 5, 5, 3, 3, 2, 2, 0, 3, 4, 5, 6, 7, 1, 1]),
        (2, [0, 0, 0, 0], [0, 1, 1, 0]),
    ]
    out = []
    for k, (classes, preds, targets) in enumerate(specs):
        m = dfmodel.CropModel()
        m.create_model(classes)
        m.metrics.update(torch.tensor(preds), torch.tensor(targets))
        r = m.metrics.compute()
        n = 4 * 9 + 1
        x = ((weights.uniform01("case%d" % k, n * classes, SEED) - 0.5) * 8).astype(np.float32).reshape(n, classes)
        y = (weights.uniform01("case%d#y" % k, n, SEED) * classes).astype(np.int64)
        ds = torch.utils.data.TensorDataset(torch.from_numpy(x), torch.from_numpy(y))
        tr = pl.Trainer(accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False)
        vl = tr.validate(LossOnly(), dataloaders=torch.utils.data.DataLoader(ds, batch_size=4), verbose=False)[0]["val_loss"]
        out.append({"classes": classes, "preds": preds, "targets": targets,
                    "class_accuracy": f32bits(r["Class Accuracy"].numpy()), "accuracy": f32bits(r["Accuracy"].numpy())[0],
                    "precision": f32bits(r["Precision"].numpy())[0], "macro_precision": f32bits(r["Macro Precision"].numpy())[0],
                    "logits": f32bits(x), "logit_targets": [int(v) for v in y], "val_loss": f32bits([vl])[0]})
    return out


def log_softmax_cases():
    """torch's F.log_softmax (dim 1) of seeded float32 logits, 64 rows for
    each class count: below, at and above one 8-lane vector."""
    out = []
    for k in (2, 5, 8, 9, 17, 54):
        x = ((weights.uniform01("lsm%d" % k, 64 * k, SEED) - 0.5) * 12).astype(np.float32).reshape(64, k)
        out.append({"classes": k, "logits": f32bits(x),
                    "log_softmax": f32bits(torch.nn.functional.log_softmax(torch.from_numpy(x), 1).numpy())})
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--make-folder")
    ap.add_argument("--folder")
    ap.add_argument("--skeleton", help="write the model's hub-header.json and hub-config.json here")
    a = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(2)
    if a.make_folder:
        make_folder(a.make_folder)
    if a.folder:
        table(a.folder, a.skeleton)


if __name__ == "__main__":
    main()
