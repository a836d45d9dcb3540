"""Train canopy's small demo tree detector (testdata/models/canopy-demo-r18).

Purpose: a small torchvision RetinaNet (ResNet-18 + 64-channel FPN, P3-P7,
2 classes: Tree=0, Dead=1, 400x400 input) trained from scratch (no pretrained
weights) on the synthetic aerial forest images of cmd/forestgen, so that
canopy ships a real, working demo model. Not part of canopy's build or tests.

Exact command used for the shipped model (from the repository root, with the
image sets generated beforehand by the project's Go generator):

    go build -o /tmp/forestgen ./cmd/forestgen
    /tmp/forestgen -out /tmp/forest-train -n 1500 -seed 11
    /tmp/forestgen -out /tmp/forest-val -n 100 -seed 12
    /usr/bin/python3 tools/demo/train.py --train /tmp/forest-train --val /tmp/forest-val

(defaults: --minutes 18 --seed 1 --batch 4 --lr 1e-3 --warmup 50 --val-every-min 5
--out testdata/models/canopy-demo-r18). The demo set (seed 3) is never used.

Written for Debian 12's python3-torch 1.13 / python3-torchvision 0.14 (CPU),
numpy and PIL; scipy and safetensors are not needed (the assignment solver and
the safetensors writer/reader are implemented here).

Reproducibility: torch, random and numpy are seeded, the data order and the
flips come from one seeded torch.Generator, torch.use_deterministic_algorithms
(True) is switched on, and 2 threads are used (OMP_WAIT_POLICY=PASSIVE unless
set otherwise, for shared machines). With --minutes (the default) the cosine
learning-rate schedule follows wall time (it reaches its floor when the time
budget ends), so how many steps fit depends on the machine and its load; the
seeds fix the data order and flips of every step. `--minutes 0 --max-steps N`
gives the same shape of schedule over N steps with no time dependence at all
(bit for bit repeatable on one machine).

Outputs in --out: model.safetensors (float16 state dict without
num_batches_tracked, torchvision key names), config.json and TRAINING.md. The
validation numbers printed at the end are measured with the float16 weights
re-loaded from the written file.
"""
import argparse
import csv
import hashlib
import json
import math
import os
import platform
import random
import struct
import sys
import time

# libgomp threads spin while waiting by default; on a shared, busy machine two
# spinning threads are several times slower than passive ones (measured here:
# 4-23 s per step instead of 3.5-6 s). Must be set before torch is imported.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numpy as np  # noqa: E402
import torch
import torchvision  # noqa: E402
from PIL import Image
from torchvision.models import resnet18
from torchvision.models.detection import RetinaNet
from torchvision.models.detection.backbone_utils import BackboneWithFPN
from torchvision.ops.feature_pyramid_network import LastLevelP6P7

LABELS = {"Tree": 0, "Dead": 1}
CONFIG = {
    "num_classes": 2,
    "label_dict": {"Tree": 0, "Dead": 1},
    "score_thresh": 0.1,
    "nms_thresh": 0.05,
    "detections_per_img": 300,
    "topk_candidates": 1000,
    "min_size": 400,
    "max_size": 400,
}
IOU_THRESHOLD = 0.4
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def build_model():
    body = resnet18(weights=None)  # trainable nn.BatchNorm2d: no pretrained stats
    backbone = BackboneWithFPN(
        body,
        return_layers={"layer2": "0", "layer3": "1", "layer4": "2"},
        in_channels_list=[128, 256, 512],
        out_channels=64,
        extra_blocks=LastLevelP6P7(64, 64),
    )
    c = CONFIG
    return RetinaNet(
        backbone,
        num_classes=c["num_classes"],
        min_size=c["min_size"],
        max_size=c["max_size"],
        score_thresh=c["score_thresh"],
        nms_thresh=c["nms_thresh"],
        detections_per_img=c["detections_per_img"],
        topk_candidates=c["topk_candidates"],
    )


# ---------------------------------------------------------------- data


