package jobs

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/canopy-hpc/canopy/mpi"
)

// tileSet writes three small rasters listed by a CSV: one/b.tif (no CRS,
// 2 windows), a.tif (UTM, 6 windows) and two/b.tif (UTM, 4 windows): two
// rasters named b, so the second's outputs are rasters/b-2.*.
func tileSet(t *testing.T) (list string) {
	t.Helper()
	dir := t.TempDir()
	_, small := tileRasterFile(t, 380, 300, 5)
	_, big := tileRasterFile(t, 700, 520, 27, "-a_srs", "EPSG:32617", "-a_ullr", "404211.37", "3285123.91", "404281.37", "3285071.91")
	_, mid := tileRasterFile(t, 500, 400, 9, "-a_srs", "EPSG:32617", "-a_ullr", "404211.37", "3285123.91", "404261.37", "3285083.91")
	for name, src := range map[string]string{"one/b.tif": small, "a.tif": big, "two/b.tif": mid} {
		os.MkdirAll(filepath.Join(dir, filepath.Dir(name)), 0o755)
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dir, name), b, 0o644)
	}
	list = filepath.Join(dir, "rasters.csv")
	os.WriteFile(list, []byte("image_path\none/b.tif\na.tif\ntwo/b.tif\n"), 0o644)
	return list
}

func tileListCfg(out, list string) TileConfig {
	cfg := tileCfg(out, "")
	cfg.Raster, cfg.CSV, cfg.BatchSize = "", list, 1
	return cfg
}

// tileOutputs are the bytes of every output a tile run publishes but
// report.json (which records the ranks): rasters/* and the combined files.
func tileOutputs(t *testing.T, out string) map[string][]byte {
	t.Helper()
	got := map[string][]byte{}
	names, _ := filepath.Glob(filepath.Join(out, rastersDir, "*"))
	for _, n := range append(names, filepath.Join(out, "predictions.csv"), filepath.Join(out, gpkgFile)) {
		b, err := os.ReadFile(n)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(out, n)
		got[rel] = b
	}
	return got
}

func sameOutputs(t *testing.T, what string, got, want map[string][]byte) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d outputs, want %d", what, len(got), len(want))
	}
	for n, b := range want {
		if !bytes.Equal(got[n], b) {
			t.Fatalf("%s: %s differs from the uninterrupted 1-rank run", what, n)
		}
	}
}

func runTileCodes(t *testing.T, n int, cfg TileConfig, interrupt string) ([]int, string) {
	t.Helper()
	var stderr bytes.Buffer
	cfg.Progress = &stderr
	ctxs := make([]context.Context, n)
	cancels := make([]context.CancelFunc, n)
	for r := range ctxs {
		ctxs[r], cancels[r] = context.WithCancel(context.Background())
		defer cancels[r]()
	}
	if interrupt != "" {
		t.Setenv(InterruptEnv, interrupt) // t.Setenv restores it at the test's end,
		defer os.Unsetenv(InterruptEnv)   // this call's end unsets it
		old := interruptSelf
		interruptSelf = func(rank int) { cancels[rank]() }
		defer func() { interruptSelf = old }()
	}
	codes := runLocalJob(t, n, func(r int) context.Context { return ctxs[r] }, &stderr, func(ctx context.Context, c mpi.Comm) error {
		return PredictTile(ctx, c, cfg)
	})
	return codes, stderr.String()
}

// TestTileStopResumeIdentical is issue 34's "done means": a run stopped
// by a signal at 3 ranks and resumed at 2 gives per-raster and combined
// files byte-identical to an uninterrupted 1-rank run; the raster finished
// before the stop is not read again and the saved windows are not detected
// again.
func TestTileStopResumeIdentical(t *testing.T) {
	list := tileSet(t)
	refOut := t.TempDir()
	ref := tileListCfg(refOut, list)
	if codes, msg := runTileCodes(t, 1, ref, ""); codes[0] != 0 {
		t.Fatalf("reference: %v\n%s", codes, msg)
	}
	want := tileOutputs(t, refOut)
	for _, n := range []string{"rasters/b.csv", "rasters/a.csv", "rasters/a.gpkg", "rasters/b-2.csv", "rasters/b-2.gpkg", gpkgFile} {
		if want[n] == nil {
			t.Fatalf("the reference run wrote no %s (%d outputs)", n, len(want))
		}
	}
	if bytes.Count(want["predictions.csv"], []byte("\n")) < 20 {
		t.Fatal("too few rows to test anything")
	}
	// The same bytes for another rank count and round size.
	other := tileListCfg(t.TempDir(), list)
	other.RoundWindows = 5
	if codes, msg := runTileCodes(t, 2, other, ""); codes[0] != 0 {
		t.Fatalf("2 ranks: %v\n%s", codes, msg)
	}
	sameOutputs(t, "2 ranks, rounds of 5", tileOutputs(t, other.Out), want)

	out := t.TempDir()
	cfg := tileListCfg(out, list)
	cfg.RoundWindows = 3 // round 1 completes one/b.tif
	codes, msg := runTileCodes(t, 3, cfg, "1:1")
	for r, code := range codes {
		if code != ExitResumable {
			t.Fatalf("stopped run: rank %d exit %d, want %d\n%s", r, code, ExitResumable, msg)
		}
	}
	if !strings.Contains(msg, "--resume") || strings.Contains(msg, "keeps no part files") {
		t.Fatalf("the stop's message: %s", msg)
	}
	if _, err := os.Stat(filepath.Join(out, "report.json")); err == nil {
		t.Fatal("a stopped run published report.json")
	}
	cfg.Resume, cfg.RoundWindows = true, 0
	if codes, msg := runTileCodes(t, 2, cfg, ""); codes[0] != 0 || codes[1] != 0 {
		t.Fatalf("resume: %v\n%s", codes, msg)
	}
	sameOutputs(t, "stopped at 3 ranks, resumed at 2", tileOutputs(t, out), want)
	var rep struct {
		PerRank []rankStats `json:"per_rank"`
		Tile    struct {
			Windows int
			Resume  *tileResumeInfo
		}
	}
	b, _ := os.ReadFile(filepath.Join(out, "report.json"))
	if err := json.Unmarshal(b, &rep); err != nil || rep.Tile.Resume == nil {
		t.Fatalf("report: %v %s", err, b)
	}
	detected := 0
	for _, s := range rep.PerRank {
		detected += s.Images
	}
	r := rep.Tile.Resume
	if r.RastersFinished != 1 || r.WindowsSaved < 1 || detected != rep.Tile.Windows-2-r.WindowsSaved {
		t.Fatalf("resume %+v: %d windows detected again of %d", *r, detected, rep.Tile.Windows)
	}
}
