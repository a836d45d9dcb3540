package jobs

import (
	"bytes"
	"context"
	csvpkg "encoding/csv"
	"fmt"
	"image"
	"image/png"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/infer/cpu"
	"github.com/canopy-hpc/canopy/infer/safetensors"
	"github.com/canopy-hpc/canopy/infer/tile"
	"github.com/canopy-hpc/canopy/internal/modelsel"
	"github.com/canopy-hpc/canopy/internal/outdir"
	"github.com/canopy-hpc/canopy/internal/output"
	"github.com/canopy-hpc/canopy/internal/pipeline/eval"
	"github.com/canopy-hpc/canopy/internal/pipeline/predict"
	"github.com/canopy-hpc/canopy/internal/testsupport/forest"
	"github.com/canopy-hpc/canopy/internal/testsupport/testweights"
	"github.com/canopy-hpc/canopy/mpi"
	"github.com/canopy-hpc/canopy/mpi/local"
)

// modelSet is a model folder (the ResNet-18-FPN64 of the parity fixture
// r18.json, generated weights, 2 classes) and a labelled set of forest
// images, built once per test binary.
var modelSet struct {
	once            sync.Once
	model, csv, dir string
	err             error
}

const testModelConfig = `{"num_classes": 2, "label_dict": {"Tree": 0, "Dead": 1}, "score_thresh": 0.3,
 "nms_thresh": 0.05, "detections_per_img": 300, "topk_candidates": 1000, "min_size": 400, "max_size": 400}`

func writeTestModel(dir string, dtype string) error {
	return writeWeightsModel(dir, "resnet18", 2, 64, true, dtype, testModelConfig)
}

// writeWeightsModel writes a model folder: the test weights (seed 0) of
// testweights.StateDict(arch, classes, fpn, batchNorm) in dtype, and config.
func writeWeightsModel(dir, arch string, classes, fpn int, batchNorm bool, dtype, config string) error {
	entries, err := testweights.StateDict(arch, classes, fpn, batchNorm)
	if err != nil {
		return err
	}
	vals, err := testweights.Values(entries, 0)
	if err != nil {
		return err
	}
	ts := map[string]safetensors.Tensor{}
	for _, e := range entries {
		if !e.Int64 {
			ts[e.Name] = safetensors.Tensor{Shape: e.Shape, Data: vals[e.Name]}
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := safetensors.Write(filepath.Join(dir, "model.safetensors"), ts, dtype, nil); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "config.json"), []byte(config), 0o644)
}

// testModelSet writes 7 images (6 of 400×400 and one 300×500) with their
// truth; image 3's crowns are all labelled Tree so both classes stay in use.
func testModelSet(t *testing.T) (model, csv, dir string) {
	t.Helper()
	s := &modelSet
	s.once.Do(func() {
		root, err := os.MkdirTemp("", "canopy-model-set-")
		if err != nil {
			s.err = err
			return
		}
		s.dir = filepath.Join(root, "images")
		s.model = filepath.Join(root, "model")
		if s.err = writeTestModel(s.model, "F32"); s.err != nil {
			return
		}
		os.MkdirAll(s.dir, 0o755)
		var b strings.Builder
		b.WriteString("image_path,xmin,ymin,xmax,ymax,label\n")
		for i := 0; i < 7; i++ {
			w, h := 400, 400
			if i == 6 {
				w, h = 300, 500
			}
			img, boxes := forest.Generate(21, i, w, h)
			name := fmt.Sprintf("f%d.png", i)
			f, err := os.Create(filepath.Join(s.dir, name))
			if err != nil {
				s.err = err
				return
			}
			png.Encode(f, img)
			f.Close()
			if len(boxes) == 0 {
				fmt.Fprintf(&b, "%s,0,0,0,0,Tree\n", name)
			}
			for _, bx := range boxes {
				fmt.Fprintf(&b, "%s,%d,%d,%d,%d,%s\n", name, bx.XMin, bx.YMin, bx.XMax, bx.YMax, bx.Label)
			}
		}
		s.csv = filepath.Join(s.dir, "annotations.csv")
		s.err = os.WriteFile(s.csv, []byte(b.String()), 0o644)
	})
	if s.err != nil {
		t.Fatal(s.err)
	}
	return s.model, s.csv, s.dir
}

func modelCfg(t *testing.T, out string) EvalConfig {
	model, csv, _ := testModelSet(t)
	return EvalConfig{CSV: csv, Out: out, IoUThreshold: 0.4, BatchSize: 2,
		Model: ModelConfig{Spec: model, Threads: 1, ScoreThresh: -1, NMSThresh: -1, Device: device("cpu")}}
}