def read_set(folder, limit=0):
    """Returns [(path, boxes float32 (n,4), labels int64 (n,))] in image-name order."""
    rows = {}
    with open(os.path.join(folder, "annotations.csv"), newline="") as f:
        for r in csv.DictReader(f):
            box = [float(r["xmin"]), float(r["ymin"]), float(r["xmax"]), float(r["ymax"])]
            lst = rows.setdefault(r["image_path"], [])
            if box == [0.0, 0.0, 0.0, 0.0]:
                continue  # DeepForest's empty-frame row
            lst.append((box, LABELS[r["label"]]))
    out = []
    for name in sorted(rows):
        b = rows[name]
        boxes = np.array([x[0] for x in b], dtype=np.float32).reshape(-1, 4)
        labels = np.array([x[1] for x in b], dtype=np.int64)
        out.append((os.path.join(folder, name), boxes, labels))
    if limit:
        out = out[:limit]
    return out


def load_uint8(path):
    return np.asarray(Image.open(path).convert("RGB"))  # H, W, 3 uint8


def to_tensor(a):
    # As DeepForest's dataset: PIL RGB, /255 in float64, then float32, CHW.
    return torch.from_numpy((a / 255.0).astype(np.float32)).permute(2, 0, 1).contiguous()


def flip(img, boxes, hflip, vflip):
    """img uint8 HWC, boxes (n,4) xyxy in pixels; returns flipped copies."""
    h, w = img.shape[:2]
    boxes = boxes.copy()
    if hflip:
        img = img[:, ::-1]
        boxes[:, [0, 2]] = w - boxes[:, [2, 0]]
    if vflip:
        img = img[::-1]
        boxes[:, [1, 3]] = h - boxes[:, [3, 1]]
    return np.ascontiguousarray(img), boxes


# ---------------------------------------------------------------- metrics


def lsap(cost, maximize=False):
    """Rectangular linear sum assignment, scipy.optimize.linear_sum_assignment's
    algorithm and tie rules (Crouse 2016 shortest augmenting path, as canopy's
    metrics/lsap/lsap.go): returns (rows, cols) of min(nr, nc) assigned pairs."""
    c = np.asarray(cost, dtype=np.float64)
    nr, nc = c.shape
    if nr == 0 or nc == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    transpose = nc < nr
    if maximize:
        c = -c
    if transpose:
        c = c.T
    c = np.ascontiguousarray(c)
    rows, cols = c.shape
    u = np.zeros(rows)
    v = np.zeros(cols)
    path = np.full(cols, -1, np.int64)
    col4row = np.full(rows, -1, np.int64)
    row4col = np.full(cols, -1, np.int64)
    for cur in range(rows):
        min_val = 0.0
        rem = np.arange(cols - 1, -1, -1, dtype=np.int64)  # rem[k] = nc-k-1
        n = cols
        sr = np.zeros(rows, bool)
        sc = np.zeros(cols, bool)
        spc = np.full(cols, np.inf)
        sink = -1
        i = cur
        while sink == -1:
            sr[i] = True
            js = rem[:n]
            r = min_val + c[i, js] - u[i] - v[js]
            better = r < spc[js]
            upd = js[better]
            path[upd] = i
            spc[upd] = r[better]
            s = spc[js]
            lowest = s.min()
            if math.isinf(lowest):
                raise ValueError("infeasible cost matrix")
            # Sequential scan rule: first k reaching the minimum, replaced by
            # any later k with the same value whose column is unassigned.
            ties = np.nonzero(s == lowest)[0]
            free = ties[row4col[js[ties]] == -1]
            index = int(free[-1]) if len(free) else int(ties[0])
            min_val = lowest
            j = int(rem[index])
            if row4col[j] == -1:
                sink = j
            else:
                i = int(row4col[j])
            sc[j] = True
            n -= 1
            rem[index] = rem[n]
        u[cur] += min_val
        others = sr.copy()
        others[cur] = False
        idx = np.nonzero(others)[0]
        u[idx] += min_val - spc[col4row[idx]]
        v[sc] -= min_val - spc[sc]
        j = sink
        while True:
            i = int(path[j])
            row4col[j] = i
            col4row[i], j = j, int(col4row[i])
            if i == cur:
                break
    if transpose:
        order = np.argsort(col4row, kind="stable")
        return col4row[order], order.astype(np.int64)
    return np.arange(rows, dtype=np.int64), col4row


