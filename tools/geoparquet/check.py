"""Check canopy's GeoParquet files against the peers.

OUT is a predict --tile folder: predictions.csv, report.json (tile.rasters:
image_path and file of each raster) and, in PARQUET_DIR (default
OUT/rasters), one <name>.parquet per georeferenced raster (<name>: the
raster's file name without its extension). Each file is read with
geopandas.read_parquet and compared with the predictions.csv rows of its
raster, in order:

  rows      the same count, image_path, label and score;
  geometry  equal to DeepForest's utilities.image_to_geo_coordinates of the
            CSV rows (tools/tile/geo.py's to_geo): the largest coordinate
            difference;
  bounds    the xmin..ymax columns equal DeepForest's; the bbox covering
            column (read with pyarrow) equal to each polygon's bounds; the
            geo metadata's bbox equal to the file's total_bounds;
  crs       the file's CRS equal to the raster's as rasterio reads it, and
            the same EPSG code;
  geo       version 1.1.0, encoding WKB, geometry_types ["Polygon"], the
            bbox covering;
  crops     with --crop-model (cropmodel_* columns in predictions.csv): the
            same crop columns in the file, in the CSV's order after score,
            each row's label equal and its score equal at float32 (the CSV
            writes the float32 score's shortest form); null only where the
            CSV cell is empty.

It prints one JSON verdict (the peers' versions, the command, one entry per
file with its sha256) and exits 1 when a check fails.

Usage (the peers' venv):
  /opt/canopy-peers/venv/bin/python tools/geoparquet/check.py OUT [--parquet-dir DIR] [--rasters DIR]

--rasters DIR finds each raster as DIR/<image_path> instead of report.json's
file (a folder moved since the run).
"""
import argparse
import hashlib
import importlib.metadata as md
import json
import os
import sys

import geopandas as gpd
import numpy as np
import pandas as pd
import pyarrow
import pyarrow.parquet as pq
import pyproj
import rasterio
import shapely

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tile"))
sys.path.insert(0, os.path.join(HERE, ".."))
from geo import to_geo  # noqa: E402  DeepForest's image_to_geo_coordinates
from peer_meta import peer_command, torch_meta  # noqa: E402


def max_abs(a, b):
    if len(a) == 0:
        return 0.0
    return float(np.abs(np.asarray(a, dtype=float) - np.asarray(b, dtype=float)).max())


