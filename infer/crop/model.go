package crop

import (
	"context"
	"fmt"
	"math"

	"github.com/canopy-hpc/canopy/infer/cpu"
	"github.com/canopy-hpc/canopy/infer/imagefile"
	"github.com/canopy-hpc/canopy/infer/nn"
	"github.com/canopy-hpc/canopy/infer/resnet"
)

// Net is the classifier: torchvision's ResNet (infer/resnet's body),
// global average pooling, and fc (Linear(channels, classes)), in eval mode
// (batch norm folded into the convolutions).
type Net struct {
	Body    *resnet.Body
	Classes int
	fcW     []float32 // [Classes][Body.Channels[3]]
	fcB     []float32
	filters cpu.BatchFilters
}

// NewNet builds the classifier from a state dict with torchvision ResNet
// names (conv1, bn1, layer1..4, fc; a leading "model." already
// stripped). A missing, misshapen or unexpected tensor is an error naming
// it (torch's strict loading would refuse it too).
func NewNet(w nn.Weights) (*Net, error) {
	t := nn.NewTake(w, "crop: the weights do not fit a torchvision ResNet classifier")
	body, err := resnet.Load(t, "")
	if err != nil {
		return nil, fmt.Errorf("crop: %w", err)
	}
	ch := body.Channels[3]
	fc := t.Shape("fc.weight")
	if len(fc) != 2 || fc[0] < 1 || fc[0] > MaxClasses {
		t.Fail(fmt.Sprintf("fc.weight has shape %v, want [classes, %d]", fc, ch))
		fc = []int{1, ch}
	}
	n := &Net{Body: body, Classes: fc[0]}
	n.fcW = t.Get("fc.weight", n.Classes, ch)
	n.fcB = t.Get("fc.bias", n.Classes)
	if err := t.Err(); err != nil {
		return nil, err
	}
	return n, nil
}

// Arch is the body's name ("resnet50", "resnet18", ...).
func (n *Net) Arch() string { return n.Body.Arch }

// FCWeights are the fc layer's weights, [Classes][Body.Channels[3]] (the
// tests derive their probability tolerance from them); not to be changed.
func (n *Net) FCWeights() []float32 { return n.fcW }

// FilterBytes is the memory the CPU engine will add for the Winograd
// filters (0 once made): F(4×4,3×3)'s, 36 floats per 3×3 filter, the 3×3
// weights kept.
func (n *Net) FilterBytes() int64 { return n.filters.Bytes(n.Body.Convs()) }

// Output is one crop's result: the logits (fc's output) and their
// softmax.
type Output struct {
	Logits, Probs []float32
	// dev says label and score are the device's argmax (GPURunner).
	dev   bool
	label int
	score float32
}

// Best is the argmax of the probabilities (the first of equal maxima, as
// numpy's argmax) and its value: DeepForest's postprocess_predictions.
func (o Output) Best() (int, float32) {
	if o.dev {
		return o.label, o.score
	}
	return o.host()
}

// host is Best computed here.
func (o Output) host() (int, float32) {
	k := 0
	for i, p := range o.Probs {
		if p > o.Probs[k] {
			k = i
		}
	}
	return k, o.Probs[k]
}

// Runner classifies transformed crops on the CPU: Batch crops at a time,
// side by side in one cpu.Batch, through one BatchEngine of workers
// threads. A crop's bytes never depend on the worker count, the batch or
// its neighbours (cpu.BatchEngine: each value is one fused multiply-add
// chain of its own row and column), nor on the CPU's instruction set. A
// Runner is not safe for concurrent use.
type Runner struct {
	net *Net
	eng *cpu.BatchEngine
	// Batch is the most crops a forward pass takes at once (DefaultBatch).
	Batch int
}

// DefaultBatch is the crops per forward pass: 16 crops of 224×224 make
// the matrices of layer4 (7×7) 784 columns wide and its Winograd layers 64
// tiles, while the largest map (layer1's, 256×56×56 per crop) stays at
// 51 MB.
const DefaultBatch = 16

// NewRunner prepares the network's Winograd filters (once per Net) and
// an engine of workers threads.
func NewRunner(n *Net, workers int) *Runner {
	n.filters.Prepare(n.Body.Convs())
	return &Runner{net: n, eng: cpu.NewBatchEngine(workers), Batch: DefaultBatch}
}

// Workers is the runner's worker count.
func (r *Runner) Workers() int { return r.eng.Threads() }

// Run classifies a batch of transformed crops, each [3, h, w] in C order
// (Transform.Apply's output) with its size.
func (r *Runner) Run(ctx context.Context, xs [][]float32, size [2]int) ([]Output, error) {
	for i, x := range xs {
		if len(x) != 3*size[0]*size[1] {
			return nil, fmt.Errorf("crop: input %d holds %d values, want 3×%d×%d", i, len(x), size[0], size[1])
		}
	}
	return r.batches(ctx, len(xs), size, func(i int) ([]float32, error) { return xs[i], nil })
}

