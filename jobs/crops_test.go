package jobs

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/infer/gdal"
	"github.com/canopy-hpc/canopy/infer/tile"
	"github.com/canopy-hpc/canopy/internal/cropstage"
	"github.com/canopy-hpc/canopy/internal/output"
	"github.com/canopy-hpc/canopy/internal/pipeline/predict"
	"github.com/canopy-hpc/canopy/internal/testsupport/approx"
	"github.com/canopy-hpc/canopy/internal/testsupport/torchckpt"
	"github.com/canopy-hpc/canopy/internal/tilerun"
	"github.com/canopy-hpc/canopy/mpi"
	"github.com/canopy-hpc/canopy/mpi/local"
)

var (
	cropOnce  sync.Once
	cropFiles torchckpt.CropFiles
	cropHub   string // the R50 detector of the parity run
	cropErr   error
)

// cropParity rebuilds the crop parity files (and the R50 test detector)
// once per test binary; the folder lives until the binary ends.
func cropParity(t *testing.T) (torchckpt.CropFiles, string) {
	t.Helper()
	cropOnce.Do(func() {
		dir, err := os.MkdirTemp("", "canopy-crops")
		if err != nil {
			cropErr = err
			return
		}
		if cropFiles, cropErr = torchckpt.CropParity("..", dir); cropErr != nil {
			return
		}
		cropHub = filepath.Join(dir, "r50")
		cropErr = torchckpt.HubFolder(filepath.Join("..", torchckpt.Skeletons), cropHub, "F32")
	})
	if cropErr != nil {
		t.Fatal(cropErr)
	}
	return cropFiles, cropHub
}

// cropFixture is the part of infer/crop/testdata/parity.json this test
// reads.
type cropFixture struct {
	Tile struct {
		Patch        int
		Overlap, IoU float64
		Rows         [][8]any
	}
}

