"""Geography fixture and check for canopy's predict --tile.

fixture  DeepForest's utilities.image_to_geo_coordinates on boxes of a
         georeferenced GeoTIFF written by rasterio (GDAL): the polygons'
         exterior rings, for infer/gdal's BoxRing test.
check    OUT (a predict --tile folder) against the raster: DeepForest's
         image_to_geo_coordinates applied to OUT/predictions.csv, compared
         with OUT/predictions.gpkg as geopandas reads it (largest coordinate
         difference, CRS equality, row count).

Usage (the peers' venv):
  /opt/canopy-peers/venv/bin/python tools/tile/geo.py fixture > infer/gdal/testdata/geo.json
  /opt/canopy-peers/venv/bin/python tools/tile/geo.py check RASTER OUT
"""
import importlib.metadata as md
import json
import os
import sys
import tempfile

import geopandas as gpd
import numpy as np
import pandas as pd
import rasterio
import shapely
from rasterio.transform import Affine
from deepforest import utilities

CASES = [
    ("EPSG:32617", Affine(0.1, 0.0, 404211.37, 0.0, -0.1, 3285123.91)),
    ("EPSG:3857", Affine(0.29858214173896974, 0.0, -9171345.123, 0.0, -0.29858214173896974, 3456789.5)),
    ("EPSG:32611", Affine(0.5, 0.01, 315000.25, -0.02, -0.5, 4106000.75)),  # rotated
]


def to_geo(raster, df):
    gdf = gpd.GeoDataFrame(df.copy(), geometry=shapely.box(df.xmin, df.ymin, df.xmax, df.ymax))
    gdf["image_path"] = os.path.basename(raster)
    return utilities.image_to_geo_coordinates(gdf, root_dir=os.path.dirname(raster))


def fixture():
    rng = np.random.default_rng(27)
    out = {"peer": {"deepforest": md.version("deepforest"), "rasterio": rasterio.__version__, "gdal": rasterio.__gdal_version__,
                    "geopandas": gpd.__version__},
           "command": "/opt/canopy-peers/venv/bin/python tools/tile/geo.py fixture", "cases": []}
    with tempfile.TemporaryDirectory() as d:
        for crs, tr in CASES:
            p = os.path.join(d, "geo.tif")
            with rasterio.open(p, "w", driver="GTiff", width=1000, height=800, count=3, dtype="uint8", crs=crs, transform=tr) as ds:
                ds.write(np.zeros((3, 800, 1000), dtype=np.uint8))
            x0 = rng.integers(0, 950, 40)
            y0 = rng.integers(0, 750, 40)
            df = pd.DataFrame({"xmin": x0, "ymin": y0, "xmax": x0 + rng.integers(1, 50, 40), "ymax": y0 + rng.integers(1, 50, 40),
                               "label": "Tree", "score": 0.5})
            g = to_geo(p, df)
            with rasterio.open(p) as ds:
                gt = list(ds.transform.to_gdal())
            out["cases"].append({"crs": crs, "geotransform": gt,
                                 "boxes": df[["xmin", "ymin", "xmax", "ymax"]].values.tolist(),
                                 "rings": [list(map(list, geom.exterior.coords)) for geom in g.geometry],
                                 "bounds": g[["xmin", "ymin", "xmax", "ymax"]].values.tolist()})
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")


def check(raster, out):
    preds = pd.read_csv(os.path.join(out, "predictions.csv"))
    want = to_geo(raster, preds)
    got = gpd.read_file(os.path.join(out, "predictions.gpkg"))
    with rasterio.open(raster) as ds:
        crs = ds.crs
    worst = 0.0
    for a, b in zip(want.geometry, got.geometry, strict=True):
        worst = max(worst, float(np.abs(np.array(a.exterior.coords) - np.array(b.exterior.coords)).max()))
    cols = float(np.abs(want[["xmin", "ymin", "xmax", "ymax"]].values - got[["xmin", "ymin", "xmax", "ymax"]].values).max())
    print(json.dumps({"rows": len(got), "crs_equal": got.crs == crs, "max_coordinate_difference": worst,
                      "max_bounds_column_difference": cols, "scores_equal": bool((got.score.values == preds.score.values).all())}))


if __name__ == "__main__":
    if sys.argv[1] == "fixture":
        fixture()
    else:
        check(sys.argv[2], sys.argv[3])
