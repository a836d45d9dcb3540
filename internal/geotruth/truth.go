// Package geotruth reads a shapefile or GeoPackage truth for eval and
// eval --tile: DeepForest's read_file rules (columns, geometry type, CRS
// checks), and the conversion of its coordinates to the pixels of the
// rasters it names (Raster: their size and georeferencing, which the
// caller opens; eval's images GeometryCSV opens itself). It knows no
// command and no MPI.
package geotruth

import (
	"bytes"
	"encoding/csv"
	"fmt"
	"math"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/canopy-hpc/canopy/infer/gdal"
	"github.com/canopy-hpc/canopy/internal/dataset"
)

// A truth as a shapefile or GeoPackage, converted to the
// rasters' pixels as DeepForest's utilities.read_file(path) converts it
// (read at 1bad4419 and 2.1.0: read_file, __assign_image_path__,
// __check_and_assign_label__, __shapefile_to_annotations__,
// geo_to_image_coordinates). Rank 0 reads the file (infer/gdal), checks
// it, converts every feature's bounds and hands on the truth as the CSV
// it equals, which every rank parses as a CSV truth. The rules, each as
// read_file has it unless said:
//   - the file's name ends in .shp or .gpkg; its first layer is read (as
//     pyogrio reads it), with a warning when it has more;
//   - an image_path column names each feature's raster (relative to the
//     truth's folder, or --root-dir); a label column gives the labels;
//     either missing is an error (read_file's image_path and label
//     arguments have no flag here); a feature without either value is an
//     error;
//   - one geometry type for the whole layer (else an error, as read_file);
//     canopy scores boxes, so it must be Polygon or MultiPolygon, and each
//     feature's box is its geometry's bounds (as the WKT CSV truth; read_file
//     keeps points as points and non-rectangular crowns as polygons);
//   - a layer without a CRS holds pixel coordinates: nothing is converted;
//   - a geographic CRS is refused (read_file refuses EPSG:4326 by name;
//     canopy refuses every CRS in degrees, whose bounds divided by a
//     resolution in metres mean nothing either);
//   - a layer with a CRS needs a raster with one (read_file fails with an
//     AttributeError); a CRS other than the raster's is warned about and
//     NOT reprojected: the coordinates are converted with the raster's
//     bounds and resolution all the same (canopy compares the two CRSs
//     with GDAL's OSRIsSameEx, read_file their authority strings);
//   - the conversion is (x - left)·(1/res[0]), (y - top)·(-1/res[0]) with
//     rasterio's bounds and res of the raster (gdal.FrameOf): no rounding,
//     no clipping to the raster;
//   - a file naming several rasters converts each feature with its own
//     raster, as read_file does given a GeoDataFrame (given the file name,
//     read_file converts every feature with the first raster's bounds).

// IsVector: eval --tile's truth is a shapefile or GeoPackage, by the
// end of its name (read_file decides so).
func IsVector(name string) bool {
	ext := strings.ToLower(filepath.Ext(name))
	return ext == ".shp" || ext == ".gpkg"
}

// Truth is report.json's record of a shapefile or GeoPackage truth.
type Truth struct {
	File     string   `json:"file"`
	Driver   string   `json:"driver"`
	Layer    string   `json:"layer"`
	Layers   int      `json:"layers"`
	Features int      `json:"features"`
	CRS      string   `json:"crs,omitempty"` // authority name, else the WKT
	Geometry string   `json:"geometry_type"`
	Frame    string   `json:"frame"` // how coordinates became pixels
	Warnings []string `json:"warnings,omitempty"`
	vec      *gdal.Vector
	paths    []string // image_path values, in order of first appearance
}

// Raster is what the conversion needs of a raster the truth names: its
// image_path (as the truth names it), the file opened, its size and its
// georeferencing (GeoTransform nil: none).
type Raster struct {
	Path, File    string
	Width, Height int
	CRS           string
	GeoTransform  *[6]float64
}

// Paths are the truth's image_path values, in order of first appearance.
func (t *Truth) Paths() []string { return t.paths }

// Vector is the layer as read (its features, CRS and columns).
func (t *Truth) Vector() *gdal.Vector { return t.vec }