// TestCropTileMatchesDeepForest: predict --tile --crop-model equals
// DeepForest 2.1.0's predict_tile(crop_model=...) on the parity raster
// (the R50 test detector, the seeded ResNet-50 CropModel saved by
// DeepForest as a Lightning checkpoint): the same boxes as for tiles
// (counts equal, every row matched, integer coordinates equal for at least
// 99%, scores within 1e-5), cropmodel_label equal and cropmodel_score
// within 1e-5 on every box with equal coordinates; and predictions.csv is
// the same bytes at 1, 2 and 3 ranks with other --threads and
// --batch-size.
func TestCropTileMatchesDeepForest(t *testing.T) {
	if !gdal.Available {
		t.Skip("built with -tags nogdal: no raster reads")
	}
	pf, hub := cropParity(t)
	b, err := os.ReadFile("../" + torchckpt.CropFixture)
	if err != nil {
		t.Fatal(err)
	}
	var fx cropFixture
	if err := json.Unmarshal(b, &fx); err != nil {
		t.Fatal(err)
	}
	var want []box.Detection
	for _, r := range fx.Tile.Rows {
		want = append(want, box.Detection{Box: box.Box{Xmin: r[0].(float64), Ymin: r[1].(float64), Xmax: r[2].(float64), Ymax: r[3].(float64)}, Score: r[5].(float64)})
	}
	var ref []byte
	for _, v := range []struct{ ranks, threads, batch int }{{1, 2, 1}, {2, 1, 3}, {3, 1, 2}} {
		cfg := tilerun.Config{Names: output.Names, Raster: pf.Tile, Out: filepath.Join(t.TempDir(), "out"), BatchSize: v.batch,
			Settings: tile.Settings{Patch: fx.Tile.Patch, Overlap: fx.Tile.Overlap}, IoU: fx.Tile.IoU, CacheMiB: 16,
			Model: ModelConfig{Spec: hub, Threads: v.threads, ScoreThresh: -1, NMSThresh: -1, Device: device("cpu")}, Crops: cropstage.CropConfig{Models: []string{pf.Ckpt}}}
		got := runTile(t, v.ranks, cfg)
		if ref != nil {
			if !bytes.Equal(got, ref) {
				t.Fatalf("%d ranks, %d threads, batch %d: predictions.csv differs from 1 rank's", v.ranks, v.threads, v.batch)
			}
			continue
		}
		ref = got
		rows, boxes := predictionRows(t, got)
		if strings.Join(rows[0], ",") != "image_path,xmin,ymin,xmax,ymax,label,score,cropmodel_label,cropmodel_score" {
			t.Fatalf("header %v", rows[0])
		}
		matched, equal, worst, pair := matchE2E(want, boxes)
		if len(boxes) != len(want) || matched != len(want) || float64(equal) < 0.99*float64(matched) || approx.Far(worst, 1e-5) {
			t.Fatalf("boxes: canopy %d, DeepForest %d, %d matched, %d with equal coordinates, scores within %g", len(boxes), len(want), matched, equal, worst)
		}
		labelsEqual, scoreWorst := 0, 0.0
		for i, k := range pair {
			g := boxes[k]
			if g[0] != want[i].Box.Xmin || g[1] != want[i].Box.Ymin || g[2] != want[i].Box.Xmax || g[3] != want[i].Box.Ymax {
				continue
			}
			r := rows[1+k]
			if r[7] == fx.Tile.Rows[i][6].(string) {
				labelsEqual++
			} else {
				t.Errorf("row %d %v: cropmodel_label %s, DeepForest %s", i, g[:4], r[7], fx.Tile.Rows[i][6])
			}
			s, err := strconv.ParseFloat(r[8], 64)
			if err != nil {
				t.Fatal(err)
			}
			scoreWorst = max(scoreWorst, approx.Diff(s, fx.Tile.Rows[i][7].(float64)))
		}
		t.Logf("%d rows, %d with DeepForest's coordinates: cropmodel_label equal on %d, cropmodel_score within %.3g", len(boxes), equal, labelsEqual, scoreWorst)
		if approx.Far(scoreWorst, 1e-5) {
			t.Errorf("cropmodel_score differs from DeepForest's by %g; want within 1e-5", scoreWorst)
		}
		var rep struct {
			CropModels []cropstage.ModelInfo `json:"crop_models"`
			Crops      cropstage.Stats       `json:"crops"`
		}
		rb, err := os.ReadFile(filepath.Join(cfg.Out, "report.json"))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(rb, &rep); err != nil {
			t.Fatal(err)
		}
		if len(rep.CropModels) != 1 || len(rep.CropModels[0].SHA256) != 64 || strings.Join(rep.CropModels[0].Labels, ",") != "Alive,Dead,Snag" ||
			rep.CropModels[0].Transform.Resize != [2]int{224, 224} || rep.Crops.Classified != len(boxes) {
			t.Errorf("report.json crop records: %+v %+v", rep.CropModels, rep.Crops)
		}
	}
}

