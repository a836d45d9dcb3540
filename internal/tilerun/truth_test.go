package tilerun

import (
	"encoding/json"
	"errors"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/canopy-hpc/canopy/infer/gdal"
	"github.com/canopy-hpc/canopy/infer/tile"
	"github.com/canopy-hpc/canopy/internal/dataset"
	"github.com/canopy-hpc/canopy/internal/geotruth"
)

// readfileFixture is tools/tile/readfile.py's record of what DeepForest's
// read_file made of each vector file in testdata/readfile.
type readfileFixture struct {
	Peer  map[string]string `json:"peer"`
	Cases map[string]struct {
		Note       string  `json:"note"`
		Error      string  `json:"error"`
		Message    string  `json:"message"`
		Rows       [][]any `json:"rows"`
		Warnings   []string
		LabelDtype string `json:"label_dtype"`
	} `json:"cases"`
}

// vectorTruthRows is rank 0's reading of a vector truth: the rows every
// rank then parses, and the record.
func vectorTruthRows(t *testing.T, file, raster string) ([]dataset.Row, *geotruth.Truth, error) {
	t.Helper()
	override := ""
	if raster != "" {
		override = filepath.Base(raster)
	}
	vt, err := geotruth.Read(file, override)
	if err != nil {
		return nil, nil, err
	}
	rasters, _, err := openRasters(Config{CSV: file, Raster: raster, Eval: &EvalConfig{}, vector: vt, Settings: tile.Settings{Patch: 400, Overlap: 0.05}})
	if err != nil {
		return nil, nil, err
	}
	data, err := vt.CSV(truthRasters(rasters))
	if err != nil {
		return nil, nil, err
	}
	tr, err := dataset.ParseTruth(file, data)
	if err != nil {
		t.Fatalf("%s: the converted CSV does not parse: %v\n%s", file, err, data)
	}
	var rows []dataset.Row
	for _, im := range tr.Images {
		rows = append(rows, im.Rows...)
	}
	// Back to file order (ParseTruth groups rows by image).
	byLine := make([]dataset.Row, len(rows))
	for _, r := range rows {
		byLine[r.Line-2] = r
	}
	return byLine, vt, nil
}

