package jobs

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"image"
	"image/draw"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/infer/gdal"
	"github.com/canopy-hpc/canopy/infer/tile"
	"github.com/canopy-hpc/canopy/internal/collective"
	"github.com/canopy-hpc/canopy/internal/modelsel"
	"github.com/canopy-hpc/canopy/internal/output"
	"github.com/canopy-hpc/canopy/internal/pipeline/predict"
	"github.com/canopy-hpc/canopy/internal/tilerun"
	"github.com/canopy-hpc/canopy/mpi"
	"github.com/canopy-hpc/canopy/mpi/local"
)

// demoModelDir is the project's demo detector (tools/demo/train.py).
const demoModelDir = "../testdata/models/canopy-demo-r18"

// tileRasterFile writes a forestgen image of w×h as a tiled, compressed
// GeoTIFF (gdal_translate) and returns the PNG and the GeoTIFF.
func tileRasterFile(t *testing.T, w, h int, seed int, extra ...string) (pngFile, tif string) {
	t.Helper()
	if !gdal.Available {
		t.Skip("built with -tags nogdal: no raster reads")
	}
	dir := t.TempDir()
	cmd := exec.Command("go", "run", "./cmd/forestgen", "-out", dir, "-n", "1", "-sizes", fmt.Sprintf("%dx%d", w, h), "-seed", fmt.Sprint(seed))
	cmd.Dir = ".."
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("forestgen: %v\n%s", err, out)
	}
	pngFile = filepath.Join(dir, "img_0000.png")
	tif = filepath.Join(dir, "raster.tif")
	args := append([]string{"-q", "-of", "GTiff", "-co", "TILED=YES", "-co", "BLOCKXSIZE=128", "-co", "BLOCKYSIZE=128", "-co", "COMPRESS=DEFLATE"}, extra...)
	if out, err := exec.Command("gdal_translate", append(args, pngFile, tif)...).CombinedOutput(); err != nil {
		t.Fatalf("gdal_translate: %v\n%s", err, out)
	}
	return pngFile, tif
}

func tileCfg(out, raster string) tilerun.Config {
	return tilerun.Config{Names: output.Names, Raster: raster, Out: out, BatchSize: 2, Settings: tile.Settings{Patch: 300, Overlap: 0.2}, IoU: tile.DefaultIoU,
		CacheMiB: 16, Model: ModelConfig{Spec: demoModelDir, Threads: 1, ScoreThresh: -1, NMSThresh: -1, Device: device("cpu")}}
}

