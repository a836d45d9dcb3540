package geotruth

import (
	"encoding/csv"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/canopy-hpc/canopy/infer/gdal"
	"github.com/canopy-hpc/canopy/internal/dataset"
)

func TestIsVector(t *testing.T) {
	for name, want := range map[string]bool{"a.shp": true, "b.GPKG": true, "dir.gpkg/c.csv": false, "d.csv": false, "shp": false, "e.shp.csv": false} {
		if got := IsVector(name); got != want {
			t.Errorf("IsVector(%q) = %v, want %v", name, got, want)
		}
	}
}

// TestCSVEachRastersFrame: a layer naming two rasters converts each
// feature with its own raster's frame ((x - left)/res, (top - y)/res), in
// file order; the coordinates and resolutions are multiples of 1/4, so
// every step is exact in float64 and the wanted pixels are written out
// whole. A raster without a CRS, and a feature naming no given raster,
// are input errors.
func TestCSVEachRastersFrame(t *testing.T) {
	if !gdal.Available {
		t.Skip("built with -tags nogdal: no vector reads")
	}
	if _, err := exec.LookPath("ogr2ogr"); err != nil {
		t.Skip("no ogr2ogr to write the GeoPackage")
	}
	dir := t.TempDir()
	src, file := filepath.Join(dir, "t.csv"), filepath.Join(dir, "t.gpkg")
	os.WriteFile(src, []byte("WKT,image_path,label\n"+
		"\"POLYGON((404010 3284990,404020 3284990,404020 3284980,404010 3284980,404010 3284990))\",a.tif,Tree\n"+
		"\"POLYGON((500001 4000000,500002.5 4000000,500002.5 3999998,500001 3999998,500001 4000000))\",b.tif,Snag\n"+
		"\"POLYGON((404000 3285000,404000.25 3285000,404000.25 3284999.75,404000 3284999.75,404000 3285000))\",a.tif,Tree\n"), 0o644)
	if out, err := exec.Command("ogr2ogr", "-q", "-f", "GPKG", file, src, "-oo", "GEOM_POSSIBLE_NAMES=WKT", "-oo", "KEEP_GEOM_COLUMNS=NO", "-a_srs", "EPSG:32617").CombinedOutput(); err != nil {
		t.Fatalf("ogr2ogr: %v\n%s", err, out)
	}
	tr, err := Read(file, "")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(tr.Paths(), " "); got != "a.tif b.tif" {
		t.Fatalf("paths %q, want a.tif b.tif (first appearance)", got)
	}
	crs := tr.Vector().CRS
	a := Raster{Path: "a.tif", File: "a.tif", Width: 1000, Height: 1000, CRS: crs, GeoTransform: &[6]float64{404000, 0.25, 0, 3285000, 0, -0.25}}
	b := Raster{Path: "b.tif", File: "b.tif", Width: 100, Height: 100, CRS: crs, GeoTransform: &[6]float64{500000, 0.5, 0, 4000000, 0, -0.5}}
	data, err := tr.CSV([]Raster{a, b})
	if err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(strings.NewReader(string(data))).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	want := [][]string{
		{"image_path", "xmin", "ymin", "xmax", "ymax", "label"},
		{"a.tif", "40", "40", "80", "80", "Tree"},
		{"b.tif", "2", "-0", "5", "4", "Snag"}, // (y - top)·(-1/res) at y = top is -0, as numpy's
		{"a.tif", "0", "-0", "1", "1", "Tree"},
	}
	if len(rows) != len(want) {
		t.Fatalf("%d rows, want %d:\n%s", len(rows), len(want), data)
	}
	for i := range want {
		if strings.Join(rows[i], ",") != strings.Join(want[i], ",") {
			t.Errorf("row %d: %v, want %v", i, rows[i], want[i])
		}
	}
	if len(tr.Warnings) != 0 || !strings.HasPrefix(tr.Frame, "converted") {
		t.Errorf("warnings %q, frame %q", tr.Warnings, tr.Frame)
	}

	noCRS := b
	noCRS.CRS = ""
	if _, err := tr.CSV([]Raster{a, noCRS}); err == nil || !errors.Is(err, dataset.ErrInput) || !strings.Contains(err.Error(), "has no CRS") {
		t.Errorf("a raster without a CRS: %v, want an input error", err)
	}
	if _, err := tr.CSV([]Raster{a}); err == nil || !errors.Is(err, dataset.ErrInput) || !strings.Contains(err.Error(), `names image_path "b.tif", no raster of this job`) {
		t.Errorf("a feature naming no given raster: %v, want an input error", err)
	}
}

