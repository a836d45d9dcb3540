"""Shapefile and GeoPackage truth for canopy's eval --tile: what DeepForest's
utilities.read_file makes of them.

Writes, into OUT (jobs/testdata/readfile), small GeoTIFFs (written by
rasterio, i.e. GDAL: UTM, Web Mercator, rotated, one without a CRS) and
vector files (written by geopandas through pyogrio, i.e. GDAL's OGR):
polygons and multipolygons, boxes and irregular crowns, some crossing the
raster's edge or lying outside it, several labels; then runs read_file on
each vector file and records, per case, either the rows (image_path, the
geometry's bounds as DeepForest's BoxDataset takes them, label, in file
order) and the warnings read_file gave, or the exception it raised.
OUT/expected.json also records the peers' versions, the command and the
CPU capability (no torch arithmetic is involved: the numbers are shapely's
float64 affine arithmetic).

    /opt/canopy-peers/venv/bin/python tools/tile/readfile.py jobs/testdata/readfile

Timing (docs/benchmarks.md, "Shapefile/GeoPackage truth"):
    readfile.py bench-write DIR N   DIR/crowns.gpkg: N crowns (5-10 vertices)
                                    over DIR/utm.tif
    readfile.py bench-time FILE     seconds of one read_file(FILE), after a
                                    warm-up read
"""
import importlib.metadata as md
import json
import os
import shutil
import sys
import warnings

import geopandas as gpd
import numpy as np
import pyogrio
import rasterio
import shapely
from rasterio.transform import Affine
from deepforest import utilities

RASTERS = {
    # name: (crs or None, transform, width, height)
    "utm.tif": ("EPSG:32617", Affine(0.1, 0.0, 404211.37, 0.0, -0.1, 3285123.91), 1000, 800),
    "merc.tif": ("EPSG:3857", Affine(0.29858214173896974, 0.0, -9171345.123, 0.0, -0.29858214173896974, 3456789.5), 900, 700),
    "rot.tif": ("EPSG:32611", Affine(0.5, -0.01, 315000.25, 0.02, -0.5, 4106000.75), 640, 480),  # rotated: left and top from other corners
    "nocrs.tif": (None, Affine(0.1, 0.0, 404211.37, 0.0, -0.1, 3285123.91), 500, 400),
}


def write_raster(out, name):
    crs, tr, w, h = RASTERS[name]
    with rasterio.open(os.path.join(out, name), "w", driver="GTiff", width=w, height=h, count=3, dtype="uint8",
                       crs=crs, transform=tr, compress="deflate", tiled=True) as ds:
        ds.write(np.zeros((3, h, w), dtype=np.uint8))


def pixel_polygons(rng, w, h, n):
    """n polygons in pixel coordinates: boxes, irregular crowns, a few
    crossing an edge, one outside."""
    out = []
    for i in range(n):
        cx, cy = rng.uniform(-20, w + 20), rng.uniform(-20, h + 20)
        if i == n - 1:
            cx, cy = w + 60.5, -45.25  # wholly outside the raster
        rx, ry = rng.uniform(3, 40), rng.uniform(3, 40)
        if i % 3 == 0:
            out.append(shapely.box(cx - rx, cy - ry, cx + rx, cy + ry))
        else:
            k = int(rng.integers(5, 11))
            t = np.sort(rng.uniform(0, 2 * np.pi, k))
            r = rng.uniform(0.6, 1.0, k)
            out.append(shapely.Polygon(np.c_[cx + rx * r * np.cos(t), cy + ry * r * np.sin(t)]))
    return out


def to_geo(tr, geoms):
    """Pixel (col, row) vertices to the raster's CRS by its transform."""
    return [shapely.transform(g, lambda xy: np.c_[tr.c + xy[:, 0] * tr.a + xy[:, 1] * tr.b,
                                                  tr.f + xy[:, 0] * tr.d + xy[:, 1] * tr.e]) for g in geoms]


def frame(geoms, image_path, labels, crs):
    data = {"label": labels}
    if image_path is not None:
        data["image_path"] = image_path
    return gpd.GeoDataFrame(data, geometry=geoms, crs=crs)


def write_vector(gdf, path, **kw):
    if path.endswith(".gpkg"):
        kw = {"driver": "GPKG", "SPATIAL_INDEX": "NO", **kw}  # smaller files; read_file uses no index
    else:
        kw = {"driver": "ESRI Shapefile", **kw}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pyogrio's note on a file written without a CRS
        gdf.to_file(path, engine="pyogrio", **kw)


def run_read_file(path, image_path=None):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            if image_path is None:
                df = utilities.read_file(path)
            else:  # read_file's image_path argument (canopy: eval --tile --raster)
                df = utilities.read_file(path, root_dir=os.path.dirname(path), image_path=image_path)
        except Exception as e:  # recorded: canopy refuses these
            return {"error": type(e).__name__, "message": str(e)}
    rows = []
    for _, r in df.iterrows():
        g = r["geometry"]
        xmin, ymin, xmax, ymax = g.bounds
        rows.append([str(r["image_path"]), g.geom_type, xmin, ymin, xmax, ymax, str(r["label"])])
    # DeepForest's own warnings and pyogrio's; geopandas' and affine's
    # deprecation notes (emitted inside read_file) are left out.
    noise = ("Overriding the CRS", "Use `@` matmul")
    return {"rows": rows, "warnings": sorted({str(w.message) for w in caught if not str(w.message).startswith(noise)}),
            "label_dtype": str(df["label"].dtype)}


