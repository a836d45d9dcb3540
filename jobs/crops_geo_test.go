package jobs

import (
	"encoding/csv"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/canopy-hpc/canopy/internal/tilerun"
	"github.com/parquet-go/parquet-go"
)

// cropParquetRow is the part of a GeoParquet row this test reads back.
type cropParquetRow struct {
	ImagePath string   `parquet:"image_path"`
	Label     string   `parquet:"label"`
	Score     float64  `parquet:"score"`
	CropLabel *string  `parquet:"cropmodel_label,optional"`
	CropScore *float64 `parquet:"cropmodel_score,optional"`
}

// ogrCropCells reads the crop cells of every feature of a GeoPackage, in
// order, as ogrinfo prints them.
func ogrCropCells(t *testing.T, gpkg string) (labels []string, scores []float64) {
	t.Helper()
	out, err := exec.Command("ogrinfo", "-q", "-al", gpkg).CombinedOutput()
	if err != nil {
		t.Fatalf("ogrinfo %s: %v\n%s", gpkg, err, out)
	}
	lre := regexp.MustCompile(`(?m)^\s*cropmodel_label \(String\) = (.*)$`)
	sre := regexp.MustCompile(`(?m)^\s*cropmodel_score \(Real\) = (.*)$`)
	for _, m := range lre.FindAllStringSubmatch(string(out), -1) {
		labels = append(labels, m[1])
	}
	for _, m := range sre.FindAllStringSubmatch(string(out), -1) {
		v, err := strconv.ParseFloat(strings.TrimSpace(m[1]), 64)
		if err != nil {
			t.Fatal(err)
		}
		scores = append(scores, v)
	}
	return labels, scores
}

// TestCropColumnsInGeoOutputs (issue 42, item 6): predict --tile with a
// crop model on a georeferenced raster writes cropmodel_label and
// cropmodel_score in the per-raster GeoParquet and GeoPackage and in the
// combined predictions.gpkg, each row's cells those of predictions.csv
// (labels equal, scores equal at float32); they held the detector's
// columns only.
func TestCropColumnsInGeoOutputs(t *testing.T) {
	pf, _ := cropParity(t)
	_, tif := tileRasterFile(t, 380, 300, 4, "-a_srs", "EPSG:32617", "-a_ullr", "404211.37", "3285123.91", "404249.37", "3285093.91")
	ld := filepath.Join(t.TempDir(), "r18.csv")
	os.WriteFile(ld, []byte("label,id\nhealthy,0\nsick,1\n"), 0o644)
	out := filepath.Join(t.TempDir(), "out")
	if code, stderr := runArgs(t, "predict", "--tile", "--raster", tif, "--patch-size", "300", "--patch-overlap", "0.15", "--model", demoModelDir,
		"--threads", "1", "--score-thresh", "0.05", "--crop-model", pf.R18, "--crop-label-dict", ld, "--out", out); code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	f, err := os.Open(filepath.Join(out, "predictions.csv"))
	if err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(f).ReadAll()
	f.Close()
	if err != nil || len(recs) < 3 || len(recs[0]) != 9 || recs[0][7] != "cropmodel_label" || recs[0][8] != "cropmodel_score" {
		t.Fatalf("predictions.csv: %v, %d rows, header %v", err, len(recs), recs[0])
	}
	rows := recs[1:]
	pq, err := parquet.ReadFile[cropParquetRow](filepath.Join(out, tilerun.RastersDir, "raster.parquet"))
	if err != nil {
		t.Fatal(err)
	}
	if len(pq) != len(rows) {
		t.Fatalf("raster.parquet: %d rows, predictions.csv %d", len(pq), len(rows))
	}
	for i, r := range pq {
		if r.CropLabel == nil || r.CropScore == nil || *r.CropLabel != rows[i][7] || strconv.FormatFloat(*r.CropScore, 'g', -1, 32) != strconv.FormatFloat(mustFloat(t, rows[i][8]), 'g', -1, 32) {
			t.Fatalf("raster.parquet row %d: crop cells %v %v, predictions.csv %q %q", i, r.CropLabel, r.CropScore, rows[i][7], rows[i][8])
		}
	}
	// the GeoParquet check against the peers (geopandas, pyarrow), where
	// their venv is installed
	if py := peerPython(); py != "" {
		v, err := exec.Command(py, "../tools/geoparquet/check.py", out).CombinedOutput()
		if err != nil || !strings.Contains(string(v), `"crop_cells_equal": true`) || !strings.Contains(string(v), `"crop_columns_follow_score": true`) {
			t.Errorf("tools/geoparquet/check.py: %v\n%s", err, v)
		}
	} else {
		t.Log("no peers' venv (" + peerVenvPython + "): tools/geoparquet/check.py not run")
	}
	for _, g := range []string{filepath.Join(out, tilerun.RastersDir, "raster.gpkg"), filepath.Join(out, tilerun.GPKGFile)} {
		labels, scores := ogrCropCells(t, g)
		if len(labels) != len(rows) || len(scores) != len(rows) {
			t.Fatalf("%s: %d crop labels and %d scores for %d rows", g, len(labels), len(scores), len(rows))
		}
		for i := range rows {
			if labels[i] != rows[i][7] || float32(scores[i]) != float32(mustFloat(t, rows[i][8])) {
				t.Fatalf("%s feature %d: crop cells %q %v, predictions.csv %q %q", g, i, labels[i], scores[i], rows[i][7], rows[i][8])
			}
		}
	}
}

func mustFloat(t *testing.T, s string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// peerVenvPython is the peers' venv's python (docs: the shared venv).
const peerVenvPython = "/opt/canopy-peers/venv/bin/python"

// peerPython is the peers' python: $PEER_PY, else the shared venv's, when
// it exists ("" otherwise).
func peerPython() string {
	for _, p := range []string{os.Getenv("PEER_PY"), peerVenvPython} {
		if p == "" {
			continue
		}
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return ""
}
