package crop

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/canopy-hpc/canopy/infer"
	"github.com/canopy-hpc/canopy/infer/gemm"
	"github.com/canopy-hpc/canopy/infer/imagefile"
	"github.com/canopy-hpc/canopy/internal/testsupport/approx"
	"github.com/canopy-hpc/canopy/internal/testsupport/croptol"
	"github.com/canopy-hpc/canopy/internal/testsupport/torchckpt"
)

var (
	parityOnce  sync.Once
	parityFiles torchckpt.CropFiles
	parityErr   error
)

func parity(t testing.TB) (*parityFixture, torchckpt.CropFiles) {
	t.Helper()
	fx := readParity(t)
	parityOnce.Do(func() {
		dir, err := os.MkdirTemp("", "canopy-crop-parity")
		if err != nil {
			parityErr = err
			return
		}
		parityFiles, parityErr = torchckpt.CropParity("../..", dir)
	})
	if parityErr != nil {
		t.Fatal(parityErr)
	}
	return fx, parityFiles
}

func TestMain(m *testing.M) {
	code := m.Run()
	if parityFiles.Dir != "" {
		os.RemoveAll(parityFiles.Dir)
	}
	os.Exit(code)
}

// rowCrops reads the crops of the fixture's predict_tile rows from the
// raster, as BoundingBoxDataset reads them (expand 0).
func rowCrops(t *testing.T, fx *parityFixture, pf torchckpt.CropFiles) []imagefile.Image {
	t.Helper()
	img, err := imagefile.Read(pf.Tile)
	if err != nil {
		t.Fatal(err)
	}
	var crops []imagefile.Image
	for _, r := range fx.Tile.Rows {
		b := [4]float64{r[0].(float64), r[1].(float64), r[2].(float64), r[3].(float64)}
		w, err := Window(b[0], b[1], b[2], b[3], 0, img.W, img.H)
		if err != nil {
			t.Fatal(err)
		}
		crops = append(crops, Cut(img, w))
	}
	return crops
}

// probTolerance is how far a probability may be from torch's on these
// crops: croptol.ProbTolerance (derived there) of m's network.
func probTolerance(t *testing.T, m *Model, crops []imagefile.Image) float64 {
	t.Helper()
	n := m.Net()
	tol, eps, scale, err := croptol.ProbTolerance(croptol.Net{Body: n.Body, FCW: n.fcW, Classes: n.Classes, Apply: m.Transform.Apply, Size: m.Transform.Size}, crops)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: ε = %.3g, largest logit scale %.3g: probabilities within %.3g", n.Arch(), eps, scale, tol)
	return tol
}

