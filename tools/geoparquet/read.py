"""Read GeoParquet files with geopandas.read_parquet and print, per file,
what was read: rows, the CRS's EPSG code (null: no CRS), the columns, the
total bounds, and the first row's image_path, label and geometry as WKT.
internal/geoparquet's TestGeopandasReads runs it on the edge cases (no
rows, no CRS, names that are not UTF-8).

Usage (the peers' venv):
  /opt/canopy-peers/venv/bin/python tools/geoparquet/read.py FILE...
"""
import json
import math
import sys

import geopandas as gpd


def main():
    out = []
    for p in sys.argv[1:]:
        g = gpd.read_parquet(p)
        first = None
        if len(g):
            r = g.iloc[0]
            first = {"image_path": r.image_path, "label": r.label, "geometry": r.geometry.wkt}
        out.append({"file": p, "rows": len(g), "epsg": g.crs.to_epsg() if g.crs is not None else None,
                    "columns": list(g.columns),
                    "bounds": [None if math.isnan(v) else v for v in g.total_bounds.tolist()], "first": first})
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
