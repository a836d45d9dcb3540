package crop

import (
	"bytes"
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/canopy-hpc/canopy/infer/cpu"
	"github.com/canopy-hpc/canopy/infer/cuda"
	"github.com/canopy-hpc/canopy/infer/cuda/cudnn"
	"github.com/canopy-hpc/canopy/infer/cuda/hostkern"
	"github.com/canopy-hpc/canopy/infer/gpu"
	"github.com/canopy-hpc/canopy/infer/imagefile"
	"github.com/canopy-hpc/canopy/infer/nn"
	"github.com/canopy-hpc/canopy/infer/resnet"
	"github.com/canopy-hpc/canopy/internal/testsupport/approx"
	"github.com/canopy-hpc/canopy/internal/testsupport/bound"
	"github.com/canopy-hpc/canopy/internal/testsupport/gputest"
	"github.com/canopy-hpc/canopy/internal/testsupport/testweights"
)

// The crop classifier on the GPU engine (gpu.go) against the CPU engine
// (cpu.BatchEngine): on the host shim (infer/cuda/hostkern: kernels.cu on
// the CPU with the GPU's launch geometry), with the fake libcudnn for the
// cuDNN path; built with -tags cuda, on a GPU (tools/gpu/check.sh's
// crops step, with CANOPY_CUDNN naming the real cuDNN).

// smallNet is a ResNet-18 classifier of 3 classes with testweights' body
// values for seed and a seeded fc.
func smallNet(t testing.TB, seed uint64) *Net {
	t.Helper()
	body, err := testweights.Weights("resnet18", 1, 8, seed)
	if err != nil {
		t.Fatal(err)
	}
	return netOf(t, body, seed)
}

