"""NMS tie-order fixture for canopy's nms / batchedNMS (infer/retinanet
nms.go): torchvision.ops.nms and torchvision.ops.batched_nms on constructed
cases where scores tie exactly, boxes are identical or their IoU equals the
threshold exactly.

Every coordinate is a small integer and every score a multiple of 1/8, so
the inputs are the same float32 values on both sides and the cases test the
rules, not rounding:
  - which of two tied, overlapping boxes survives (the candidates' order);
  - in which order tied survivors come out (nms and batched_nms);
  - IoU exactly at the threshold does not suppress (strict >);
  - boxes of different labels never suppress each other, tied or not,
    along both batched_nms paths: the coordinate offset (up to 1,000 boxes
    on the CPU) and the per-class loop (more than 1,000);
  - enough tied candidates (64, 300, 1,200) that a sort that is not stable
    would show it (std::sort is an insertion sort below 17 elements).
torchvision's nms kernel sorts the scores with a stable sort: tied
candidates keep their order. batched_nms's per-class path (more than 1,000
boxes on the CPU) orders the survivors with torch.sort(descending=True),
which is not stable (std::sort); "sorts" records that sort's output on
tie-heavy vectors, for canopy's reproduction of it, among them vectors that
drive std::sort into its heap-sort fallback (found with a model of the
algorithm and McIlroy's adversary, heap_sorts).

The script runs each case once more in a child process with
ATEN_CPU_CAPABILITY=default and checks that the kept lists are the same
(recorded as "capabilities").

Usage:
  /opt/canopy-peers/venv/bin/python tools/retinanet/nms_ties.py \\
      --out testdata/golden/retinanet/nms_ties.json
(make golden-nms)
"""
import argparse
import json
import os
import platform
import subprocess
import sys

import numpy as np
import torch
import torchvision
from torchvision.ops import batched_nms, nms



def case(name, boxes, scores, thr, labels=None, note=""):
    return {"name": name, "note": note, "iou_threshold": thr, "boxes": boxes, "scores": scores, "labels": labels}


def cases():
    out = []
    # Six disjoint boxes, one score: every one survives; the order of the
    # survivors is the order of the ties.
    out.append(case("disjoint-ties", [[10 * i, 0, 10 * i + 5, 5] for i in range(6)], [0.5] * 6, 0.5,
                    note="no overlap, all tied: the kept order is the tie order"))
    # Two identical boxes with the same score: one survives.
    out.append(case("identical-pair", [[0, 0, 10, 10], [0, 0, 10, 10]], [0.5, 0.5], 0.5,
                    note="IoU 1, tied: which index survives"))
    # Three identical boxes, tied, among a higher and a lower score.
    out.append(case("identical-triple", [[0, 0, 8, 8], [0, 0, 8, 8], [20, 0, 28, 8], [0, 0, 8, 8], [0, 0, 8, 8]],
                    [0.25, 0.625, 0.875, 0.625, 0.625], 0.05,
                    note="the first of the tied identical boxes (index 1) suppresses 3, then 4 and 0"))
    # A chain: 0 overlaps 1, 1 overlaps 2, 0 and 2 apart; all tied.
    out.append(case("chain", [[0, 0, 10, 10], [5, 0, 15, 10], [10, 0, 20, 10]], [0.5, 0.5, 0.5], 0.3,
                    note="IoU(0,1) = IoU(1,2) = 1/3 > 0.3: the tie order decides between {0,2} and {1}"))
    out.append(case("chain-reversed", [[10, 0, 20, 10], [5, 0, 15, 10], [0, 0, 10, 10]], [0.5, 0.5, 0.5], 0.3,
                    note="the same boxes, indices reversed"))
    out.append(case("chain-middle-first", [[5, 0, 15, 10], [0, 0, 10, 10], [10, 0, 20, 10]], [0.5, 0.5, 0.5], 0.3,
                    note="the middle box first: it suppresses both"))
    # IoU exactly 0.5 (intersection 2, union 4): not suppressed at 0.5,
    # suppressed just below.
    out.append(case("iou-at-threshold", [[0, 0, 3, 1], [1, 0, 4, 1]], [0.75, 0.5], 0.5,
                    note="IoU exactly 0.5 = threshold: both kept (strict >)"))
    out.append(case("iou-above-threshold", [[0, 0, 3, 1], [1, 0, 4, 1]], [0.75, 0.5], 0.4999,
                    note="IoU 0.5 > 0.4999: the lower score suppressed"))
    out.append(case("iou-at-threshold-tied", [[0, 0, 3, 1], [1, 0, 4, 1], [2, 0, 5, 1]], [0.5, 0.5, 0.5], 0.5,
                    note="tied, IoU(0,1) = IoU(1,2) = 0.5 exactly: all kept, in tie order"))
    # Touching boxes (IoU 0) at a zero threshold: not suppressed.
    out.append(case("touching-zero-threshold", [[0, 0, 4, 4], [4, 0, 8, 4], [2, 0, 6, 4]], [0.5, 0.5, 0.5], 0.0,
                    note="IoU 0 is not > 0; the middle box overlaps both"))
    # Tied groups among other scores, in shuffled positions.
    out.append(case("mixed", [[0, 0, 10, 10], [1, 1, 11, 11], [30, 30, 40, 40], [2, 2, 12, 12], [31, 31, 41, 41], [60, 0, 70, 10]],
                    [0.375, 0.75, 0.75, 0.75, 0.375, 0.75], 0.5,
                    note="ties at 0.75 across overlapping and disjoint boxes"))
    rng = np.random.default_rng(30)

    def rand_boxes(n, span, size):
        xy = rng.integers(0, span, size=(n, 2))
        wh = rng.integers(1, size, size=(n, 2))
        return [[int(x), int(y), int(x + w), int(y + h)] for (x, y), (w, h) in zip(xy, wh)]

    for n, span, size, levels, thr in ((64, 60, 30, 3, 0.3), (300, 200, 40, 4, 0.05)):
        out.append(case("random-%d" % n, rand_boxes(n, span, size), [float(v) / 8 for v in rng.integers(1, 1 + levels, size=n)], thr,
                        note="%d seeded boxes, %d distinct scores" % (n, levels)))
    # batched_nms: labels.
    out.append(case("labels-identical", [[0, 0, 10, 10]] * 4, [0.5, 0.5, 0.5, 0.5], 0.5, labels=[1, 0, 1, 0],
                    note="identical tied boxes, two labels: one survivor per label"))
    out.append(case("labels-mixed", [[0, 0, 10, 10], [1, 1, 11, 11], [30, 30, 40, 40], [2, 2, 12, 12], [31, 31, 41, 41], [0, 0, 10, 10]],
                    [0.375, 0.75, 0.75, 0.75, 0.375, 0.75], 0.5, labels=[0, 1, 0, 0, 1, 2]))
    for n, span, size, levels, nl, thr in ((300, 150, 40, 3, 3, 0.05), (1200, 400, 40, 4, 3, 0.05)):
        out.append(case("labels-random-%d" % n, rand_boxes(n, span, size), [float(v) / 8 for v in rng.integers(1, 1 + levels, size=n)], thr,
                        labels=[int(v) for v in rng.integers(0, nl, size=n)],
                        note="%d boxes (the %s path), %d labels, %d distinct scores" % (n, "per-class loop" if n > 1000 else "coordinate offset", nl, levels)))
    return out


