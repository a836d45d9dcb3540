package jobs

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/canopy-hpc/canopy/mpi"
	"github.com/canopy-hpc/canopy/mpi/local"
)

// TestTileConfig: --config and key=value overrides reach predict --tile
// and eval --tile as DeepForest's CLI --mode tile takes them (patch_size,
// patch_overlap, nms_thresh as the merge IoU), flags beat overrides beat
// the file, and report.json records each value with its source. The
// config run's predictions.csv equals, byte for byte, the run given the
// same values as flags.
func TestTileConfig(t *testing.T) {
	pngFile, _ := tileRasterFile(t, 520, 440, 7)
	dir := t.TempDir()
	yaml := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(yaml, []byte("patch_size: 300\npatch_overlap: 0.1\nnms_thresh: 0.3\nlabel_dict: {Tree: 0, Dead: 1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	one := func(c mpi.Comm) func() (mpi.Comm, func() error, error) {
		return func() (mpi.Comm, func() error, error) { return c, func() error { return nil }, nil }
	}
	run := func(args ...string) (string, []byte) {
		out := filepath.Join(t.TempDir(), "out")
		var stderr bytes.Buffer
		lw := &lockedWriter{w: &stderr}
		codes := make([]int, 2)
		local.Run(2, func(c mpi.Comm) error {
			codes[c.Rank()] = MainWith(context.Background(), append(append([]string{"canopy"}, args...), "--out", out), &bytes.Buffer{}, lw, one(c))
			return nil
		})
		for r, code := range codes {
			if code != 0 {
				t.Fatalf("%v: rank %d exit %d\n%s", args, r, code, stderr.String())
			}
		}
		b, err := os.ReadFile(filepath.Join(out, "report.json"))
		if err != nil {
			t.Fatal(err)
		}
		return out, b
	}
	type report struct {
		Tile struct {
			PatchSize    int     `json:"patch_size"`
			PatchOverlap float64 `json:"patch_overlap"`
			IoU          float64 `json:"iou_threshold"`
		}
		Config        string
		Settings      map[string]setting
		ConfigIgnored []string `json:"config_ignored"`
	}
	base := []string{"predict", "--tile", "--raster", pngFile, "--model", demoModelDir, "--threads", "1"}
	cout, cb := run(append(append([]string{}, base...), "--config", yaml, "--patch-size", "250", "patch_overlap=0.2")...)
	var rep report
	if err := json.Unmarshal(cb, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Tile.PatchSize != 250 || rep.Tile.PatchOverlap != 0.2 || rep.Tile.IoU != 0.3 {
		t.Errorf("tile settings %+v, want patch 250 (flag), overlap 0.2 (override), iou 0.3 (config nms_thresh)", rep.Tile)
	}
	want := map[string]setting{"patch_size": {Value: "250", Source: "flag"}, "patch_overlap": {Value: "0.2", Source: "override"},
		"tile_iou": {Value: "0.3", Source: "config"}, "nms_thresh": {Value: "0.3", Source: "config"}, "label_dict": {Value: "label,id\nTree,0\nDead,1\n", Source: "config"}}
	for k, w := range want {
		if rep.Settings[k] != w {
			t.Errorf("settings[%s] = %+v, want %+v (all: %+v)", k, rep.Settings[k], w, rep.Settings)
		}
	}
	if rep.Config != yaml || len(rep.ConfigIgnored) != 0 {
		t.Errorf("config %q, ignored %v; want %q, none (label_dict applies with --tile)", rep.Config, rep.ConfigIgnored, yaml)
	}
	fout, _ := run(append(append([]string{}, base...), "--patch-size", "250", "--patch-overlap", "0.2", "--tile-iou", "0.3", "--nms-thresh", "0.3")...)
	a, _ := os.ReadFile(filepath.Join(cout, "predictions.csv"))
	b, _ := os.ReadFile(filepath.Join(fout, "predictions.csv"))
	if len(a) < 100 || !bytes.Equal(a, b) {
		t.Errorf("predictions.csv with --config differs from the run with the same flags (%d vs %d bytes)", len(a), len(b))
	}

	// eval --tile: the tile IoU flag beats the config; the rest from it.
	truth := filepath.Join(filepath.Dir(pngFile), "annotations.csv")
	_, eb := run("eval", "--tile", "--csv", truth, "--model", demoModelDir, "--threads", "1", "--html=false",
		"--config", yaml, "--tile-iou", "0.4")
	var erep struct {
		Tile struct {
			PatchSize    int     `json:"patch_size"`
			PatchOverlap float64 `json:"patch_overlap"`
			IoU          float64 `json:"iou_threshold"`
		}
		Settings map[string]setting
	}
	if err := json.Unmarshal(eb, &erep); err != nil {
		t.Fatal(err)
	}
	if erep.Tile.PatchSize != 300 || erep.Tile.PatchOverlap != 0.1 || erep.Tile.IoU != 0.4 {
		t.Errorf("eval --tile settings %+v, want 300, 0.1 (config), 0.4 (flag)", erep.Tile)
	}
	for k, w := range map[string]setting{"patch_size": {Value: "300", Source: "config"}, "patch_overlap": {Value: "0.1", Source: "config"}, "tile_iou": {Value: "0.4", Source: "flag"},
		"label_dict": {Value: "label,id\nTree,0\nDead,1\n", Source: "config"}} {
		if erep.Settings[k] != w {
			t.Errorf("eval settings[%s] = %+v, want %+v", k, erep.Settings[k], w)
		}
	}
}