// TestCropModelsEvalReplay: eval --predictions with two crop models
// (the ResNet-18 .pt with --crop-label-dict and the hub folder) writes
// the _0 and _1 columns, keeps the zero-size box with empty cells, and
// its predictions.csv is the same bytes on 1 and 3 ranks; a prediction
// outside its image is bad input (exit 3), on every rank count.
func TestCropModelsEvalReplay(t *testing.T) {
	pf, _ := cropParity(t)
	dir := t.TempDir()
	img := filepath.Join(dir, "img.png")
	raw, err := os.ReadFile(pf.Tile)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(img, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	truth := filepath.Join(dir, "truth.csv")
	os.WriteFile(truth, []byte("image_path,xmin,ymin,xmax,ymax,label\nimg.png,10,10,60,60,Tree\n"), 0o644)
	preds := filepath.Join(dir, "preds.csv")
	os.WriteFile(preds, []byte("image_path,xmin,ymin,xmax,ymax,label,score\nimg.png,12,11,58,61,Tree,0.9\nimg.png,100,100,100,140,Tree,0.5\nimg.png,200.5,150.25,260.75,199,Tree,0.4\nimg.png,400,300,499,399,Tree,0.3\n"), 0o644)
	ld := filepath.Join(dir, "r18.csv")
	os.WriteFile(ld, []byte("label,id\nhealthy,0\nsick,1\n"), 0o644)
	var ref []byte
	for _, n := range []int{1, 3} {
		out := filepath.Join(dir, "out"+strconv.Itoa(n))
		cfg := EvalConfig{CSV: truth, Predictions: preds, Out: out, IoUThreshold: 0.4, BatchSize: 1,
			Model: ModelConfig{Threads: n}, Crops: cropstage.CropConfig{Models: []string{pf.R18, pf.Hub}, LabelDicts: []string{ld}}}
		for _, code := range runLocal(t, n, cfg) {
			if code != 0 {
				t.Fatalf("%d ranks: exit %d", n, code)
			}
		}
		got, err := os.ReadFile(filepath.Join(out, "predictions.csv"))
		if err != nil {
			t.Fatal(err)
		}
		if ref == nil {
			ref = got
			lines := strings.Split(strings.TrimSpace(string(got)), "\n")
			if lines[0] != "image_path,xmin,ymin,xmax,ymax,label,score,cropmodel_label_0,cropmodel_score_0,cropmodel_label_1,cropmodel_score_1" || len(lines) != 5 {
				t.Fatalf("predictions.csv:\n%s", got)
			}
			if !strings.HasSuffix(lines[2], ",,,,") {
				t.Errorf("the zero-width box's row %q: want empty crop cells", lines[2])
			}
			for _, l := range []string{lines[1], lines[3], lines[4]} {
				f := strings.Split(l, ",")
				if (f[7] != "healthy" && f[7] != "sick") || (f[9] != "Alive" && f[9] != "Dead" && f[9] != "Snag") {
					t.Errorf("row %q: crop labels %s, %s", l, f[7], f[9])
				}
			}
		} else if !bytes.Equal(got, ref) {
			t.Errorf("%d ranks: predictions.csv differs from 1 rank's", n)
		}
	}
	// A box outside the image: exit 3 on every rank count.
	os.WriteFile(preds, []byte("image_path,xmin,ymin,xmax,ymax,label,score\nimg.png,12,11,58,61,Tree,0.9\nimg.png,600,500,640,540,Tree,0.5\n"), 0o644)
	for _, n := range []int{1, 2} {
		cfg := EvalConfig{CSV: truth, Predictions: preds, Out: filepath.Join(dir, "bad"+strconv.Itoa(n)), IoUThreshold: 0.4, BatchSize: 1,
			Crops: cropstage.CropConfig{Models: []string{pf.R18}, LabelDicts: []string{ld}}}
		codes, msg := runLocalErr(t, n, cfg)
		t.Logf("%d ranks: %v %s", n, codes, strings.TrimSpace(msg))
		for r, code := range codes {
			if code != ExitInput {
				t.Errorf("%d ranks: rank %d exit %d, want %d (%s)", n, r, code, ExitInput, msg)
			}
		}
		if !strings.Contains(msg, "outside the 500×400 image") {
			t.Errorf("%d ranks: message %q does not say the box is outside the image", n, msg)
		}
	}
}

// TestCropModelBadInputs: item 8's command-line cases, each a clear
// message and its exit code: a detector given as --crop-model, a crop
// model given as --model, a crop model whose classes differ from its
// labels, --crop-label-dict without --crop-model.
func TestCropModelBadInputs(t *testing.T) {
	pf, hub := cropParity(t)
	dir := t.TempDir()
	two := filepath.Join(dir, "two.csv")
	os.WriteFile(two, []byte("label,id\na,0\nb,1\n"), 0o644)
	base := []string{"predict", "--tile", "--raster", pf.Tile, "--threads", "1", "--patch-size", "300"}
	cases := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"detector as --crop-model", []string{"--model", hub, "--crop-model", hub}, ExitModel, "is a RetinaNet detector"},
		{"crop model as --model", []string{"--model", pf.Ckpt}, ExitModel, "is a crop model"},
		{"classes differ from labels", []string{"--model", hub, "--crop-model", pf.PT, "--crop-label-dict", two}, ExitModel, "3 classes"},
		{"labels without model", []string{"--model", hub, "--crop-label-dict", two}, ExitUsage, "needs --crop-model"},
	}
	for i, c := range cases {
		args := append(append(append([]string{}, base...), c.args...), "--out", filepath.Join(dir, "o"+strconv.Itoa(i)))
		code, stderr := runArgs(t, args...)
		t.Logf("%s: exit %d: %s", c.name, code, strings.TrimSpace(stderr))
		if code != c.code || !strings.Contains(stderr, c.want) {
			t.Errorf("%s: exit %d, stderr %q; want exit %d naming %q", c.name, code, stderr, c.code, c.want)
		}
	}
}

