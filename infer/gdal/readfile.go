package gdal

import (
	"errors"
	"math"
	"strconv"
	"strings"
)

// What DeepForest's utilities.read_file reads of a shapefile or a
// GeoPackage (through geopandas and pyogrio, i.e. GDAL's OGR): the first
// layer, its CRS, each feature's geometry and its label and image_path
// columns. ReadVector reads as much, and PixelFrame converts the
// geometries to a raster's pixels as read_file's geo_to_image_coordinates
// does.

// ErrVector marks a vector file canopy cannot read: missing, not a
// shapefile or GeoPackage, truncated, or beyond the limits below.
var ErrVector = errors.New("bad vector file")

// Limits on what ReadVector holds, checked before it allocates.
const (
	// MaxFeatures: features of the layer (a truth of boxes).
	MaxFeatures = 5_000_000
	// MaxString: bytes of one label or image_path value.
	MaxString = 4096
	// MaxStrings: bytes of all label and image_path values together.
	MaxStrings = 256 << 20
	// MaxWKB: bytes of one feature's geometry (ISO WKB); MaxWKBs: of all.
	MaxWKB  = 16 << 20
	MaxWKBs = 1 << 30
)

// VectorFeature is one feature of the layer: the geometry's type (as
// shapely names it: "Polygon", "MultiPolygon", "Point", ...; "" for a
// feature without geometry), whether it is empty, its envelope (the
// bounds of all its coordinates), and its label and image_path values
// (Has*: the value is set and not null).
type VectorFeature struct {
	FID                    int64
	Type                   string
	Empty                  bool
	MinX, MinY, MaxX, MaxY float64
	Label, ImagePath       string
	HasLabel, HasImagePath bool
	// WKB is the geometry as ISO WKB, little endian (nil without one), for
	// point and polygon truth (dataset.ParseWKB reads it).
	WKB []byte
}

// Vector is the first layer of a shapefile or GeoPackage.
type Vector struct {
	Driver string   // "ESRI Shapefile" or "GPKG"
	Layers []string // every layer's name; Layers[0] is the one read
	// CRS is the layer's CRS as WKT ("" without one), CRSName its
	// authority name ("EPSG:32617") when GDAL identifies it, Geographic
	// whether it is a geographic (degree) CRS.
	CRS, CRSName string
	Geographic   bool
	// UndefinedCRS names the GeoPackage placeholder read as no CRS
	// ("Undefined geographic SRS": srs_id 0, what GDAL writes for a layer
	// without one), "" else; CRS is then "".
	UndefinedCRS string
	// LabelField and ImagePathField: the layer has a column of that name;
	// LabelType is the label column's OGR type ("String", "Integer",
	// "Integer64", "Real", ...).
	LabelField, ImagePathField bool
	LabelType                  string
	Features                   []VectorFeature
}

// PixelFrame is what read_file takes of a raster to convert coordinates:
// rasterio's bounds (left and top) and res[0].
type PixelFrame struct {
	Left, Top, Res float64
}

// FrameOf is rasterio's bounds and res of a raster with GDAL geotransform
// gt (nil: none, where rasterio takes the identity transform) and size
// w×h. rasterio (_base.pyx, 1.4.4) with its Affine(a, b, c, d, e, f) =
// (gt1, gt2, gt0, gt4, gt5, gt3): bounds are (c, f + e·h, c + a·w, f) when
// b = d = 0, else the minimum and maximum of the four corners
// transform·(0,0), (0,h), (w,h), (w,0) (each x = col·a + row·b + c, y =
// col·d + row·e + f, left to right); res[0] = sqrt(a·a + d·d).
func FrameOf(gt *[6]float64, w, h int) PixelFrame {
	t := [6]float64{0, 1, 0, 0, 0, 1}
	if gt != nil {
		t = *gt
	}
	a, b, c, d, e, f := t[1], t[2], t[0], t[4], t[5], t[3]
	// Each product is rounded on its own (float64 conversions forbid
	// fused multiply-adds), as Python computes it.
	res := math.Sqrt(float64(a*a) + float64(d*d))
	if b == 0 && d == 0 {
		return PixelFrame{Left: c, Top: f, Res: res}
	}
	fw, fh := float64(w), float64(h)
	corner := func(col, row float64) (float64, float64) {
		return float64(col*a) + float64(row*b) + c, float64(col*d) + float64(row*e) + f
	}
	left, top := c, f
	for _, p := range [3][2]float64{{0, fh}, {fw, fh}, {fw, 0}} {
		x, y := corner(p[0], p[1])
		left, top = min(left, x), max(top, y)
	}
	return PixelFrame{Left: left, Top: top, Res: res}
}

// Box converts an envelope in the raster's CRS to pixel bounds as
// geo_to_image_coordinates does: shapely's translate(-left, -top), then
// scale(1/res, -1/res) about (0, 0), i.e. col = (x - left)·(1/res) and
// row = (y - top)·(-1/res), each vertex on its own; y grows downward from
// the raster's top, so the envelope's maxY gives the box's ymin. The map
// is monotonic in each coordinate, so the bounds of the converted
// vertices are the converted envelope. Nothing is rounded or clipped.
func (p PixelFrame) Box(minX, minY, maxX, maxY float64) (xmin, ymin, xmax, ymax float64) {
	xmin, ymax = p.Pixel(minX, minY)
	xmax, ymin = p.Pixel(maxX, maxY)
	return xmin, ymin, xmax, ymax
}

// Pixel converts one vertex as Box does: col = (x - left)·(1/res), row =
// (y - top)·(-1/res).
func (p PixelFrame) Pixel(x, y float64) (col, row float64) {
	return float64(x-p.Left) * (1 / p.Res), float64(y-p.Top) * (-1 / p.Res)
}

// PyFloat is Python's repr of a float, which str() of a label read from
// a real column gives: "1.0", "2.5", "1e+16", "nan", "-inf".
func PyFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "nan"
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	}
	if a := math.Abs(f); a == 0 || (a >= 1e-4 && a < 1e16) {
		s := strconv.FormatFloat(f, 'f', -1, 64)
		if !strings.Contains(s, ".") {
			s += ".0"
		}
		return s
	}
	return strconv.FormatFloat(f, 'e', -1, 64)
}