// netOf is the classifier of a detector's body (its "backbone.body."
// tensors) and a seeded fc of 3 classes.
func netOf(t testing.TB, body nn.Weights, seed uint64) *Net {
	t.Helper()
	w := nn.Weights{}
	for k, v := range body {
		if name, ok := strings.CutPrefix(k, "backbone.body."); ok {
			w[name] = v
		}
	}
	ch := w["layer4.0.conv1.weight"].Shape[0] * 4
	if _, ok := w["layer1.0.conv3.weight"]; !ok {
		ch /= 4
	}
	r := rand.New(rand.NewPCG(seed, 3))
	fc := make([]float32, 3*ch)
	for i := range fc {
		fc[i] = float32(r.NormFloat64() * 0.2)
	}
	w["fc.weight"] = nn.Tensor{Shape: []int{3, ch}, Data: fc}
	w["fc.bias"] = nn.Tensor{Shape: []int{3}, Data: []float32{0.1, -0.2, 0.05}}
	n, err := NewNet(w)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// testTransform resizes to 40×36 (height × width: a swapped axis shows).
func testTransform() Transform {
	tr := DefaultTransform()
	tr.Size = [2]int{40, 36}
	return tr
}

// testSources are an 8-bit 90×70 image and a 50×45 one whose values are
// not 8-bit samples (uploaded as float32), and the pieces cut from them:
// downscales of many taps (the fused tail of tapSum), upscales, a window
// of the output size (both passes identity), one of its width only, a
// 3×2 sliver.
func testSources(seed uint64) ([]imagefile.Image, []Piece) {
	r := rand.New(rand.NewPCG(seed, 11))
	u8 := imagefile.Image{W: 90, H: 70, Pix: make([]float32, 3*90*70)}
	for i := range u8.Pix {
		u8.Pix[i] = imagefile.Unit(uint8(r.IntN(256)))
	}
	f := imagefile.Image{W: 50, H: 45, Pix: make([]float32, 3*50*45)}
	for i := range f.Pix {
		f.Pix[i] = float32(r.Float64())
	}
	return []imagefile.Image{u8, f}, []Piece{
		{Img: 0, R: Rect{0, 0, 90, 70}}, {Img: 0, R: Rect{5, 7, 20, 17}}, {Img: 0, R: Rect{10, 3, 36, 40}}, {Img: 1, R: Rect{2, 2, 40, 30}},
		{Img: 0, R: Rect{1, 1, 36, 25}}, {Img: 0, R: Rect{30, 20, 3, 2}}, {Img: 1, R: Rect{0, 0, 50, 45}},
	}
}

// cpuCrops are the pieces cut on the host (Cut), as the CPU path reads them.
func cpuCrops(imgs []imagefile.Image, ps []Piece) []imagefile.Image {
	out := make([]imagefile.Image, len(ps))
	for i, p := range ps {
		out[i] = Cut(imgs[p.Img], p.R)
	}
	return out
}

// outBytes are the outputs' logits, probabilities and best classes.
func outBytes(out []Output) []byte {
	var b []byte
	for _, o := range out {
		k, s := o.Best()
		b = append(append(append(b, f32Bytes(o.Logits)...), f32Bytes(o.Probs)...), f32Bytes([]float32{float32(k), s})...)
	}
	return b
}

// TestGPUCropTransformBits: the crops cut, normalized and resized on the
// device are Transform.Apply's bits of the crops cut on the host, for
// 8-bit and float32 sources, with and without normalization, with both
// sum rules.
func TestGPUCropTransformBits(t *testing.T) {
	imgs, ps := testSources(1)
	crops := cpuCrops(imgs, ps)
	for _, mod := range []func(*Transform){func(*Transform) {}, func(tr *Transform) { tr.FMA = false }, func(tr *Transform) { tr.Normalize = false }} {
		tr := testTransform()
		mod(&tr)
		r := NewGPURunner(smallNet(t, 1), gpu.NewEngine(gputest.Device(t), cuda.Exact))
		g := r.Engine()
		x := g.Alloc(len(ps), 3, tr.Size[0], tr.Size[1])
		r.transform(tr, imgs, ps, x)
		got := g.Download(x)
		if g.Err != nil {
			t.Fatal(g.Err)
		}
		per := 3 * tr.Size[0] * tr.Size[1]
		for i, c := range crops {
			want, err := tr.Apply(c.Pix, c.W, c.H)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(f32Bytes(got[i*per:(i+1)*per]), f32Bytes(want)) {
				k := 0
				for k < per && math.Float32bits(got[i*per+k]) == math.Float32bits(want[k]) {
					k++
				}
				t.Errorf("normalize %v fma %v: crop %d (%+v): value %d is %v, the CPU transform gives %v", tr.Normalize, tr.FMA, i, ps[i], k, got[i*per+k], want[k])
			}
		}
		r.Close()
		g.Close()
	}
}

// The layer-by-layer comparison (infer/retinanet's bound_test.go explains
// why every layer is held to its one-layer bound given the inputs each
// side holds, rather than one bound carried through the network): pair
// runs each layer on the CPU's BatchEngine (side a: Winograd F(4×4,3×3)
// on every UseWinograd layer, gemm.Chain's FMA chains elsewhere) and on
// the GPU engine (side b).

var (
	sideBatchCPU = bound.Side{Name: "cpu", Tile: func(c *nn.Conv) int {
		if cpu.UseWinograd(c) {
			return 4
		}
		return 0
	}}
	sideFP32 = bound.Side{Name: "fp32"}
	sideTF32 = bound.Side{Name: "tf32", UX: approx.UTF32, UW: approx.UTF32}
	sideBF16 = bound.Side{Name: "bf16", UW: approx.UBF16, UStore: approx.UBF16}
)

// pc is one batch of maps on both sides: the CPU's (CHWN) and the GPU's,
// each side's values in NCHW, made once.
type pc struct {
	c      cpu.Batch
	g      gpu.Map
	ca, gb []float32
}

type pair struct {
	t     *testing.T
	host  *cpu.BatchEngine
	g     *gpu.Engine
	a, b  bound.Side
	plant func(*nn.Conv) *nn.Conv
	fails int
	worst float64
}

// nchw is a CPU batch in NCHW order.
func nchw(x cpu.Batch) []float32 {
	out := make([]float32, 0, len(x.D))
	for b := 0; b < x.N; b++ {
		for c := 0; c < x.C; c++ {
			out = append(out, x.Plane(c, b)...)
		}
	}
	return out
}

func (p *pair) sides(x *pc) ([]float32, []float32) {
	if x.ca == nil {
		x.ca, x.gb = nchw(x.c), p.g.Download(x.g)
		if p.g.Err != nil {
			p.t.Fatal(p.g.Err)
		}
	}
	return x.ca, x.gb
}

func (p *pair) check(layer string, y *pc, lim []float64) {
	a, b := p.sides(y)
	worst, bad := bound.Within(b, a, lim)
	p.worst = max(p.worst, worst)
	for _, i := range bad {
		if p.fails++; p.fails <= 3 && p.plant == nil {
			p.t.Errorf("%s %s: element %d is %v, the CPU gives %v: |Δ| %.3g > bound %.3g", p.b.Name, layer, i, b[i], a[i], math.Abs(float64(a[i])-float64(b[i])), lim[i])
		}
	}
}

func (p *pair) Conv(c *nn.Conv, x *pc, relu bool, res **pc) *pc {
	y := &pc{}
	var rc *cpu.Batch
	var rg *gpu.Map
	var ra, rb []float32
	if res != nil {
		rc, rg = &(*res).c, &(*res).g
		ra, rb = p.sides(*res)
	}
	cb := c
	if p.plant != nil {
		cb = p.plant(c)
	}
	y.c, y.g = p.host.Conv(c, x.c, relu, rc), p.g.Conv(cb, x.g, relu, rg)
	xa, xb := p.sides(x)
	_, yb := p.sides(y)
	p.check(c.Name, y, bound.Batch(c, x.c.H, x.c.W, p.a, p.b, xa, xb, ra, rb, yb))
	return y
}

func (p *pair) MaxPool3s2(x *pc) *pc {
	y := &pc{c: p.host.MaxPool3s2(x.c), g: p.g.MaxPool3s2(x.g)}
	xa, xb := p.sides(x)
	p.check("maxpool", y, bound.MaxPool3s2(xa, xb, x.c.N*x.c.C, x.c.H, x.c.W))
	return y
}

func (p *pair) UpsampleAdd(lat, top *pc) { panic("a classifier has no FPN") }
func (p *pair) ReluCopy(x *pc) *pc       { panic("a classifier has no FPN") }
func (p *pair) Put(...*pc)               {}
func (p *pair) Same(a, b *pc) bool       { return a != nil && a == b }

// gamma64 is γₙ of float64.
func gamma64(n int) float64 { return approx.Gamma(n, 0x1p-53) }

// headBound bounds |Δ| of each crop's logits and probabilities from the
// two sides' C5 (NCHW, n crops of ch channels of hw values) and the fc:
//
//   - pooled: each side sums hw values in float64 (γ64_hw of Σ|x|), divides
//     (one more rounding) and rounds to float32 once (u32 of the result):
//     |Δp| ≤ mean|Δx| + Σ_sides (γ64_{hw+1}·mean|x| + u32·|p|);
//   - logits: fc in float64 over ch products and the bias (γ64_{ch+1} of
//     Σ|w||p| + |b| per side), each rounded to float32 once:
//     |Δz| ≤ Σ|w|·|Δp| + Σ_sides (γ64_{ch+1}·(Σ|w||p| + |b|) + u32·|z|);
//   - probabilities: softmax's Jacobian diag(p) − ppᵀ has rows of ∞-norm
//     2pᵢ(1 − pᵢ) ≤ ½, so |Δp| ≤ ½·max|Δz| + per side the float64
//     softmax's error (exp within 1 ulp on each side — math.Exp, the
//     device's canopy_exp — K terms summed, one division: γ64_{K+3}·p)
//     and the float32 rounding (u32·p).
func headBound(net *Net, c5a, c5b []float32, n, hw int) (logit, prob [][]float64) {
	ch, k := net.Body.Channels[3], net.Classes
	pool := func(x []float32, i, c int) (mean, abs float64) {
		for _, v := range x[(i*ch+c)*hw : (i*ch+c+1)*hw] {
			mean += float64(v)
			abs += math.Abs(float64(v))
		}
		return mean / float64(hw), abs / float64(hw)
	}
	for i := 0; i < n; i++ {
		dp := make([]float64, ch)
		pa := make([]float64, ch)
		for c := range dp {
			ma, aa := pool(c5a, i, c)
			mb, ab := pool(c5b, i, c)
			var d float64
			for j := 0; j < hw; j++ {
				o := (i*ch+c)*hw + j
				d += math.Abs(float64(c5a[o]) - float64(c5b[o]))
			}
			pa[c] = math.Abs(ma)
			dp[c] = d/float64(hw) + gamma64(hw+1)*(aa+ab) + approx.U32*(math.Abs(ma)+math.Abs(mb))*(1+approx.U32)
		}
		lz := make([]float64, k)
		var zmax float64
		for j := range lz {
			var wd, wp float64
			for c := 0; c < ch; c++ {
				w := math.Abs(float64(net.fcW[j*ch+c]))
				wd += w * dp[c]
				wp += w * (pa[c] + dp[c])
			}
			terms := wp + math.Abs(float64(net.fcB[j]))
			lz[j] = wd + 2*gamma64(ch+1)*terms + 2*approx.U32*terms*(1+approx.U32)
			zmax = max(zmax, lz[j])
		}
		lp := make([]float64, k)
		for j := range lp {
			lp[j] = zmax/2 + 2*(gamma64(k+3)+approx.U32)*(1+approx.U32)
		}
		logit, prob = append(logit, lz), append(prob, lp)
	}
	return logit, prob
}

// pairCrops runs the transformed batch x (n crops, NCHW on both sides)
// through net on both sides and holds every layer, then the head, to its
// bound; it returns the number of values outside.
func pairCrops(t *testing.T, name string, net *Net, g *gpu.Engine, b bound.Side, xa []float32, n int, size [2]int,
	plant func(*nn.Conv) *nn.Conv, gnet *Net) int {
	t.Helper()
	host := cpu.NewBatchEngine(2)
	xc := host.Batch(3, n, size[0], size[1])
	per := size[0] * size[1]
	for i := 0; i < n; i++ {
		xc.SetImage(i, xa[i*3*per:(i+1)*3*per])
	}
	xg := g.Alloc(n, 3, size[0], size[1])
	if err := g.Dev.Upload(xg.P, xa); err != nil {
		t.Fatal(err)
	}
	if g.DNN != nil {
		xg = g.ToNHWC(xg)
	}
	p := &pair{t: t, host: host, g: g, a: sideBatchCPU, b: b, plant: plant}
	c5 := resnet.Features[*pc](net.Body, p, &pc{c: xc, g: xg}, 5)[2]
	c5a, c5b := p.sides(c5)
	want := net.outputs(c5.c)
	r := NewGPURunner(gnet, g)
	defer r.Close()
	c5g := c5.g
	if g.DNN != nil {
		c5g = g.ToNCHW(c5g)
	}
	got := r.head(c5g, n)
	if g.Err != nil {
		t.Fatal(g.Err)
	}
	lz, lp := headBound(net, c5a, c5b, n, c5.c.H*c5.c.W)
	ambiguous := 0
	for i := range want {
		for _, v := range []struct {
			what      string
			got, want []float32
			lim       []float64
		}{{"logit", got[i].Logits, want[i].Logits, lz[i]}, {"probability", got[i].Probs, want[i].Probs, lp[i]}} {
			worst, bad := bound.Within(v.got, v.want, v.lim)
			p.worst = max(p.worst, worst)
			for _, k := range bad {
				if p.fails++; p.fails <= 3 && plant == nil && gnet == net {
					t.Errorf("%s crop %d: %s %d is %v, the CPU gives %v ± %.3g", name, i, v.what, k, v.got[k], v.want[k], v.lim[k])
				}
			}
		}
		gk, gs := got[i].Best()
		if hk, hs := got[i].host(); gk != hk || gs != hs {
			t.Errorf("%s crop %d: the device's argmax %d (%v) is not its probabilities' (%d, %v)", name, i, gk, gs, hk, hs)
		}
		wk, ws := want[i].Best()
		if near := secondBest(want[i].Probs, wk); ws-near <= float32(2*lp[i][wk]) {
			ambiguous++ // either side may take either class
		} else if gk != wk {
			p.fails++
			if plant == nil && gnet == net {
				t.Errorf("%s crop %d: class %d, the CPU's %d (probabilities %v and %v)", name, i, gk, wk, got[i].Probs, want[i].Probs)
			}
		}
	}
	t.Logf("%s: %d values outside their bound, largest |Δ|/bound %.3g, %d of %d crops ambiguous", name, p.fails, p.worst, ambiguous, n)
	return p.fails
}

// secondBest is the largest probability but class k's.
func secondBest(p []float32, k int) float32 {
	s := float32(math.Inf(-1))
	for j, v := range p {
		if j != k {
			s = max(s, v)
		}
	}
	return s
}

// deviceBatch is the batch the device's transform makes of the pieces.
func deviceBatch(t *testing.T, r *GPURunner, tr Transform, imgs []imagefile.Image, ps []Piece) []float32 {
	t.Helper()
	x := r.g.Alloc(len(ps), 3, tr.Size[0], tr.Size[1])
	r.transform(tr, imgs, ps, x)
	out := r.g.Download(x)
	r.g.Put(x)
	if r.g.Err != nil {
		t.Fatal(r.g.Err)
	}
	return out
}

// TestGPUCropMatchesCPU: the exact kernels and canopy's TF32 kernel on
// the test device against the CPU engine, every layer and the head within
// their derived bounds, every class equal where the CPU's best
// probability leads the next by more than twice its bound; and the
// runner (Classify, cut and transform on the device, batches of 4) gives
// the bits of the GPU side run layer by layer.
func TestGPUCropMatchesCPU(t *testing.T) {
	net := smallNet(t, 2)
	tr := testTransform()
	imgs, ps := testSources(2)
	for _, prec := range []cuda.Precision{cuda.Exact, cuda.KernelTF32} {
		g := gpu.NewEngine(gputest.Device(t), prec)
		r := NewGPURunner(net, g)
		r.Batch = 4
		x := deviceBatch(t, r, tr, imgs, ps)
		side := sideFP32
		if prec == cuda.KernelTF32 {
			side = sideTF32
		}
		if n := pairCrops(t, prec.String(), net, g, side, x, len(ps), tr.Size, nil, net); n > 0 {
			t.Errorf("%s: %d values outside their bounds", prec, n)
		}
		got, err := r.ClassifyWindows(context.Background(), tr, imgs, ps)
		if err != nil {
			t.Fatal(err)
		}
		one := NewGPURunner(net, g)
		want, err := one.ClassifyWindows(context.Background(), tr, imgs, ps)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(outBytes(got), outBytes(want)) {
			t.Errorf("%s: batches of 4 and of %d give other bytes", prec, one.Batch)
		}
		r.Close()
		g.Close()
	}
}

// withFC is net with fc's weights changed by f (the body shared).
func withFC(net *Net, f func(w []float32)) *Net {
	w := append([]float32(nil), net.fcW...)
	f(w)
	return &Net{Body: net.Body, Classes: net.Classes, fcW: w, fcB: net.fcB}
}

// TestGPUCropCatchesPlantedBugs: the bounds are tight enough to fail on a
// real bug on the GPU side: the centre taps of two input channels of one
// filter swapped in the stem, layer1 and layer4 (at 40×36 crops layer4's
// maps are 2×2, where most taps of a 3×3 filter touch one output or a
// zero of the ReLU; the centre touches all), two fc weights swapped.
func TestGPUCropCatchesPlantedBugs(t *testing.T) {
	net := smallNet(t, 3)
	tr := testTransform()
	imgs, ps := testSources(3)
	g := gpu.NewEngine(gputest.Device(t), cuda.Exact)
	defer g.Close()
	x := deviceBatch(t, NewGPURunner(net, g), tr, imgs, ps)
	for _, layer := range []string{"conv1", "layer1.0.conv1", "layer4.1.conv2", "fc"} {
		hit := false
		plant := func(c *nn.Conv) *nn.Conv {
			if c.Name != layer {
				return c
			}
			hit = true
			bad := &nn.Conv{Name: c.Name + " (planted)", Out: c.Out, In: c.In, KH: c.KH, KW: c.KW, Stride: c.Stride, Pad: c.Pad,
				W: append([]float32(nil), c.W...), B: append([]float32(nil), c.B...)}
			k, ctr := c.KH*c.KW, c.KH/2*c.KW+c.KW/2 // the centre taps of input channels 0 and 1
			bad.W[ctr], bad.W[k+ctr] = bad.W[k+ctr], bad.W[ctr]
			return bad
		}
		gnet := net
		if layer == "fc" {
			gnet = withFC(net, func(w []float32) { w[0], w[1] = w[1], w[0] })
			plant, hit = nil, true
		}
		if n := pairCrops(t, "swapped weights in "+layer, net, g, sideFP32, x, len(ps), tr.Size, plant, gnet); n == 0 {
			t.Errorf("%s: two weights swapped, every value within its bound: the bound would miss this bug", layer)
		}
		if !hit {
			t.Fatalf("no layer %s", layer)
		}
	}
}

// TestGPUCropBatchBytes: a crop's bytes do not depend on the batch size,
// its place in the batch or its batch-mates: the exact kernels at batches
// of 1, 3 and 32, the crops reversed; the cuDNN path (the fake) a crop
// alone and among the others.
func TestGPUCropBatchBytes(t *testing.T) {
	net := smallNet(t, 4)
	tr := testTransform()
	imgs, ps := testSources(4)
	ctx := context.Background()
	rev := make([]Piece, len(ps))
	for i, p := range ps {
		rev[len(ps)-1-i] = p
	}
	per := func(out []Output) [][]byte {
		var b [][]byte
		for i := range out {
			b = append(b, outBytes(out[i:i+1]))
		}
		return b
	}
	dev := gputest.Device(t)
	for _, prec := range []cuda.Precision{cuda.Exact, cuda.FP32} {
		r, err := NewGPURunnerOn(net, dev, gpu.Options{Precision: prec, CUDNN: testCUDNNFor(t, dev, prec)})
		if err != nil {
			t.Fatal(err)
		}
		var ref [][]byte
		for _, b := range []int{1, 3, 32} {
			if prec.Cudnn() && b != 3 {
				continue // cuDNN batches are always r.Batch crops: the shapes stay
			}
			r.Batch = b
			out, err := r.ClassifyWindows(ctx, tr, imgs, ps)
			if err != nil {
				t.Fatal(err)
			}
			back, err := r.ClassifyWindows(ctx, tr, imgs, rev)
			if err != nil {
				t.Fatal(err)
			}
			alone, err := r.ClassifyWindows(ctx, tr, imgs, ps[5:6])
			if err != nil {
				t.Fatal(err)
			}
			got := per(out)
			if ref == nil {
				ref = got
			}
			for i := range got {
				if !bytes.Equal(got[i], ref[i]) || !bytes.Equal(per(back)[len(ps)-1-i], ref[i]) {
					t.Errorf("%s batch %d: crop %d's bytes depend on the batch or its place", prec, b, i)
				}
			}
			if !bytes.Equal(per(alone)[0], ref[5]) {
				t.Errorf("%s batch %d: crop 5 alone gives other bytes", prec, b)
			}
		}
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestGPUCropNonFinite: finite weights whose logits overflow float32 are a
// *NonFiniteError (a model error, exit 4) naming the first such crop, as
// on the CPU (finite.go).
func TestGPUCropNonFinite(t *testing.T) {
	net := smallNet(t, 5)
	cp := withFC(net, func(w []float32) {
		for i := range w[:512] {
			w[i] = 3e37 // class 0's logit overflows wherever the pooled C5 is not all zero
		}
	})
	imgs, ps := testSources(5)
	tr := testTransform()
	g := gpu.NewEngine(gputest.Device(t), cuda.Exact)
	defer g.Close()
	_, err := NewGPURunner(cp, g).ClassifyWindows(context.Background(), tr, imgs, ps)
	var ne *NonFiniteError
	if !errors.As(err, &ne) || ne.Output != "logits" || ne.Crop != 0 {
		t.Fatalf("got %v, want the logits of crop 0 not finite", err)
	}
	_, cerr := NewRunner(cp, 1).Classify(context.Background(), tr, cpuCrops(imgs, ps))
	if cerr == nil || cerr.Error() != err.Error() {
		t.Errorf("the GPU says %q, the CPU %v", err, cerr)
	}
}

// testCUDNNFor is the cuDNN library for prec (nil off the cuDNN path).
func testCUDNNFor(t testing.TB, dev cuda.Device, prec cuda.Precision) *cudnn.Lib {
	if !prec.Cudnn() {
		return nil
	}
	return gputest.CUDNN(t, dev)
}

// TestGPUCropCUDNN: the cuDNN path (fused graphs in NHWC; the fake
// libcudnn on the host shim) at fp32, tf32 and bf16 against the CPU
// engine, every layer and the head within their bounds (BF16: the data
// stored rounded), the classes equal where unambiguous; Classify runs.
func TestGPUCropCUDNN(t *testing.T) {
	net := smallNet(t, 6)
	tr := testTransform()
	imgs, ps := testSources(6)
	for _, c := range []struct {
		prec cuda.Precision
		side bound.Side
	}{{cuda.FP32, sideFP32}, {cuda.TF32, sideTF32}, {cuda.BF16, sideBF16}} {
		dev := gputest.Device(t)
		r, err := NewGPURunnerOn(net, dev, gpu.Options{Precision: c.prec, CUDNN: testCUDNNFor(t, dev, c.prec)})
		if err != nil {
			t.Fatal(err)
		}
		x := deviceBatch(t, r, tr, imgs, ps)
		if n := pairCrops(t, "cudnn "+c.prec.String(), net, r.g, c.side, x, len(ps), tr.Size, nil, net); n > 0 {
			t.Errorf("%s: %d values outside their bounds", c.prec, n)
		}
		out, err := r.ClassifyWindows(context.Background(), tr, imgs, ps)
		if err != nil || len(out) != len(ps) {
			t.Fatalf("%s: %d outputs, %v", c.prec, len(out), err)
		}
		if rep := r.g.CUDNN(); rep == nil || len(rep.Layers) == 0 {
			t.Errorf("%s: no cuDNN layers recorded: %+v", c.prec, rep)
		}
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// BenchmarkGPUCrops is the crop step's network on the device against the
// CPU engine, side by side in one run (tools/gpu/check.sh's crops step):
// ResNet-50 and ResNet-18 classifiers of 3 classes (testweights' body
// values), $CANOPY_BENCH_CROPS (default 256) crops of 12×12 to 80×80 cut
// from a seeded 8-bit 400×400 image, resized to 224×224; each iteration
// cuts, transforms and classifies every crop. Sub-benchmarks: the device
// at exact, tf32 and bf16 (the last two on cuDNN: CANOPY_CUDNN), in
// batches of GPUBatch, and the CPU engine with $CANOPY_BENCH_THREADS
// workers (default: every core). It reports crops/s. The GPU runs need a
// GPU: on the host shim (a coroutine per CUDA thread) they are skipped.
func BenchmarkGPUCrops(b *testing.B) {
	n := 256
	if v, err := strconv.Atoi(os.Getenv("CANOPY_BENCH_CROPS")); err == nil && v > 0 {
		n = v
	}
	threads := runtime.NumCPU()
	if v, err := strconv.Atoi(os.Getenv("CANOPY_BENCH_THREADS")); err == nil && v > 0 {
		threads = v
	}
	r := rand.New(rand.NewPCG(7, 7))
	img := imagefile.Image{W: 400, H: 400, Pix: make([]float32, 3*400*400)}
	for i := range img.Pix {
		img.Pix[i] = imagefile.Unit(uint8(r.IntN(256)))
	}
	ps := make([]Piece, n)
	for i := range ps {
		w, h := 12+r.IntN(69), 12+r.IntN(69)
		ps[i] = Piece{R: Rect{X: r.IntN(400 - w), Y: r.IntN(400 - h), W: w, H: h}}
	}
	imgs := []imagefile.Image{img}
	tr := DefaultTransform()
	ctx := context.Background()
	for _, arch := range []string{"resnet50", "resnet18"} {
		net := benchNet(b, arch)
		run := func(b *testing.B, c runner) {
			if _, err := c.ClassifyWindows(ctx, tr, imgs, ps); err != nil { // warm-up: weights, plans
				b.Fatal(err)
			}
			b.ResetTimer()
			for it := 0; it < b.N; it++ {
				if _, err := c.ClassifyWindows(ctx, tr, imgs, ps); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "crops/s")
		}
		for _, prec := range []cuda.Precision{cuda.Exact, cuda.TF32, cuda.BF16} {
			b.Run(arch+"/"+prec.String(), func(b *testing.B) {
				dev := gputest.Device(b)
				if _, shim := dev.(*hostkern.Device); shim {
					b.Skip("the host shim runs a CUDA thread per coroutine: the device's crops/s needs a GPU (tools/gpu/check.sh)")
				}
				g, err := NewGPURunnerOn(net, dev, gpu.Options{Precision: prec, CUDNN: testCUDNNFor(b, dev, prec)})
				if err != nil {
					b.Fatal(err)
				}
				defer g.Close()
				run(b, g)
			})
		}
		b.Run(arch+"/cpu", func(b *testing.B) { run(b, NewRunner(net, threads)) })
	}
}

// runner is what both engines' runners do.
type runner interface {
	ClassifyWindows(ctx context.Context, tr Transform, imgs []imagefile.Image, ps []Piece) ([]Output, error)
}

// benchNet is a classifier of arch with testweights' body values and a
// seeded fc of 3 classes.
func benchNet(t testing.TB, arch string) *Net {
	t.Helper()
	body, err := testweights.Weights(arch, 1, 8, 9)
	if err != nil {
		t.Fatal(err)
	}
	return netOf(t, body, 9)
}
