package jobs

import (
	"bytes"
	"context"
	"encoding/json"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/canopy-hpc/canopy/infer/gdal"
	"github.com/canopy-hpc/canopy/internal/collective"
	"github.com/canopy-hpc/canopy/internal/dataset"
	"github.com/canopy-hpc/canopy/internal/outdir"
	"github.com/canopy-hpc/canopy/internal/output"
	"github.com/canopy-hpc/canopy/internal/parts"
	"github.com/canopy-hpc/canopy/internal/pipeline/predict"
	"github.com/canopy-hpc/canopy/internal/testhook"
	"github.com/canopy-hpc/canopy/internal/tilerun"
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

func tileListCfg(out, list string) tilerun.Config {
	cfg := tileCfg(out, "")
	cfg.Raster, cfg.CSV, cfg.BatchSize = "", list, 1
	return cfg
}

// tileOutputs are the bytes of every output a tile run publishes but
// report.json (which records the ranks): rasters/* and the combined files.
func tileOutputs(t *testing.T, out string) map[string][]byte {
	t.Helper()
	got := map[string][]byte{}
	names, _ := filepath.Glob(filepath.Join(out, tilerun.RastersDir, "*"))
	if _, err := os.Stat(filepath.Join(out, tilerun.GPKGFile)); err == nil { // rasters with a CRS
		names = append(names, filepath.Join(out, tilerun.GPKGFile))
	}
	for _, n := range append(names, filepath.Join(out, "predictions.csv")) {
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

func runTileCodes(t *testing.T, n int, cfg tilerun.Config, interrupt string) ([]int, string) {
	t.Helper()
	return runStoppable(t, n, interrupt, func(ctx context.Context, c mpi.Comm, stderr io.Writer) error {
		cfg := cfg
		cfg.Progress = stderr
		return tilerun.Run(ctx, c, cfg)
	})
}

// runStoppable runs job on n in-process ranks; interrupt is testhook.InterruptEnv's
// value ("" none), whose signal cancels that rank's context. It returns
// every rank's exit code and what the job wrote to stderr (job's writer).
func runStoppable(t *testing.T, n int, interrupt string, job func(ctx context.Context, c mpi.Comm, stderr io.Writer) error) ([]int, string) {
	t.Helper()
	var stderr bytes.Buffer
	ctxs := make([]context.Context, n)
	cancels := make([]context.CancelFunc, n)
	for r := range ctxs {
		ctxs[r], cancels[r] = context.WithCancel(context.Background())
		defer cancels[r]()
	}
	if interrupt != "" {
		t.Setenv(testhook.InterruptEnv, interrupt) // t.Setenv restores it at the test's end,
		defer os.Unsetenv(testhook.InterruptEnv)   // this call's end unsets it
		old := testhook.InterruptSelf
		testhook.InterruptSelf = func(rank int) { cancels[rank]() }
		defer func() { testhook.InterruptSelf = old }()
	}
	codes := runLocalJob(t, n, func(r int) context.Context { return ctxs[r] }, &stderr, func(ctx context.Context, c mpi.Comm) error {
		return job(ctx, c, &stderr)
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
	for _, n := range []string{"rasters/b.csv", "rasters/a.csv", "rasters/a.gpkg", "rasters/b-2.csv", "rasters/b-2.gpkg", tilerun.GPKGFile} {
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
	if code, msg := outState(out); code != ExitResumable || !strings.Contains(msg, "1 of 3 rasters published") || !strings.Contains(msg, "predict --tile --resume") {
		t.Fatalf("doctor on the stopped run: %d %q", code, msg)
	}
	stopped := t.TempDir()
	copyTree(t, out, stopped)
	cfg.Resume, cfg.RoundWindows = true, 0
	if codes, msg := runTileCodes(t, 2, cfg, ""); codes[0] != 0 || codes[1] != 0 {
		t.Fatalf("resume: %v\n%s", codes, msg)
	}
	sameOutputs(t, "stopped at 3 ranks, resumed at 2", tileOutputs(t, out), want)
	var rep struct {
		PerRank []collective.RankStats `json:"per_rank"`
		Tile    struct {
			Windows int
			Resume  *struct {
				RastersFinished int `json:"rasters_finished_before"`
				WindowsSaved    int `json:"windows_from_parts"`
			}
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

// resumeCopy resumes a copy of the stopped run in stopped with change
// applied to its config, on one rank.
func resumeCopy(t *testing.T, stopped, list string, change func(*tilerun.Config)) (tilerun.Config, int, string) {
	t.Helper()
	cfg := tileListCfg(t.TempDir(), list)
	copyTree(t, stopped, cfg.Out)
	cfg.Resume = true
	change(&cfg)
	codes, msg := runTileCodes(t, 1, cfg, "")
	return cfg, codes[0], msg
}

// TestTileResumeBadInput: issue 34's bad inputs at a resume — a raster
// that changed, other settings (patch size, merge IoU, model threshold),
// a published raster file removed by hand, and a disk that fills while a
// raster's outputs are written.
func TestTileResumeBadInput(t *testing.T) {
	list := tileSet(t)
	ref := tileListCfg(t.TempDir(), list)
	if codes, msg := runTileCodes(t, 1, ref, ""); codes[0] != 0 {
		t.Fatalf("reference: %v\n%s", codes, msg)
	}
	want := tileOutputs(t, ref.Out)
	stopped := t.TempDir()
	cfg := tileListCfg(stopped, list)
	cfg.RoundWindows = 3
	if codes, msg := runTileCodes(t, 1, cfg, "0:4"); codes[0] != ExitResumable {
		t.Fatalf("stop: %v\n%s", codes, msg)
	}
	if _, err := os.Stat(filepath.Join(stopped, tilerun.RastersDir, "b.csv")); err != nil {
		t.Fatalf("one/b.tif is not published before the stop: %v", err)
	}

	// Other settings: refused, naming the difference.
	for _, c := range []struct {
		name   string
		change func(*tilerun.Config)
	}{
		{"patch_size", func(c *tilerun.Config) { c.Settings.Patch = 301 }},
		{"tile_iou", func(c *tilerun.Config) { c.IoU = 0.3 }},
		{"score_thresh_flag", func(c *tilerun.Config) { c.Model.ScoreThresh = 0.5 }},
	} {
		if _, code, msg := resumeCopy(t, stopped, list, c.change); code != ExitUsage || !strings.Contains(msg, c.name) {
			t.Fatalf("%s changed: exit %d, want %d naming it:\n%s", c.name, code, ExitUsage, msg)
		}
	}

	// A published raster's CSV removed by hand: made again from the saved
	// windows, not detected again; the outputs as uninterrupted.
	cfg, code, msg := resumeCopy(t, stopped, list, func(c *tilerun.Config) {
		os.Remove(filepath.Join(c.Out, tilerun.RastersDir, "b.csv"))
	})
	if code != 0 || !strings.Contains(msg, "rasters/b.csv is missing") {
		t.Fatalf("b.csv removed: exit %d\n%s", code, msg)
	}
	sameOutputs(t, "b.csv removed, resumed", tileOutputs(t, cfg.Out), want)

	// A full disk while a raster's outputs are written: exit 1, none of
	// that raster's files published; a resume finishes the same.
	full := tileListCfg(t.TempDir(), list)
	restore := tilerun.FaultRasterForTest("a.csv", syscall.ENOSPC)
	codes, msg := runTileCodes(t, 1, full, "")
	restore()
	if codes[0] != ExitInternal || !strings.Contains(msg, "no space left") {
		t.Fatalf("full disk: exit %v\n%s", codes, msg)
	}
	if m, _ := filepath.Glob(filepath.Join(full.Out, tilerun.RastersDir, "a.*")); len(m) != 0 {
		t.Fatalf("a full disk published %v", m)
	}
	full.Resume = true
	if codes, msg := runTileCodes(t, 1, full, ""); codes[0] != 0 {
		t.Fatalf("resume after the full disk: %v\n%s", codes, msg)
	}
	sameOutputs(t, "full disk, resumed", tileOutputs(t, full.Out), want)

	// A raster that changed since the run: refused, naming it.
	a := filepath.Join(filepath.Dir(list), "a.tif")
	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(a, later, later); err != nil {
		t.Fatal(err)
	}
	if _, code, msg := resumeCopy(t, stopped, list, func(*tilerun.Config) {}); code != ExitUsage || !strings.Contains(msg, `"a.tif" changed`) {
		t.Fatalf("a.tif touched: exit %d, want %d naming it:\n%s", code, ExitUsage, msg)
	}
}

// TestTileLazyWindows is issue 35.3's case: a 7400×7400 sparse GeoTIFF at
// --patch-overlap 0.999 cuts 49,014,001 windows, which the list of old cost
// about 13 GB on every rank (a Go runtime fatal, exit 2). The windows are
// now arithmetic: the job starts at once, and a rank memory too small for
// it is a clear exit 3 naming the raster, its windows and the need.
func TestTileLazyWindows(t *testing.T) {
	if !gdal.Available {
		t.Skip("built with -tags nogdal")
	}
	tif := filepath.Join(t.TempDir(), "sparse.tif")
	if out, err := exec.Command("gdal_create", "-q", "-outsize", "7400", "7400", "-bands", "3", "-ot", "Byte", "-co", "SPARSE_OK=TRUE", "-co", "TILED=YES", tif).CombinedOutput(); err != nil {
		t.Fatalf("gdal_create: %v\n%s", err, out)
	}
	cfg := tileCfg(t.TempDir(), tif)
	cfg.Settings.Patch, cfg.Settings.Overlap = 400, 0.999
	cfg.Model.RankMemory = 64 << 20
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	codes, msg := runTileCodes(t, 2, cfg, "")
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if codes[0] != ExitInput || codes[1] != ExitInput || !strings.Contains(msg, "sparse.tif") || !strings.Contains(msg, "49014001") || !strings.Contains(msg, "need about") {
		t.Fatalf("exit %v, want %d naming the raster, its windows and the need:\n%s", codes, ExitInput, msg)
	}
	if grown := after.TotalAlloc - before.TotalAlloc; grown > 1<<30 {
		t.Fatalf("the job allocated %d MB before refusing", grown>>20)
	}
	t.Logf("refused after %v: %s", time.Since(start).Round(time.Millisecond), strings.TrimSpace(msg))
}

// TestTileSkipEmpty: --skip-empty on a raster with a nodata border (its
// left 300 columns 0, nodata 0, as an orthomosaic's edge): the windows
// inside the border get no detections without the model, the report counts
// them, and every output is the same bytes at 1 and 3 ranks (parquet
// included).
func TestTileSkipEmpty(t *testing.T) {
	src, _ := tileRasterFile(t, 700, 520, 27)
	f, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	rgba := image.NewNRGBA(img.Bounds())
	draw.Draw(rgba, rgba.Bounds(), img, image.Point{}, draw.Src)
	for y := range 520 {
		for x := range 300 {
			rgba.Set(x, y, color.NRGBA{A: 255})
		}
	}
	dir := t.TempDir()
	bordered := filepath.Join(dir, "border.png")
	g, _ := os.Create(bordered)
	png.Encode(g, rgba)
	g.Close()
	tif := filepath.Join(dir, "border.tif")
	if out, err := exec.Command("gdal_translate", "-q", "-a_nodata", "0", "-co", "TILED=YES", bordered, tif).CombinedOutput(); err != nil {
		t.Fatalf("gdal_translate: %v\n%s", err, out)
	}
	var want map[string][]byte
	for _, n := range []int{1, 3} {
		cfg := tileCfg(t.TempDir(), tif)
		cfg.SkipEmpty = true
		if codes, msg := runTileCodes(t, n, cfg, ""); codes[0] != 0 {
			t.Fatalf("%d ranks: %v\n%s", n, codes, msg)
		}
		var rep struct {
			Tile struct {
				Skipped int `json:"skipped_windows"`
			}
		}
		b, _ := os.ReadFile(filepath.Join(cfg.Out, "report.json"))
		if err := json.Unmarshal(b, &rep); err != nil || rep.Tile.Skipped != 2 {
			t.Fatalf("%d ranks: %d windows skipped, want the 2 inside the border (%v)", n, rep.Tile.Skipped, err)
		}
		got := tileOutputs(t, cfg.Out)
		if got["rasters/border.parquet"] == nil || bytes.Count(got["predictions.csv"], []byte("\n")) < 10 {
			t.Fatalf("%d ranks: outputs %d, no parquet or too few rows", n, len(got))
		}
		if want == nil {
			want = got
			continue
		}
		sameOutputs(t, "--skip-empty at 3 ranks", got, want)
	}
}

// TestTileForceStopBeforeCommit: a --force tile run over a previous run,
// stopped before its first round is saved, exits 1 saying the previous
// run comes back (a resume could not continue it: exit 8 would be false),
// and the next start puts the previous run back byte for byte; the same
// stop of a --force run into a fresh folder is resumable (exit 8).
func TestTileForceStopBeforeCommit(t *testing.T) {
	_, tif := tileRasterFile(t, 380, 300, 5)
	out := t.TempDir()
	cfg := tileCfg(out, tif)
	cfg.BatchSize = 1 // 2 windows, 2 batches: the stop comes between them
	if codes, msg := runTileCodes(t, 1, cfg, ""); codes[0] != 0 {
		t.Fatalf("previous run: %v\n%s", codes, msg)
	}
	before := tileOutputs(t, out)
	cfg.Force = true
	if codes, msg := runTileCodes(t, 1, cfg, "0:1"); codes[0] != ExitInternal || !strings.Contains(msg, "comes back at the next start") {
		t.Fatalf("--force stopped before its first round: exit %v, want %d:\n%s", codes, ExitInternal, msg)
	}
	o, err := outdir.Open(out, output.Names) // the next start
	if err != nil {
		t.Fatal(err)
	}
	o.Finish(nil)
	sameOutputs(t, "the previous run after the next start", tileOutputs(t, out), before)

	fresh := tileCfg(t.TempDir(), tif)
	fresh.Force, fresh.BatchSize = true, 1
	if codes, msg := runTileCodes(t, 1, fresh, "0:1"); codes[0] != ExitResumable || !strings.Contains(msg, "--resume") {
		t.Fatalf("--force into a fresh folder, stopped: exit %v, want %d:\n%s", codes, ExitResumable, msg)
	}
}

// TestPredictStopResumeIdentical (issue 34.2, plain predict over whole
// images): a run stopped by a signal at 3 ranks ends with exit 8 and a
// true "continue with --resume"; canopy doctor --out calls it resumable;
// --resume at 2 ranks does not detect the saved images again and gives a
// predictions.csv byte-identical to an uninterrupted 1-rank run. A resume
// with other settings, or after a saved image changed, is refused (exit
// 2), naming the difference or the image.
func TestPredictStopResumeIdentical(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command("go", "run", "./cmd/forestgen", "-out", dir, "-n", "6", "-sizes", "300x300", "-seed", "5")
	cmd.Dir = ".."
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("forestgen: %v\n%s", err, out)
	}
	os.Remove(filepath.Join(dir, "annotations.csv"))
	base := PredictConfig{Images: dir, BatchSize: 1, Model: tileCfg("", "").Model}
	run := func(n int, cfg PredictConfig, interrupt string) ([]int, string) {
		t.Helper()
		return runStoppable(t, n, interrupt, func(ctx context.Context, c mpi.Comm, _ io.Writer) error {
			return predict.Run(ctx, c, cfg)
		})
	}
	read := func(out string) []byte {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(out, "predictions.csv"))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}

	ref := base
	ref.Out = t.TempDir()
	if codes, msg := run(1, ref, ""); codes[0] != ExitOK {
		t.Fatalf("uninterrupted 1-rank run: exit %v\n%s", codes, msg)
	}
	want := read(ref.Out)

	stop := base
	stop.Out = t.TempDir()
	codes, msg := run(3, stop, "0:1")
	if codes[0] != ExitResumable || !strings.Contains(msg, "continue with --resume") {
		t.Fatalf("stopped run: exit %v, want %d and \"continue with --resume\":\n%s", codes, ExitResumable, msg)
	}
	if _, err := os.Stat(filepath.Join(stop.Out, "predictions.csv")); err == nil {
		t.Fatal("the stopped run published predictions.csv")
	}
	if code, say := outState(stop.Out); code != ExitResumable || !strings.Contains(say, "canopy predict --resume") {
		t.Fatalf("doctor --out on the stopped run: %d %q, want %d naming canopy predict --resume", code, say, ExitResumable)
	}
	files, err := parts.ReadAll(stop.Out)
	if err != nil {
		t.Fatal(err)
	}
	done, _, err := parts.Decode(files, 6)
	if err != nil || len(done) == 0 || len(done) == 6 {
		t.Fatalf("part files of the stopped run hold %d of 6 images (%v), want some but not all", len(done), err)
	}
	spare := t.TempDir() // a copy of the stopped run, for the refusals below
	if out, err := exec.Command("cp", "-a", stop.Out+"/.", spare).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v\n%s", err, out)
	}

	res := base
	res.Out, res.Resume = stop.Out, true
	if codes, msg := run(2, res, ""); codes[0] != ExitOK || codes[1] != ExitOK {
		t.Fatalf("--resume at 2 ranks: exit %v\n%s", codes, msg)
	}
	if got := read(res.Out); !bytes.Equal(got, want) {
		t.Fatalf("predictions.csv after stop at 3 ranks and --resume at 2 differs from the uninterrupted 1-rank run:\n%s\nwant:\n%s", got, want)
	}
	var rep output.PredictReport
	if b, err := os.ReadFile(filepath.Join(res.Out, "report.json")); err != nil || json.Unmarshal(b, &rep) != nil {
		t.Fatalf("report.json: %v", err)
	}
	detected := 0
	for _, s := range rep.PerRank {
		detected += s.Images
	}
	if rep.Resumed == nil || rep.Resumed.FromParts != len(done) || detected != 6-len(done) {
		t.Fatalf("--resume took %+v from the part files and detected %d images; want %d saved, %d detected", rep.Resumed, detected, len(done), 6-len(done))
	}
	if code, say := outState(res.Out); code != ExitOK {
		t.Fatalf("doctor --out after the resume: %d %q", code, say)
	}

	other := res
	other.Out = spare
	other.Model.ScoreThresh = 0.5
	if codes, msg := run(1, other, ""); codes[0] != ExitUsage || !strings.Contains(msg, "score_thresh") {
		t.Fatalf("--resume with another score threshold: exit %v, want %d naming it:\n%s", codes, ExitUsage, msg)
	}
	names, err := dataset.ListImages(dir)
	if err != nil {
		t.Fatal(err)
	}
	var changed string
	for i := range done { // any saved image
		changed = names[i]
	}
	p := filepath.Join(dir, changed)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, append(b, 0), 0o644); err != nil {
		t.Fatal(err)
	}
	again := res
	again.Out = spare
	if codes, msg := run(2, again, ""); codes[0] != ExitUsage || !strings.Contains(msg, changed) || !strings.Contains(msg, "changed") {
		t.Fatalf("--resume after saved image %s changed: exit %v, want %d naming it:\n%s", changed, codes, ExitUsage, msg)
	}
}