// TestClassifierMatchesDeepForest: the parity CropModel (ResNet-50, saved
// by DeepForest as a Lightning checkpoint) and the ResNet-18 state dict
// give, on the crops of DeepForest's predict_tile rows, torch's softmax
// within probTolerance and DeepForest's cropmodel_label; the checkpoint,
// the hub folder and the .pt with --crop-label-dict give the same bytes.
func TestClassifierMatchesDeepForest(t *testing.T) {
	fx, pf := parity(t)
	crops := rowCrops(t, fx, pf)
	ctx := context.Background()
	ckpt, err := Load(pf.Ckpt, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(ckpt.Labels(), ","); got != "Alive,Dead,Snag" || ckpt.Form != FormCheckpoint || ckpt.Arch() != "resnet50" {
		t.Fatalf("checkpoint: labels %s, form %s, arch %s", got, ckpt.Form, ckpt.Arch())
	}
	out, err := ckpt.Classify(ctx, crops, 2)
	if err != nil {
		t.Fatal(err)
	}
	worst := 0.0
	for i, o := range out {
		k, score := o.Best()
		if got, want := ckpt.Labels()[k], fx.Tile.Rows[i][6].(string); got != want {
			t.Errorf("row %d: cropmodel_label %s, DeepForest %s (probs %v, torch %v)", i, got, want, o.Probs, fx.Tile.Probs50[i])
		}
		worst = max(worst, approx.Diff(float64(score), fx.Tile.Rows[i][7].(float64)))
		for c, p := range o.Probs {
			worst = max(worst, approx.Diff(float64(p), fx.Tile.Probs50[i][c]))
		}
	}
	t.Logf("ResNet-50: %d crops, probabilities within %.3g of torch's", len(out), worst)
	if tol := probTolerance(t, ckpt, crops); approx.Far(worst, tol) {
		t.Errorf("ResNet-50 probabilities differ from torch's by %g; want within %.3g", worst, tol)
	}

	labels2 := map[string]int{"Alive": 0, "Dead": 1, "Snag": 2}
	for _, alt := range []struct {
		path string
		opts Options
		form Form
	}{{pf.Hub, Options{}, FormHub}, {pf.PT, Options{LabelDict: labels2}, FormStateDict}, {pf.Ckpt, Options{LabelDict: labels2}, FormCheckpoint}} {
		m, err := Load(alt.path, alt.opts)
		if err != nil {
			t.Fatalf("%s: %v", alt.path, err)
		}
		got, err := m.Classify(ctx, crops, 3)
		if err != nil {
			t.Fatal(err)
		}
		if m.Form != alt.form || !sameOutputs(got, out) {
			t.Errorf("%s (%s): not the checkpoint's outputs", alt.path, m.Form)
		}
	}

	r18, err := Load(pf.R18, Options{LabelDict: map[string]int{"a": 0, "b": 1}})
	if err != nil {
		t.Fatal(err)
	}
	if r18.Arch() != "resnet18" {
		t.Fatalf("arch %s", r18.Arch())
	}
	o18, err := r18.Classify(ctx, crops, 1)
	if err != nil {
		t.Fatal(err)
	}
	worst, flips := 0.0, 0
	for i, o := range o18 {
		k, _ := o.Best()
		want := 0
		if fx.Tile.Probs18[i][1] > fx.Tile.Probs18[i][0] {
			want = 1
		}
		if k != want {
			flips++
		}
		for c, p := range o.Probs {
			worst = max(worst, approx.Diff(float64(p), fx.Tile.Probs18[i][c]))
		}
	}
	t.Logf("ResNet-18: %d crops, probabilities within %.3g of torch's", len(o18), worst)
	if tol := probTolerance(t, r18, crops); approx.Far(worst, tol) || flips > 0 {
		t.Errorf("ResNet-18: probabilities within %g of torch's, %d argmax differ; want %.3g and none", worst, flips, tol)
	}
}

func sameOutputs(a, b []Output) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		for k := range a[i].Probs {
			if math.Float32bits(a[i].Probs[k]) != math.Float32bits(b[i].Probs[k]) || math.Float32bits(a[i].Logits[k]) != math.Float32bits(b[i].Logits[k]) {
				return false
			}
		}
	}
	return true
}

// TestLoadBadModels: item 8's model errors, each an infer.ErrModel that
// says what is wrong.
func TestLoadBadModels(t *testing.T) {
	_, pf := parity(t)
	det := filepath.Join(pf.Dir, "detector.pt")
	if err := torchckpt.RebuildFile(filepath.Join("../..", torchckpt.Skeletons), "model.pt", det); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		path string
		opts Options
		want string
	}{
		{pf.PT, Options{}, "--crop-label-dict"},
		{pf.PT, Options{LabelDict: map[string]int{"a": 0, "b": 1}}, "3 classes"},
		{pf.Ckpt, Options{LabelDict: map[string]int{"Alive": 0, "Dead": 1, "Tree": 2}}, "but --crop-label-dict gives"},
		{det, Options{LabelDict: map[string]int{"Tree": 0}}, "is a RetinaNet detector"},
		{filepath.Join(pf.Dir, "missing.pt"), Options{}, "no such file"},
		// torch.save of a checkpoint whose hyper_parameters hold an
		// OmegaConf DictConfig (CropModel(config=...)).
		{"testdata/omegaconf.ckpt", Options{}, "save it with save_pretrained"},
	}
	for _, c := range cases {
		_, err := Load(c.path, c.opts)
		if err == nil || !errors.Is(err, infer.ErrModel) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %v: error %v, want an ErrModel naming %q", filepath.Base(c.path), c.opts.LabelDict, err, c.want)
		}
	}
	if !Probe(pf.Ckpt) || !Probe(pf.Hub) || Probe(det) {
		t.Errorf("Probe: checkpoint %v, hub %v, detector %v; want true, true, false", Probe(pf.Ckpt), Probe(pf.Hub), Probe(det))
	}
}

