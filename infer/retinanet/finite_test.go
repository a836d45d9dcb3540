package retinanet

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/infer"
	"github.com/canopy-hpc/canopy/infer/cuda"
	"github.com/canopy-hpc/canopy/infer/imagefile"
	"github.com/canopy-hpc/canopy/infer/nn"
)

// hugeModel is smallModel's network with the named tensor's weights set to
// ±3e38 (finite, alternating signs): modelfile.CheckFinite passes them.
func hugeModel(t *testing.T, name string) *Model {
	t.Helper()
	w := generatedWeights(t, "resnet18", 2, 32, 7)
	src := w[name]
	d := make([]float32, len(src.Data))
	for i := range d {
		d[i] = 3e38
		if i%2 == 1 {
			d[i] = -3e38
		}
	}
	w[name] = nn.Tensor{Shape: src.Shape, Data: d}
	if math.IsInf(float64(d[0]), 0) || math.IsInf(float64(d[1]), 0) { // what modelfile.CheckFinite passes
		t.Fatalf("%g and %g are not finite float32s", d[0], d[1])
	}
	return smallModelOf(t, w)
}

// TestNonFiniteOutputs (issue 35, item 10): finite weights of ±3e38 in a
// head overflow float32; the forward pass is a model error naming the
// level, the head output and the first layer whose output overflowed,
// where it gave NaN scores, no boxes and NaN losses without a word. The
// same network with ordinary weights passes.
func TestNonFiniteOutputs(t *testing.T) {
	img := smallImages(1, 80, 64, 3)[0]
	targets := []Target{{Box: [4]float32{5, 5, 30, 30}, Label: 1}}
	if _, _, err := NewRunner(smallModel(t), 1).Check(img, targets, true); err != nil {
		t.Fatalf("ordinary weights: %v", err)
	}
	for _, c := range []struct{ tensor, first, output string }{
		{"head.classification_head.cls_logits.weight", "head.classification_head.cls_logits", "head.classification_head.cls_logits output"},
		{"head.regression_head.conv.1.0.weight", "head.regression_head.conv.1.0", "head.regression_head.bbox_reg output"},
		{"head.classification_head.conv.0.0.weight", "head.classification_head.conv.0.0", "head.classification_head.cls_logits output"},
	} {
		r := NewRunner(hugeModel(t, c.tensor), 1)
		for _, want := range []bool{false, true} {
			dets, loss, err := r.Check(img, targets, want)
			var ne *NonFiniteError
			if !errors.As(err, &ne) || !errors.Is(err, infer.ErrModel) {
				t.Fatalf("%s (loss %v): %v, %d boxes, loss %v: want a NonFiniteError", c.tensor, want, err, len(dets), loss)
			}
			if ne.First != c.first || ne.Output != c.output || ne.Level != 0 || dets != nil ||
				!strings.Contains(err.Error(), "at pyramid level P3") || !strings.Contains(err.Error(), c.first+" is the first layer") {
				t.Errorf("%s (loss %v): %v (first %q)", c.tensor, want, err, ne.First)
			}
		}
	}
	for _, l := range []box.Loss{{Classification: float32(math.Inf(1))}, {BoxRegression: float32(math.NaN())}} {
		if err := checkLoss(l); err == nil || !errors.Is(err, infer.ErrModel) || !strings.Contains(err.Error(), "loss is") {
			t.Errorf("loss %v: %v", l, err)
		}
	}
	if err := checkLoss(box.Loss{Classification: 3e38, BoxRegression: 1}); err != nil {
		t.Errorf("finite losses: %v", err)
	}
}

// TestGPUNonFiniteOutputs (issue 42): the GPU engine (on the host shim)
// refuses what the CPU refuses, a *NonFiniteError (exit 4), for predict
// (no losses) as for eval (losses), eagerly and by graph replay, through
// the runner and the detector. It checked only the losses: huge
// regression weights gave 300 boxes of NaN, huge classification weights
// boxes with score 1, without a word. checkResults refuses a non-finite
// box or score whatever the head outputs were.
func TestGPUNonFiniteOutputs(t *testing.T) {
	img := smallImages(1, 80, 64, 3)[0]
	targets := [][]Target{{{Box: [4]float32{5, 5, 30, 30}, Label: 1}}}
	for _, name := range []string{"head.classification_head.cls_logits.weight", "head.regression_head.conv.1.0.weight",
		"head.regression_head.bbox_reg.weight", "head.classification_head.conv.0.0.weight"} {
		m := hugeModel(t, name)
		if _, _, err := NewRunner(m, 1).Check(img, targets[0], false); !errors.Is(err, infer.ErrModel) {
			t.Fatalf("%s: the CPU gives %v", name, err)
		}
		gr := NewGPURunner(m, newTestDevice(t), cuda.Exact)
		for round := 0; round < 2; round++ { // the second replays the captured graph, where the device has one
			dets, err := gr.DetectBatch([]Image{img}, 1)
			var ne *NonFiniteError
			if !errors.As(err, &ne) || !errors.Is(err, infer.ErrModel) || dets != nil || ne.Level != 0 {
				t.Errorf("%s: GPU DetectBatch: %v, %d images' detections; want a NonFiniteError at P3", name, err, len(dets))
			}
			_, losses, err := gr.DetectBatchLoss([]Image{img}, targets, 1)
			if !errors.As(err, &ne) || losses != nil {
				t.Errorf("%s: GPU DetectBatchLoss: %v, losses %v; want a NonFiniteError", name, err, losses)
			}
		}
		if _, _, err := gr.DetectTrace(img); !errors.As(err, new(*NonFiniteError)) {
			t.Errorf("%s: GPU DetectTrace: %v; want a NonFiniteError", name, err)
		}
		d, err := NewGPUDetector(m, newTestDevice(t), cuda.Exact, []int32{0, 1})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := d.Detect(context.Background(), []infer.Input{{Path: "x.png", File: "x.png", Pixels: func() (imagefile.Image, error) {
			return imagefile.Image{W: img.W, H: img.H, Pix: img.Pix}, nil
		}}}); !errors.Is(err, infer.ErrModel) || !strings.Contains(err.Error(), "x.png") {
			t.Errorf("%s: GPU detector: %v; want a model error naming the batch", name, err)
		}
		d.Close()
	}
	for _, c := range []struct {
		d    Detection
		want string
	}{
		{Detection{Box: [4]float32{1, 2, float32(math.NaN()), 4}, Score: 0.5}, "detection box is NaN"},
		{Detection{Box: [4]float32{1, 2, 3, 4}, Score: float32(math.Inf(1))}, "detection score is +Inf"},
	} {
		if err := checkResults([][]Detection{{{Box: [4]float32{0, 0, 1, 1}, Score: 0.9}, c.d}}, nil); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.d, err, c.want)
		}
	}
	if err := checkResults([][]Detection{{{Box: [4]float32{0, 0, 1, 1}, Score: 0.9}}}, []box.Loss{{Classification: 1}}); err != nil {
		t.Errorf("finite results: %v", err)
	}
}
