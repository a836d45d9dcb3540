package jobs

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/canopy-hpc/canopy/infer/gdal"
	"github.com/canopy-hpc/canopy/internal/dataset"
	"github.com/canopy-hpc/canopy/internal/geotruth"
	"github.com/canopy-hpc/canopy/mpi"
	"github.com/canopy-hpc/canopy/mpi/local"
)

// geoTruth writes truth rows (pixel boxes of a raster with geotransform
// gt) as a GeoPackage of box polygons in the CRS crs (WKT), image_path
// naming the raster.
func geoTruth(t *testing.T, path, crs, raster string, gt [6]float64, rows [][]string) {
	t.Helper()
	ly := gdal.Layer{Name: "crowns", CRS: crs}
	for _, r := range rows[1:] {
		var v [4]float64
		for k := range v {
			f, err := strconv.ParseFloat(r[1+k], 64)
			if err != nil {
				t.Fatal(err)
			}
			v[k] = f
		}
		// Pixel edges to coordinates: x = gt0 + col·gt1, y = gt3 + row·gt5
		// (exact here: gt1, gt5 are powers of two and gt0, gt3 integers).
		left, right := gt[0]+v[0]*gt[1], gt[0]+v[2]*gt[1]
		top, bottom := gt[3]+v[1]*gt[5], gt[3]+v[3]*gt[5]
		ring := [5][2]float64{{left, bottom}, {right, bottom}, {right, top}, {left, top}, {left, bottom}}
		ly.Features = append(ly.Features, gdal.Feature{Ring: ring, ImagePath: raster, Label: r[5]})
	}
	if err := gdal.WriteGPKG(path, []gdal.Layer{ly}); err != nil {
		t.Fatal(err)
	}
}