func runTile(t *testing.T, n int, cfg tilerun.Config) []byte {
	t.Helper()
	errs := local.Run(n, func(c mpi.Comm) error { return tilerun.Run(context.Background(), c, cfg) })
	for r, err := range errs {
		if err != nil {
			t.Fatalf("%d ranks: rank %d: %v", n, r, err)
		}
	}
	b, err := os.ReadFile(filepath.Join(cfg.Out, "predictions.csv"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestTileIdenticalAcrossRanksThreadsBatches: predictions.csv is the same
// bytes for 1-4 ranks, 1 or 2 threads and batch sizes 1-3; and it equals
// the merge of the whole-image predictions of the windows cut from the PNG
// (so GDAL's windows are the pixels imagefile reads, and the job's
// gather and merge add nothing).
func TestTileIdenticalAcrossRanksThreadsBatches(t *testing.T) {
	src, tif := tileRasterFile(t, 700, 520, 27)
	var ref []byte
	for _, v := range []struct{ ranks, threads, batch int }{{1, 1, 1}, {2, 2, 3}, {3, 1, 2}, {4, 1, 1}} {
		cfg := tileCfg(t.TempDir(), tif)
		cfg.Model.Threads, cfg.BatchSize = v.threads, v.batch
		got := runTile(t, v.ranks, cfg)
		if ref == nil {
			ref = got
			if n := bytes.Count(got, []byte("\n")); n < 20 {
				t.Fatalf("only %d rows: the demo model finds the trees of a forestgen raster", n-1)
			}
			continue
		}
		if !bytes.Equal(got, ref) {
			t.Fatalf("%+v: predictions.csv differs from 1 rank", v)
		}
	}

	// The windows cut from the PNG, predicted as whole images, merged.
	wins, err := tile.Windows(700, 520, tile.Settings{Patch: 300, Overlap: 0.2})
	if err != nil {
		t.Fatal(err)
	}
	f, _ := os.Open(src)
	img, err := png.Decode(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var list strings.Builder
	list.WriteString("image_path\n")
	for k, w := range wins {
		crop := image.NewNRGBA(image.Rect(0, 0, w.W, w.H))
		draw.Draw(crop, crop.Bounds(), img, image.Pt(w.X, w.Y), draw.Src)
		name := fmt.Sprintf("w%03d.png", k)
		g, _ := os.Create(filepath.Join(dir, name))
		png.Encode(g, crop)
		g.Close()
		fmt.Fprintln(&list, name)
	}
	os.WriteFile(filepath.Join(dir, "list.csv"), []byte(list.String()), 0o644)
	out := t.TempDir()
	pc := PredictConfig{CSV: filepath.Join(dir, "list.csv"), Out: out, BatchSize: 1, Model: tileCfg("", "").Model, RawRows: true}
	if errs := local.Run(1, func(c mpi.Comm) error { return predict.Run(context.Background(), c, pc) }); errs[0] != nil {
		t.Fatal(errs[0])
	}
	b, _ := os.ReadFile(filepath.Join(out, "predictions.csv"))
	rows, err := csv.NewReader(bytes.NewReader(b)).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	perWin := make([][]box.Detection, len(wins))
	for _, r := range rows[1:] {
		k, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(r[0], "w"), ".png"))
		v := make([]float64, 5)
		for i, s := range []string{r[1], r[2], r[3], r[4], r[6]} {
			v[i], _ = strconv.ParseFloat(s, 64)
		}
		lab := int32(0)
		if r[5] != "Tree" {
			lab = 1
		}
		perWin[k] = append(perWin[k], box.Detection{Box: box.Box{Xmin: v[0], Ymin: v[1], Xmax: v[2], Ymax: v[3]}, Label: lab, Score: v[4]})
	}
	merged := tile.Merge(wins, perWin, tile.DefaultIoU)
	var want bytes.Buffer
	labels, _ := box.NewLabelMap([]string{"Tree", "Dead"})
	if err := output.WritePredictions(&want, []box.Image{{Path: "raster.tif"}}, [][]box.Detection{merged}, labels, nil); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(want.Bytes(), ref) {
		t.Fatalf("predict --tile differs from the merged predictions of the cut windows:\n%.600s\nwant\n%.600s", ref, want.Bytes())
	}
}

// TestTileBadInput: each bad raster or setting gets a clear error and its
// exit code on every rank, never a hang or a crash.
func TestTileBadInput(t *testing.T) {
	pngFile, tif := tileRasterFile(t, 320, 240, 3)
	dir := t.TempDir()
	data, _ := os.ReadFile(tif)
	cut := filepath.Join(dir, "cut.tif")
	os.WriteFile(cut, data[:len(data)/2], 0o644)
	text := filepath.Join(dir, "notes.tif")
	os.WriteFile(text, []byte("hello\n"), 0o644)
	gray := filepath.Join(dir, "gray.tif")
	if out, err := exec.Command("gdal_translate", "-q", "-b", "1", pngFile, gray).CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	cli := func(n int, args ...string) ([]int, string) {
		codes := make([]int, n)
		var stderr bytes.Buffer
		lw := &lockedWriter{w: &stderr}
		local.Run(n, func(c mpi.Comm) error {
			codes[c.Rank()] = MainWith(context.Background(), append([]string{"canopy", "predict", "--tile", "--model", demoModelDir,
				"--out", filepath.Join(dir, fmt.Sprint("out", len(args), args[len(args)-1] == "")), "--threads", "1"}, args...), &bytes.Buffer{}, lw,
				func() (mpi.Comm, func() error, error) { return c, func() error { return nil }, nil })
			return nil
		})
		return codes, stderr.String()
	}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--raster", filepath.Join(dir, "missing.tif")}, ExitInput, "no such file"},
		{[]string{"--raster", text}, ExitInput, "is not a raster canopy reads"},
		{[]string{"--raster", cut}, ExitInput, "truncated or corrupt"},
		{[]string{"--raster", gray}, ExitInput, "has 1 bands"},
		{[]string{"--raster", tif, "--patch-overlap", "1"}, ExitInput, "must be in [0, 1)"},
		{[]string{"--raster", tif, "--patch-overlap", "-0.1"}, ExitInput, "must be in [0, 1)"},
		{[]string{"--raster", tif, "--patch-size", "0"}, ExitInput, "must be at least 1"},
		{[]string{"--raster", tif, "--images", dir}, ExitUsage, "exactly one of --raster, --images and --csv"},
		{[]string{"--raster", tif, "--tile-iou", "2"}, ExitUsage, "--tile-iou 2 is not in [0, 1]"},
	} {
		n := 2 // a raster error comes from rank 0's broadcast: every rank exits, rank 0 speaks
		if c.code == ExitUsage || strings.Contains(c.want, "must be") {
			n = 1 // a flag error comes before MPI: each process speaks unless a launcher names its rank
		}
		codes, msg := cli(n, c.args...)
		for r, code := range codes {
			if code != c.code {
				t.Errorf("%v: rank %d exit %d, want %d\n%s", c.args, r, code, c.code, msg)
			}
		}
		if !strings.Contains(msg, c.want) || strings.Count(msg, "canopy:") != 1 {
			t.Errorf("%v: want one line saying %q, got:\n%s", c.args, c.want, msg)
		}
	}
	// --patch-size without --tile is a usage error.
	var so, se bytes.Buffer
	code := MainWith(context.Background(), []string{"canopy", "predict", "--images", dir, "--model", demoModelDir, "--patch-size", "10"}, &so, &se,
		func() (mpi.Comm, func() error, error) { return local.New(1)[0], func() error { return nil }, nil })
	if code != ExitUsage || !strings.Contains(se.String(), "--patch-size needs --tile") {
		t.Errorf("--patch-size without --tile: exit %d: %s", code, se.String())
	}
	se.Reset()
	code = MainWith(context.Background(), []string{"canopy", "eval", "--csv", pngFile, "--model", demoModelDir, "--tile-iou", "0.2"}, &so, &se,
		func() (mpi.Comm, func() error, error) { return local.New(1)[0], func() error { return nil }, nil })
	if code != ExitUsage || !strings.Contains(se.String(), "eval: --tile-iou needs --tile") {
		t.Errorf("eval --tile-iou without --tile: exit %d: %s", code, se.String())
	}
}

// TestTileGPKG: a raster with a CRS gets predictions.gpkg (one polygon per
// row of predictions.csv, its sha256 in report.json) and report.json
// records the CRS and geotransform; one without gets no .gpkg and one note.
func TestTileGPKG(t *testing.T) {
	_, geo := tileRasterFile(t, 380, 300, 4, "-a_srs", "EPSG:32617", "-a_ullr", "404211.37", "3285123.91", "404249.37", "3285093.91")
	_, plain := tileRasterFile(t, 380, 300, 4)
	for _, c := range []struct {
		raster string
		gpkg   bool
	}{{geo, true}, {plain, false}} {
		out := t.TempDir()
		cfg := tileCfg(out, c.raster)
		var progress bytes.Buffer
		cfg.Progress = &progress
		csvBytes := runTile(t, 2, cfg)
		rows := bytes.Count(csvBytes, []byte("\n")) - 1
		var rep struct {
			Outputs map[string]string `json:"outputs"`
			Tile    struct {
				GPKG    string
				Rasters []struct {
					CRS          string      `json:"crs"`
					GeoTransform *[6]float64 `json:"geotransform"`
				}
			}
		}
		b, _ := os.ReadFile(filepath.Join(out, "report.json"))
		if err := json.Unmarshal(b, &rep); err != nil {
			t.Fatal(err)
		}
		_, err := os.Stat(filepath.Join(out, tilerun.GPKGFile))
		if got := err == nil; got != c.gpkg || (rep.Outputs[tilerun.GPKGFile] != "") != c.gpkg || (rep.Tile.GPKG != "") != c.gpkg {
			t.Fatalf("%s: gpkg present %v (outputs %v), want %v", c.raster, got, rep.Outputs, c.gpkg)
		}
		note := strings.Count(progress.String(), "no raster has a CRS")
		if c.gpkg {
			r := rep.Tile.Rasters[0]
			if !strings.Contains(r.CRS, "32617") || r.GeoTransform == nil || r.GeoTransform[1] != 0.1 || note != 0 {
				t.Fatalf("report: %+v, note %d", rep.Tile.Rasters, note)
			}
			info, err := exec.Command("ogrinfo", "-so", "-al", filepath.Join(out, tilerun.GPKGFile)).CombinedOutput()
			if err != nil || !strings.Contains(string(info), fmt.Sprintf("Feature Count: %d\n", rows)) || rows < 5 {
				t.Fatalf("ogrinfo (want %d features): %v\n%s", rows, err, info)
			}
		} else if note != 1 {
			t.Fatalf("no CRS: the note came %d times:\n%s", note, progress.String())
		}
	}
}

// TestEvalTile: eval --tile scores the merged rows: its metrics equal, byte
// for byte, eval's replay of predict --tile's predictions.csv against the
// same truth, for 1 and 3 ranks; the truth is forestgen's, in the raster's
// pixel frame.
func TestEvalTile(t *testing.T) {
	dir := forestRasters(t, "-n", "1", "-sizes", "640x560", "-seed", "11")
	truth := filepath.Join(dir, "annotations.csv")
	one := func(c mpi.Comm) func() (mpi.Comm, func() error, error) {
		return func() (mpi.Comm, func() error, error) { return c, func() error { return nil }, nil }
	}
	run := func(n int, args ...string) []byte {
		out := filepath.Join(t.TempDir(), "out")
		var stderr bytes.Buffer
		lw := &lockedWriter{w: &stderr}
		codes := make([]int, n)
		local.Run(n, func(c mpi.Comm) error {
			codes[c.Rank()] = MainWith(context.Background(), append(append([]string{"canopy"}, args...), "--out", out), &bytes.Buffer{}, lw, one(c))
			return nil
		})
		for r, code := range codes {
			if code != 0 {
				t.Fatalf("%v: rank %d exit %d\n%s", args, r, code, stderr.String())
			}
		}
		return []byte(out)
	}
	tileArgs := []string{"--tile", "--model", demoModelDir, "--threads", "1", "--patch-size", "300", "--patch-overlap", "0.15"}
	var ref []byte
	for _, n := range []int{1, 3} {
		out := string(run(n, append([]string{"eval", "--csv", truth, "--html=false"}, tileArgs...)...))
		var rep struct {
			Metrics json.RawMessage
			Eval    *struct {
				IoU       float64 `json:"iou_threshold"`
				Semantics string  `json:"semantics"`
			}
		}
		b, _ := os.ReadFile(filepath.Join(out, "report.json"))
		if err := json.Unmarshal(b, &rep); err != nil || len(rep.Metrics) < 10 {
			t.Fatalf("report.json: %v %s", err, b)
		}
		if rep.Eval == nil || rep.Eval.IoU != 0.4 || rep.Eval.Semantics != "validation" {
			t.Fatalf("report.json eval: %+v, want eval's defaults, IoU 0.4 and validation semantics", rep.Eval)
		}
		if _, err := os.Stat(filepath.Join(out, "results.csv")); err != nil {
			t.Fatal(err)
		}
		if ref == nil {
			ref = rep.Metrics
			var m map[string]any
			json.Unmarshal(rep.Metrics, &m)
			if r, _ := m["box_recall"].(float64); r < 0.3 {
				t.Fatalf("box_recall %v on the demo forest", m["box_recall"])
			}
		} else if !bytes.Equal(rep.Metrics, ref) {
			t.Fatalf("%d ranks: metrics differ:\n%s\n%s", n, rep.Metrics, ref)
		}
	}
	pout := string(run(2, append([]string{"predict", "--raster", filepath.Join(dir, "img_0000.png")}, tileArgs...)...))
	dict := filepath.Join(dir, "classes.csv") // the model's label ids, as eval --model uses them
	os.WriteFile(dict, []byte("label,id\nTree,0\nDead,1\n"), 0o644)
	eout := string(run(1, "eval", "--csv", truth, "--predictions", filepath.Join(pout, "predictions.csv"), "--html=false", "--label-dict", dict))
	b, _ := os.ReadFile(filepath.Join(eout, "report.json"))
	var rep struct{ Metrics json.RawMessage }
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	var a, b2 bytes.Buffer
	json.Compact(&a, rep.Metrics)
	json.Compact(&b2, ref)
	if a.Len() < 10 || !bytes.Equal(a.Bytes(), b2.Bytes()) {
		t.Fatalf("eval --tile's metrics differ from eval's replay of predict --tile:\n%s\n%s", b2.Bytes(), a.Bytes())
	}
}

// TestTileCUDNNIdenticalAcrossRanks: on the cuDNN path (fake cuDNN on host
// shim GPUs, whose tensor-core engine's bits depend on an image's slot and
// the batch size) predict --tile takes whole global batches of windows, so
// predictions.csv is the same bytes for 1, 2 and 3 ranks at --batch-size 4
// and the report records the batching.
func TestTileCUDNNIdenticalAcrossRanks(t *testing.T) {
	_, tif := tileRasterFile(t, 700, 520, 27)
	withFakeGPUs(t, 3)
	var ref []byte
	for _, ranks := range []int{1, 2, 3} {
		out := t.TempDir()
		cfg := tileCfg(out, tif)
		cfg.Model = gpuCfg(t, out).Model
		cfg.Model.Precision, cfg.Model.PrecisionSet = precision("tf32"), true
		cfg.BatchSize = 4
		got := runTile(t, ranks, cfg)
		var rep struct{ Model modelsel.Info }
		b, _ := os.ReadFile(filepath.Join(out, "report.json"))
		if err := json.Unmarshal(b, &rep); err != nil {
			t.Fatal(err)
		}
		if bt := rep.Model.Batching; bt == nil || bt.N != 4 {
			t.Fatalf("%d ranks: report's batching %+v\n%.1500s", ranks, bt, b)
		}
		// The cuDNN path's record, as eval's and predict's reports hold it.
		if c := rep.Model.CUDNN; c == nil || c.Plan != "heuristic" || len(c.Layers) == 0 {
			t.Fatalf("%d ranks: report's cudnn %+v", ranks, c)
		}
		if ref == nil {
			if n := bytes.Count(got, []byte("\n")) - 1; n < 1 {
				t.Fatalf("no detections: the comparison would say nothing")
			}
			ref = got
			continue
		}
		if !bytes.Equal(got, ref) {
			t.Fatalf("%d ranks: predictions.csv differs from 1 rank's", ranks)
		}
	}
}

// TestTileCSVFIFO: predict --tile --csv naming a FIFO nobody writes to, or
// /dev/zero, ends at once with exit 3 (the raster list is read as eval's
// inputs are: O_NONBLOCK, fstat), never a hang.
func TestTileCSVFIFO(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "rasters.csv")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{fifo, "/dev/zero"} {
		cfg := tileCfg(t.TempDir(), "")
		cfg.CSV = p
		done := make(chan []error, 1)
		go func() {
			done <- local.Run(1, func(c mpi.Comm) error { return tilerun.Run(context.Background(), c, cfg) })
		}()
		select {
		case errs := <-done:
			if Code(errs[0]) != ExitInput {
				t.Errorf("--csv %s: %v (exit %d), want exit 3", p, errs[0], Code(errs[0]))
			}
		case <-time.After(15 * time.Second):
			if f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
				f.Close()
			}
			t.Fatalf("--csv %s: the raster list blocked the run", p)
		}
	}
}