// Detections and metrics are byte-identical for any rank count, batch size
// and thread count: each image is padded on its own and every reduction
// has a fixed order.
func TestModelEvalIdenticalAcrossRanksBatchesThreads(t *testing.T) {
	var refMetrics, refPreds []byte
	for _, v := range []struct{ ranks, batch, threads int }{{1, 1, 1}, {2, 4, 1}, {3, 2, 2}} {
		out := t.TempDir()
		cfg := modelCfg(t, out)
		cfg.BatchSize, cfg.Model.Threads = v.batch, v.threads
		if codes := runLocal(t, v.ranks, cfg); codes[0] != 0 {
			t.Fatalf("%+v: exit codes %v", v, codes)
		}
		m, vals := reportMetrics(t, out)
		preds, err := os.ReadFile(filepath.Join(out, "predictions.csv"))
		if err != nil {
			t.Fatal(err)
		}
		if refMetrics == nil {
			if n := bytes.Count(preds, []byte("\n")) - 1; n < 50 {
				t.Fatalf("only %d detections: the test model must detect something", n)
			}
			if r, ok := vals["box_recall"].(float64); !ok || r <= 0 {
				t.Fatalf("box_recall %v", vals["box_recall"])
			}
			if l, ok := vals[eval.KeyValLoss].(float64); !ok || l <= 0 {
				t.Fatalf("%s %v: the comparison must cover the losses", eval.KeyValLoss, vals[eval.KeyValLoss])
			}
			refMetrics, refPreds = m, preds
			continue
		}
		if !bytes.Equal(m, refMetrics) {
			t.Errorf("%+v: metrics differ from 1 rank, batch 1, 1 thread:\n%s\n%s", v, m, refMetrics)
		}
		if !bytes.Equal(preds, refPreds) {
			t.Errorf("%+v: predictions.csv differs from 1 rank, batch 1, 1 thread", v)
		}
	}
}

// The model's identity and thresholds are in the report.
func TestModelReport(t *testing.T) {
	out := t.TempDir()
	if codes := runLocal(t, 1, modelCfg(t, out)); codes[0] != 0 {
		t.Fatalf("exit %v", codes)
	}
	b, _ := os.ReadFile(filepath.Join(out, "report.json"))
	for _, want := range []string{`"arch": "resnet18-fpn64"`, `"score_thresh": "0.1"`, `score_thresh (DeepForest's own value wins)`, `"sha256": "`, `"detector": "retinanet-cpu resnet18-fpn64"`, `"Dead": 1`} {
		if !bytes.Contains(b, []byte(want)) {
			t.Errorf("report.json lacks %s", want)
		}
	}
}

func TestModelErrors(t *testing.T) {
	model, csv, dir := testModelSet(t)
	bad := t.TempDir()
	// a truth label the model does not know
	data, _ := os.ReadFile(csv)
	os.WriteFile(filepath.Join(bad, "unknown.csv"), bytes.ReplaceAll(data, []byte(",Dead\n"), []byte(",Snag\n")), 0o644)
	// a truth CSV naming a missing image, and one naming a corrupt image
	f0, _ := os.ReadFile(filepath.Join(dir, "f0.png"))
	os.WriteFile(filepath.Join(bad, "f0.png"), f0, 0o644)
	os.WriteFile(filepath.Join(bad, "missing.csv"), []byte("image_path,xmin,ymin,xmax,ymax,label\nf0.png,1,1,5,5,Tree\nnope.png,1,1,5,5,Tree\n"), 0o644)
	os.WriteFile(filepath.Join(bad, "corrupt.png"), []byte("\x89PNG\r\n\x1a\nshort"), 0o644)
	os.WriteFile(filepath.Join(bad, "corrupt.csv"), []byte("image_path,xmin,ymin,xmax,ymax,label\ncorrupt.png,1,1,5,5,Tree\n"), 0o644)
	// a 2000×1 image resizes to height 0 (torch raises; canopy refuses it)
	thin := image.NewRGBA(image.Rect(0, 0, 2000, 1))
	if f, err := os.Create(filepath.Join(bad, "thin.png")); err == nil {
		png.Encode(f, thin)
		f.Close()
	}
	os.WriteFile(filepath.Join(bad, "thin.csv"), []byte("image_path,xmin,ymin,xmax,ymax,label\nthin.png,1,0,5,1,Tree\n"), 0o644)
	// a model with a wrong tensor shape
	wrong := filepath.Join(bad, "wrong")
	os.MkdirAll(wrong, 0o755)
	ts, _, err := safetensors.Read(filepath.Join(model, "model.safetensors"))
	if err != nil {
		t.Fatal(err)
	}
	ts["head.regression_head.bbox_reg.bias"] = safetensors.Tensor{Shape: []int{35}, Data: make([]float32, 35)}
	safetensors.Write(filepath.Join(wrong, "model.safetensors"), ts, "F32", nil)
	cases := []struct {
		name, csv, model, want string
		code                   int
	}{
		{"unknown label", filepath.Join(bad, "unknown.csv"), model, `label "Snag"`, ExitModel},
		{"missing image", filepath.Join(bad, "missing.csv"), model, "nope.png", ExitInput},
		{"corrupt image", filepath.Join(bad, "corrupt.csv"), model, "corrupt.png", ExitInput},
		{"too elongated", filepath.Join(bad, "thin.csv"), model, "too elongated", ExitInput},
		{"no model", csv, filepath.Join(bad, "absent"), "absent", ExitModel},
		{"wrong shape", csv, wrong, "bbox_reg.bias", ExitModel},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := modelCfg(t, t.TempDir())
			cfg.CSV, cfg.Model.Spec = c.csv, c.model
			var stderr bytes.Buffer
			codes := runLocalCtx(t, 2, cfg, func(int) context.Context { return context.Background() }, &stderr)
			for r, code := range codes {
				if code != c.code {
					t.Errorf("rank %d exit %d, want %d; stderr:\n%s", r, code, c.code, stderr.String())
				}
			}
			if !strings.Contains(stderr.String(), c.want) {
				t.Errorf("stderr does not name %q:\n%s", c.want, stderr.String())
			}
			if n := strings.Count(stderr.String(), "\n"); n > 3 {
				t.Errorf("error printed %d lines, want it once:\n%s", n, stderr.String())
			}
		})
	}
}