def _lsap_selftest():
    import itertools

    rng = np.random.default_rng(5)
    for trial in range(300):
        nr, nc = int(rng.integers(1, 6)), int(rng.integers(1, 6))
        if trial % 3 == 0:
            m = rng.integers(0, 3, size=(nr, nc)).astype(float)  # many ties
        else:
            m = rng.random((nr, nc))
        maximize = trial % 2 == 0
        r, cc = lsap(m, maximize)
        got = m[r, cc].sum()
        assert len(r) == min(nr, nc) and len(set(r.tolist())) == len(r) and len(set(cc.tolist())) == len(cc)
        best = None
        if nr <= nc:
            for p in itertools.permutations(range(nc), nr):
                s = sum(m[i, p[i]] for i in range(nr))
                best = s if best is None else (max(best, s) if maximize else min(best, s))
        else:
            for p in itertools.permutations(range(nr), nc):
                s = sum(m[p[j], j] for j in range(nc))
                best = s if best is None else (max(best, s) if maximize else min(best, s))
        assert abs(got - best) < 1e-9, (trial, m, got, best)
    print("lsap self-test: 300 random matrices match brute force")


def box_metrics(truths, preds, iou_threshold=IOU_THRESHOLD):
    """DeepForest-style box recall/precision.

    truths, preds: per image (boxes (n,4), labels (n,)). Per image, truth and
    predicted boxes are paired one to one maximising the total intersection
    area (linear sum assignment); a truth box is matched when the IoU of its
    pair is > iou_threshold. box_recall = mean over images with truth of
    matched/n_truth (0 for images without predictions); box_precision = mean
    over images with predictions of matched/n_pred (0 for empty frames with
    predictions)."""
    recalls, precisions = [], []
    matched_total = truth_total = pred_total = class_ok = 0
    empty = correct_empty = 0
    for (tb, tl), (pb, pl) in zip(truths, preds):
        nt, npred = len(tb), len(pb)
        truth_total += nt
        pred_total += npred
        if nt == 0:
            empty += 1
            if npred == 0:
                correct_empty += 1
            else:
                precisions.append(0.0)
            continue
        if npred == 0:
            recalls.append(0.0)
            continue
        tb = np.asarray(tb, np.float64)
        pb = np.asarray(pb, np.float64)
        ix = np.clip(np.minimum(tb[:, None, 2], pb[None, :, 2]) - np.maximum(tb[:, None, 0], pb[None, :, 0]), 0, None)
        iy = np.clip(np.minimum(tb[:, None, 3], pb[None, :, 3]) - np.maximum(tb[:, None, 1], pb[None, :, 1]), 0, None)
        inter = ix * iy
        r, c = lsap(inter, maximize=True)
        at = (tb[:, 2] - tb[:, 0]) * (tb[:, 3] - tb[:, 1])
        ap = (pb[:, 2] - pb[:, 0]) * (pb[:, 3] - pb[:, 1])
        union = at[r] + ap[c] - inter[r, c]
        iou = np.where(union > 0, inter[r, c] / np.where(union > 0, union, 1), 0.0)
        ok = iou > iou_threshold
        m = int(ok.sum())
        matched_total += m
        class_ok += int((np.asarray(tl)[r[ok]] == np.asarray(pl)[c[ok]]).sum())
        recalls.append(m / nt)
        precisions.append(m / npred)
    return {
        "box_recall": float(np.mean(recalls)) if recalls else float("nan"),
        "box_precision": float(np.mean(precisions)) if precisions else float("nan"),
        "class_accuracy_of_matched": class_ok / matched_total if matched_total else float("nan"),
        "empty_frame_accuracy": correct_empty / empty if empty else float("nan"),
        "images": len(truths),
        "truth_boxes": truth_total,
        "predicted_boxes": pred_total,
        "matched_boxes": matched_total,
    }


