"""DeepForest 2.1.0's crop step timed (predict.py _predict_crop_model_:
BoundingBoxDataset reads each box with rasterio, the transform, the
CropModel's trainer.predict, softmax, argmax), for the side by side with
canopy's classifier (infer/crop BenchmarkCropsR50/R18,
tools/cropmodel/bench.sh): the same network (the parity CropModel
checkpoint, ResNet-50; or with --r18 the parity ResNet-18 state dict, put
in a CropModel as parity.py does for the ResNet-50), the same boxes (the
parity fixture's predict_tile rows, repeated to --crops), the same threads.
Prints one JSON line: seconds per repeat, crops/s of the fastest repeat and
over all repeats, the process's CPU seconds (user+sys, every thread) of
each repeat and per crop in the cheapest and over all repeats (the first
repeat warms up), the load average before the first, torch's CPU
capability (the ISA of its kernels).

Usage (the peers' venv, from the repository root):
  /opt/canopy-peers/venv/bin/python tools/cropmodel/bench.py --ckpt CROP.ckpt --raster R.png --threads 2 --crops 128 --repeat 3 [--r18 crop-r18.pt]
"""
import argparse
import json
import os
import sys
import time

import pandas as pd
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import parity  # noqa: E402  (the offline resnet50 patch)
from parity import torch_meta  # noqa: E402
from deepforest import predict  # noqa: E402
from deepforest import model as dfmodel  # noqa: E402
from pytorch_lightning import Trainer  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckpt", required=True)
    ap.add_argument("--raster", required=True)
    ap.add_argument("--fixture", default=os.path.join(HERE, "..", "..", "infer", "crop", "testdata", "parity.json"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--crops", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--r18", help="the parity ResNet-18 state dict: time it instead of the checkpoint's ResNet-50")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    stdout, sys.stdout = sys.stdout, sys.stderr
    rows = json.load(open(a.fixture))["tile"]["rows"]
    rows = (rows * (a.crops // len(rows) + 1))[:a.crops]
    df = pd.DataFrame({"image_path": os.path.basename(a.raster), "xmin": [r[0] for r in rows], "ymin": [r[1] for r in rows],
                       "xmax": [r[2] for r in rows], "ymax": [r[3] for r in rows], "label": "Tree", "score": [r[5] for r in rows]})
    cm = dfmodel.CropModel.load_from_checkpoint(a.ckpt)
    arch = "resnet50"
    if a.r18:
        arch = "resnet18"
        r18 = parity.classifier("resnet18", 2)
        r18.load_state_dict(torch.load(a.r18, map_location="cpu"))
        cm.model = r18
        cm.label_dict = {"a": 0, "b": 1}
        cm.numeric_to_label_dict = {0: "a", 1: "b"}
    cm.eval()
    load = os.getloadavg()
    trainer = Trainer(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False, enable_checkpointing=False)
    secs, cpus = [], []
    for _ in range(a.repeat):
        c = time.process_time()
        t = time.perf_counter()
        out = predict._predict_crop_model_(crop_model=cm, trainer=trainer, results=df, path=a.raster, is_single_model=True)
        secs.append(time.perf_counter() - t)
        cpus.append(time.process_time() - c)
        assert len(out) == a.crops
    sys.stdout = stdout
    print(json.dumps(dict({"peer": "deepforest _predict_crop_model_", "arch": arch, "crops": a.crops, "seconds": secs,
                           "crops_per_s": a.crops / min(secs), "crops_per_s_all": a.crops * a.repeat / sum(secs),
                           "cpu_s_per_crop": min(cpus) / a.crops, "cpu_s_per_crop_all": sum(cpus) / (a.repeat * a.crops), "cpu_seconds": cpus, "load_before": load, "load": os.getloadavg()},
                          **torch_meta())))


if __name__ == "__main__":
    main()