// predict --raw-rows on 2 ranks writes the same rows as eval's
// predictions.csv (same model, same images, same order); predict's default
// rows are eval's through tile.AcrossClassNMS, image by image (the test
// model has two labels, so rows go).
func TestPredictMatchesEval(t *testing.T) {
	_, csv, dir := testModelSet(t)
	evalOut := t.TempDir()
	if codes := runLocal(t, 1, modelCfg(t, evalOut)); codes[0] != 0 {
		t.Fatalf("eval exit %v", codes)
	}
	want, _ := os.ReadFile(filepath.Join(evalOut, "predictions.csv"))
	across := acrossClassRows(t, want, 0.05)
	if len(across) >= len(want) {
		t.Fatalf("across_class_nms removes nothing from eval's rows: the test model must give overlapping labels")
	}
	for _, v := range []struct {
		src string
		raw bool
	}{{"csv", true}, {"images", true}, {"csv", false}} {
		out := t.TempDir()
		cfg := PredictConfig{Out: out, BatchSize: 3, Model: modelCfg(t, out).Model, RawRows: v.raw}
		if v.src == "csv" {
			cfg.CSV = csv
		} else {
			cfg.Images = dir
		}
		errs := local.Run(2, func(c mpi.Comm) error { return predict.Run(context.Background(), c, cfg) })
		for r, err := range errs {
			if err != nil {
				t.Fatalf("%s: rank %d: %v", v.src, r, err)
			}
		}
		got, _ := os.ReadFile(filepath.Join(out, "predictions.csv"))
		if v.raw && !bytes.Equal(got, want) {
			t.Errorf("predict --%s --raw-rows on 2 ranks differs from eval's predictions.csv (%d vs %d bytes)", v.src, len(got), len(want))
		}
		if !v.raw && !bytes.Equal(got, across) {
			t.Errorf("predict --%s on 2 ranks differs from eval's predictions.csv through across_class_nms (%d vs %d bytes)", v.src, len(got), len(across))
		}
	}
}