// TestEvalTileVectorTruth: eval --tile with a GeoPackage truth gives the
// bytes of eval --tile with the CSV it equals, at 1 and 3 ranks; a truth
// in another projected CRS is warned about once, recorded, and converted
// without reprojection (the same bytes again); a geographic CRS, a
// truncated GeoPackage, a text file named .shp and a FIFO named .gpkg are
// refused with exit 3 at once; eval without --tile refuses a .gpkg (2).
func TestEvalTileVectorTruth(t *testing.T) {
	gt := [6]float64{404000, 0.25, 0, 3285000, 0, -0.25}
	_, tif := tileRasterFile(t, 640, 560, 11, "-a_srs", "EPSG:32617", "-a_ullr", "404000", "3285000", "404160", "3284860")
	dir := filepath.Dir(tif)
	r, err := gdal.Open(tif)
	if err != nil {
		t.Fatal(err)
	}
	in := r.Info()
	r.Close()
	if in.GeoTransform != gt || in.CRS == "" {
		t.Fatalf("raster georeferencing %v %q", in.GeoTransform, in.CRS)
	}
	// The forest's truth, renamed to the GeoTIFF: the CSV the GeoPackage equals.
	f, err := os.Open(filepath.Join(dir, "annotations.csv"))
	if err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(f).ReadAll()
	f.Close()
	if err != nil || len(rows) < 20 {
		t.Fatalf("annotations: %d rows, %v", len(rows), err)
	}
	var b bytes.Buffer
	w := csv.NewWriter(&b)
	for i, row := range rows {
		if i > 0 {
			row[0] = "raster.tif"
		}
		w.Write(row)
	}
	w.Flush()
	csvTruth := filepath.Join(dir, "truth.csv")
	os.WriteFile(csvTruth, b.Bytes(), 0o644)
	gpkg := filepath.Join(dir, "truth.gpkg")
	geoTruth(t, gpkg, in.CRS, "raster.tif", gt, rows)
	utm18 := filepath.Join(dir, "utm18.gpkg")
	geoTruth(t, utm18, epsgWKT(t, "EPSG:32618"), "raster.tif", gt, rows)
	wgs := filepath.Join(dir, "wgs84.gpkg")
	geoTruth(t, wgs, epsgWKT(t, "EPSG:4326"), "raster.tif", [6]float64{-81.5, 1e-6, 0, 29.6, 0, -1e-6}, rows)

	one := func(c mpi.Comm) func() (mpi.Comm, func() error, error) {
		return func() (mpi.Comm, func() error, error) { return c, func() error { return nil }, nil }
	}
	run := func(n int, truth string, extra ...string) (code int, out, stderr string) {
		out = filepath.Join(t.TempDir(), "out")
		var se bytes.Buffer
		lw := &lockedWriter{w: &se}
		codes := make([]int, n)
		args := append([]string{"canopy", "eval", "--csv", truth, "--html=false", "--out", out}, extra...)
		local.Run(n, func(c mpi.Comm) error {
			codes[c.Rank()] = MainWith(context.Background(), args, &bytes.Buffer{}, lw, one(c))
			return nil
		})
		for r := range codes {
			if codes[r] != codes[0] {
				t.Fatalf("%v: exit codes differ by rank: %v\n%s", args, codes, se.String())
			}
		}
		return codes[0], out, se.String()
	}
	tileArgs := []string{"--tile", "--model", demoModelDir, "--threads", "1", "--patch-size", "300", "--patch-overlap", "0.15"}
	outputs := func(out string) []byte {
		var all []byte
		for _, name := range []string{"predictions.csv", "results.csv"} {
			b, err := os.ReadFile(filepath.Join(out, name))
			if err != nil {
				t.Fatal(err)
			}
			all = append(append(all, name...), b...)
		}
		var rep struct {
			Metrics json.RawMessage
			Tile    struct{ Truth *geotruth.Truth }
		}
		b, _ := os.ReadFile(filepath.Join(out, "report.json"))
		if err := json.Unmarshal(b, &rep); err != nil || len(rep.Metrics) < 10 {
			t.Fatalf("report.json: %v %s", err, b)
		}
		return append(all, rep.Metrics...)
	}
	code, out, se := run(1, csvTruth, tileArgs...)
	if code != 0 {
		t.Fatalf("CSV truth: exit %d\n%s", code, se)
	}
	want := outputs(out)
	if !bytes.Contains(want, []byte("box_recall")) {
		t.Fatalf("no metrics: %s", want)
	}
	for _, n := range []int{1, 3} {
		code, out, se := run(n, gpkg, tileArgs...)
		if code != 0 {
			t.Fatalf("GeoPackage truth, %d ranks: exit %d\n%s", n, code, se)
		}
		if got := outputs(out); !bytes.Equal(got, want) {
			t.Fatalf("GeoPackage truth, %d ranks: outputs differ from the CSV truth's:\n%s\n%s", n, got, want)
		}
		if strings.Contains(se, "warning") {
			t.Fatalf("a warning for a truth in the raster's CRS:\n%s", se)
		}
		var rep struct {
			Tile struct{ Truth *geotruth.Truth }
		}
		b, _ := os.ReadFile(filepath.Join(out, "report.json"))
		json.Unmarshal(b, &rep)
		if tt := rep.Tile.Truth; tt == nil || tt.Driver != "GPKG" || tt.Features != len(rows)-1 || tt.CRS != "EPSG:32617" || len(tt.Warnings) != 0 {
			t.Fatalf("report.json tile.truth: %+v", rep.Tile.Truth)
		}
	}

	// Another projected CRS: warned once, recorded, not reprojected.
	code, out, se = run(1, utm18, tileArgs...)
	if code != 0 {
		t.Fatalf("EPSG:32618 truth: exit %d\n%s", code, se)
	}
	if n := strings.Count(se, "canopy: warning: the CRS of"); n != 1 || !strings.Contains(se, "EPSG:32618") || !strings.Contains(se, "not reprojected") {
		t.Fatalf("%d CRS warnings on stderr:\n%s", n, se)
	}
	var rep struct {
		Tile struct{ Truth *geotruth.Truth }
	}
	rb, _ := os.ReadFile(filepath.Join(out, "report.json"))
	if json.Unmarshal(rb, &rep); rep.Tile.Truth == nil || len(rep.Tile.Truth.Warnings) != 1 || !strings.Contains(rep.Tile.Truth.Warnings[0], "EPSG:32617") {
		t.Fatalf("report.json tile.truth: %+v", rep.Tile.Truth)
	}
	if got := outputs(out); !bytes.Equal(got, want) {
		t.Fatalf("EPSG:32618 truth: outputs differ from the CSV truth's (reprojected?)")
	}

	// --raster: read_file's image_path argument, overriding the column.
	other := filepath.Join(dir, "other.gpkg")
	geoTruth(t, other, in.CRS, "elsewhere.tif", gt, rows)
	code, out, se = run(1, other, append([]string{"--raster", tif}, tileArgs...)...)
	if code != 0 || strings.Count(se, "--raster overrides it") != 1 {
		t.Fatalf("--raster: exit %d\n%s", code, se)
	}
	if got := outputs(out); !bytes.Equal(got, want) {
		t.Fatalf("--raster: outputs differ from the CSV truth's")
	}
	if code, _, se := run(1, csvTruth, append([]string{"--raster", tif}, tileArgs...)...); code != ExitUsage || !strings.Contains(se, "--raster with --tile") {
		t.Errorf("--raster with a CSV truth: exit %d, want %d:\n%s", code, ExitUsage, se)
	}

	// Refused at once.
	data, _ := os.ReadFile(gpkg)
	cut := filepath.Join(dir, "cut.gpkg")
	os.WriteFile(cut, data[:len(data)/3], 0o644)
	text := filepath.Join(dir, "text.shp")
	os.WriteFile(text, []byte("image_path,xmin,ymin,xmax,ymax,label\nraster.tif,1,2,3,4,Tree\n"), 0o644)
	fifo := filepath.Join(dir, "fifo.gpkg")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ file, msg string }{
		{wgs, "geographic"}, {cut, "cut.gpkg"}, {text, "not a shapefile or GeoPackage"}, {fifo, "not a regular file"},
	} {
		t0 := time.Now()
		code, _, se := run(2, c.file, tileArgs...)
		if code != ExitInput || !strings.Contains(se, c.msg) || time.Since(t0) > 20*time.Second {
			t.Errorf("%s: exit %d after %v, want %d saying %q:\n%s", c.file, code, time.Since(t0), ExitInput, c.msg, se)
		}
	}
	if code, _, se := run(1, gpkg, "--model", demoModelDir); code != ExitUsage || !strings.Contains(se, "goes with --tile") {
		t.Errorf("eval without --tile: exit %d, want %d:\n%s", code, ExitUsage, se)
	}
}