// TestEvalTileShardedMatching: eval --tile over three rasters matches them
// on different ranks (split by their boxes); at np 3 every rank matches
// one, and report.json's metrics, results.csv and predictions.csv are np
// 1's bytes.
func TestEvalTileShardedMatching(t *testing.T) {
	dir := forestRasters(t, "-n", "3", "-sizes", "320x300,300x320", "-seed", "5")
	var ref [3][]byte
	for _, n := range []int{1, 3} {
		out := filepath.Join(t.TempDir(), "out")
		var stderr bytes.Buffer
		lw := &lockedWriter{w: &stderr}
		codes := make([]int, n)
		local.Run(n, func(c mpi.Comm) error {
			codes[c.Rank()] = MainWith(context.Background(), []string{"canopy", "eval", "--csv", filepath.Join(dir, "annotations.csv"),
				"--html=false", "--tile", "--model", demoModelDir, "--threads", "1", "--patch-size", "300", "--out", out},
				&bytes.Buffer{}, lw, func() (mpi.Comm, func() error, error) { return c, func() error { return nil }, nil })
			return nil
		})
		for r, code := range codes {
			if code != 0 {
				t.Fatalf("np%d rank %d: exit %d\n%s", n, r, code, stderr.String())
			}
		}
		var rep struct {
			Metrics json.RawMessage        `json:"metrics"`
			PerRank []collective.RankStats `json:"per_rank"`
		}
		if err := json.Unmarshal(readOut(t, out, "report.json"), &rep); err != nil {
			t.Fatal(err)
		}
		files := [3][]byte{rep.Metrics, readOut(t, out, "results.csv"), readOut(t, out, "predictions.csv")}
		if n == 1 {
			ref = files
		}
		for k, name := range []string{"metrics", "results.csv", "predictions.csv"} {
			if !bytes.Equal(files[k], ref[k]) {
				t.Fatalf("np%d: %s differs from np 1", n, name)
			}
		}
		if len(rep.PerRank) != n {
			t.Fatalf("np%d: %d per_rank entries", n, len(rep.PerRank))
		}
		for _, s := range rep.PerRank {
			if want := 3 / n; s.MetricsImages != want || s.MetricsBytesSent == 0 {
				t.Fatalf("np%d rank %d matched %d rasters (%d bytes), want %d", n, s.Rank, s.MetricsImages, s.MetricsBytesSent, want)
			}
		}
	}
}

// forestRasters writes forestgen images and their annotations.csv (args:
// forestgen's flags) into a temporary folder, skipping without GDAL.
func forestRasters(t *testing.T, args ...string) string {
	t.Helper()
	if !gdal.Available {
		t.Skip("built with -tags nogdal: no raster reads")
	}
	dir := t.TempDir()
	cmd := exec.Command("go", append([]string{"run", "./cmd/forestgen", "-out", dir}, args...)...)
	cmd.Dir = ".."
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("forestgen: %v\n%s", err, out)
	}
	return dir
}
