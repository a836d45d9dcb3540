package treeformer

import (
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/canopy-hpc/canopy/infer/cuda"
	"github.com/canopy-hpc/canopy/infer/cuda/kernels"
	"github.com/canopy-hpc/canopy/infer/gpu"
	"github.com/canopy-hpc/canopy/infer/nn"
	"github.com/canopy-hpc/canopy/infer/tile"
)

// The GPU engine's TreeFormer (docs/design.md, "TreeFormer on the GPU"):
// the same network as forward.go, one window at a time, on infer/gpu's
// Engine. Every GEMM with weights is a convolution of the engine: the
// patch embeddings and the decoder's 3×3 convs as they are, the spatial
// reduction as its r×r stride-r conv, and the query, key/value, output,
// fc1 and fc2 linears as 1×1 convs (bias and the block's residual fused
// in the epilogue): canopy's kernels (exact, kernel-tf32; NCHW) or cuDNN
// (fp32, tf32; NHWC, which is the CPU's token-major layout). The rest are
// kernels.cu's tf_* kernels, each the CPU kernel's operation sequence
// (the same bits on the host shim: gpu_test.go): LayerNorm, the
// depthwise 3×3 with GELU, bilinear ×2, the channel attention, and the
// attention itself as two strided batched GEMMs (FP32 fmaf chains, under
// tf32 too) around a float32 softmax. Only proj1's channel means (the
// count head, 256 values) and the density map come back to the host,
// where the count, the crop and the normalisation are forward.go's code.

// ErrGPUPrecision refuses --precision bf16 for a point model.
var ErrGPUPrecision = errors.New("treeformer: a point model runs on the GPU at --precision exact, kernel-tf32, fp32 or tf32 (bf16 is the box detectors')")

// gpuBlock is a block's linears as the engine's convolutions.
type gpuBlock struct{ q, kv, proj, sr, fc1, fc2 *nn.Conv }

// GPURunner runs a Model on a cuda.Device, one window per forward. Not
// safe for concurrent use.
type GPURunner struct {
	m      *Model
	g      *gpu.Engine
	blocks [4][]gpuBlock
	vecs   map[*float32]cuda.Ptr // LayerNorm, depthwise and gate weights, uploaded once
	Trace  Trace
}

// NewGPURunner runs m on dev as o says (o.CUDNN for fp32 and tf32). The
// weights are uploaded on the first window.
func NewGPURunner(m *Model, dev cuda.Device, o gpu.Options) (*GPURunner, error) {
	if o.Precision == cuda.BF16 {
		return nil, ErrGPUPrecision
	}
	g := gpu.NewEngine(dev, o.Precision)
	if o.Precision.Cudnn() {
		d, err := gpu.NewDNN(dev, nil, o)
		if err != nil {
			return nil, err
		}
		g.DNN = d
	}
	r := &GPURunner{m: m, g: g, vecs: map[*float32]cuda.Ptr{}}
	for i := range m.stages {
		s := &m.stages[i]
		for b := range s.blocks {
			bl := &s.blocks[b]
			n := "backbone." + strconv.Itoa(i) + "." + strconv.Itoa(b) + "."
			gb := gpuBlock{q: linearConv(n+"q", &bl.q), kv: linearConv(n+"kv", &bl.kv), proj: linearConv(n+"proj", &bl.proj),
				fc1: linearConv(n+"fc1", &bl.fc1), fc2: linearConv(n+"fc2", &bl.fc2)}
			if s.sr > 1 {
				gb.sr = srConv(n+"sr", &bl.sr, s.width, s.sr)
			}
			r.blocks[i] = append(r.blocks[i], gb)
		}
	}
	return r, nil
}

// linearConv is l as a 1×1 convolution (W [Out][In]).
func linearConv(name string, l *linear) *nn.Conv {
	c := &nn.Conv{Name: name, Out: l.Out, In: l.In, KH: 1, KW: 1, Stride: 1, W: make([]float32, l.In*l.Out), B: l.B}
	for i := 0; i < l.In; i++ {
		for o := 0; o < l.Out; o++ {
			c.W[o*l.In+i] = l.Wt[i*l.Out+o]
		}
	}
	return c
}

// srConv is the spatial reduction as its r×r stride-r convolution (the
// GEMM's rows are (ky, kx, c) patches: model.go).
func srConv(name string, l *linear, c, r int) *nn.Conv {
	cv := &nn.Conv{Name: name, Out: c, In: c, KH: r, KW: r, Stride: r, W: make([]float32, r*r*c*c), B: l.B}
	for o := 0; o < c; o++ {
		for ci := 0; ci < c; ci++ {
			for ky := 0; ky < r; ky++ {
				for kx := 0; kx < r; kx++ {
					cv.W[((o*c+ci)*r+ky)*r+kx] = l.Wt[((ky*r+kx)*c+ci)*c+o]
				}
			}
		}
	}
	return cv
}

// Device is the runner's device.
func (r *GPURunner) Device() cuda.Device { return r.g.Dev }

