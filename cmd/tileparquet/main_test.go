package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/canopy-hpc/canopy/infer/gdal"
)

const (
	fixture  = "../../tools/geoparquet/testdata"
	peerPy   = "/opt/canopy-peers/venv/bin/python"
	rasters  = "../../../shared/data/deepforest"
	checkPy  = "../../tools/geoparquet/check.py"
	runFiles = "run"
)

type verdict struct {
	OK    bool             `json:"ok"`
	Files []map[string]any `json:"files"`
}

func readVerdict(t *testing.T, b []byte) verdict {
	t.Helper()
	var v verdict
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("verdict: %v\n%s", err, b)
	}
	return v
}

// TestCheckVerdict writes the .parquet files of the committed predict
// --tile run (tools/geoparquet/testdata/run, make golden-geoparquet) and
// compares them with the verdict geopandas and DeepForest gave on them:
// the same bytes (sha256), so the verdict holds for what canopy writes
// now. With the peers' venv and DeepForest's sample rasters it reruns
// tools/geoparquet/check.py on the new files, which must pass and give
// the committed verdict.
func TestCheckVerdict(t *testing.T) {
	if !gdal.Available {
		t.Skip("built with -tags nogdal: no PROJJSON without GDAL")
	}
	want := readVerdict(t, must(os.ReadFile(filepath.Join(fixture, "verdict.json"))))
	if !want.OK || len(want.Files) != 2 {
		t.Fatalf("the committed verdict is not a pass on two files: %+v", want)
	}
	out := t.TempDir()
	for _, f := range []string{"predictions.csv", "report.json"} {
		if err := os.WriteFile(filepath.Join(out, f), must(os.ReadFile(filepath.Join(fixture, runFiles, f))), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := run(out); err != nil {
		t.Fatal(err)
	}
	for _, f := range want.Files {
		b := must(os.ReadFile(filepath.Join(out, "rasters", f["file"].(string))))
		sum := sha256.Sum256(b)
		if got := hex.EncodeToString(sum[:]); got != f["sha256"] {
			t.Errorf("%s: sha256 %s, the checked file's %s", f["file"], got, f["sha256"])
		}
	}
	if err := run(out); err == nil {
		t.Error("a second run overwrote the .parquet files")
	}
	if _, err := os.Stat(peerPy); err != nil {
		t.Skipf("the peers' venv (%s) is not installed: the bytes are checked, geopandas is not run", peerPy)
	}
	if _, err := os.Stat(filepath.Join(rasters, "OSBS_029.tif")); err != nil {
		t.Skipf("DeepForest's sample rasters (%s) are absent: the bytes are checked, geopandas is not run", rasters)
	}
	cmd := exec.Command(peerPy, checkPy, out, "--rasters", rasters)
	cmd.Stderr = os.Stderr
	b, err := cmd.Output()
	got := readVerdict(t, b)
	if err != nil || !got.OK {
		t.Fatalf("check.py: %v\n%s", err, b)
	}
	if !reflect.DeepEqual(got.Files, want.Files) {
		t.Errorf("check.py's verdict differs from the committed one:\n%s", b)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
