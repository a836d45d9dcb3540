//go:build !nogdal

package gdal

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestVectorRowsAsReadFile: ReadVector and PixelFrame.Box give, for every
// vector file DeepForest's read_file read into rows
// (jobs/testdata/readfile/expected.json, tools/tile/readfile.py), its rows'
// coordinates exactly: a file with a CRS converted with its raster's
// rasterio bounds and res[0], one without taken as pixels; the label as
// str() gives it. (jobs.TestVectorTruthDeepForest checks the job's rules
// on the same files; this test holds the reader to them in its own
// package, for its mutation runs.)
func TestVectorRowsAsReadFile(t *testing.T) {
	dir := filepath.Join("..", "..", "jobs", "testdata", "readfile")
	b, err := os.ReadFile(filepath.Join(dir, "expected.json"))
	if err != nil {
		t.Fatal(err)
	}
	var fx struct {
		Cases map[string]struct {
			Rows [][]any `json:"rows"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(b, &fx); err != nil {
		t.Fatal(err)
	}
	compared := 0
	for name, c := range fx.Cases {
		if len(c.Rows) == 0 || strings.Contains(name, "+") {
			continue // refused, or read with read_file's image_path argument
		}
		v, err := ReadVector(filepath.Join(dir, name))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if len(v.Features) != len(c.Rows) {
			t.Errorf("%s: %d features, read_file %d rows", name, len(v.Features), len(c.Rows))
			continue
		}
		for i, f := range v.Features {
			want := c.Rows[i]
			x0, y0, x1, y1 := f.MinX, f.MinY, f.MaxX, f.MaxY
			if v.CRS != "" {
				r, err := Open(filepath.Join(dir, want[0].(string)))
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				in := r.Info()
				r.Close()
				var gt *[6]float64
				if in.HasTransform {
					gt = &in.GeoTransform
				}
				x0, y0, x1, y1 = FrameOf(gt, in.Width, in.Height).Box(f.MinX, f.MinY, f.MaxX, f.MaxY)
			}
			label := f.Label
			if v.LabelType == "Real" {
				label = PyFloat(mustFloat(t, f.Label))
			}
			for k, g := range []float64{x0, y0, x1, y1} {
				if w := want[2+k].(float64); !(g == w) {
					t.Errorf("%s row %d column %d: %v, read_file %v", name, i, k, g, w)
				}
			}
			if w, ok := want[6].(string); ok && label != w && v.LabelType != "Real" {
				t.Errorf("%s row %d: label %q, read_file %q", name, i, label, w)
			}
			if f.ImagePath != want[0].(string) {
				t.Errorf("%s row %d: image_path %q, read_file %q", name, i, f.ImagePath, want[0])
			}
			compared++
		}
	}
	if compared < 20 {
		t.Fatalf("%d rows compared", compared)
	}
}

func mustFloat(t *testing.T, s string) float64 {
	t.Helper()
	var f float64
	if _, err := fmt.Sscan(s, &f); err != nil {
		t.Fatalf("label %q: %v", s, err)
	}
	return f
}

// TestFrameOfRotated: rasterio's bounds of a rotated transform are the
// extremes of its four corners, res[0] the length of its first column.
func TestFrameOfRotated(t *testing.T) {
	// Affine(a=2, b=-1, c=100, d=0.5, e=-3, f=200) on 10x20: corners
	// (100,200), (80,140), (100,145), (120,205).
	p := FrameOf(&[6]float64{100, 2, -1, 200, 0.5, -3}, 10, 20)
	if p.Left != 80 || p.Top != 205 || p.Res != math.Sqrt(4.25) {
		t.Fatalf("%+v", p)
	}
	// the same with the other corners extreme: (100,200) (120,260) (140,265) (120,205)
	p = FrameOf(&[6]float64{100, 2, 1, 200, 0.5, 3}, 10, 20)
	if p.Left != 100 || p.Top != 265 {
		t.Fatalf("%+v", p)
	}
	if p := FrameOf(nil, 5, 5); p != (PixelFrame{Left: 0, Top: 0, Res: 1}) {
		t.Fatalf("no transform: %+v", p)
	}
	x0, y0, x1, y1 := PixelFrame{Left: 10, Top: 50, Res: 0.5}.Box(11, 40, 13, 45)
	if x0 != 2 || y0 != 10 || x1 != 6 || y1 != 20 {
		t.Fatalf("box %v %v %v %v", x0, y0, x1, y1)
	}
}

// TestPyFloat: Python's repr of a float.
func TestPyFloat(t *testing.T) {
	for f, want := range map[float64]string{1: "1.0", 2.5: "2.5", -3: "-3.0", 1e16: "1e+16", 9999999999999998: "9999999999999998.0",
		1e-5: "1e-05", 0.0001: "0.0001", 0: "0.0", math.Inf(1): "inf", math.Inf(-1): "-inf", -1e-7: "-1e-07", 123456.5: "123456.5"} {
		if got := PyFloat(f); got != want {
			t.Errorf("PyFloat(%v) = %q, want %q", f, got, want)
		}
	}
	if PyFloat(math.NaN()) != "nan" || PyFloat(math.Copysign(0, -1)) != "-0.0" {
		t.Error("nan or -0")
	}
}

// TestReadVectorRefuses: a missing file, a folder, a FIFO and a text file
// named .shp are refused as ErrVector, at once.
func TestReadVectorRefuses(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "f.gpkg")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	txt := filepath.Join(dir, "t.shp")
	os.WriteFile(txt, []byte("not a shapefile"), 0o644)
	for p, want := range map[string]string{filepath.Join(dir, "missing.shp"): "no such file", dir: "not a regular file", fifo: "not a regular file", txt: "not a shapefile or GeoPackage"} {
		if _, err := ReadVector(p); err == nil || !errors.Is(err, ErrVector) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", p, err, want)
		}
	}
}

// TestVectorTypesColumnsCRS: the shapely geometry type of each feature (""
// for one without geometry), the columns found, and the CRS helpers
// (SameCRS, CRSName) on DeepForest's fixture files. (Mutation survivors of
// vecread.go, issue 35.)
func TestVectorTypesColumnsCRS(t *testing.T) {
	dir := filepath.Join("..", "..", "jobs", "testdata", "readfile")
	read := func(name string) *Vector {
		t.Helper()
		v, err := ReadVector(filepath.Join(dir, name))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return v
	}
	types := func(v *Vector) map[string]int {
		m := map[string]int{}
		for _, f := range v.Features {
			m[f.Type]++
		}
		return m
	}
	if m := types(read("points.shp")); m["Point"] == 0 || len(m) != 1 {
		t.Errorf("points.shp: %v", m)
	}
	if m := types(read("mixed.shp")); m["Polygon"] == 0 || m["MultiPolygon"] == 0 || len(m) != 2 {
		t.Errorf("mixed.shp: %v", m)
	}
	utm, merc := read("utm.shp"), read("merc.shp")
	if m := types(utm); m["Polygon"] != len(utm.Features) {
		t.Errorf("utm.shp: %v", m)
	}
	if v := read("no_image_path.shp"); v.ImagePathField || !v.LabelField {
		t.Errorf("no_image_path.shp: image_path %v, label %v", v.ImagePathField, v.LabelField)
	}
	if !utm.LabelField || !utm.ImagePathField || utm.LabelType != "String" {
		t.Errorf("utm.shp: columns %v %v %q", utm.LabelField, utm.ImagePathField, utm.LabelType)
	}
	if !SameCRS(utm.CRS, read("utm.gpkg").CRS) || SameCRS(utm.CRS, merc.CRS) {
		t.Error("SameCRS")
	}
	if CRSName(utm.CRS) != utm.CRSName || !strings.HasPrefix(utm.CRSName, "EPSG:") || CRSName(merc.CRS) == utm.CRSName {
		t.Errorf("CRSName %q %q", CRSName(utm.CRS), CRSName(merc.CRS))
	}
	if n := CRSName(`LOCAL_CS["nowhere",UNIT["metre",1]]`); n != "" {
		t.Errorf("a CRS without authority: %q", n)
	}
	// A feature without geometry has no type.
	tmp := t.TempDir()
	src, dst := filepath.Join(tmp, "g.csv"), filepath.Join(tmp, "g.gpkg")
	os.WriteFile(src, []byte("WKT,image_path,label\n\"POLYGON ((0 0, 1 0, 1 1, 0 0))\",r.tif,Tree\n,r.tif,Tree\n"), 0o644)
	if out, err := exec.Command("ogr2ogr", "-q", "-f", "GPKG", dst, src, "-oo", "GEOM_POSSIBLE_NAMES=WKT", "-oo", "KEEP_GEOM_COLUMNS=NO").CombinedOutput(); err != nil {
		t.Fatalf("ogr2ogr: %v\n%s", err, out)
	}
	v, err := ReadVector(dst)
	if err != nil || len(v.Features) != 2 || v.Features[0].Type != "Polygon" || v.Features[1].Type != "" {
		t.Fatalf("%+v %v", v, err)
	}
}