// TestGeometryCSVToPixels: eval's layer truth with a CRS, its images
// opened under root, every vertex converted with its own image's frame
// ((x - left)/res, (top - y)/res): MultiPolygons (one part with a hole,
// two parts) and a Point layer. The coordinates and resolutions are
// multiples of 1/4, so every step is exact in float64 and the wanted
// pixels are written out whole.
func TestGeometryCSVToPixels(t *testing.T) {
	if !gdal.Available {
		t.Skip("built with -tags nogdal: no vector reads")
	}
	for _, tool := range []string{"ogr2ogr", "gdal_create"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s to write the test files", tool)
		}
	}
	dir := t.TempDir()
	for _, r := range []struct{ name, ullr string }{
		{"a.tif", "404000 3285000 404050 3284975"}, // 200×100 pixels of 0.25 m
		{"b.tif", "500000 4000000 500100 3999950"}, // 200×100 pixels of 0.5 m
	} {
		args := append([]string{"-q", "-of", "GTiff", "-outsize", "200", "100", "-bands", "3", "-ot", "Byte", "-a_srs", "EPSG:32617", "-a_ullr"}, strings.Fields(r.ullr)...)
		if out, err := exec.Command("gdal_create", append(args, filepath.Join(dir, r.name))...).CombinedOutput(); err != nil {
			t.Fatalf("gdal_create: %v\n%s", err, out)
		}
	}
	layer := func(name, rows string) string {
		src, file := filepath.Join(dir, name+".csv"), filepath.Join(dir, name+".gpkg")
		if err := os.WriteFile(src, []byte("WKT,image_path,label\n"+rows), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("ogr2ogr", "-q", "-f", "GPKG", file, src, "-oo", "GEOM_POSSIBLE_NAMES=WKT", "-oo", "KEEP_GEOM_COLUMNS=NO", "-a_srs", "EPSG:32617").CombinedOutput(); err != nil {
			t.Fatalf("ogr2ogr: %v\n%s", err, out)
		}
		return file
	}
	for _, c := range []struct{ name, rows, want string }{
		{"polygons",
			"\"MULTIPOLYGON(((404010 3284990,404020 3284990,404020 3284980,404010 3284980,404010 3284990),(404012 3284988,404012 3284986,404014 3284986,404012 3284988)))\",a.tif,Tree\n" +
				"\"MULTIPOLYGON(((500001 3999990,500002.5 3999990,500002.5 3999988,500001 3999990)),((500010 3999980,500011 3999980,500011 3999979,500010 3999980)))\",b.tif,Snag\n",
			"image_path,geometry,label\n" +
				"a.tif,\"MULTIPOLYGON (((40 40, 80 40, 80 80, 40 80, 40 40), (48 48, 48 56, 56 56, 48 48)))\",Tree\n" +
				"b.tif,\"MULTIPOLYGON (((2 20, 5 20, 5 24, 2 20)), ((20 40, 22 40, 22 42, 20 40)))\",Snag\n"},
		{"points",
			"POINT (404010.25 3284990),a.tif,Tree\nPOINT (500001 3999990.5),b.tif,Snag\n",
			"image_path,x,y,label\na.tif,41,40,Tree\nb.tif,2,19,Snag\n"},
	} {
		data, warns, err := GeometryCSV(layer(c.name, c.rows), dir)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if string(data) != c.want || len(warns) != 0 {
			t.Errorf("%s:\n got %q (warnings %q)\nwant %q", c.name, data, warns, c.want)
		}
	}
}