// TestClassifyIndependentOfWorkers: a crop's bytes do not depend on the
// worker count, on the other crops of the call, on the batch size (its
// place in a batch) or on the kernels' instruction set (generic, AVX2,
// AVX-512: CANOPY_SIMD).
func TestClassifyIndependentOfWorkers(t *testing.T) {
	fx, pf := parity(t)
	crops := rowCrops(t, fx, pf)[:6]
	m, err := Load(pf.R18, Options{LabelDict: map[string]int{"a": 0, "b": 1}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	one, err := m.Classify(ctx, crops, 1)
	if err != nil {
		t.Fatal(err)
	}
	three, err := m.Classify(ctx, crops, 3)
	if err != nil {
		t.Fatal(err)
	}
	alone, err := m.Classify(ctx, crops[4:5], 2)
	if err != nil {
		t.Fatal(err)
	}
	if !sameOutputs(one, three) || !sameOutputs(one[4:5], alone) {
		t.Error("the outputs depend on the workers or on the batch")
	}
	r := NewRunner(m.Net(), 2)
	r.Batch = 4 // batches of 4 and 2: crop 4 first in its batch
	four, err := r.Classify(ctx, m.Transform, crops)
	if err != nil {
		t.Fatal(err)
	}
	if !sameOutputs(one, four) {
		t.Error("the outputs depend on the batch size")
	}
	defer gemm.SetSIMD(gemm.Kernels())
	for s := gemm.Generic; s <= gemm.BestKernels(); s++ {
		if s == gemm.Generic && testing.Short() {
			continue // the generic clone's fmaf is slow
		}
		if err := gemm.SetSIMD(s); err != nil {
			t.Fatal(err)
		}
		got, err := m.Classify(ctx, crops[:2], 2)
		if err != nil {
			t.Fatal(err)
		}
		if !sameOutputs(one[:2], got) {
			t.Errorf("kernels %s: not the bytes of kernels %s", s, gemm.BestKernels())
		}
	}
}

// TestWindowRules: DeepForest's windows (int truncation, max(1, ·),
// expand clamped) and rasterio's clipping; a box off the image is ErrBox.
func TestWindowRules(t *testing.T) {
	cases := []struct {
		b      [4]float64
		expand int
		want   Rect
	}{
		{[4]float64{10.7, 3.2, 50.2, 9.9}, 0, Rect{10, 3, 39, 6}},
		{[4]float64{5, 5, 5.5, 6}, 0, Rect{5, 5, 1, 1}},
		{[4]float64{90, 40, 120, 60}, 0, Rect{90, 40, 10, 10}},
		{[4]float64{-5, 0, 5, 10}, 0, Rect{0, 0, 5, 10}},
		{[4]float64{2, 3, 20, 30}, 4, Rect{0, 0, 24, 34}},
		{[4]float64{95, 45, 99, 49}, 10, Rect{85, 35, 15, 15}},
	}
	for _, c := range cases {
		got, err := Window(c.b[0], c.b[1], c.b[2], c.b[3], c.expand, 100, 50)
		if err != nil || got != c.want {
			t.Errorf("%v expand %d: %+v, %v; want %+v", c.b, c.expand, got, err, c.want)
		}
	}
	for _, b := range [][4]float64{{100, 0, 110, 10}, {0, -20, 10, -10}, {math.NaN(), 0, 1, 1}, {0, 0, math.Inf(1), 1}} {
		if _, err := Window(b[0], b[1], b[2], b[3], 0, 100, 50); !errors.Is(err, ErrBox) {
			t.Errorf("%v: error %v, want ErrBox", b, err)
		}
	}
	if !ZeroSize(3, 4, 3, 9) || !ZeroSize(3, 4, 8, 4) || ZeroSize(3, 4, 3.5, 9) {
		t.Error("ZeroSize")
	}
}