@torch.no_grad()
def evaluate(model, val, images, batch=4):
    was_training = model.training
    model.eval()
    truths, preds = [], []
    for k in range(0, len(val), batch):
        xs = [to_tensor(a) for a in images[k:k + batch]]
        out = model(xs)
        for (path, boxes, labels), o in zip(val[k:k + batch], out):
            truths.append((boxes, labels))
            preds.append((o["boxes"].numpy(), o["labels"].numpy()))
    model.train(was_training)
    return box_metrics(truths, preds)


def fmt_metrics(m):
    return ("box_recall %.4f box_precision %.4f class_acc %.4f empty_acc %.3f (truth %d, pred %d, matched %d)"
            % (m["box_recall"], m["box_precision"], m["class_accuracy_of_matched"], m["empty_frame_accuracy"],
               m["truth_boxes"], m["predicted_boxes"], m["matched_boxes"]))


# ---------------------------------------------------------------- safetensors


def state_for_export(model):
    sd = model.state_dict()
    return {k: v for k, v in sd.items() if not k.endswith("num_batches_tracked")}


def write_safetensors_f16(path, tensors):
    """safetensors file: u64 LE header length, JSON header padded with spaces to
    a multiple of 8, then the raw little-endian float16 data in sorted name order."""
    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        a = tensors[name].detach().cpu().to(torch.float32).numpy()
        h = a.astype("<f2")
        if not np.all(np.isfinite(h)):
            raise SystemExit("tensor %s does not fit in float16 (max |x| %g)" % (name, np.abs(a).max()))
        b = h.tobytes(order="C")
        header[name] = {"dtype": "F16", "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    header["__metadata__"] = {"format": "pt"}
    hj = json.dumps(header, separators=(",", ":")).encode()
    hj += b" " * ((8 - len(hj) % 8) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    base = 8 + n
    out = {}
    for name, h in header.items():
        assert h["dtype"] == "F16", h
        b, e = h["data_offsets"]
        a = np.frombuffer(data, dtype="<f2", count=(e - b) // 2, offset=base + b).reshape(h["shape"])
        out[name] = torch.from_numpy(a.astype(np.float32))
    return out


def load_exported(model, tensors):
    missing, unexpected = model.load_state_dict(tensors, strict=False)
    bad = [k for k in missing if not k.endswith("num_batches_tracked")]
    if bad or unexpected:
        raise SystemExit("state dict mismatch: missing %s unexpected %s" % (bad, unexpected))


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# ---------------------------------------------------------------- main


def main():
    t_start = time.time()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--train", default="/tmp/forest-train", help="forestgen set for training (seed 11)")
    ap.add_argument("--val", default="/tmp/forest-val", help="forestgen set for validation (seed 12)")
    ap.add_argument("--out", default=os.path.join(REPO, "testdata", "models", "canopy-demo-r18"))
    ap.add_argument("--minutes", type=float, default=18.0,
                    help="wall budget of the whole run (training stops early enough to leave --reserve-s); 0 = no limit")
    ap.add_argument("--reserve-s", type=float, default=100.0, help="seconds kept for the final validation and writing")
    ap.add_argument("--max-steps", type=int, default=0,
                    help="stop after this many steps (0 = no step limit; needs --minutes); with --minutes 0 the "
                         "cosine schedule spans exactly these steps")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--min-lr-frac", type=float, default=0.02, help="cosine floor as a fraction of --lr")
    ap.add_argument("--warmup", type=int, default=50, help="linear warm-up steps (from 0.1 * lr)")
    ap.add_argument("--weight-decay", type=float, default=1e-4)
    ap.add_argument("--clip", type=float, default=10.0, help="gradient norm clip (0 = off)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--n-train", type=int, default=0, help="use only the first N training images (0 = all)")
    ap.add_argument("--n-val", type=int, default=100)
    ap.add_argument("--val-every-min", type=float, default=5.0, help="also validate (fp32) every N minutes; 0 = only at the end")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--log-every", type=int, default=20)
    ap.add_argument("--selftest", action="store_true", help="check the assignment solver against brute force and exit")
    args = ap.parse_args()
    if args.selftest:
        _lsap_selftest()
        return

    command = "/usr/bin/python3 " + " ".join([os.path.relpath(os.path.abspath(sys.argv[0]), REPO)] + sys.argv[1:])
    torch.set_num_threads(args.threads)
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    deterministic = "on"
    try:
        torch.use_deterministic_algorithms(True)
    except Exception as e:  # pragma: no cover
        deterministic = "unavailable (%s)" % e
    print("torch %s torchvision %s python %s numpy %s, %d threads (OMP_WAIT_POLICY=%s), deterministic algorithms %s"
          % (torch.__version__, torchvision.__version__, platform.python_version(), np.__version__,
             torch.get_num_threads(), os.environ.get("OMP_WAIT_POLICY"), deterministic), flush=True)

    train = read_set(args.train, args.n_train)
    val = read_set(args.val, args.n_val)
    t0 = time.time()
    train_imgs = [load_uint8(p) for p, _, _ in train]
    val_imgs = [load_uint8(p) for p, _, _ in val]
    n_boxes = sum(len(b) for _, b, _ in train)
    print("train %d images (%d boxes, %d empty) from %s; val %d images from %s; loaded in %.1fs"
          % (len(train), n_boxes, sum(len(b) == 0 for _, b, _ in train), args.train, len(val), args.val,
             time.time() - t0), flush=True)

    model = build_model()
    model.train()
    n_params = sum(p.numel() for p in model.parameters())
    print("model: %d parameters" % n_params, flush=True)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    gen = torch.Generator().manual_seed(args.seed)

    deadline = t_start + args.minutes * 60 - args.reserve_s if args.minutes > 0 else float("inf")
    if args.minutes <= 0 and args.max_steps <= 0:
        raise SystemExit("give --minutes or --max-steps")
    max_steps = args.max_steps if args.max_steps > 0 else 10**9
    min_lr = args.lr * args.min_lr_frac
    t_warm = None  # wall time when warm-up ended

    def lr_at(step, now):  # step counts from 0
        if step < args.warmup:
            return args.lr * (0.1 + 0.9 * step / args.warmup)
        # Cosine progress: by steps when a step limit is given, by wall time when
        # a time budget is given (the larger of the two when both are).
        p = 0.0
        if args.max_steps > 0:
            p = (step - args.warmup) / max(1, args.max_steps - args.warmup)
        if args.minutes > 0:
            p = max(p, (now - t_warm) / max(1.0, deadline - t_warm))
        p = min(1.0, p)
        return min_lr + (args.lr - min_lr) * 0.5 * (1 + math.cos(math.pi * p))

    order, pos, epoch = [], 0, 0
    step = 0
    t_train = time.time()
    hist = []
    val_time_spent = 0.0
    next_val = t_train + args.val_every_min * 60 if args.val_every_min > 0 else float("inf")
    stopped_by = "max-steps"
    periodic = []
    while step < max_steps:
        now = time.time()
        if now >= deadline:
            stopped_by = "time"
            break
        if now >= next_val:
            tv = time.time()
            m = evaluate(model, val, val_imgs)
            val_time_spent += time.time() - tv
            periodic.append((step, time.time() - t_start, m))
            print("[val fp32] step %d, %.1f min: %s (%.0fs)" % (step, (time.time() - t_start) / 60, fmt_metrics(m),
                                                                time.time() - tv), flush=True)
            next_val = time.time() + args.val_every_min * 60
        xs, ts = [], []
        for _ in range(args.batch):
            if pos == len(order):
                order = torch.randperm(len(train), generator=gen).tolist()
                pos = 0
                epoch += 1
            idx = order[pos]
            pos += 1
            fl = torch.randint(0, 2, (2,), generator=gen).tolist()
            img, boxes = flip(train_imgs[idx], train[idx][1], fl[0] == 1, fl[1] == 1)
            xs.append(to_tensor(img))
            ts.append({"boxes": torch.from_numpy(boxes).reshape(-1, 4), "labels": torch.from_numpy(train[idx][2])})
        if step == args.warmup:
            t_warm = time.time()
        lr = lr_at(step, time.time())
        for g in opt.param_groups:
            g["lr"] = lr
        losses = model(xs, ts)
        loss = losses["classification"] + losses["bbox_regression"]
        if not torch.isfinite(loss):
            raise SystemExit("non-finite loss at step %d: %s" % (step, {k: float(v) for k, v in losses.items()}))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if args.clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        opt.step()
        step += 1
        hist.append((float(losses["classification"]), float(losses["bbox_regression"])))
        if step % args.log_every == 0 or step == max_steps:
            k = hist[-args.log_every:]
            el = time.time() - t_train
            print("step %d epoch %d lr %.2e cls %.4f reg %.4f | %.2f s/step, %.1f min"
                  % (step, epoch, lr, np.mean([a for a, _ in k]), np.mean([b for _, b in k]),
                     el / step, (time.time() - t_start) / 60), flush=True)
    train_s = time.time() - t_train
    print("training stopped by %s after %d steps (%.1f epochs) in %.1f min"
          % (stopped_by, step, step * args.batch / len(train), train_s / 60), flush=True)

    model.eval()
    tv = time.time()
    m32 = evaluate(model, val, val_imgs)
    print("[val fp32] %s (%.0fs)" % (fmt_metrics(m32), time.time() - tv), flush=True)

    os.makedirs(args.out, exist_ok=True)
    st_path = os.path.join(args.out, "model.safetensors")
    exported = state_for_export(model)
    write_safetensors_f16(st_path, exported)
    back = read_safetensors(st_path)
    assert sorted(back) == sorted(exported)
    max_rel = 0.0
    for k, v in exported.items():
        d = (back[k] - v.float()).abs().max().item()
        s = v.float().abs().max().item()
        max_rel = max(max_rel, d / s if s > 0 else d)
    model16 = build_model()
    load_exported(model16, back)
    model16.eval()
    tv = time.time()
    m16 = evaluate(model16, val, val_imgs)
    print("[val fp16 re-loaded] %s (%.0fs)" % (fmt_metrics(m16), time.time() - tv), flush=True)
    size = os.path.getsize(st_path)
    digest = sha256(st_path)
    print("wrote %s: %d bytes (%.2f MiB), %d tensors, sha256 %s; fp16 round trip max error/max|x| %.2e"
          % (st_path, size, size / 2**20, len(exported), digest, max_rel), flush=True)
    if size > 24 * 2**20:
        raise SystemExit("model.safetensors exceeds 24 MiB")
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(CONFIG, f, indent=2)
        f.write("\n")

    wall = time.time() - t_start
    lines = [
        "# canopy-demo-r18: training record",
        "",
        "Written by `tools/demo/train.py` at the end of the run (see `tools/demo/README.md`).",
        "",
        "- Model: torchvision RetinaNet, ResNet-18 body (trainable `nn.BatchNorm2d`, no pretrained weights),",
        "  `BackboneWithFPN` (layer2-4, 64 channels) + `LastLevelP6P7(64, 64)`, 2 classes (Tree=0, Dead=1),",
        "  min_size = max_size = 400, score 0.1, NMS 0.05, 300 detections, top-k 1000 (`config.json`).",
        "  %d parameters; shipped as float16 safetensors (%d tensors, no `num_batches_tracked`)." % (n_params, len(exported)),
        "- Versions: torch %s, torchvision %s, numpy %s, Python %s (Debian 12 `/usr/bin/python3`, CPU, torch threads %d,"
        % (torch.__version__, torchvision.__version__, np.__version__, platform.python_version(), args.threads),
        "  OMP_WAIT_POLICY=%s);" % os.environ.get("OMP_WAIT_POLICY"),
        "  `torch.use_deterministic_algorithms(True)`: %s." % deterministic,
        "- Data: `cmd/forestgen` images, 400x400: training seed 11, %d images (%d boxes); validation seed 12,"
        % (len(train), n_boxes),
        "  %d images. Demo set (seed 3) not used. Augmentation: random horizontal and vertical flips." % len(val),
        "- Seed %d (torch, random, numpy; data order and flips from one seeded `torch.Generator`)." % args.seed,
        "- Optimiser: AdamW, lr %g, weight decay %g, batch %d, gradient-norm clip %g; schedule: linear warm-up"
        % (args.lr, args.weight_decay, args.batch, args.clip),
        "  from %g to %g over %d steps, then cosine to %g %s."
        % (args.lr * 0.1, args.lr, args.warmup, min_lr,
           "over the remaining wall-time budget (training until %.1f min after the start)" % ((deadline - t_start) / 60)
           if args.minutes > 0 else "over the remaining steps of %d" % args.max_steps),
        "- Steps done: %d (%.2f epochs), stopped by %s; training %.1f min, whole run %.1f min wall."
        % (step, step * args.batch / len(train), stopped_by, train_s / 60, wall / 60),
        "",
        "## Validation (%d images of seed 12, IoU 0.4)" % len(val),
        "",
        "DeepForest-style box recall/precision: per image, one-to-one pairing maximising total intersection",
        "area (a port of scipy's `linear_sum_assignment` algorithm, as canopy's `metrics/lsap/lsap.go`; scipy is not",
        "installed for `/usr/bin/python3`), a truth box is matched when IoU > 0.4; recall = mean over images",
        "with truth of matched/truth, precision = mean over images with predictions of matched/predicted.",
        "",
        "| weights | box_recall | box_precision | class accuracy of matched | empty-frame accuracy | truth / predicted / matched |",
        "|---|---|---|---|---|---|",
    ]
    for name, m in (("float32 (end of training)", m32), ("**float16, re-loaded from model.safetensors (shipped)**", m16)):
        lines.append("| %s | %.4f | %.4f | %.4f | %.3f | %d / %d / %d |" % (
            name, m["box_recall"], m["box_precision"], m["class_accuracy_of_matched"], m["empty_frame_accuracy"],
            m["truth_boxes"], m["predicted_boxes"], m["matched_boxes"]))
    if periodic:
        lines += ["", "Periodic float32 validation during training:", ""]
        for s, t, m in periodic:
            lines.append("- step %d (%.1f min): recall %.4f, precision %.4f" % (s, t / 60, m["box_recall"], m["box_precision"]))
    lines += [
        "",
        "## Files",
        "",
        "- `model.safetensors`: %d bytes (%.2f MiB), sha256 `%s`" % (size, size / 2**20, digest),
        "- `config.json`",
        "",
        "## Command",
        "",
        "```sh",
        "go build -o /tmp/forestgen ./cmd/forestgen",
        "/tmp/forestgen -out %s -n %d -seed 11" % (args.train, len(train)),
        "/tmp/forestgen -out %s -n %d -seed 12" % (args.val, len(val)),
        command,
        "```",
        "",
    ]
    if args.minutes > 0:
        lines += [
            "With `--minutes` the schedule follows wall time and the run stops by it, so the step count",
            "depends on the machine's speed and load. A machine-independent run of the same length and shape:",
            "`... --minutes 0 --max-steps %d` (not bit-identical to this one)." % step,
        ]
    lines.append("")
    with open(os.path.join(args.out, "TRAINING.md"), "w") as f:
        f.write("\n".join(lines))
    print("done in %.1f min" % (wall / 60), flush=True)


if __name__ == "__main__":
    main()
