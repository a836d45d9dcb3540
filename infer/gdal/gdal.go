// Package gdal is canopy's thin binding of the few GDAL calls that read a
// window of a large raster (and write the box polygons of a georeferenced
// one): open a file read-only, learn its size, bands, sample type and
// georeferencing, and read one window through GDAL's block cache, whose
// size is bounded (SetCacheMax), so a rank never holds the whole raster.
//
// The default build links the system's libgdal (Debian's libgdal-dev,
// found by pkg-config module gdal). With -tags nogdal the package is a stub
// whose Open fails with ErrUnavailable, so that a binary built with
// -tags nompi,noblas,nogdal needs only libc.
//
// What is read, as DeepForest's PIL convert("RGB") reads it and as
// infer/imagefile reads small images:
//   - GeoTIFF (tiled, striped, BigTIFF, compressed; a COG is a GeoTIFF),
//     JPEG and PNG, found from the content by GDAL's drivers GTiff, JPEG
//     and PNG only;
//   - 3 bands (RGB) or 4 (RGBA: the fourth band, colour-interpreted as
//     alpha, is dropped as PIL's convert drops unassociated alpha). GDAL does
//     not say whether a TIFF's alpha is associated (premultiplied), so such a
//     TIFF is read as stored, where PIL (and infer/imagefile) would
//     un-premultiply it first;
//   - 8-bit samples as they are; 16-bit samples keep their high byte
//     (v>>8), Pillow's rule for 16-bit RGB and RGBA;
//   - nodata areas are read as the values they hold.
//
// Anything else (another band count, another sample type, a missing file,
// a file that is not a raster or is truncated) is an error wrapping
// ErrRaster.
package gdal

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/canopy-hpc/canopy/box"
)

// ErrRaster marks a raster canopy cannot read: missing, not a raster,
// truncated, or of a band count or sample type it does not take.
var ErrRaster = errors.New("bad raster")

// ErrUnavailable is Open's error in a build without GDAL (-tags nogdal).
var ErrUnavailable = errors.New("this canopy was built without GDAL (-tags nogdal): rasters cannot be read")

// DefaultCacheMax is the block cache canopy gives GDAL per process.
const DefaultCacheMax = 256 << 20

// Info describes an open raster.
type Info struct {
	Width, Height int
	Bands         int // 3 or 4 (the fourth is alpha, dropped)
	Bits          int // bits per sample: 8 or 16
	Driver        string
	// CRS is the raster's coordinate reference system as WKT, "" when it
	// has none.
	CRS string
	// GeoTransform is GDAL's affine transform (x = gt[0] + col·gt[1] +
	// row·gt[2], y = gt[3] + col·gt[4] + row·gt[5]); HasTransform says
	// whether the raster has one (else it is the identity GDAL reports).
	GeoTransform [6]float64
	HasTransform bool
	// NoData holds bands 1–3's nodata values as GDAL reports them
	// (GDALGetRasterNoDataValue); HasNoData says which bands have one.
	NoData    [3]float64
	HasNoData [3]bool
	// Alpha says that a window has an alpha plane (ReadSamples): band 4
	// is alpha, or band 1's mask is per dataset (GMF_PER_DATASET: an
	// alpha band or a TIFF mask, whose 0 is "no data").
	Alpha bool
	// BlockW and BlockH are the size of the raster's blocks (a TIFF's
	// TileWidth and TileLength, or its width and RowsPerStrip), as its
	// header states them: GDAL allocates a whole block to read any pixel
	// of it.
	BlockW, BlockH int
}

// checkBlock refuses a raster whose block (all its bands' samples, as a
// pixel-interleaved TIFF stores them) is larger than budget, GDAL's block
// cache: a header that lies about its tile size (TileWidth 32768 in a
// small file) would otherwise make GDAL allocate gigabytes to read one
// pixel. It is checked from the header, before any block is read.
func (in Info) checkBlock(path string, budget int64) error {
	if in.BlockW < 1 || in.BlockH < 1 {
		return fmt.Errorf("gdal: %s: blocks of %dx%d pixels: %w", path, in.BlockW, in.BlockH, ErrRaster)
	}
	need := int64(in.BlockW) * int64(in.BlockH) * int64(in.Bands) * int64(max(in.Bits, 8)/8)
	if need > budget {
		return fmt.Errorf("gdal: %s: its blocks are %dx%d pixels (%d bands of %d bits: %s each, read whole to read any pixel), more than GDAL's block cache of %s (--gdal-cache): a header whose tile or strip size is wrong, or a raster stored in blocks too large to read by windows (rewrite it tiled: gdal_translate -co TILED=YES): %w",
			path, in.BlockW, in.BlockH, in.Bands, in.Bits, byteSize(need), byteSize(budget), ErrRaster)
	}
	return nil
}

