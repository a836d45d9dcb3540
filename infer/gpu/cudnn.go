package gpu

import (
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/canopy-hpc/canopy/infer/cuda"
	"github.com/canopy-hpc/canopy/infer/cuda/cudnn"
	"github.com/canopy-hpc/canopy/infer/nn"
)

// The cuDNN half of the GPU engine (--precision fp32, tf32, bf16): every
// convolution is one fused cuDNN graph (conv + folded-BN bias [+ the
// block's residual] [+ ReLU]) in NHWC, its engine pinned by a plan file or
// by the first eligible engine of cuDNN's heuristic (cudnn.Eligible: no
// NONDETERMINISTIC engine, no split reduction); max-pool, the FPN's
// top-down add and ReLU run as NHWC kernels (kernels/nhwc.cu). The input
// goes to NHWC on the device, and the heads' outputs come back to NCHW
// FP32, so what follows (postprocess, losses) is the exact engine's.
// Activations are FP32 (fp32, tf32) or BF16 (bf16; the heads' last
// convolutions write FP32).

// Options configures a GPURunner.
type Options struct {
	Precision cuda.Precision
	// CUDNN is the library (needed for fp32, tf32 and bf16).
	CUDNN *cudnn.Lib
	// Plans pins engines per layer shape (canopy gpu-plan); nil: the
	// heuristic's first eligible engine.
	Plans *cudnn.PlanFile
	// PlanSHA is the plan file's sha256, for the report.
	PlanSHA string
	// Timing makes the runner time every eligible engine of each new
	// layer shape, Repeat times each, and keep the fastest (gpu-plan only:
	// never at run time).
	Timing bool
	Repeat int
}

// DNN is the engine's cuDNN state: one handle on the device's stream, the
// weights in the graph's layout, a plan per layer shape, one workspace
// sized to the largest plan.
type DNN struct {
	o       Options
	math    cudnn.Math
	h       *cudnn.Handle
	wts     map[*nn.Conv][2]cuda.Ptr
	plans   map[string]*cudnn.Plan
	from    map[string]string // plan key → "plan file", "heuristic" or "timed"
	outF32  map[*nn.Conv]bool // the heads' last convolutions (BF16: FP32 out)
	ws      cuda.Ptr
	wsBytes int64
	// Layers records, by layer name, its plan key and engine (report).
	Layers map[string]LayerEngine
	timed  map[string]cudnn.LayerPlan // gpu-plan: what the timing chose
}

// LayerEngine is one layer's cuDNN engine, for the report.
type LayerEngine struct {
	Shape  string `json:"shape"`
	Engine string `json:"engine"`
	From   string `json:"from"` // "plan file", "heuristic" or "timed"
}

func mathOf(p cuda.Precision) cudnn.Math {
	switch p {
	case cuda.FP32:
		return cudnn.FP32
	case cuda.BF16:
		return cudnn.BF16
	}
	return cudnn.TF32
}