def check_file(path, raster, rows):
    got = gpd.read_parquet(path)
    table = pq.read_table(path)
    geo = json.loads(pq.read_schema(path).metadata[b"geo"])
    col = geo["columns"]["geometry"]
    with rasterio.open(raster) as ds:
        crs = ds.crs
    v = {"file": os.path.basename(path), "sha256": hashlib.sha256(open(path, "rb").read()).hexdigest(),
         "rows": len(got), "csv_rows": len(rows)}
    v["crs_epsg"] = got.crs.to_epsg() if got.crs is not None else None
    v["raster_epsg"] = crs.to_epsg()
    v["crs_equal"] = got.crs is not None and got.crs == pyproj.CRS.from_wkt(crs.to_wkt())
    v["geo"] = {"version": geo["version"], "primary_column": geo["primary_column"], "encoding": col["encoding"],
                "geometry_types": col["geometry_types"], "covering": col.get("covering")}
    v["columns"] = table.column_names
    ok = v["rows"] == v["csv_rows"] and v["crs_equal"] and v["crs_epsg"] == v["raster_epsg"]
    if len(rows) and len(got) == len(rows):
        want = to_geo(raster, rows.reset_index(drop=True))
        worst = 0.0
        for a, b in zip(want.geometry, got.geometry, strict=True):
            worst = max(worst, max_abs(a.exterior.coords, b.exterior.coords))
        v["max_geometry_difference"] = worst
        cols = ["xmin", "ymin", "xmax", "ymax"]
        v["max_bounds_column_difference"] = max_abs(want[cols].values, got[cols].values)
        bb = table.column("bbox").combine_chunks()
        bbox = np.stack([bb.field(c).to_numpy() for c in cols], axis=1)
        v["max_bbox_column_difference"] = max_abs(bbox, shapely.bounds(got.geometry.values))
        v["geo_bbox"] = col.get("bbox")
        v["max_geo_bbox_difference"] = max_abs(col.get("bbox"), got.total_bounds)
        v["image_path_label_score_equal"] = bool((got.image_path.values == rows.image_path.values).all()
                                                 and (got.label.values == rows.label.values).all()
                                                 and (got.score.values == rows.score.values).all())
        v["geometry_is_box"] = bool(all(g.equals(shapely.box(*g.bounds)) for g in got.geometry))
        crop_cols = [c for c in rows.columns if c.startswith("cropmodel_")]
        if crop_cols:
            v["crop_columns"] = crop_cols
            v["crop_columns_follow_score"] = table.column_names[7:7 + len(crop_cols)] == crop_cols
            same = True
            for c in crop_cols:
                a, b = got[c].to_numpy(), rows[c].to_numpy()
                if c.startswith("cropmodel_score"):
                    want = np.array([np.float32(x) if x != "" else np.nan for x in b], dtype=np.float32)
                    have = np.array([np.float32(x) if x is not None and not pd.isna(x) else np.nan for x in a], dtype=np.float32)
                    same = same and bool(np.array_equal(want, have, equal_nan=True))
                else:
                    same = same and all((x if x is not None else "") == y for x, y in zip(a, b, strict=True))
            v["crop_cells_equal"] = bool(same)
            ok = ok and v["crop_columns_follow_score"] and v["crop_cells_equal"]
        ok = ok and v["max_geometry_difference"] == 0.0 and v["max_bounds_column_difference"] == 0.0 \
            and v["max_bbox_column_difference"] == 0.0 and v["max_geo_bbox_difference"] == 0.0 \
            and v["image_path_label_score_equal"] and v["geometry_is_box"]
    ok = ok and geo["version"] == "1.1.0" and col["encoding"] == "WKB" and col["geometry_types"] == ["Polygon"] \
        and col.get("covering") == {"bbox": {k: ["bbox", k] for k in ("xmin", "ymin", "xmax", "ymax")}}
    v["ok"] = bool(ok)
    return v


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--parquet-dir")
    ap.add_argument("--rasters")
    a = ap.parse_args()
    report = json.load(open(os.path.join(a.out, "report.json")))
    preds = pd.read_csv(os.path.join(a.out, "predictions.csv"), keep_default_na=False)
    pdir = a.parquet_dir or os.path.join(a.out, "rasters")
    verdict = {"peer": {"deepforest": md.version("deepforest"), "geopandas": gpd.__version__, "pyarrow": pyarrow.__version__,
                        "rasterio": rasterio.__version__, "gdal": rasterio.__gdal_version__, "shapely": shapely.__version__,
                        "pyproj": pyproj.__version__, **torch_meta()},
               "command": peer_command(), "files": []}
    for r in report["tile"]["rasters"]:
        if not r.get("crs") or not r.get("geotransform"):
            continue
        raster = os.path.join(a.rasters, r["image_path"]) if a.rasters else r["file"]
        # report.json names each raster's outputs (tile.rasters[].name); an
        # older report: the file name without its extension
        name = r.get("name") or os.path.splitext(os.path.basename(r["image_path"]))[0]
        verdict["files"].append(check_file(os.path.join(pdir, name + ".parquet"), raster,
                                           preds[preds.image_path == r["image_path"]]))
    verdict["ok"] = bool(verdict["files"]) and all(f["ok"] for f in verdict["files"])
    json.dump(verdict, sys.stdout, indent=1)
    sys.stdout.write("\n")
    sys.exit(0 if verdict["ok"] else 1)


if __name__ == "__main__":
    main()