// TestVectorTruthDeepForest reads the shapefiles and GeoPackages that
// tools/tile/readfile.py wrote and gave to DeepForest's read_file, and
// compares every box exactly (float64 equality: both sides do the same
// IEEE operations on the same stored coordinates) and every refusal.
func TestVectorTruthDeepForest(t *testing.T) {
	if !gdal.Available {
		t.Skip("built with -tags nogdal: no vector reads")
	}
	dir := filepath.Join("..", "..", "jobs", "testdata", "readfile")
	b, err := os.ReadFile(filepath.Join(dir, "expected.json"))
	if err != nil {
		t.Fatal(err)
	}
	var fx readfileFixture
	if err := json.Unmarshal(b, &fx); err != nil {
		t.Fatal(err)
	}
	if len(fx.Cases) < 15 {
		t.Fatalf("%d cases in the fixture", len(fx.Cases))
	}
	// canopy refuses these although read_file takes them (see tiletruth.go).
	canopyRefuses := map[string]string{"points.shp": "canopy scores boxes"}
	boxes := 0
	for name, c := range fx.Cases {
		t.Run(name, func(t *testing.T) {
			file, raster, _ := strings.Cut(name, "+") // "+R": read_file's image_path argument R (--raster)
			if raster != "" {
				raster = filepath.Join(dir, raster)
			}
			rows, vt, err := vectorTruthRows(t, filepath.Join(dir, file), raster)
			if c.Error != "" || canopyRefuses[name] != "" {
				if err == nil || !errors.Is(err, dataset.ErrInput) {
					t.Fatalf("read_file raised %s (%s); canopy: %v, want an input error", c.Error, c.Message, err)
				}
				if w := canopyRefuses[name]; w != "" && !strings.Contains(err.Error(), w) {
					t.Fatalf("error %q does not say %q", err, w)
				}
				t.Logf("refused as read_file (%s): %v", c.Error, err)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(rows) != len(c.Rows) {
				t.Fatalf("%d rows, read_file %d", len(rows), len(c.Rows))
			}
			for i, want := range c.Rows {
				r := rows[i]
				got := []any{r.Path, r.Box.Xmin, r.Box.Ymin, r.Box.Xmax, r.Box.Ymax, r.Label}
				for k, w := range []any{want[0], want[2], want[3], want[4], want[5], want[6]} {
					if f, ok := w.(float64); ok {
						g := got[k].(float64)
						if !(g == f) || math.IsNaN(g) {
							t.Errorf("row %d column %d: %v, read_file %v (differs by %g)", i, k, g, f, g-f)
						}
					} else if got[k] != w {
						t.Errorf("row %d column %d: %v, read_file %v", i, k, got[k], w)
					}
				}
				boxes++
			}
			// A warning where read_file warns of the CRS or of layers.
			for _, topic := range []string{"does not match", "More than one layer", "overriding"} {
				df := false
				for _, w := range c.Warnings {
					df = df || strings.Contains(w, topic)
				}
				canopy := false
				for _, w := range vt.Warnings {
					canopy = canopy || strings.Contains(w, map[string]string{"does not match": "is not the CRS", "More than one layer": "layers", "overriding": "overrides"}[topic])
				}
				if df != canopy {
					t.Errorf("read_file warns %q: %v; canopy's warnings: %q", topic, df, vt.Warnings)
				}
			}
		})
	}
	t.Logf("%d boxes equal to read_file's (DeepForest %s)", boxes, fx.Peer["deepforest"])
}

// BenchmarkVectorTruth is what canopy does with a shapefile or GeoPackage
// truth before detection: rank 0 reads it, opens its rasters and
// converts it (readVectorTruth, openRasters, csv), and a rank parses the
// CSV it becomes. CANOPY_BENCH_TRUTH names the file (tools/tile/readfile.py
// bench-write makes one; docs/benchmarks.md).
func BenchmarkVectorTruth(b *testing.B) {
	file := os.Getenv("CANOPY_BENCH_TRUTH")
	if file == "" || !gdal.Available {
		b.Skip("CANOPY_BENCH_TRUTH names no file (or no GDAL)")
	}
	for i := 0; i < b.N; i++ {
		vt, err := geotruth.Read(file, "")
		if err != nil {
			b.Fatal(err)
		}
		rasters, _, err := openRasters(Config{CSV: file, Eval: &EvalConfig{}, vector: vt, Settings: tile.Settings{Patch: 400, Overlap: 0.05}})
		if err != nil {
			b.Fatal(err)
		}
		data, err := vt.CSV(truthRasters(rasters))
		if err != nil {
			b.Fatal(err)
		}
		if _, err := dataset.ParseTruth(file, data); err != nil {
			b.Fatal(err)
		}
	}
}

// TestGeoPackageWithoutCRS (issue 35, item 11): a GeoPackage written
// without a CRS carries GDAL's placeholder (srs_id 0, "Undefined
// geographic SRS"; -1 "Undefined Cartesian SRS"), which is no CRS: its
// coordinates are the raster's pixels, as for a shapefile without a .prj,
// even beside a raster with a CRS (it was refused as geographic, exit 3).
func TestGeoPackageWithoutCRS(t *testing.T) {
	if !gdal.Available {
		t.Skip("built with -tags nogdal: no vector reads")
	}
	dir := t.TempDir()
	ras, err := os.ReadFile(filepath.Join("..", "..", "jobs", "testdata", "readfile", "merc.tif")) // a raster with a CRS
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "merc.tif"), ras, 0o644)
	src := filepath.Join(dir, "b.csv")
	os.WriteFile(src, []byte("WKT,image_path,label\n\"POLYGON ((1 2, 30 2, 30 40, 1 40, 1 2))\",merc.tif,Tree\n\"POLYGON ((5 6, 9 6, 9 8, 5 8, 5 6))\",merc.tif,Tree\n"), 0o644)
	for _, srs := range []string{"0", "-1"} {
		dst := filepath.Join(dir, "srs"+srs+".gpkg")
		if out, err := exec.Command("ogr2ogr", "-q", "-f", "GPKG", dst, src, "-oo", "GEOM_POSSIBLE_NAMES=WKT", "-oo", "KEEP_GEOM_COLUMNS=NO", "-nln", "b").CombinedOutput(); err != nil {
			t.Fatalf("ogr2ogr: %v\n%s", err, out)
		}
		if srs != "0" {
			for _, q := range []string{"UPDATE gpkg_geometry_columns SET srs_id = " + srs, "UPDATE gpkg_contents SET srs_id = " + srs} {
				if out, err := exec.Command("ogrinfo", "-q", dst, "-sql", q).CombinedOutput(); err != nil {
					t.Fatalf("ogrinfo %s: %v\n%s", q, err, out)
				}
			}
		}
		v, err := gdal.ReadVector(dst)
		if err != nil {
			t.Fatal(err)
		}
		if v.CRS != "" || v.UndefinedCRS == "" {
			t.Fatalf("srs_id %s: CRS %q, placeholder %q", srs, v.CRSName, v.UndefinedCRS)
		}
		rows, vt, err := vectorTruthRows(t, dst, "")
		if err != nil {
			t.Fatalf("srs_id %s: %v", srs, err)
		}
		if len(rows) != 2 || rows[0].Box.Xmin != 1 || rows[0].Box.Ymin != 2 || rows[0].Box.Xmax != 30 || rows[0].Box.Ymax != 40 || rows[1].Box.Xmax != 9 {
			t.Errorf("srs_id %s: rows %+v, want the file's coordinates as pixels", srs, rows)
		}
		if !strings.Contains(vt.Frame, "pixels: the file has no CRS") || !strings.Contains(vt.Frame, v.UndefinedCRS) || vt.CRS != "" {
			t.Errorf("srs_id %s: frame %q, CRS %q", srs, vt.Frame, vt.CRS)
		}
	}
}
