"""shapely's intersection and union areas for canopy's GEOS binding.

Writes internal/geos/testdata/areas.json: pairs of WKT polygons (notched
convex blobs, MultiPolygons, polygons with holes, touching squares) and
shapely.area(shapely.intersection(a, b)), shapely.area(shapely.union(a, b))
and shapely.intersects(a, b), with shapely's GEOS version.

  /opt/canopy-peers/venv/bin/python tools/geometry/areas.py --out internal/geos/testdata/areas.json
"""
import argparse
import json
import os
import sys

import numpy as np
import shapely

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from peer import blob, multi_wkt, poly_wkt, square  # noqa: E402
from peer_meta import peer_command  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    rng = np.random.default_rng(7)
    wkts = []
    for _ in range(120):
        cx, cy = rng.uniform(0, 100, 2)
        r = rng.uniform(5, 20)
        wkts.append(poly_wkt([blob(rng, cx, cy, r, int(rng.integers(5, 12)))]))
    wkts += [poly_wkt([square(0, 0, 10)]), poly_wkt([square(10, 0, 10)]), poly_wkt([square(5, 5, 10)]),
             multi_wkt([[square(50, 50, 5)], [square(60, 50, 5)]]), poly_wkt([square(40, 40, 30), square(50, 50, 10)])]
    geoms = [shapely.from_wkt(w) for w in wkts]
    pairs = []
    for i in range(len(geoms)):
        for j in range(i + 1, len(geoms)):
            a, b = geoms[i], geoms[j]
            if not shapely.intersects(a, b):
                continue
            pairs.append({"a": i, "b": j, "intersection": shapely.area(shapely.intersection(a, b)),
                          "union": shapely.area(shapely.union(a, b))})
    out = {"meta": {"shapely": shapely.__version__, "geos": ".".join(map(str, shapely.geos_version)),
                    "command": peer_command()},
           "wkt": wkts, "pairs": pairs}
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=0)
    print(len(wkts), "polygons", len(pairs), "intersecting pairs")


if __name__ == "__main__":
    main()