def main():
    out = sys.argv[1]
    if os.path.isdir(out):
        shutil.rmtree(out)
    os.makedirs(out)
    for name in RASTERS:
        write_raster(out, name)
    rng = np.random.default_rng(2027)
    cases = {}
    labels = lambda n: [("Tree", "Snag", "Dead")[i % 3] for i in range(n)]

    def case(name, gdf, note, **kw):
        p = os.path.join(out, name)
        write_vector(gdf, p, **kw)
        cases[name] = {"note": note, **run_read_file(p)}

    for raster in ("utm.tif", "merc.tif", "rot.tif"):
        crs, tr, w, h = RASTERS[raster]
        stem = raster[:-4]
        geoms = to_geo(tr, pixel_polygons(rng, w, h, 14))
        case(stem + ".shp", frame(geoms, raster, labels(len(geoms)), crs), "polygons in the raster's CRS, shapefile")
        case(stem + ".gpkg", frame(geoms, raster, labels(len(geoms)), crs), "polygons in the raster's CRS, GeoPackage")

    crs, tr, w, h = RASTERS["utm.tif"]
    geoms = to_geo(tr, pixel_polygons(rng, w, h, 8))
    multi = [shapely.MultiPolygon([g, shapely.affinity.translate(g, 7.5, -3.25)]) for g in geoms]
    case("multi.shp", frame(multi, "utm.tif", labels(len(multi)), crs), "multipolygons: bounds of all parts")
    # A shapefile keeps no polygon/multipolygon distinction: OGR reads a
    # one-part feature as a Polygon, so this file has both types.
    case("mixed.shp", frame(geoms[:4] + multi[4:], "utm.tif", labels(len(geoms)), crs),
         "polygons and multipolygons together: DeepForest refuses several geometry types")
    case("other_crs.shp", frame(geoms, "utm.tif", labels(len(geoms)), "EPSG:32618"),
         "another projected CRS than the raster's: warned, converted without reprojection")
    wgs = [shapely.box(-81.5 + i * 1e-4, 29.6, -81.5 + i * 1e-4 + 5e-5, 29.6 + 5e-5) for i in range(5)]
    case("wgs84.shp", frame(wgs, "utm.tif", labels(5), "EPSG:4326"), "geographic (EPSG:4326): refused")
    px = pixel_polygons(rng, w, h, 6)
    case("pixels.shp", frame(px, "utm.tif", labels(len(px)), None), "no CRS: taken as pixel coordinates, not converted")
    case("pixels_nocrs.shp", frame(px, "nocrs.tif", labels(len(px)), None),
         "no CRS on either side: pixel coordinates, not converted")
    case("nocrs_raster.shp", frame(to_geo(tr, px), "nocrs.tif", labels(len(px)), crs),
         "a CRS, but the raster has none: DeepForest fails")
    pts = [shapely.Point(tr.c + 10 * i, tr.f - 10 * i) for i in range(1, 5)]
    case("points.shp", frame(pts, "utm.tif", labels(4), crs), "points: DeepForest keeps points; canopy scores boxes")
    case("int_label.shp", frame(geoms, "utm.tif", [1 + i % 2 for i in range(len(geoms))], crs), "integer labels")
    case("no_image_path.shp", frame(geoms, None, labels(len(geoms)), crs),
         "no image_path column: read_file needs its image_path argument")
    for name, raster in (("no_image_path.shp", "utm.tif"), ("utm.shp", "merc.tif")):
        cases[name + "+" + raster] = {"note": "read_file(" + name + ", image_path=" + raster + ")",
                                      **run_read_file(os.path.join(out, name), raster)}
    two = os.path.join(out, "two_layers.gpkg")
    write_vector(frame(geoms[:3], "utm.tif", labels(3), crs), two, layer="first")
    write_vector(frame(geoms[3:], "utm.tif", labels(len(geoms) - 3), crs), two, layer="second", mode="a")
    cases["two_layers.gpkg"] = {"note": "two layers: read_file (pyogrio) reads the first", **run_read_file(two)}

    res = {
        "peer": {"deepforest": md.version("deepforest"), "geopandas": gpd.__version__, "pyogrio": pyogrio.__version__,
                 "gdal": pyogrio.__gdal_version_string__, "shapely": shapely.__version__, "rasterio": rasterio.__version__,
                 "pyproj": md.version("pyproj")},
        "cpu_capability": os.environ.get("ATEN_CPU_CAPABILITY", "unset (no torch arithmetic involved)"),
        "command": "/opt/canopy-peers/venv/bin/python tools/tile/readfile.py " + " ".join(sys.argv[1:]),
        "rasters": {k: {"crs": v[0], "geotransform": list(v[1].to_gdal()), "width": v[2], "height": v[3]} for k, v in RASTERS.items()},
        "cases": cases,
    }
    with open(os.path.join(out, "expected.json"), "w") as f:
        json.dump(res, f, indent=1)
        f.write("\n")


def bench_write(out, n):
    os.makedirs(out, exist_ok=True)
    write_raster(out, "utm.tif")
    crs, tr, w, h = RASTERS["utm.tif"]
    geoms = to_geo(tr, pixel_polygons(np.random.default_rng(7), w, h, n))
    write_vector(frame(geoms, "utm.tif", [("Tree", "Snag", "Dead")[i % 3] for i in range(n)], crs),
                 os.path.join(out, "crowns.gpkg"))


def bench_time(path):
    import time
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        utilities.read_file(path)
        t0 = time.perf_counter()
        df = utilities.read_file(path)
        dt = time.perf_counter() - t0
    print(f"read_file {path}: {len(df)} rows in {dt:.3f} s")


if __name__ == "__main__":
    if sys.argv[1] == "bench-write":
        bench_write(sys.argv[2], int(sys.argv[3]))
    elif sys.argv[1] == "bench-time":
        bench_time(sys.argv[2])
    else:
        main()