// NewDNN is the cuDNN state of an engine on dev as o says (o.CUDNN
// loaded); outF32 are the convolutions that write FP32 under BF16 (the
// network's last: RetinaNet's cls_logits and bbox_reg).
func NewDNN(dev cuda.Device, outF32 []*nn.Conv, o Options) (*DNN, error) {
	if o.CUDNN == nil {
		return nil, fmt.Errorf("retinanet: --precision %s runs on cuDNN, and no library was given", o.Precision)
	}
	d := &DNN{o: o, math: mathOf(o.Precision), wts: map[*nn.Conv][2]cuda.Ptr{}, plans: map[string]*cudnn.Plan{}, from: map[string]string{},
		outF32: map[*nn.Conv]bool{}, Layers: map[string]LayerEngine{}, timed: map[string]cudnn.LayerPlan{}}
	for _, c := range outF32 {
		d.outF32[c] = true
	}
	err := dev.WithStream(func(s uintptr) error {
		var err error
		d.h, err = o.CUDNN.NewHandle(s)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("retinanet: %w", err)
	}
	return d, nil
}

func (d *DNN) bf16() bool { return d.math == cudnn.BF16 }

// release frees the device memory and the plans (the handle stays).
func (d *DNN) release(dev cuda.Device) {
	for _, w := range d.wts {
		dev.Free(w[0])
		dev.Free(w[1])
	}
	d.wts = map[*nn.Conv][2]cuda.Ptr{}
	for _, p := range d.plans {
		p.Close()
	}
	d.plans = map[string]*cudnn.Plan{}
	if d.ws != 0 {
		dev.Free(d.ws)
		d.ws, d.wsBytes = 0, 0
	}
}

func (d *DNN) Close(dev cuda.Device) error {
	d.release(dev)
	var err error
	if d.h != nil {
		err = dev.WithStream(func(uintptr) error { return d.h.Close() })
		d.h = nil
	}
	return err
}

// BF16Bits rounds v to bfloat16 (nearest even, NaN kept), as the engine
// stores BF16.
func BF16Bits(v float32) uint16 {
	u := math.Float32bits(v)
	if u&0x7fffffff > 0x7f800000 {
		return uint16(u>>16) | 0x40
	}
	u += 0x7fff + (u>>16)&1
	return uint16(u >> 16)
}

// packBF16 packs values as BF16, two to a float32 word (little-endian),
// the device buffer's bytes.
func packBF16(v []float32) []float32 {
	out := make([]float32, (len(v)+1)/2)
	for i, f := range v {
		b := uint32(BF16Bits(f))
		w := math.Float32bits(out[i/2])
		if i%2 == 0 {
			w = w&0xffff0000 | b
		} else {
			w = w&0xffff | b<<16
		}
		out[i/2] = math.Float32frombits(w)
	}
	return out
}

// weights uploads c's filter in KRSC ([M, KH, KW, C], BF16 when the
// activations are) and its bias (FP32), once.
func (g *Engine) dnnWeights(c *nn.Conv) [2]cuda.Ptr {
	d := g.DNN
	if w, ok := d.wts[c]; ok {
		return w
	}
	krsc := make([]float32, len(c.W))
	for m := 0; m < c.Out; m++ {
		for ci := 0; ci < c.In; ci++ {
			for kh := 0; kh < c.KH; kh++ {
				for kw := 0; kw < c.KW; kw++ {
					krsc[((m*c.KH+kh)*c.KW+kw)*c.In+ci] = c.W[((m*c.In+ci)*c.KH+kh)*c.KW+kw]
				}
			}
		}
	}
	if d.bf16() {
		krsc = packBF16(krsc)
	}
	var w [2]cuda.Ptr
	for i, src := range [][]float32{krsc, c.B} {
		p, err := g.Dev.Alloc(len(src))
		g.Fail(err)
		if err == nil {
			g.Fail(g.Dev.Upload(p, src))
		}
		w[i] = p
	}
	d.wts[c] = w
	return w
}

// plan returns the plan of spec for layer c: from the plan file when it
// has the shape, else timed (gpu-plan) or the heuristic's.
func (g *Engine) dnnPlan(c *nn.Conv, spec cudnn.Conv) *cudnn.Plan {
	d := g.DNN
	key := spec.Key()
	if p, ok := d.plans[key]; ok {
		d.Layers[c.Name] = LayerEngine{Shape: key, Engine: p.Engine.String(), From: d.from[key]}
		return p
	}
	var pin *cudnn.Engine
	from := "heuristic"
	if d.o.Plans != nil {
		if lp, ok := d.o.Plans.Plans[key]; ok {
			e := lp.Engine
			pin, from = &e, "plan file"
		}
	}
	if pin == nil && d.o.Timing {
		e, lp, err := g.timeEngines(spec)
		if err != nil {
			g.Fail(err)
			return nil
		}
		lp.Layer = c.Name
		d.timed[key] = lp
		pin, from = &e, "timed"
	}
	var p *cudnn.Plan
	err := g.Dev.WithStream(func(uintptr) error {
		var err error
		p, err = d.h.NewPlan(spec, pin)
		return err
	})
	if err != nil {
		g.Fail(fmt.Errorf("retinanet: layer %s: %w", c.Name, err))
		return nil
	}
	d.plans[key], d.from[key] = p, from
	d.Layers[c.Name] = LayerEngine{Shape: key, Engine: p.Engine.String(), From: from}
	return p
}

// workspace makes the rank's one workspace hold n bytes (it grows to the
// largest plan's need, after the queued work that may use it).
func (g *Engine) workspace(n int64) cuda.Ptr {
	d := g.DNN
	if n <= d.wsBytes && d.ws != 0 {
		return d.ws
	}
	if d.ws != 0 {
		g.Fail(g.Dev.Sync())
		g.Dev.Free(d.ws)
	}
	p, err := g.Dev.Alloc(int((n + 3) / 4))
	g.Fail(err)
	d.ws, d.wsBytes = p, max(n, 4)
	return p
}

// timeEngines runs every eligible engine cuDNN's heuristic offers for
// spec on scratch buffers and returns the fastest (gpu-plan).
func (g *Engine) timeEngines(spec cudnn.Conv) (cudnn.Engine, cudnn.LayerPlan, error) {
	d := g.DNN
	var cands []cudnn.Candidate
	err := g.Dev.WithStream(func(uintptr) error {
		var err error
		cands, err = d.h.Candidates(spec)
		return err
	})
	if err != nil {
		return cudnn.Engine{}, cudnn.LayerPlan{}, err
	}
	oh, ow := spec.Out()
	half := 1
	if d.bf16() {
		half = 2
	}
	words := func(n int) int { return (n + half - 1) / half }
	var bufs [5]cuda.Ptr
	sizes := [5]int{words(spec.N * spec.C * spec.H * spec.W), words(spec.M * spec.C * spec.KH * spec.KW), spec.M, words(spec.N * spec.M * oh * ow), spec.N * spec.M * oh * ow}
	for i, n := range sizes {
		p, err := g.Dev.Alloc(n)
		if err != nil {
			return cudnn.Engine{}, cudnn.LayerPlan{}, err
		}
		g.Fail(g.Dev.Upload(p, make([]float32, n)))
		bufs[i] = p
		defer g.Dev.Free(p)
	}
	best, bestT, tried := cudnn.Engine{}, time.Duration(math.MaxInt64), 0
	for _, cd := range cands {
		if !cd.Eligible {
			continue
		}
		var p *cudnn.Plan
		if err := g.Dev.WithStream(func(uintptr) error {
			var err error
			p, err = d.h.NewPlan(spec, &cd.Engine)
			return err
		}); err != nil {
			continue // an engine that cannot take this graph
		}
		ws := g.workspace(p.Workspace)
		run := func() error {
			return g.Dev.WithStream(func(uintptr) error {
				return p.Execute(uintptr(bufs[0]), uintptr(bufs[1]), uintptr(bufs[2]), uintptr(bufs[3]), uintptr(bufs[4]), uintptr(ws))
			})
		}
		if err := run(); err != nil { // warm-up
			p.Close()
			continue
		}
		g.Fail(g.Dev.Sync())
		t0 := time.Now()
		for i := 0; i < max(d.o.Repeat, 1); i++ {
			g.Fail(run())
		}
		g.Fail(g.Dev.Sync())
		t := time.Since(t0) / time.Duration(max(d.o.Repeat, 1))
		p.Close()
		tried++
		if t < bestT {
			best, bestT = cd.Engine, t
		}
	}
	if tried == 0 {
		return cudnn.Engine{}, cudnn.LayerPlan{}, fmt.Errorf("retinanet: %s: no eligible engine ran (%d offered)", spec.Key(), len(cands))
	}
	return best, cudnn.LayerPlan{Engine: best, Millis: float64(bestT.Microseconds()) / 1000, Tried: tried}, nil
}

// dnnConv is conv on cuDNN: y = relu?(conv(x) + b [+ res]) in NHWC.
func (g *Engine) dnnConv(c *nn.Conv, x Map, relu bool, res *Map) Map {
	d := g.DNN
	oh := (x.H+2*c.Pad-c.KH)/c.Stride + 1
	ow := (x.W+2*c.Pad-c.KW)/c.Stride + 1
	outF32 := !d.bf16() || d.outF32[c]
	y := g.AllocAs(x.N, c.Out, oh, ow, !outF32)
	spec := cudnn.Conv{N: x.N, C: x.C, H: x.H, W: x.W, M: c.Out, KH: c.KH, KW: c.KW, Stride: c.Stride, Pad: c.Pad,
		Relu: relu, Residual: res != nil, Math: d.math, OutFP32: d.bf16() && outF32}
	w := g.dnnWeights(c)
	if g.Err != nil {
		return y
	}
	p := g.dnnPlan(c, spec)
	if g.Err != nil {
		return y
	}
	ws := g.workspace(p.Workspace)
	var r cuda.Ptr
	if res != nil {
		r = res.P
	}
	if g.Err == nil {
		g.Fail(g.Dev.WithStream(func(uintptr) error {
			return p.Execute(uintptr(x.P), uintptr(w[0]), uintptr(w[1]), uintptr(r), uintptr(y.P), uintptr(ws))
		}))
	}
	return y
}

// ToNHWC turns the uploaded NCHW FP32 batch into the cuDNN path's layout
// and type.
func (g *Engine) ToNHWC(x Map) Map {
	y := g.AllocAs(x.N, x.C, x.H, x.W, g.DNN.bf16())
	if g.Err == nil {
		g.Fail(g.Dev.NHWC(cuda.NHWCArgs{Op: cuda.ToNHWC, X: x.P, Y: y.P, N: x.N, C: x.C, H: x.H, W: x.W, BF16: y.Half}))
	}
	g.Put(x)
	return y
}

// ToNCHW turns an NHWC map into NCHW FP32 (the heads' outputs, and the
// levels of a trace).
func (g *Engine) ToNCHW(x Map) Map {
	if !x.NHWC {
		return x
	}
	y := Map{N: x.N, C: x.C, H: x.H, W: x.W, P: g.NCHWCopy(x)}
	g.Put(x)
	return y
}

// CUDNNReport is what the report records of the cuDNN path.
type CUDNNReport struct {
	Library   string `json:"library"`
	Version   int    `json:"version"`
	FoundBy   string `json:"found_by"`
	Plan      string `json:"plan"` // the plan file's sha256, or "heuristic"
	Workspace int64  `json:"workspace_bytes"`
	// Layers is each convolution's engine (the last shape it ran).
	Layers map[string]LayerEngine `json:"layers"`
}

// NCHWCopy returns a new NCHW FP32 allocation holding x (NHWC); x stays.
func (g *Engine) NCHWCopy(x Map) cuda.Ptr {
	y := g.Alloc(x.N, x.C, x.H, x.W)
	if g.Err == nil {
		g.Fail(g.Dev.NHWC(cuda.NHWCArgs{Op: cuda.ToNCHW, X: x.P, Y: y.P, N: x.N, C: x.C, H: x.H, W: x.W, BF16: x.Half}))
	}
	return y.P
}

// CUDNN reports the engine's cuDNN use (nil for exact and kernel-tf32).
func (g *Engine) CUDNN() *CUDNNReport {
	d := g.DNN
	if d == nil {
		return nil
	}
	plan := "heuristic"
	if d.o.PlanSHA != "" {
		plan = d.o.PlanSHA
	}
	out := &CUDNNReport{Library: d.o.CUDNN.Path, Version: d.o.CUDNN.Version, FoundBy: d.o.CUDNN.Where, Plan: plan, Workspace: d.wsBytes, Layers: map[string]LayerEngine{}}
	for k, v := range d.Layers {
		out.Layers[k] = v
	}
	return out
}

// TimedPlans returns what Timing chose per layer shape (gpu-plan), in
// key order.
func (g *Engine) TimedPlans() map[string]cudnn.LayerPlan {
	if g.DNN == nil {
		return nil
	}
	out := map[string]cudnn.LayerPlan{}
	keys := make([]string, 0, len(g.DNN.timed))
	for k := range g.DNN.timed {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		out[k] = g.DNN.timed[k]
	}
	return out
}