// Classify transforms each raw crop with tr and classifies it. Outputs
// are in crop order.
func (r *Runner) Classify(ctx context.Context, tr Transform, crops []imagefile.Image) ([]Output, error) {
	if err := tr.check(); err != nil {
		return nil, err
	}
	return r.batches(ctx, len(crops), tr.Size, func(i int) ([]float32, error) {
		x, err := tr.Apply(crops[i].Pix, crops[i].W, crops[i].H)
		if err != nil {
			return nil, fmt.Errorf("crop %d: %w", i, err)
		}
		return x, nil
	})
}

// batches runs n crops, r.Batch at a time: input(i) gives crop i's three
// planes (in parallel), which go to its place in the batch, then the
// network runs the batch.
func (r *Runner) batches(ctx context.Context, n int, size [2]int, input func(i int) ([]float32, error)) ([]Output, error) {
	out := make([]Output, 0, n)
	bs := max(r.Batch, 1)
	for lo := 0; lo < n; lo += bs {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		hi := min(lo+bs, n)
		x := r.eng.Batch(3, hi-lo, size[0], size[1])
		errs := make([]error, hi-lo)
		r.eng.Parallel(hi-lo, func(_, b int) {
			in, err := input(lo + b)
			if err == nil {
				x.SetImage(b, in)
			}
			errs[b] = err
		})
		for _, err := range errs {
			if err != nil {
				r.eng.Put(x)
				return nil, err
			}
		}
		out = append(out, r.net.forward(r.eng, x)...)
	}
	if err := checkFinite(out); err != nil {
		return nil, err
	}
	return out, nil
}

// forward runs a batch: the body to C5, then per crop the mean of each
// channel (in float64, rounded once), fc (float64 sums in channel order,
// rounded once) and the softmax (float64, rounded once).
func (n *Net) forward(e *cpu.BatchEngine, x cpu.Batch) []Output {
	c5 := resnet.Features[cpu.Batch](n.Body, e, x, 5)[2]
	out := n.outputs(c5)
	e.Put(c5)
	return out
}

// outputs is forward's head on C5: the pool, fc and softmax of each crop.
func (n *Net) outputs(c5 cpu.Batch) []Output {
	ch := c5.C
	out := make([]Output, c5.N)
	pooled := make([]float64, ch)
	for b := range out {
		pool(c5, b, pooled)
		o := Output{Logits: make([]float32, n.Classes), Probs: make([]float32, n.Classes)}
		for k := 0; k < n.Classes; k++ {
			s := float64(n.fcB[k])
			row := n.fcW[k*ch : (k+1)*ch]
			for c, w := range row {
				s += float64(w) * pooled[c]
			}
			o.Logits[k] = float32(s)
		}
		softmax(o.Logits, o.Probs)
		out[b] = o
	}
	return out
}

// pool is the global average pool of crop b of c5: the mean of each
// channel in float64 (its values in row-major order), rounded once to
// float32.
func pool(c5 cpu.Batch, b int, pooled []float64) {
	hw := c5.H * c5.W
	for c := range pooled {
		var s float64
		row := c5.D[c*hw*c5.N : (c+1)*hw*c5.N]
		for i := b; i < len(row); i += c5.N {
			s += float64(row[i])
		}
		pooled[c] = float64(float32(s / float64(hw)))
	}
}

// softmax is exp(z − max)/Σ in float64, rounded once per class.
func softmax(z, p []float32) {
	m := math.Inf(-1)
	for _, v := range z {
		m = math.Max(m, float64(v))
	}
	e := make([]float64, len(z))
	var s float64
	for i, v := range z {
		e[i] = math.Exp(float64(v) - m)
		s += e[i]
	}
	for i := range p {
		p[i] = float32(e[i] / s)
	}
}

// ClassifyWindows cuts the pieces from their sources (Cut) and classifies
// them (Classify): the CPU side of GPURunner.ClassifyWindows.
func (r *Runner) ClassifyWindows(ctx context.Context, tr Transform, imgs []imagefile.Image, ps []Piece) ([]Output, error) {
	if err := checkPieces(imgs, ps); err != nil {
		return nil, err
	}
	crops := make([]imagefile.Image, len(ps))
	for i, p := range ps {
		if p.Held != nil {
			return nil, fmt.Errorf("crop %d: cut from an image on the device, which the CPU engine cannot read", i)
		}
		crops[i] = Cut(imgs[p.Img], p.R)
	}
	return r.Classify(ctx, tr, crops)
}