// Read reads the truth file and applies the checks that need
// no raster. imagePath, when not "", is every feature's image_path, as
// read_file's image_path argument assigns it (eval --tile --raster); an
// image_path column that names another is overridden with a warning, as
// read_file warns. Errors wrap dataset.ErrInput (exit 3).
func Read(name, imagePath string) (*Truth, error) {
	return ReadLayer(name, imagePath, false)
}

// ReadLayer is Read; geometries lets Point layers through
// (eval scores them as points, and non-rectangular polygons as polygons).
func ReadLayer(name, imagePath string, geometries bool) (*Truth, error) {
	v, err := gdal.ReadVector(name)
	if err != nil {
		if err == gdal.ErrUnavailable {
			return nil, err
		}
		return nil, fmt.Errorf("jobs: %w: %w", err, dataset.ErrInput)
	}
	bad := func(format string, a ...any) error {
		return fmt.Errorf("jobs: %s: %s: %w", name, fmt.Sprintf(format, a...), dataset.ErrInput)
	}
	t := &Truth{File: name, Driver: v.Driver, Layer: v.Layers[0], Layers: len(v.Layers), Features: len(v.Features), vec: v}
	if len(v.Layers) > 1 {
		t.Warnings = append(t.Warnings, fmt.Sprintf("%s has %d layers (%s): the first, %q, is read, as DeepForest's read_file reads it",
			name, len(v.Layers), strings.Join(quoteAll(v.Layers, 5), ", "), v.Layers[0]))
	}
	if imagePath != "" {
		warned := false
		for i := range v.Features {
			f := &v.Features[i]
			if f.HasImagePath && dataset.TrimPath(f.ImagePath) != imagePath && !warned {
				warned = true
				t.Warnings = append(t.Warnings, fmt.Sprintf("%s names image_path %q (feature %d): --raster overrides it with %q for every feature, as read_file's image_path argument does",
					name, f.ImagePath, f.FID, imagePath))
			}
			f.ImagePath, f.HasImagePath = imagePath, true
		}
		v.ImagePathField = true
	}
	switch {
	case len(v.Features) == 0:
		return nil, bad("layer %q has no features, nothing to score", v.Layers[0])
	case !v.ImagePathField:
		return nil, bad("no image_path column naming the raster of each feature (DeepForest's read_file needs one, or its image_path argument)")
	case !v.LabelField:
		return nil, bad("no label column (DeepForest's read_file needs one, or its label argument)")
	case v.Geographic:
		return nil, bad("its CRS %s is geographic (degrees): DeepForest converts only projected coordinates (metres) to pixels and refuses EPSG:4326; reproject the file to the raster's CRS (ogr2ogr -t_srs)", crsText(v.CRSName, v.CRS))
	}
	seen := map[string]bool{}
	for _, f := range v.Features {
		switch {
		case f.Type != v.Features[0].Type:
			return nil, bad("several geometry types (%s and %s, feature %d): DeepForest's read_file refuses them; give every feature the same type", typeText(v.Features[0].Type), typeText(f.Type), f.FID)
		case !f.HasImagePath || strings.TrimSpace(f.ImagePath) == "":
			return nil, bad("feature %d has no image_path", f.FID)
		case !f.HasLabel:
			return nil, bad("feature %d has no label", f.FID)
		}
		if p := dataset.TrimPath(f.ImagePath); !seen[p] {
			seen[p] = true
			t.paths = append(t.paths, p)
		}
	}
	switch t.Geometry = v.Features[0].Type; t.Geometry {
	case "Polygon", "MultiPolygon":
	case "Point":
		if !geometries {
			return nil, bad("its features are %ss: canopy scores boxes (DeepForest keeps points as keypoints; its convert_point_to_bbox makes boxes of them)", t.Geometry)
		}
	case "MultiPoint":
		return nil, bad("its features are %ss: canopy scores boxes (DeepForest keeps points as keypoints; its convert_point_to_bbox makes boxes of them)", t.Geometry)
	default:
		return nil, bad("its features are %s: canopy takes Polygon or MultiPolygon features, whose bounds are the boxes", typeText(t.Geometry))
	}
	for _, f := range v.Features {
		if f.Empty {
			return nil, bad("feature %d has an empty geometry", f.FID)
		}
		for _, c := range [4]float64{f.MinX, f.MinY, f.MaxX, f.MaxY} {
			if math.IsNaN(c) || math.IsInf(c, 0) {
				return nil, bad("feature %d has a coordinate %v", f.FID, c)
			}
		}
	}
	if v.CRS != "" {
		t.CRS = crsText(v.CRSName, v.CRS)
	}
	return t, nil
}