// epsgWKT is the WKT of an EPSG code, as gdalsrsinfo writes it.
func epsgWKT(t *testing.T, code string) string {
	t.Helper()
	out, err := exec.Command("gdalsrsinfo", "-o", "wkt1", code).Output()
	if err != nil {
		t.Fatalf("gdalsrsinfo %s: %v", code, err)
	}
	return strings.TrimSpace(string(out))
}

// TestVectorTruthRefused: what the reader refuses (exit 3 in a run), each
// with what it says, and how a real label column is written.
func TestVectorTruthRefused(t *testing.T) {
	if !gdal.Available {
		t.Skip("built with -tags nogdal: no vector reads")
	}
	dir := t.TempDir()
	// ogr2ogr writes a GeoPackage of a CSV with a WKT column.
	gpkg := func(name, csvText string, oo ...string) string {
		t.Helper()
		src, dst := filepath.Join(dir, name+".csv"), filepath.Join(dir, name+".gpkg")
		os.WriteFile(src, []byte(csvText), 0o644)
		args := []string{"-q", "-f", "GPKG", dst, src, "-oo", "GEOM_POSSIBLE_NAMES=WKT", "-oo", "KEEP_GEOM_COLUMNS=NO", "-a_srs", "EPSG:32617"}
		for _, o := range oo {
			args = append(args, "-oo", o)
		}
		if out, err := exec.Command("ogr2ogr", args...).CombinedOutput(); err != nil {
			t.Fatalf("ogr2ogr: %v\n%s", err, out)
		}
		return dst
	}
	const sq = `"POLYGON((0 0,1 0,1 1,0 1,0 0))"`
	cut := filepath.Join(dir, "cut")
	os.MkdirAll(cut, 0o755)
	for _, ext := range []string{"shp", "shx", "dbf", "prj"} {
		b, err := os.ReadFile(filepath.Join("testdata", "readfile", "utm."+ext))
		if err != nil {
			t.Fatal(err)
		}
		if ext == "shp" {
			b = b[:1500]
		}
		os.WriteFile(filepath.Join(cut, "utm."+ext), b, 0o644)
	}
	// A layer that is a recursive view never ends: refused before reading.
	view := gpkg("view", "WKT,image_path,label\n"+sq+",r.tif,Tree\n")
	for _, q := range []string{
		"CREATE VIEW aaa AS WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i+1 FROM n) SELECT n.i AS fid, v.geom AS geom, v.label AS label, v.image_path AS image_path FROM n, view v",
		"DELETE FROM gpkg_geometry_columns", "DELETE FROM gpkg_contents",
		"INSERT INTO gpkg_contents (table_name, data_type, identifier, srs_id) VALUES ('aaa', 'features', 'aaa', 32617)",
		"INSERT INTO gpkg_geometry_columns VALUES ('aaa', 'geom', 'POLYGON', 32617, 0, 0)",
	} {
		if out, err := exec.Command("ogrinfo", "-q", view, "-sql", q).CombinedOutput(); err != nil {
			t.Fatalf("ogrinfo -sql %q: %v\n%s", q, err, out)
		}
	}
	for _, c := range []struct{ file, msg string }{
		{view, `layer "aaa" is an SQLite view`},
		{filepath.Join(cut, "utm.shp"), "truncated or corrupt"},
		{gpkg("nolabel", "WKT,image_path\n"+sq+",r.tif\n"), "no label column"},
		{gpkg("nulllabel", "WKT,image_path,label\n"+sq+",r.tif,\n", "EMPTY_STRING_AS_NULL=YES"), "has no label"},
		{gpkg("longlabel", "WKT,image_path,label\n"+sq+",r.tif,"+strings.Repeat("x", gdal.MaxString+1)+"\n"), "bytes long"},
		{gpkg("empty", "WKT,image_path,label\n"), "no features"},
		{gpkg("line", "WKT,image_path,label\n\"LINESTRING(0 0,1 1)\",r.tif,Tree\n"), "Polygon or MultiPolygon"},
		{filepath.Join(dir, "missing.gpkg"), "no such file"},
	} {
		_, err := geotruth.Read(c.file, "")
		if err == nil || !errors.Is(err, dataset.ErrInput) || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%s: %v, want an input error saying %q", c.file, err, c.msg)
		}
	}
	// A real label column: pandas holds floats, str() writes Python's repr.
	vt, err := geotruth.Read(gpkg("real", "WKT,image_path,label\n"+sq+",r.tif,1\n"+sq+",r.tif,2.5\n"+sq+",r.tif,1e20\n", "AUTODETECT_TYPE=YES"), "")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range vt.Vector().Features {
		got = append(got, f.Label)
	}
	if vt.Vector().LabelType != "Real" || strings.Join(got, " ") != "1.0 2.5 1e+20" {
		t.Fatalf("real labels (%s): %q", vt.Vector().LabelType, got)
	}
}
