package retinanet

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/infer"
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
