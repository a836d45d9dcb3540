"""TreeFormer points on the GPU check (tools/gpu/check.sh, part "points").
Standard library only (the GPU machine has Python but no Go).

  strip  REF_POINTS.json OUT.json
      keeps the points of tools/treeformer/reference.py's points.json
      (DeepForest 1bad4419's predict_image and predict_tile on the seeded
      pvt_v2_b3 model), dropping the density maps: small enough to carry.

  compare --ref NAME=DIR [--deepforest STRIPPED.json] NAME=DIR ...
      each run's OUT/predictions.csv against the reference run's by issue
      46's rule: every reference point matched by one of the run's on the
      same image with the same label within 0.5 px and a score within
      1e-3 (each used once); pass when at least 99% match and at most 1%
      are extra. With --deepforest, every run against DeepForest's points
      too. Prints a table (and --out JSON) with each run's windows,
      seconds of predict on rank 0 (report.json) and windows/s.
"""
import argparse
import csv
import hashlib
import json
import math
import os
import sys


def rows(path):
    with open(path, newline="") as f:
        r = csv.reader(f)
        head = next(r)
        if head != ["image_path", "x", "y", "label", "score"]:
            raise SystemExit("%s: header %s" % (path, head))
        return [(os.path.basename(a[0]), a[3], float(a[1]), float(a[2]), float(a[4])) for a in r]


def match(got, want, dist=0.5, tol=1e-3):
    used = [False] * len(got)
    n, worst = 0, 0.0
    for w in want:
        for j, g in enumerate(got):
            ds = abs(g[4] - w[4])
            if used[j] or g[0] != w[0] or g[1] != w[1] or not math.hypot(g[2] - w[2], g[3] - w[3]) <= dist or not ds <= tol:
                continue
            used[j] = True
            n += 1
            worst = max(worst, ds)
            break
    return n, len(got) - n, worst


def verdict(n, extra, total):
    return "ok" if total == 0 or (100 * n >= 99 * total and 100 * extra <= total) else "FAIL"


def deepforest_rows(path, tiled):
    d = json.load(open(path))
    out = []
    if tiled:
        t = d["tile"]
        for p in t["points"]:
            out.append((t["image"], p["label"], p["x"], p["y"], p["score"]))
        return out
    for name, im in sorted(d["images"].items()):
        for p in im["points"]:
            out.append((name, p["label"], p["x"], p["y"], p["score"]))
    return out


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("strip")
    s.add_argument("src")
    s.add_argument("dst")
    c = sub.add_parser("compare")
    c.add_argument("--ref", required=True)
    c.add_argument("--deepforest")
    c.add_argument("--tiled", action="store_true", help="the runs are predict --tile (DeepForest's predict_tile points)")
    c.add_argument("--out")
    c.add_argument("runs", nargs="+")
    a = ap.parse_args()
    if a.cmd == "strip":
        d = json.load(open(a.src))
        for im in d["images"].values():
            im.pop("maps", None)
        d["tile"].pop("maps", None)
        # what made this file, and the sha256 of each image DeepForest ran
        # on (beside the source), so that a test regenerating the images
        # knows they are the same
        d["meta"]["stripped"] = "python3 tools/gpu/tf_points.py strip %s %s" % (a.src, a.dst)
        sums = {}
        for name in list(d["images"]) + [d["tile"]["image"]]:
            p = os.path.join(os.path.dirname(a.src), name)
            if os.path.exists(p):
                sums[name] = hashlib.sha256(open(p, "rb").read()).hexdigest()
        d["meta"]["image_sha256"] = sums
        json.dump(d, open(a.dst, "w"), indent=1, sort_keys=True)
        return
    runs = [r.split("=", 1) for r in [a.ref] + a.runs]
    ref = rows(os.path.join(runs[0][1], "predictions.csv"))
    df = deepforest_rows(a.deepforest, a.tiled) if a.deepforest and os.path.exists(a.deepforest) else None
    table, fail = [], False
    print("%-14s %7s %22s %22s %8s %9s %10s" % ("run", "points", "vs " + runs[0][0] + " (match/extra)", "vs DeepForest", "windows", "seconds", "windows/s"))
    for name, d in runs:
        try:
            got = rows(os.path.join(d, "predictions.csv"))
            rep = json.load(open(os.path.join(d, "report.json")))
        except (OSError, ValueError) as e:
            print("%-14s missing: %s" % (name, e))
            fail = True
            continue
        n, extra, worst = match(got, ref)
        v = verdict(n, extra, len(ref))
        e = {"run": name, "points": len(got), "vs_ref": {"matched": n, "of": len(ref), "extra": extra, "worst_score": worst, "verdict": v}}
        vd = "-"
        if df is not None:
            dn, dx, dw = match(got, df)
            dv = verdict(dn, dx, len(df))
            e["vs_deepforest"] = {"matched": dn, "of": len(df), "extra": dx, "worst_score": dw, "verdict": dv}
            vd = "%d/%d +%d %.1e %s" % (dn, len(df), dx, dw, dv)
            fail = fail or dv != "ok"
        fail = fail or v != "ok"
        secs = rep.get("seconds_rank0", {}).get("predict", 0.0)
        wins = rep.get("windows", 0)
        e.update({"windows": wins, "predict_seconds": secs, "windows_per_s": wins / secs if secs else None, "device": rep.get("device")})
        table.append(e)
        print("%-14s %7d %22s %22s %8d %9.2f %10s" % (name, len(got), "%d/%d +%d %.1e %s" % (n, len(ref), extra, worst, v), vd, wins, secs,
                                                     "%.2f" % (wins / secs) if secs else "-"))
    if a.out:
        json.dump({"runs": table}, open(a.out, "w"), indent=1)
    sys.exit(1 if fail else 0)


if __name__ == "__main__":
    main()
