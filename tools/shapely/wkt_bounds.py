#!/usr/bin/env python3
"""How DeepForest's read_file reads a WKT geometry cell (geopandas'
GeoSeries.from_wkt, shapely/GEOS underneath) and the box it then takes
(.bounds): for each case, the bounds or the error it raises. canopy's
dataset package must refuse what raises and give the same bounds for the
rest, except where canopy is stricter (non-finite coordinates, Z
coordinates, EMPTY members): internal/dataset TestWKTAsShapely.

  /opt/canopy-peers/venv/bin/python tools/shapely/wkt_bounds.py \
      --out internal/dataset/testdata/shapely_wkt.json
"""
import argparse
import json
import os
import platform
import sys
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from peer_meta import peer_command, torch_meta  # noqa: E402

import geopandas as gpd
import shapely

SQ = "0 0, 10 0, 10 10, 0 10, 0 0"
CASES = [
    "POLYGON ((%s))" % SQ,
    "POLYGON((0 0,10 0,10 10,0 0))",
    "polygon ((0 0, 10 0, 10 10, 0 0))",
    "POLYGON ((0.5 0.25, 10 0, 10 10, 0.5 0.25))",
    "POLYGON ((0 0, 10 0, 10 10, -0 0))",
    "POLYGON ((0 0, 10 0, 10 10, 0 0.0))",
    "POLYGON ((0 0, 1 1, 0 0))",
    "POLYGON ((0 0, 10 0, 0 0))",
    # interior rings: .bounds is the shell's
    "POLYGON ((%s), (20 20, 30 20, 30 30, 20 30, 20 20))" % SQ,
    "POLYGON ((%s), (-5 -5, -1 -5, -1 -1, -5 -5))" % SQ,
    "POLYGON ((%s), (2 2, 4 2, 4 4, 2 2))" % SQ,
    "MULTIPOLYGON (((%s), (20 20, 30 20, 30 30, 20 30, 20 20)), ((40 40, 50 40, 50 50, 40 40)))" % SQ,
    "MULTIPOLYGON (((0 0, 2 0, 2 2, 0 0)), ((5 -1, 6 -1, 6 3, 5 -1)))",
    "MULTIPOLYGON (((%s), (-5 -5, -1 -5, -1 -1, -5 -5)))" % SQ,
    # unclosed rings, too few points
    "POLYGON ((0 0, 10 0, 10 10, 0 10))",
    "POLYGON ((0 0, 1 0, 1 1))",
    "POLYGON ((0 0, 10 0))",
    "POLYGON ((0 0, 0 0))",
    "POLYGON ((0 0))",
    "POLYGON ((1 2, 3 4, 5 6, 1 2.0000001))",
    "POLYGON ((%s), (20 20, 30 20, 30 30, 20 30))" % SQ,
    "POLYGON ((0 0, 10 0, 10 10, 0 0), (1 1, 2 1, 2 2))",
    "MULTIPOLYGON (((%s)), ((40 40, 50 40, 50 50, 40 50)))" % SQ,
    # malformed text
    "POLYGON ((0 0, 10 0, 10 10, 0 0)) x",
    "POLYGON ((0 0, 10 0, 10 10, 0 0)",
    "POLYGON ((0 0, 10 0, 10 10, 0 0)))",
    "POLYGON (0 0, 10 0, 10 10, 0 0)",
    "POLYGON (((0 0, 10 0, 10 10, 0 0)))",
    "MULTIPOLYGON ((0 0, 10 0, 10 10, 0 0))",
    "POLYGON ((0 0, 1 x, 1 1, 0 0))",
    "POLYGON ((0 0,, 1 0, 1 1, 0 0))",
    "POLYGON (())",
    "POLYGON ()",
    "POLYGON EMPTY",
    "POINT (1 2)",
    "LINESTRING (0 0, 1 1)",
    # forms canopy refuses although shapely reads them
    "POLYGON ((0 0 5, 10 0 5, 10 10 5, 0 0 5))",
    "MULTIPOLYGON (((0 0, 10 0, 10 10, 0 0)), EMPTY)",
    "POLYGON ((0 0, 1e400 0, 1 1, 0 0))",
    "POLYGON ((0 0, nan 0, 1 1, 0 0))",
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    cases = []
    for wkt in CASES:
        c = {"wkt": wkt}
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                geom = gpd.GeoSeries.from_wkt([wkt])[0]
                b = [float(v) for v in geom.bounds]
            c["bounds"] = [v if v == v and abs(v) != float("inf") else repr(v) for v in b]
        except Exception as e:  # what DeepForest's read_file would raise
            c["error"] = "%s: %s" % (type(e).__name__, e)
        cases.append(c)
    meta = {"shapely": shapely.__version__, "geos": ".".join(map(str, shapely.geos_version)),
            "geopandas": gpd.__version__, "python": platform.python_version(),
            "reader": "geopandas.GeoSeries.from_wkt([cell])[0].bounds (DeepForest 2.1.0 utilities.read_file)",
            "command": peer_command(),
            "ATEN_CPU_CAPABILITY": os.environ.get("ATEN_CPU_CAPABILITY", "(unset)")}
    meta.update(torch_meta())
    with open(a.out, "w") as f:
        json.dump({"meta": meta, "cases": cases}, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