// Precision is the runner's convolution precision.
func (r *GPURunner) Precision() cuda.Precision { return r.g.Prec }

// CUDNN reports the cuDNN path's library and engines (nil off it).
func (r *GPURunner) CUDNN() *gpu.CUDNNReport { return r.g.CUDNN() }

// Close frees the device memory the runner holds (not the device).
func (r *GPURunner) Close() error {
	for _, p := range r.vecs {
		r.g.Dev.Free(p)
	}
	r.vecs = map[*float32]cuda.Ptr{}
	r.g.Close()
	return r.g.Err
}

// vec is v on the device, uploaded on first use.
func (r *GPURunner) vec(v []float32) cuda.Ptr {
	if p, ok := r.vecs[&v[0]]; ok {
		return p
	}
	p, err := r.g.Dev.Alloc(len(v))
	r.g.Fail(err)
	if err == nil {
		r.g.Fail(r.g.Dev.Upload(p, v))
	}
	r.vecs[&v[0]] = p
	return p
}

// like is a map of c channels over h×w in x's layout.
func (r *GPURunner) like(x gpu.Map, c, h, w int) gpu.Map {
	if x.NHWC {
		return r.g.AllocAs(1, c, h, w, false)
	}
	return r.g.Alloc(1, c, h, w)
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// strides are (channel, position) strides of x's layout.
func strides(x gpu.Map) (cs, ps int64) {
	if x.NHWC {
		return 1, int64(x.C)
	}
	return int64(x.H * x.W), 1
}

// layerNorm queues LayerNorm over x's channels into y (y may be x).
func (r *GPURunner) layerNorm(x, y gpu.Map, ln layerNorm) {
	p := x.H * x.W
	r.g.LaunchN(kernels.TFLayerNorm, p, x.P, y.P, r.vec(ln.G), r.vec(ln.B), p, x.C, b2i(x.NHWC), float64(LNEps))
}

// traceMap gives the trace x in CHW, or in token-major rows (tokens).
func (r *GPURunner) traceMap(name string, x gpu.Map, tokens bool) {
	if r.Trace == nil {
		return
	}
	v := r.g.Download(x)
	if !tokens {
		r.Trace(name, []int{1, x.C, x.H, x.W}, v)
		return
	}
	n := x.H * x.W
	tok := make([]float32, len(v))
	toTokens(func(k int, f func(int, int)) {
		for j := 0; j < k; j++ {
			f(0, j)
		}
	}, v, x.C, n, tok)
	r.Trace(name, []int{1, n, x.C}, tok)
}

func (r *GPURunner) trace(name string, v []float32, shape ...int) {
	if r.Trace != nil {
		r.Trace(name, shape, v)
	}
}

// Forward runs the network on window win of im, as Runner.Forward.
func (r *GPURunner) Forward(im Image, win tile.Window) (Density, error) {
	h, w := win.H, win.W
	if err := checkWindow(im, win); err != nil {
		return Density{}, err
	}
	g := r.g
	x, ph, pw := Normalize(im, win)
	r.trace("input", x, 1, 3, ph, pw)
	g.ReuseFor(1, ph, pw)
	in := g.Alloc(1, 3, ph, pw)
	g.UploadAsync(in.P, x)
	if g.DNN != nil {
		in = g.ToNHWC(in)
	}
	feats := r.backbone(in)
	gap := g.Scratch(feats[1].C)
	g.LaunchN(kernels.TFChanMean, feats[1].C, feats[1].P, gap.P, feats[1].C, int64(feats[1].H*feats[1].W), b2i(feats[1].NHWC))
	y0 := r.decoder(feats)
	means := make([]float32, feats[1].C)
	if g.Err == nil {
		g.Fail(g.Dev.Download(means, gap.P))
	}
	den := g.Download(y0)
	g.Put(gap, y0)
	if g.Err != nil {
		return Density{}, fmt.Errorf("treeformer: GPU forward: %w", g.Err)
	}
	count := r.m.countHead(means, h, w, r.trace)
	return densityOf(den, y0.W, h, w, ph, pw, count), nil
}

// backbone runs the four PvT stages and returns their projections.
func (r *GPURunner) backbone(x gpu.Map) [4]gpu.Map {
	g := r.g
	var feats [4]gpu.Map
	for i := range r.m.stages {
		s := &r.m.stages[i]
		y := g.Conv(s.embed, x, false, nil)
		g.Put(x)
		r.layerNorm(y, y, s.embedLN)
		r.traceMap(fmt.Sprintf("embed%d", i), y, true)
		for b := range s.blocks {
			y = r.block(s, &s.blocks[b], &r.blocks[i][b], y)
			if b == 0 {
				r.traceMap(fmt.Sprintf("block%d_0", i), y, true)
			}
		}
		r.layerNorm(y, y, s.ln)
		r.traceMap(fmt.Sprintf("stage%d", i), y, false)
		feats[i] = g.Conv(r.m.proj[i], y, false, nil)
		r.traceMap(fmt.Sprintf("proj%d", i), feats[i], false)
		x = y
	}
	g.Put(x)
	return feats
}

// block is PvtV2BlockLayer on the device (forward.go's block).
func (r *GPURunner) block(s *stage, bl *block, gb *gpuBlock, h gpu.Map) gpu.Map {
	g := r.g
	c, n := s.width, h.H*h.W
	t := r.like(h, c, h.H, h.W)
	r.layerNorm(h, t, bl.ln1)
	q := g.Conv(gb.q, t, false, nil)
	kvIn := t
	if gb.sr != nil {
		kvIn = g.Conv(gb.sr, t, false, nil)
		r.layerNorm(kvIn, kvIn, bl.srLN)
	}
	kv := g.Conv(gb.kv, kvIn, false, nil)
	if kvIn.P != t.P {
		g.Put(kvIn)
	}
	m := kv.H * kv.W
	d := c / s.heads
	// scores[hd][i][j] = Σ_k q[i][hd·d+k]·k[j][hd·d+k]
	sc := g.Scratch(s.heads * n * m)
	qc, qp := strides(q)
	kc, kp := strides(kv)
	g.LaunchN(kernels.TFGemm, s.heads*n*m, q.P, kv.P, sc.P, s.heads, n, m, d,
		int64(0), int64(d)*qc, qp, qc,
		int64(0), int64(d)*kc, kc, kp,
		int64(0), int64(n*m), int64(m), int64(1))
	g.LaunchN(kernels.TFSoftmax, s.heads*n, sc.P, int64(s.heads*n), m, float32(math.Sqrt(float64(d))))
	// ctx[i][hd·d+e] = Σ_j p[hd][i][j]·v[j][hd·d+e] (LN1's output is dead)
	ctx := t
	g.LaunchN(kernels.TFGemm, s.heads*n*d, sc.P, kv.P, ctx.P, s.heads, n, d, m,
		int64(0), int64(n*m), int64(m), int64(1),
		int64(c)*kc, int64(d)*kc, kp, kc,
		int64(0), int64(d)*qc, qp, qc)
	g.Put(sc, kv, q)
	h2 := g.Conv(gb.proj, ctx, false, &h)
	g.Put(h)
	r.layerNorm(h2, t, bl.ln2)
	hid := g.Conv(gb.fc1, t, false, nil)
	g.Put(t)
	act := r.like(h, s.hidden, h.H, h.W)
	g.LaunchN(kernels.TFDWConvGELU, s.hidden*n, hid.P, act.P, r.vec(bl.dwW), r.vec(bl.dwB), h.H, h.W, s.hidden, b2i(hid.NHWC))
	g.Put(hid)
	out := g.Conv(gb.fc2, act, false, &h2)
	g.Put(act, h2)
	return out
}

// channelAttention gates x's channels (forward.go's channelAttention).
func (r *GPURunner) channelAttention(a *channelAttention, x gpu.Map) gpu.Map {
	g := r.g
	hw := int64(x.H * x.W)
	mean, gate := g.Scratch(x.C), g.Scratch(x.C)
	g.LaunchN(kernels.TFChanMean, x.C, x.P, mean.P, x.C, hw, b2i(x.NHWC))
	g.LaunchN(kernels.TFCAGate, x.C, mean.P, r.vec(a.fc1), r.vec(a.fc2), gate.P, a.c, a.r)
	y := r.like(x, x.C, x.H, x.W)
	g.LaunchN(kernels.TFScaleChan, x.Size(), x.P, gate.P, y.P, x.C, hw, b2i(x.NHWC))
	g.Put(mean, gate)
	return y
}

// decoder is forward.go's decoder up to res0 (the count is the host's).
func (r *GPURunner) decoder(f [4]gpu.Map) gpu.Map {
	g := r.g
	top := f[3]
	names := [3]string{"0", "1", "2"}
	for i := 2; i >= 0; i-- {
		gated := r.channelAttention(&r.m.ca[i], f[i])
		g.Put(f[i]) // proj1's means were taken before the decoder (Forward)
		ca := g.Conv(r.m.caConv[i], gated, true, nil)
		g.Put(gated)
		r.traceMap("ca"+names[i], ca, false)
		up := r.like(top, top.C, 2*top.H, 2*top.W)
		g.LaunchN(kernels.TFUpsample2, up.Size(), top.P, up.P, top.C, top.H, top.W, b2i(top.NHWC))
		g.Put(top)
		v := g.Conv(r.m.v[i], up, true, nil)
		g.Put(up)
		r.traceMap("v"+string(rune('1'+i)), v, false)
		g.LaunchN(kernels.TFAdd, ca.Size(), ca.P, v.P, int64(ca.Size()))
		g.Put(v)
		top = ca
	}
	a := g.Conv(r.m.res0a, top, true, nil)
	g.Put(top)
	y0 := g.Conv(r.m.res0b, a, true, nil)
	g.Put(a)
	r.traceMap("res0", y0, false)
	return y0
}
