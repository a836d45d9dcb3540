package retinanet

// Non-finite outputs (issue 35): weights that are finite but huge (±3e38
// in a head) overflow float32 in the forward pass; the scores are then NaN,
// no box passes the threshold and the losses are NaN, which DeepForest
// logs without a word. canopy stops instead: a model error (exit 4) naming
// the pyramid level, the head output and, on the CPU, the first layer whose
// output overflowed.

import (
	"fmt"
	"math"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/infer"
	"github.com/canopy-hpc/canopy/infer/cpu"
	"github.com/canopy-hpc/canopy/infer/nn"
)

// NonFiniteError is a forward pass whose head outputs or losses hold NaN
// or ±Inf. It matches infer.ErrModel.
type NonFiniteError struct {
	// Output names what is not finite: a head output
	// ("head.classification_head.cls_logits") or a loss; Level is its
	// pyramid level (0 for P3; -1 for a loss); Value the first such value.
	Output string
	Level  int
	Value  float64
	// First is the first layer (in execution order) whose output is not
	// finite, when the CPU engine looked for it ("" otherwise).
	First string
}

func (e *NonFiniteError) Error() string {
	at := ""
	if e.Level >= 0 {
		at = fmt.Sprintf(" at pyramid level P%d", e.Level+3)
	}
	first := ""
	if e.First != "" {
		first = fmt.Sprintf("; %s is the first layer whose output is not finite", e.First)
	}
	return fmt.Sprintf("retinanet: the network's %s is %v%s%s: float32 overflowed, the weights give no usable scores (DeepForest would detect nothing and log NaN losses)", e.Output, e.Value, at, first)
}

// Unwrap makes the error a model error (exit 4).
func (e *NonFiniteError) Unwrap() error { return infer.ErrModel }

// check is the level's head outputs checked (L: the level, 0 for P3).
func (lo levelOut) check(L int) error {
	for _, o := range [...]struct {
		name string
		d    []float32
	}{{"head.classification_head.cls_logits output", lo.cls.D}, {"head.regression_head.bbox_reg output", lo.reg.D}} {
		if i := nn.FirstNonFinite(o.d); i >= 0 {
			return &NonFiniteError{Output: o.name, Level: L, Value: float64(o.d[i])}
		}
	}
	return nil
}

// checkLoss refuses losses that are not finite (outputs finite but so
// large that the focal loss's sums overflow).
func checkLoss(l box.Loss) error {
	for _, v := range [...]struct {
		name string
		v    float32
	}{{"classification loss", l.Classification}, {"box regression loss", l.BoxRegression}} {
		if f := float64(v.v); math.IsNaN(f) || math.IsInf(f, 0) {
			return &NonFiniteError{Output: v.name, Level: -1, Value: f}
		}
	}
	return nil
}

// checkResults refuses detections whose boxes or scores, and losses,
// that are not finite (the GPU engine's results, whatever its head
// outputs gave).
func checkResults(dets [][]Detection, losses []box.Loss) error {
	for _, ds := range dets {
		for _, d := range ds {
			if i := nn.FirstNonFinite(d.Box[:]); i >= 0 {
				return &NonFiniteError{Output: "detection box", Level: -1, Value: float64(d.Box[i])}
			}
			if nn.FirstNonFinite([]float32{d.Score}) >= 0 {
				return &NonFiniteError{Output: "detection score", Level: -1, Value: float64(d.Score)}
			}
		}
	}
	for _, l := range losses {
		if err := checkLoss(l); err != nil {
			return err
		}
	}
	return nil
}

// watched is the CPU engine noting the first layer whose output is not
// finite.
type watched struct {
	*cpu.Engine
	first string
}

func (w *watched) Conv(c *nn.Conv, x cpu.Fmap, relu bool, res *cpu.Fmap) cpu.Fmap {
	y := w.Engine.Conv(c, x, relu, res)
	if w.first == "" && nn.FirstNonFinite(y.D) >= 0 {
		w.first = c.Name
	}
	return y
}

func (w *watched) UpsampleAdd(lat, top cpu.Fmap) {
	w.Engine.UpsampleAdd(lat, top)
	if w.first == "" && nn.FirstNonFinite(lat.D) >= 0 {
		w.first = "the FPN's top-down addition"
	}
}

// firstBadLayer runs img again, watching every layer's output, and names
// the first that is not finite ("" if none: the forward pass is
// deterministic, so it finds the layer the checked run overflowed in).
func (m *Model) firstBadLayer(e *cpu.Engine, img Image) string {
	e.ReuseFor(img.H, img.W)
	w := &watched{Engine: e}
	x, _, _ := normalizeResizePad(e, img, m.Opt)
	p := features[cpu.Fmap](m, w, x)
	for L := 0; L < 5 && w.first == ""; L++ {
		cls, reg := head[cpu.Fmap](m, w, p[L])
		w.Put(cls, reg)
	}
	w.Put(p[:]...)
	return w.first
}
