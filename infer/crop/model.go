package crop

import (
	"context"
	"fmt"
	"math"
	"sync"

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
	filters cpu.Filters
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

// FilterBytes is the memory the CPU engine will add for the Winograd
// filters (0 once made).
func (n *Net) FilterBytes() int64 { return n.filters.Bytes(n.Body.Convs()) }

// Output is one crop's result: the logits (fc's output) and their
// softmax.
type Output struct {
	Logits, Probs []float32
}

// Best is the argmax of the probabilities (the first of equal maxima, as
// numpy's argmax) and its value: DeepForest's postprocess_predictions.
func (o Output) Best() (int, float32) {
	k := 0
	for i, p := range o.Probs {
		if p > o.Probs[k] {
			k = i
		}
	}
	return k, o.Probs[k]
}

// Runner classifies transformed crops on the CPU: workers goroutines, each
// with its own single-threaded engine, take whole crops, so a crop's bytes
// never depend on the worker count, the batch or its neighbours.
type Runner struct {
	net     *Net
	engines []*cpu.Engine
}

// NewRunner prepares the network's Winograd filters (once per Net) and
// makes workers engines.
func NewRunner(n *Net, workers int) *Runner {
	n.filters.Prepare(n.Body.Convs(), true)
	r := &Runner{net: n}
	for i := 0; i < max(workers, 1); i++ {
		r.engines = append(r.engines, cpu.NewEngine(1))
	}
	return r
}

// Workers is the runner's worker count.
func (r *Runner) Workers() int { return len(r.engines) }

// Run classifies a batch of transformed crops, each [3, h, w] in C order
// (Transform.Apply's output) with its size.
func (r *Runner) Run(ctx context.Context, xs [][]float32, size [2]int) ([]Output, error) {
	out := make([]Output, len(xs))
	for i, x := range xs {
		if len(x) != 3*size[0]*size[1] {
			return nil, fmt.Errorf("crop: input %d holds %d values, want 3×%d×%d", i, len(x), size[0], size[1])
		}
	}
	r.each(ctx, len(xs), func(e *cpu.Engine, i int) { out[i] = r.net.forward(e, xs[i], size) })
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := checkFinite(out); err != nil {
		return nil, err
	}
	return out, nil
}

// Classify transforms each raw crop with tr and classifies it: each
// worker takes whole crops (transform and network), in crop order.
func (r *Runner) Classify(ctx context.Context, tr Transform, crops []imagefile.Image) ([]Output, error) {
	if err := tr.check(); err != nil {
		return nil, err
	}
	out := make([]Output, len(crops))
	errs := make([]error, len(crops))
	r.each(ctx, len(crops), func(e *cpu.Engine, i int) {
		x, err := tr.Apply(crops[i].Pix, crops[i].W, crops[i].H)
		if err != nil {
			errs[i] = fmt.Errorf("crop %d: %w", i, err)
			return
		}
		out[i] = r.net.forward(e, x, tr.Size)
	})
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	if err := checkFinite(out); err != nil {
		return nil, err
	}
	return out, nil
}

// each runs f(engine, i) for i in [0, n) on the runner's workers, each i
// once, in increasing order of taking.
func (r *Runner) each(ctx context.Context, n int, f func(e *cpu.Engine, i int)) {
	var (
		mu   sync.Mutex
		next int
		wg   sync.WaitGroup
	)
	for _, e := range r.engines {
		wg.Add(1)
		go func(e *cpu.Engine) {
			defer wg.Done()
			for {
				mu.Lock()
				i := next
				next++
				mu.Unlock()
				if i >= n || ctx.Err() != nil {
					return
				}
				f(e, i)
			}
		}(e)
	}
	wg.Wait()
}

// forward runs one crop: the body to C5, the mean of each channel (in
// float64, rounded once), fc (float64 sums in channel order, rounded
// once) and the softmax (float64, rounded once).
func (n *Net) forward(e *cpu.Engine, x []float32, size [2]int) Output {
	in := e.Fmap(3, size[0], size[1])
	copy(in.D, x)
	c5 := resnet.Features[cpu.Fmap](n.Body, e, in, 5)[2]
	ch := c5.C
	hw := c5.H * c5.W
	pooled := make([]float64, ch)
	for c := 0; c < ch; c++ {
		var s float64
		for _, v := range c5.D[c*hw : (c+1)*hw] {
			s += float64(v)
		}
		pooled[c] = float64(float32(s / float64(hw)))
	}
	e.Put(c5)
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
	return o
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
