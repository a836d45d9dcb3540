"""canopy's cuDNN modes against torchvision on the same GPU, weights and
images: for each canopy predictions.csv (canopy predict --precision P),
torchvision's detections in the matching mode (fp32: allow_tf32 off; tf32:
on; bf16: autocast bfloat16 with channels_last), matched per image (same
label, greedy by IoU, then by score), with the mean and max box-coordinate
difference (pixels), the max score difference and the detections left
unmatched. Writes one JSON line per mode.

Usage (tools/gpu/check.sh):
  python3 tools/gpu/cudnn_parity.py --model FOLDER --images DIR \
      tf32=OUT/predict-tf32/predictions.csv bf16=OUT/predict-bf16/predictions.csv ...
"""
import argparse
import contextlib
import csv
import json
import os
import sys

import torch
import torchvision

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "retinanet"))
import golden  # noqa: E402


def iou(a, b):
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ix * iy
    u = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / u if u > 0 else 0.0


def read_canopy(path):
    out = {}
    with open(path) as f:
        for r in csv.DictReader(f):
            out.setdefault(os.path.basename(r["image_path"]), []).append(
                ([float(r[k]) for k in ("xmin", "ymin", "xmax", "ymax")], float(r["score"]), r["label"]))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--images", required=True)
    ap.add_argument("--out")
    ap.add_argument("runs", nargs="+", help="MODE=predictions.csv (MODE: fp32, tf32 or bf16)")
    a = ap.parse_args()
    dev = torch.device("cuda")
    model = golden.build_checkpoint(a.model)
    model.eval().to(dev)
    names = sorted(n for n in os.listdir(a.images) if n.endswith(".png"))
    res = []
    for run in a.runs:
        mode, path = run.split("=", 1)
        torch.backends.cudnn.allow_tf32 = mode != "fp32"
        torch.backends.cuda.matmul.allow_tf32 = mode != "fp32"
        cl = mode == "bf16"
        m = model.to(memory_format=torch.channels_last) if cl else model.to(memory_format=torch.contiguous_format)
        ctx = torch.autocast("cuda", dtype=torch.bfloat16) if cl else contextlib.nullcontext()
        canopy = read_canopy(path)
        dbox, dscore, matched, unmatched_c, unmatched_t = [], [], 0, 0, 0
        for n in names:
            x = golden.load(os.path.join(a.images, n)).to(dev)
            with torch.inference_mode(), ctx:
                o = m([x])[0]
            tv = [(b.float().tolist(), float(s), int(l)) for b, s, l in zip(o["boxes"], o["scores"], o["labels"])]
            cd = list(canopy.get(n, []))
            used = set()
            for b, s, _ in sorted(tv, key=lambda t: -t[1]):
                best, bi = 0.5, -1
                for j, (cb, cs, _) in enumerate(cd):
                    if j not in used and iou(b, cb) > best:
                        best, bi = iou(b, cb), j
                if bi < 0:
                    unmatched_t += 1
                    continue
                used.add(bi)
                matched += 1
                dbox.append(max(abs(p - q) for p, q in zip(b, cd[bi][0])))
                dscore.append(abs(s - cd[bi][1]))
            unmatched_c += len(cd) - len(used)
        r = {"mode": mode, "torchvision": torchvision.__version__, "torch": torch.__version__,
             "cudnn": torch.backends.cudnn.version(), "gpu": torch.cuda.get_device_name(0), "images": len(names),
             "matched": matched, "torchvision_only": unmatched_t, "canopy_only": unmatched_c,
             "box_max_px": max(dbox) if dbox else None, "box_mean_px": sum(dbox) / len(dbox) if dbox else None,
             "score_max": max(dscore) if dscore else None}
        print(json.dumps(r), flush=True)
        res.append(r)
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
