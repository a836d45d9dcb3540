"""End-to-end check of canopy predict --tile against DeepForest's
predict_tile rows stored by tools/tile/merge.py (its first case: the same
raster, patch, overlap and iou, the same R50 test weights). Matches each
DeepForest row to canopy's row of the highest IoU and prints the box
counts, the share of matched boxes whose integer coordinates are equal,
and the largest score difference.

Exits 1 unless issue 27's acceptance holds: equal box counts, every
DeepForest row matched, integer coordinates equal for at least 99% of the
matched boxes, scores within 1e-5. Also prints the fixture's predict_tile
wall time and load average when it recorded them.

Usage: python3 tools/tile/e2e.py infer/tile/testdata/merge.json OUT/predictions.csv
       python3 tools/tile/e2e.py infer/tile/testdata/e2e2000.json OUT/predictions.csv   (make e2e-tile)
"""
import csv
import json
import sys


def iou(a, b):
    w = min(a[2], b[2]) - max(a[0], b[0])
    h = min(a[3], b[3]) - max(a[1], b[1])
    if w <= 0 or h <= 0:
        return 0.0
    i = w * h
    return i / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - i)


def main():
    case = json.load(open(sys.argv[1]))["cases"][0]
    df = case["predict_tile"]
    rows = [[float(r["xmin"]), float(r["ymin"]), float(r["xmax"]), float(r["ymax"]), float(r["score"])]
            for r in csv.DictReader(open(sys.argv[2]))]
    used = set()
    equal = matched = 0
    worst = 0.0
    for d in df:
        best, k = 0.0, -1
        for j, r in enumerate(rows):
            if j not in used and iou(d, r) > best:
                best, k = iou(d, r), j
        if k < 0 or best < 0.5:
            continue
        used.add(k)
        matched += 1
        equal += rows[k][:4] == d[:4]
        worst = max(worst, abs(rows[k][4] - d[5]))
    share = equal / max(matched, 1)
    ok = len(df) == len(rows) == matched and share >= 0.99 and worst <= 1e-5
    out = {"deepforest_rows": len(df), "canopy_rows": len(rows), "matched": matched,
           "integer_coordinates_equal": share, "max_score_difference": worst, "acceptance": "pass" if ok else "FAIL"}
    for k in ("predict_tile_seconds", "load_before", "load_after"):
        if k in case:
            out["fixture_" + k] = case[k]
    print(json.dumps(out))
    if not ok:
        sys.exit(1)


if __name__ == "__main__":
    main()