def introsort_model(n, before_ids, heap_ranges):
    """A model of libstdc++'s std::sort (introsort: median-of-three pivot
    moved to the front, unguarded partition, heap sort below a depth of
    2*floor(log2 n), final insertion sort over runs of more than 16) on
    element ids, recording the ranges it heap-sorts. It only steers the
    search for inputs below; the fixture holds torch's own output."""
    idx = list(range(n))

    def before(i, j):
        return before_ids(idx[i], idx[j])

    def swap(i, j):
        idx[i], idx[j] = idx[j], idx[i]

    def partition(first, last):
        a, b, c = first + 1, first + (last - first) // 2, last - 1
        if before(a, b):
            m = b if before(b, c) else (c if before(a, c) else a)
        else:
            m = a if before(a, c) else (c if before(b, c) else b)
        swap(first, m)
        lo, hi = first + 1, last
        while True:
            while before(lo, first):
                lo += 1
            hi -= 1
            while before(first, hi):
                hi -= 1
            if lo >= hi:
                return lo
            swap(lo, hi)
            lo += 1

    def sift(first, hole, size, x):
        top = child = hole
        while child < (size - 1) // 2:
            child = 2 * (child + 1)
            if before(first + child, first + child - 1):
                child -= 1
            idx[first + hole] = idx[first + child]
            hole = child
        if size % 2 == 0 and child == (size - 2) // 2:
            child = 2 * (child + 1)
            idx[first + hole] = idx[first + child - 1]
            hole = child - 1
        while hole > top and before_ids(idx[first + (hole - 1) // 2], x):
            idx[first + hole] = idx[first + (hole - 1) // 2]
            hole = (hole - 1) // 2
        idx[first + hole] = x

    def heap(first, last):
        heap_ranges.append((first, last))
        size = last - first
        for p in range((size - 2) // 2, -1, -1):
            sift(first, p, size, idx[first + p])
        for end in range(last - 1, first, -1):
            x = idx[end]
            idx[end] = idx[first]
            sift(first, 0, end - first, x)

    def intro(first, last, depth):
        while last - first > 16:
            if depth == 0:
                heap(first, last)
                return
            depth -= 1
            cut = partition(first, last)
            intro(cut, last, depth)
            last = cut

    def insert(i, guarded_first):
        x = idx[i]
        if guarded_first is not None and before_ids(x, idx[guarded_first]):
            idx[guarded_first + 1:i + 1] = idx[guarded_first:i]
            idx[guarded_first] = x
            return
        while before_ids(x, idx[i - 1]):
            idx[i] = idx[i - 1]
            i -= 1
        idx[i] = x

    if n > 1:
        intro(0, n, 2 * (n.bit_length() - 1))
        for i in range(1, n):
            insert(i, 0 if i < 16 else None)
    return idx


def heap_sorts():
    """Tie-heavy vectors that drive std::sort into its heap-sort fallback
    with ties inside the heap-sorted range: McIlroy's adversary against the
    model gives a killer order of distinct keys, then a seeded window of
    keys is merged pairwise until the model still heap-sorts and sees ties
    there."""
    rng = np.random.default_rng(32)
    out = []
    for n in (64, 100, 200):
        val = [n] * n  # n = gas, not yet frozen
        st = {"solid": 0, "cand": 0}

        def adversary(x, y):
            if val[x] == n and val[y] == n:
                z = x if x == st["cand"] else y
                val[z] = st["solid"]
                st["solid"] += 1
            if val[x] == n:
                st["cand"] = x
            elif val[y] == n:
                st["cand"] = y
            return val[x] < val[y]

        introsort_model(n, adversary, [])
        base = [n - v for v in val]
        for _ in range(500):
            lo = int(rng.integers(1, n))
            hi = lo + int(rng.integers(4, 40))
            keys = [k if k < lo else (lo + (k - lo) // 2 if k < hi else k - (hi - lo) // 2) for k in base]
            ranges = []
            order = introsort_model(n, lambda a, b: keys[a] > keys[b], ranges)
            ties = sum(keys[order[i]] == keys[order[i + 1]] for f, l in ranges for i in range(f, l - 1))
            if ranges and ties >= 3:
                out.append([float(k) / 8 for k in keys])
                break
        else:
            sys.exit("no heap-sort input found for n=%d" % n)
    return out


def sorts():
    """torch.sort(descending=True) of float32 vectors full of ties: the
    final ordering of batched_nms's per-class path (not stable)."""
    rng = np.random.default_rng(31)
    out = []
    for n, levels in ((5, 2), (16, 3), (17, 3), (40, 3), (200, 4), (1000, 4), (1500, 6), (100, 1)):
        out.append([float(v) / 8 for v in rng.integers(1, 1 + levels, size=n)])
    out.append([float(v) / 8 for v in sorted(rng.integers(1, 5, size=300))])
    out.append([float(v) / 8 for v in sorted(rng.integers(1, 5, size=300), reverse=True)])
    out.append([float(i % 7) / 8 for i in range(500)])
    out += heap_sorts()
    return [{"values": v, "indices": torch.tensor(v, dtype=torch.float32).sort(descending=True)[1].tolist()} for v in out]


def run(cs):
    for c in cs:
        b = torch.tensor(c["boxes"], dtype=torch.float32)
        s = torch.tensor(c["scores"], dtype=torch.float32)
        assert b.numpy().tolist() == c["boxes"] and [float(v) for v in s] == c["scores"], c["name"]
        if c["labels"] is None:
            c["keep"] = nms(b, s, c["iou_threshold"]).tolist()
        c["batched_keep"] = batched_nms(b, s, torch.tensor(c["labels"] or [0] * len(c["scores"])), c["iou_threshold"]).tolist()
    return cs


def write(path, obj):
    """JSON with one line per case (the box lists are long)."""
    lists = {k: obj.pop(k) for k in ("cases", "sorts")}
    head = json.dumps(obj, indent=1)[:-2]
    with open(path, "w") as f:
        f.write(head)
        for k, v in lists.items():
            f.write(',\n "%s": [\n' % k)
            f.write(",\n".join("  " + json.dumps(c, separators=(",", ":")) for c in v))
            f.write("\n ]")
        f.write("\n}\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--child", action="store_true", help="print the kept lists as JSON (the capability check)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    cs = run(cases())
    ss = sorts()
    got = [[c.get("keep"), c["batched_keep"]] for c in cs] + [s["indices"] for s in ss]
    if args.child:
        json.dump(got, sys.stdout)
        return
    caps = [torch.backends.cpu.get_cpu_capability()]
    env = dict(os.environ, ATEN_CPU_CAPABILITY="default")
    child = json.loads(subprocess.run([sys.executable, __file__, "--out", "-", "--child"], env=env, check=True,
                                      capture_output=True, text=True).stdout)
    if child != got:
        sys.exit("ATEN_CPU_CAPABILITY=default keeps other boxes: the fixture would depend on the CPU")
    caps.append("default")
    write(args.out, {
        "peer": {
            "torch": torch.__version__,
            "torchvision": torchvision.__version__,
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "ATEN_CPU_CAPABILITY": os.environ.get("ATEN_CPU_CAPABILITY", "(unset)"),
            "threads": torch.get_num_threads(),
            "python": platform.python_version(),
        },
        "capabilities": caps,
        "command": "/opt/canopy-peers/venv/bin/python tools/retinanet/nms_ties.py " + " ".join(sys.argv[1:]),
        "cases": cs,
        "sorts": ss,
    })


if __name__ == "__main__":
    main()