// TestCropPredictImages: predict (whole images) with a crop model: the
// crop columns on every row, the same bytes on 1 and 2 ranks with other
// --threads and --batch-size.
func TestCropPredictImages(t *testing.T) {
	pf, _ := cropParity(t)
	dir := t.TempDir()
	raw, err := os.ReadFile(pf.Tile)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"a.png", "b.png"} {
		if err := os.WriteFile(filepath.Join(dir, n), raw, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ld := filepath.Join(t.TempDir(), "r18.csv")
	os.WriteFile(ld, []byte("label,id\nhealthy,0\nsick,1\n"), 0o644)
	var ref []byte
	for _, v := range []struct{ ranks, threads, batch int }{{1, 2, 1}, {2, 1, 2}} {
		cfg := PredictConfig{Images: dir, Out: filepath.Join(t.TempDir(), "out"), BatchSize: v.batch,
			Model: ModelConfig{Spec: demoModelDir, Threads: v.threads, ScoreThresh: -1, NMSThresh: -1, Device: device("cpu")},
			Crops: cropstage.CropConfig{Models: []string{pf.R18}, LabelDicts: []string{ld}}}
		for r, err := range local.Run(v.ranks, func(c mpi.Comm) error { return predict.Run(context.Background(), c, cfg) }) {
			if err != nil {
				t.Fatalf("%d ranks: rank %d: %v", v.ranks, r, err)
			}
		}
		got, err := os.ReadFile(filepath.Join(cfg.Out, "predictions.csv"))
		if err != nil {
			t.Fatal(err)
		}
		if ref == nil {
			ref = got
			rows, _ := predictionRows(t, got)
			if len(rows) < 10 || rows[0][7] != "cropmodel_label" {
				t.Fatalf("predictions.csv: %d rows, header %v", len(rows), rows[0])
			}
			for _, r := range rows[1:] {
				if r[7] != "healthy" && r[7] != "sick" {
					t.Fatalf("row %v: crop label %q", r, r[7])
				}
			}
			continue
		}
		if !bytes.Equal(got, ref) {
			t.Errorf("%d ranks: predictions.csv differs from 1 rank's", v.ranks)
		}
	}
}

// TestCropEvalTileKeepsMetrics: eval --tile with a crop model gives the
// metrics and the detector's columns of the run without it, plus the crop
// columns.
func TestCropEvalTileKeepsMetrics(t *testing.T) {
	if !gdal.Available {
		t.Skip("built with -tags nogdal: no raster reads")
	}
	pf, _ := cropParity(t)
	ld := filepath.Join(t.TempDir(), "r18.csv")
	os.WriteFile(ld, []byte("label,id\nhealthy,0\nsick,1\n"), 0o644)
	base := []string{"eval", "--tile", "--csv", filepath.Join(pf.Dir, "annotations.csv"), "--model", demoModelDir, "--threads", "1",
		"--patch-size", "300", "--patch-overlap", "0.25", "--html=false"}
	out := [2]string{filepath.Join(t.TempDir(), "plain"), filepath.Join(t.TempDir(), "crops")}
	for i, extra := range [][]string{nil, {"--crop-model", pf.R18, "--crop-label-dict", ld}} {
		if code, stderr := runArgs(t, append(append(append([]string{}, base...), extra...), "--out", out[i])...); code != 0 {
			t.Fatalf("run %d: exit %d: %s", i, code, stderr)
		}
	}
	var metrics [2]string
	var rows [2][][]string
	for i, o := range out {
		var rep struct{ Metrics json.RawMessage }
		b, err := os.ReadFile(filepath.Join(o, "report.json"))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &rep); err != nil {
			t.Fatal(err)
		}
		metrics[i] = string(rep.Metrics)
		p, err := os.ReadFile(filepath.Join(o, "predictions.csv"))
		if err != nil {
			t.Fatal(err)
		}
		rows[i], _ = predictionRows(t, p)
	}
	if metrics[0] == "" || metrics[0] != metrics[1] {
		t.Errorf("metrics differ with the crop model:\n%s\n%s", metrics[0], metrics[1])
	}
	if len(rows[0]) < 5 || len(rows[0]) != len(rows[1]) {
		t.Fatalf("%d rows without the crop model, %d with", len(rows[0]), len(rows[1]))
	}
	for j := range rows[0] {
		if strings.Join(rows[0][j], ",") != strings.Join(rows[1][j][:7], ",") || len(rows[1][j]) != 9 {
			t.Fatalf("row %d: %v against %v", j, rows[0][j], rows[1][j])
		}
	}
}

