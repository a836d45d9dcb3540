package retinanet

import (
	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/infer/cpu"
	"github.com/canopy-hpc/canopy/infer/nn"
)

// Runner runs a Model with a fixed number of worker threads, reusing its
// buffers across images. A Runner is not safe for concurrent use; the
// results do not depend on the thread count.
type Runner struct {
	m *Model
	e *cpu.Engine
}

// NewRunner returns a Runner with threads workers (at least 1). The first
// Runner of a model transforms its Winograd filters (prepareCPU) and keeps
// the model's weights, so it may still run on a GPU.
func NewRunner(m *Model, threads int) *Runner { return newRunner(m, threads, false) }

// newRunner is NewRunner; with release (the CPU detector), the model's
// first runner drops the 3×3 weights its Winograd filters replace.
func newRunner(m *Model, threads int, release bool) *Runner {
	m.prepareCPU(release)
	return &Runner{m: m, e: cpu.NewEngine(threads)}
}

// Model is the runner's model.
func (r *Runner) Model() *Model { return r.m }

// Threads is the worker count.
func (r *Runner) Threads() int { return r.e.Threads() }

// Detect runs one image (padded on its own to a multiple of 32); nil when
// the network's outputs are not finite (Check says why).
func (r *Runner) Detect(img Image) []Detection {
	d, _, _ := r.m.detect(r.e, img, nil, nil, false)
	return d
}

// DetectLoss is Detect that also computes the image's validation losses
// against targets (in original pixels; none for an empty frame) from the
// same forward pass, as torchvision's RetinaNet does in train mode.
func (r *Runner) DetectLoss(img Image, targets []Target) ([]Detection, box.Loss) {
	d, l, _ := r.m.detect(r.e, img, nil, targets, true)
	return d, l
}

// Check is Detect (want false) or DetectLoss (want true) that returns a
// *NonFiniteError when the head outputs or the losses are NaN or ±Inf.
func (r *Runner) Check(img Image, targets []Target, want bool) ([]Detection, box.Loss, error) {
	return r.m.detect(r.e, img, nil, targets, want)
}

// DetectTrace is Detect that also records the transform sizes and the
// pyramid levels.
func (r *Runner) DetectTrace(img Image) ([]Detection, *Trace) {
	tr := &Trace{}
	d, _, _ := r.m.detect(r.e, img, tr, nil, false)
	return d, tr
}

// EnableLayerTimes makes the Runner time every layer group (a little
// overhead per layer; off by default).
func (r *Runner) EnableLayerTimes() {
	r.e.Times = nn.NewTimes()
}

// LayerTimes returns the times so far, slowest first (nil when not
// enabled).
func (r *Runner) LayerTimes() []nn.LayerTime { return r.e.Times.List() }