// CSV converts the features to the rasters' pixels and writes them as the
// truth CSV they equal (image_path,xmin,ymin,xmax,ymax,label, features in
// file order). rasters are the job's, opened from t.paths.
func (t *Truth) CSV(rasters []Raster) ([]byte, error) {
	v := t.vec
	frames, err := t.Frames(rasters)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	w := csv.NewWriter(&b)
	w.Write([]string{"image_path", "xmin", "ymin", "xmax", "ymax", "label"})
	g := func(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }
	for _, f := range v.Features {
		xmin, ymin, xmax, ymax := f.MinX, f.MinY, f.MaxX, f.MaxY
		if frames != nil {
			fr, err := t.FrameOf(frames, f)
			if err != nil {
				return nil, err
			}
			xmin, ymin, xmax, ymax = fr.Box(f.MinX, f.MinY, f.MaxX, f.MaxY)
		}
		w.Write([]string{f.ImagePath, g(xmin), g(ymin), g(xmax), g(ymax), f.Label})
	}
	w.Flush()
	return b.Bytes(), w.Error()
}

// Frames are the rasters' pixel frames by image_path (nil: the file has
// no CRS, its coordinates are pixels), with t.Frame and the CRS warnings
// set.
func (t *Truth) Frames(rasters []Raster) (map[string]gdal.PixelFrame, error) {
	v := t.vec
	if v.CRS == "" {
		t.Frame = "pixels: the file has no CRS, its coordinates are taken as the raster's pixels (as DeepForest's read_file)"
		if v.UndefinedCRS != "" {
			t.Frame = fmt.Sprintf("pixels: the file has no CRS (its GeoPackage CRS is the placeholder %q), its coordinates are taken as the raster's pixels, as for a shapefile without one", v.UndefinedCRS)
		}
		return nil, nil
	}
	t.Frame = "converted: (x - left)/res, (top - y)/res with each raster's rasterio bounds and res[0] (DeepForest's geo_to_image_coordinates)"
	frames := map[string]gdal.PixelFrame{}
	for _, r := range rasters {
		if r.CRS == "" {
			return nil, fmt.Errorf("jobs: %s is in %s but its raster %s has no CRS: its coordinates cannot be converted to pixels (DeepForest's read_file fails there too): %w",
				t.File, t.CRS, r.File, dataset.ErrInput)
		}
		if !gdal.SameCRS(v.CRS, r.CRS) {
			t.Warnings = append(t.Warnings, fmt.Sprintf("the CRS of %s (%s) is not the CRS of raster %s (%s): its coordinates are converted with the raster's bounds and resolution, not reprojected, as DeepForest's read_file does",
				t.File, t.CRS, r.Path, crsText(gdal.CRSName(r.CRS), r.CRS)))
		}
		frames[r.Path] = gdal.FrameOf(r.GeoTransform, r.Width, r.Height)
	}
	return frames, nil
}

// FrameOf is the frame of feature f's raster.
func (t *Truth) FrameOf(frames map[string]gdal.PixelFrame, f gdal.VectorFeature) (gdal.PixelFrame, error) {
	fr, ok := frames[dataset.TrimPath(f.ImagePath)]
	if !ok {
		return fr, fmt.Errorf("jobs: %s: feature %d names image_path %q, no raster of this job: %w", t.File, f.FID, f.ImagePath, dataset.ErrInput)
	}
	return fr, nil
}

// crsText names a CRS by its authority name, else by the start of its WKT.
func crsText(name, wkt string) string {
	if name != "" {
		return name
	}
	if len(wkt) > 80 {
		return strconv.Quote(wkt[:80] + "...")
	}
	return strconv.Quote(wkt)
}

func typeText(t string) string {
	if t == "" {
		return "no geometry"
	}
	return t
}

func quoteAll(s []string, most int) []string {
	var out []string
	for i, x := range s {
		if i == most {
			out = append(out, fmt.Sprintf("and %d more", len(s)-most))
			break
		}
		out = append(out, strconv.Quote(x))
	}
	return out
}