// TestCropModelHubCache: --crop-model owner/name resolves in the local
// Hugging Face cache as --model does (refs/main → the snapshot folder),
// and report.json records the folder.
func TestCropModelHubCache(t *testing.T) {
	pf, _ := cropParity(t)
	cache := t.TempDir()
	repo := filepath.Join(cache, "models--weecology--cropmodel-test")
	snap := filepath.Join(repo, "snapshots", "0123456789abcdef0123456789abcdef01234567")
	if err := os.MkdirAll(filepath.Join(repo, "refs"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(snap, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(repo, "refs", "main"), []byte("0123456789abcdef0123456789abcdef01234567"), 0o644)
	for _, f := range []string{"config.json", "model.safetensors"} {
		if err := os.Symlink(filepath.Join(pf.Hub, f), filepath.Join(snap, f)); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("HF_HUB_CACHE", cache)
	dir := t.TempDir()
	raw, err := os.ReadFile(pf.Tile)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "img.png"), raw, 0o644)
	truth := filepath.Join(dir, "truth.csv")
	os.WriteFile(truth, []byte("image_path,xmin,ymin,xmax,ymax,label\nimg.png,10,10,60,60,Tree\n"), 0o644)
	preds := filepath.Join(dir, "preds.csv")
	os.WriteFile(preds, []byte("image_path,xmin,ymin,xmax,ymax,label,score\nimg.png,12,11,58,61,Tree,0.9\n"), 0o644)
	out := filepath.Join(dir, "out")
	code, stderr := runArgs(t, "eval", "--csv", truth, "--predictions", preds, "--out", out, "--html=false",
		"--crop-model", "weecology/cropmodel-test")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var rep struct {
		Run struct {
			CropModels []cropstage.ModelInfo `json:"crop_models"`
		} `json:"run"`
	}
	b, err := os.ReadFile(filepath.Join(out, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Run.CropModels) != 1 || rep.Run.CropModels[0].Dir != snap || rep.Run.CropModels[0].Form != "hub-folder" {
		t.Errorf("report.json crop_models: %+v; want the snapshot %s", rep.Run.CropModels, snap)
	}
}