// byteSize is n bytes for a message: MiB or GiB with two decimals.
func byteSize(n int64) string {
	if n >= 1<<30 {
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	}
	return fmt.Sprintf("%.2f MiB", float64(n)/(1<<20))
}

// check applies the band and sample rules to what GDAL reported.
func (in Info) check(path string, alpha string) error {
	if in.Width < 1 || in.Height < 1 {
		return fmt.Errorf("gdal: %s: a %dx%d raster has no pixels: %w", path, in.Width, in.Height, ErrRaster)
	}
	if in.Bands != 3 && in.Bands != 4 {
		return fmt.Errorf("gdal: %s has %d bands: canopy reads RGB (3 bands) or RGBA (4): %w", path, in.Bands, ErrRaster)
	}
	if in.Bits != 8 && in.Bits != 16 {
		return fmt.Errorf("gdal: %s has samples of type %s: canopy reads 8-bit (Byte) or 16-bit (UInt16): %w", path, alpha, ErrRaster)
	}
	if in.HasTransform {
		if err := checkTransform(in.GeoTransform, in.Width, in.Height); err != nil {
			return fmt.Errorf("gdal: %s: %w: %w", path, err, ErrRaster)
		}
	}
	return nil
}

// checkTransform refuses a geotransform that is not finite, or that maps
// a pixel of a w×h raster (BoxRing's pixel centres, from 0.5 to w+0.5 and
// h+0.5: the extremes are the corners, the map being affine) outside the
// float64 range: its boxes could not be written or reported.
func checkTransform(gt [6]float64, w, h int) error {
	for _, v := range gt {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return fmt.Errorf("its geotransform %v is not finite (a .aux.xml or a tag holding NaN or Inf)", gt)
		}
	}
	for _, c := range [][2]float64{{0, 0}, {float64(w), 0}, {0, float64(h)}, {float64(w), float64(h)}} {
		r := BoxRing(gt, c[0], c[1], c[0], c[1])
		if x, y := r[0][0], r[0][1]; math.IsInf(x, 0) || math.IsInf(y, 0) || math.IsNaN(x) || math.IsNaN(y) {
			return fmt.Errorf("its geotransform %v maps pixel (%g, %g) outside the float64 range", gt, c[0], c[1])
		}
	}
	return nil
}

// RGB8 is a window's pixels as 8-bit planes: R (W·H bytes, rows top
// first), then G, then B.
type RGB8 struct {
	W, H int
	Pix  []uint8
}

// Samples is a window as stored: bands 1–3 as planes (R, G, B, W·H
// samples each, rows top first) in Pix8 (8-bit rasters) or Pix16 (16-bit
// ones), and, when the raster has one (Info.Alpha), its alpha or mask
// plane as bytes (a 16-bit alpha saturates at 255; 0 stays 0).
type Samples struct {
	W, H  int
	Pix8  []uint8
	Pix16 []uint16
	Alpha []uint8
}

// RGB8 is the window as Read gives it: 8-bit samples as they are, 16-bit
// samples' high byte (v>>8).
func (s Samples) RGB8() RGB8 {
	if s.Pix16 == nil {
		return RGB8{W: s.W, H: s.H, Pix: s.Pix8}
	}
	out := RGB8{W: s.W, H: s.H, Pix: make([]uint8, len(s.Pix16))}
	for i, v := range s.Pix16 {
		out.Pix[i] = uint8(v >> 8)
	}
	return out
}

// Feature is one box of predictions.gpkg: its polygon in the raster's CRS
// (a closed ring of 5 points) and the columns of predictions.csv.
type Feature struct {
	Ring                          [5][2]float64
	ImagePath, Label              string
	Xmin, Ymin, Xmax, Ymax, Score float64
	// CropLabels and CropScores are the crop models' cells, one per model
	// (Layer.CropColumns); nil for a box the crop step left out (null).
	CropLabels []string
	CropScores []float64
}