// acrossClassRows is a predictions.csv (labels Tree and Dead) with each
// image's rows through tile.AcrossClassNMS at iou.
func acrossClassRows(t *testing.T, preds []byte, iou float64) []byte {
	t.Helper()
	recs, err := csvpkg.NewReader(bytes.NewReader(preds)).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	labels, err := box.NewLabelMap([]string{"Tree", "Dead"})
	if err != nil {
		t.Fatal(err)
	}
	var images []box.Image
	var dets [][]box.Detection
	for _, r := range recs[1:] {
		if len(images) == 0 || images[len(images)-1].Path != r[0] {
			images, dets = append(images, box.Image{Path: r[0]}), append(dets, nil)
		}
		var v [5]float64
		for i, s := range []string{r[1], r[2], r[3], r[4], r[6]} {
			if v[i], err = strconv.ParseFloat(s, 64); err != nil {
				t.Fatal(err)
			}
		}
		id, ok := labels.ID(r[5])
		if !ok {
			t.Fatalf("label %q", r[5])
		}
		dets[len(dets)-1] = append(dets[len(dets)-1], box.Detection{Box: box.Box{Xmin: v[0], Ymin: v[1], Xmax: v[2], Ymax: v[3]}, Label: id, Score: v[4]})
	}
	for i := range dets {
		dets[i] = tile.AcrossClassNMS(dets[i], iou)
	}
	var b bytes.Buffer
	if err := output.WritePredictions(&b, images, dets, labels, nil); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// A run that failed before saving any image (here: an image missing) leaves
// a manifest; running again into the same folder needs no --force.
func TestRerunAfterFailedStart(t *testing.T) {
	_, csv, dir := testModelSet(t)
	out := t.TempDir()
	missing := filepath.Join(t.TempDir(), "missing.csv")
	os.WriteFile(missing, []byte("image_path,xmin,ymin,xmax,ymax,label\n"+dir+"/f0.png,1,1,5,5,Tree\nnope.png,1,1,5,5,Tree\n"), 0o644)
	cfg := modelCfg(t, out)
	cfg.CSV = missing
	if codes := runLocal(t, 2, cfg); codes[0] != ExitInput {
		t.Fatalf("first run: exit %v, want %d", codes, ExitInput)
	}
	if _, err := os.Stat(filepath.Join(out, outdir.ManifestFile)); err != nil {
		t.Fatalf("the failed start left no manifest (the test needs one): %v", err)
	}
	cfg.CSV = csv
	if codes := runLocal(t, 2, cfg); codes[0] != 0 {
		t.Fatalf("rerun into the same folder without --force: exit %v", codes)
	}
}

// Ranks must read the same config.json as rank 0, as they must the weights.
func TestModelConfigMustMatchRank0(t *testing.T) {
	model, _, _ := testModelSet(t)
	mc := modelCfg(t, t.TempDir()).Model
	w := outdir.FileSHA(filepath.Join(model, "model.safetensors"))
	if _, err := modelsel.LoadLocal(mc, model, w, outdir.FileSHA(filepath.Join(model, "config.json")), 1); err != nil {
		t.Fatalf("same files: %v", err)
	}
	_, err := modelsel.LoadLocal(mc, model, w, "0123456789abcdef", 1)
	if err == nil || !strings.Contains(err.Error(), "config.json differs") {
		t.Fatalf("a different config.json on rank 0 was not noticed: %v", err)
	}
}

func TestDefaultThreads(t *testing.T) {
	for _, c := range []struct{ maxprocs, ncpu, local, want int }{
		{1, 2, 2, 1},   // mpirun --bind-to core
		{2, 2, 1, 2},   // one rank, all cores
		{8, 16, 4, 4},  // bound to an 8-core socket, 4 ranks on the node
		{16, 16, 4, 4}, // srun without binding
		{16, 16, 32, 1},
	} {
		if got := modelsel.DefaultThreads(c.maxprocs, c.ncpu, c.local); got != c.want {
			t.Errorf("defaultThreads(%d, %d, %d) = %d, want %d", c.maxprocs, c.ncpu, c.local, got, c.want)
		}
	}
}

// raiseProcs only raises GOMAXPROCS, and the default thread count keeps
// following the process's start (startProcs), not the raised value: a
// second model of a run gets no more workers than the rank has cores.
func TestRaiseProcsKeepsThreads(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	runtime.GOMAXPROCS(1)
	modelsel.RaiseProcs(3)
	if got := runtime.GOMAXPROCS(0); got != 3 {
		t.Fatalf("raiseProcs(3) from 1: GOMAXPROCS %d", got)
	}
	modelsel.RaiseProcs(2)
	if got := runtime.GOMAXPROCS(0); got != 3 {
		t.Fatalf("raiseProcs(2) lowered GOMAXPROCS to %d", got)
	}
	defer func(p int) { modelsel.StartProcs = p }(modelsel.StartProcs)
	modelsel.StartProcs = 1 // as under mpirun --bind-to core
	model, _, _ := testModelSet(t)
	mc := modelCfg(t, t.TempDir()).Model
	mc.Threads = 0
	lm, err := modelsel.LoadLocal(mc, model, outdir.FileSHA(filepath.Join(model, "model.safetensors")), outdir.FileSHA(filepath.Join(model, "config.json")), 1)
	if err != nil {
		t.Fatal(err)
	}
	if want := 1; lm.Threads != want {
		t.Fatalf("default threads %d after GOMAXPROCS was raised to 3, want %d (from the start's %d)", lm.Threads, want, modelsel.StartProcs)
	}
	// The CPU detector raises GOMAXPROCS to its workers plus one.
	runtime.GOMAXPROCS(1)
	lm.Threads = 2
	if _, err := lm.Detector(lm.Labels()); err != nil {
		t.Fatal(err)
	}
	if got := runtime.GOMAXPROCS(0); got != cpu.Procs(2) || got != 3 {
		t.Fatalf("after a CPU detector of 2 threads: GOMAXPROCS %d, want 3", got)
	}
}