// Layer is one polygon layer of a GeoPackage: a raster's boxes in its CRS
// (WKT). CropColumns name the crop models' columns after score, a label
// (String) and a score (Real) per model.
type Layer struct {
	Name, CRS   string
	CropColumns []string
	Features    []Feature
	// Points makes a point layer (a point model's rows, PointFeature):
	// columns image_path, x, y, label, score; no crop columns.
	Points bool
}

// PointFeature is a point model's point of a georeferenced raster as
// predictions.gpkg holds it: its geometry mapped as DeepForest's
// image_to_geo_coordinates maps a point (rasterio's transform.xy at the
// pixel centre, as BoxRing), in Ring[0]; the x and y columns (Xmin, Ymin)
// keep the pixel coordinates of predictions.csv, as DeepForest updates
// only a box's bounds columns.
func PointFeature(gt [6]float64, x, y float64, imagePath, label string, score float64) Feature {
	ring := BoxRing(gt, x, y, x, y)
	return Feature{Ring: [5][2]float64{ring[3]}, ImagePath: imagePath, Label: label, Score: score, Xmin: x, Ymin: y}
}

// BoxRing is DeepForest's utilities.image_to_geo_coordinates for one box:
// the pixel corners (xmin, ymin) and (xmax, ymax) mapped by the raster's
// transform at the pixel centre (rasterio's transform.xy, offset
// "center": x = gt0 + (col+0.5)·gt1 + (row+0.5)·gt2, y = gt3 +
// (col+0.5)·gt4 + (row+0.5)·gt5), then shapely's box(left, bottom, right,
// top): the ring (right,bottom) (right,top) (left,top) (left,bottom),
// closed.
func BoxRing(gt [6]float64, xmin, ymin, xmax, ymax float64) [5][2]float64 {
	at := func(col, row float64) (float64, float64) {
		c, r := col+0.5, row+0.5
		return gt[0] + c*gt[1] + r*gt[2], gt[3] + c*gt[4] + r*gt[5]
	}
	left, bottom := at(xmin, ymin)
	right, top := at(xmax, ymax)
	return [5][2]float64{{right, bottom}, {right, top}, {left, top}, {left, bottom}, {right, bottom}}
}

// BoxFeature is a box of a georeferenced raster as predictions.gpkg and
// the GeoParquet files hold it: its polygon (BoxRing) and, as
// image_to_geo_coordinates sets them, the polygon's bounds as the xmin,
// ymin, xmax and ymax columns.
func BoxFeature(gt [6]float64, b box.Box, imagePath, label string, score float64) Feature {
	ring := BoxRing(gt, b.Xmin, b.Ymin, b.Xmax, b.Ymax)
	f := Feature{Ring: ring, ImagePath: imagePath, Label: label, Score: score,
		Xmin: ring[0][0], Ymin: ring[0][1], Xmax: ring[0][0], Ymax: ring[0][1]}
	for _, p := range ring {
		f.Xmin, f.Xmax = min(f.Xmin, p[0]), max(f.Xmax, p[0])
		f.Ymin, f.Ymax = min(f.Ymin, p[1]), max(f.Ymax, p[1])
	}
	return f
}

// gpkgRefusedFirst are the characters GDAL's GeoPackage driver refuses at
// the start of a layer name ("may not contain special characters").
const gpkgRefusedFirst = "`~!@#$%^&*()+-={}|[]\\:\";'<>?,./"

// LayerNames gives each raster's image_path a GeoPackage layer name that
// GDAL accepts and that is unique in the file, whatever the paths
// (box.UniqueNames): a path that is a valid name keeps it; otherwise the
// name is the path with its control characters as '_', its leading
// characters that GDAL refuses dropped ("./x.tif" → "x.tif"), "layer_"
// before a reserved prefix (gpkg, sqlite_, and rtree_, GDAL's spatial
// index tables), and a "_2", "_3", … suffix where it is taken.
func LayerNames(paths []string) []string { return box.UniqueNames(paths, layerBase, "_") }

// layerBase is p made a valid layer name (uniqueness aside).
func layerBase(p string) string {
	n := strings.Map(func(r rune) rune {
		if r == utf8.RuneError || !unicode.IsPrint(r) {
			return '_'
		}
		return r
	}, strings.ToValidUTF8(p, "\uFFFD"))
	n = strings.TrimLeft(n, gpkgRefusedFirst)
	if n == "" {
		return "raster"
	}
	l := strings.ToLower(n)
	for _, reserved := range []string{"gpkg", "sqlite_", "rtree_"} {
		if strings.HasPrefix(l, reserved) {
			return "layer_" + n
		}
	}
	return n
}
