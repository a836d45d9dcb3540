// Package retinanet is canopy's native torchvision RetinaNet (v1, ResNet-FPN)
// for the CPU: the inference path DeepForest runs, reproduced from
// torchvision's semantics (../shared/spec/semantics.md §1) with one
// deliberate difference: every image is padded on its own, so detections
// never depend on which images share a batch, and every reduction has a fixed
// order, so they are byte-identical for any rank count, thread count or batch
// size.
//
// Layout: feature maps are CHW float32; a 3×3 stride-1 convolution is
// Winograd F(4×4,3×3) (F(2×2,3×3) on maps under 8×8), any other im2col +
// SGEMM (infer/gemm), over blocks of a width fixed by the layer's shape
// handed to a worker pool, with bias, residual add and ReLU fused into the
// block's epilogue or output transform. Frozen batch
// norm (eps 1e-5) is folded into the preceding convolution at load.
package retinanet

import (
	"fmt"
	"math"
	"runtime"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
)

// NumAnchors is A, the anchors per location of the default generator
// (3 aspect ratios × 3 sizes).
const NumAnchors = 9

// BNEps is FrozenBatchNorm2d's epsilon as torchvision builds DeepForest's
// hub models (ResNet50_Weights backbone default: 1e-5).
const BNEps = 1e-5

// Options are the constructor arguments of torchvision's RetinaNet that
// change inference; DefaultOptions gives DeepForest's.
type Options struct {
	MinSize, MaxSize    int
	ScoreThresh         float32
	NMSThresh           float64
	DetectionsPerImg    int
	TopkCandidates      int
	ImageMean, ImageStd [3]float32
	// Resize is the size rule of the transform (the zero value is
	// torchvision ≥ 0.16's).
	Resize ResizeRule
	// Blend is the bilinear resize's rounding (the zero value is torch's
	// AVX2 multi-thread FMA blend).
	Blend BlendRule
}

// DefaultOptions are DeepForest's (config.yaml) on torchvision's defaults.
func DefaultOptions() Options {
	return Options{
		MinSize: 800, MaxSize: 1333,
		ScoreThresh: 0.1, NMSThresh: 0.05,
		DetectionsPerImg: 300, TopkCandidates: 1000,
		ImageMean: [3]float32{0.485, 0.456, 0.406},
		ImageStd:  [3]float32{0.229, 0.224, 0.225},
	}
}

// conv is one convolution with folded batch norm: W is [out, in·kh·kw].
type conv struct {
	name                         string
	out, in, kh, kw, stride, pad int
	w, b                         []float32
	wino                         winograd // U of a 3×3 stride-1 filter, made on first use
}

type block struct {
	c1, c2, c3 *conv // c3 nil for BasicBlock
	down       *conv
}

// Model is a loaded RetinaNet.
type Model struct {
	Arch    string // e.g. "resnet50-fpn256", "resnet18-fpn64"
	Classes int
	FPN     int
	Opt     Options

	stem   *conv
	layers [4][]block
	inner  [3]*conv
	layer  [3]*conv
	p6, p7 *conv
	clsT   [4]*conv
	regT   [4]*conv
	cls    *conv
	reg    *conv

	cpuReady sync.Once   // the CPU engine's transformed filters are made
	cpuDone  atomic.Bool // and cpuReady has run
	released atomic.Bool // prepareCPU dropped the Winograd layers' 3×3 weights
}

// CPUFilterBytes is the memory the CPU detector (NewDetector) will add
// for its transformed Winograd filters, net of the 3×3 weights it drops
// (0 once they are made): a job's memory estimate adds it to the process's
// resident memory, measured before any runner exists.
func (m *Model) CPUFilterBytes() int64 {
	if m.cpuDone.Load() {
		return 0
	}
	var n int64
	for _, c := range m.convs() {
		if c != nil && useWinograd(c) {
			comps := int64(36)
			if winoTile(c) == 2 {
				comps = 16
			}
			n += (comps - 9) * int64(c.out*c.in) * 4
		}
	}
	return n
}

// convs lists every convolution of the network.
func (m *Model) convs() []*conv {
	cs := []*conv{m.stem}
	for L := range m.layers {
		for _, b := range m.layers[L] {
			for _, c := range []*conv{b.c1, b.c2, b.c3, b.down} {
				if c != nil {
					cs = append(cs, c)
				}
			}
		}
	}
	cs = append(cs, m.inner[:]...)
	cs = append(cs, m.layer[:]...)
	cs = append(cs, m.p6, m.p7)
	cs = append(cs, m.clsT[:]...)
	cs = append(cs, m.regT[:]...)
	return append(cs, m.cls, m.reg)
}

// prepareCPU makes, once per model, the Winograd filters of every 3×3
// stride-1 convolution (which tile each uses depends on its shape alone).
// It first collects the garbage of loading and gives its pages back, and
// collects again every winoGCBytes of filters: with release (the CPU
// detector, which never uploads the model to a GPU) each convolution's 3×3
// weights are dropped as soon as its filters exist, and the collections let
// the next filters reuse their memory, so the process grows by the filters
// less the weights they replace (CPUFilterBytes). The first runner decides:
// a later NewDetector on a model a Runner prepared keeps the weights.
func (m *Model) prepareCPU(release bool) {
	m.cpuReady.Do(func() {
		debug.FreeOSMemory()
		var made int64
		for _, c := range m.convs() {
			if c == nil || !useWinograd(c) {
				continue
			}
			if winoTile(c) == 4 {
				made += int64(len(c.winogradU4())) * 4
			} else {
				made += int64(len(c.winogradU())) * 4
			}
			if release {
				c.w = nil
				m.released.Store(true)
			}
			if made >= winoGCBytes {
				runtime.GC()
				made = 0
			}
		}
		debug.FreeOSMemory()
		m.cpuDone.Store(true)
	})
}

// winoGCBytes is how many bytes of Winograd filters prepareCPU makes
// between two collections.
const winoGCBytes = 32 << 20

// Released reports whether the CPU detector dropped the 3×3 weights that
// its Winograd filters replace: the model then runs on the CPU only.
func (m *Model) Released() bool { return m.released.Load() }

// loadConv takes a conv weight (and its BN, or its bias) from t.
func loadConv(t *take, name, bn string, out, in, k, stride, pad int) *conv {
	c := &conv{name: name, out: out, in: in, kh: k, kw: k, stride: stride, pad: pad}
	w := t.get(name+".weight", out, in, k, k)
	c.w = bigFloats(len(w))
	copy(c.w, w)
	c.b = make([]float32, out)
	if bn == "" {
		copy(c.b, t.get(name+".bias", out))
		return c
	}
	g := t.get(bn+".weight", out)
	beta := t.get(bn+".bias", out)
	mean := t.get(bn+".running_mean", out)
	varr := t.get(bn+".running_var", out)
	kk := in * k * k
	for o := 0; o < out; o++ {
		// FrozenBatchNorm2d: scale = w·rsqrt(var+eps), bias = b − mean·scale.
		scale := g[o] * float32(1/math.Sqrt(float64(varr[o]+BNEps)))
		c.b[o] = beta[o] - mean[o]*scale
		row := c.w[o*kk : (o+1)*kk]
		for i := range row {
			row[i] *= scale
		}
	}
	return c
}

// New builds the network from a normalized state dict (Normalize). The body's
// depth (Bottleneck or BasicBlock, blocks per layer), the FPN width and the
// class count come from the tensors' names and shapes; anything missing,
// misshapen or left over is an error.
func New(w Weights, opt Options) (*Model, error) {
	t := &take{w: w, used: map[string]bool{}}
	m := &Model{Opt: opt}
	const body = "backbone.body."
	if !t.has(body + "conv1.weight") {
		return nil, fmt.Errorf("retinanet: no %sconv1.weight: not a torchvision ResNet-FPN RetinaNet state dict", body)
	}
	m.stem = loadConv(t, body+"conv1", body+"bn1", 64, 3, 7, 2, 3)
	bottleneck := t.has(body + "layer1.0.conv3.weight")
	widths := [4]int{64, 128, 256, 512}
	exp := 1
	if bottleneck {
		exp = 4
	}
	in := 64
	total := 0
	for L := 0; L < 4; L++ {
		n := 0
		for t.has(body + "layer" + strconv.Itoa(L+1) + "." + strconv.Itoa(n) + ".conv1.weight") {
			n++
		}
		if n == 0 {
			return nil, fmt.Errorf("retinanet: no blocks in %slayer%d", body, L+1)
		}
		total += n
		wd := widths[L]
		for b := 0; b < n; b++ {
			p := body + "layer" + strconv.Itoa(L+1) + "." + strconv.Itoa(b)
			stride := 1
			if b == 0 && L > 0 {
				stride = 2
			}
			var blk block
			if bottleneck {
				blk.c1 = loadConv(t, p+".conv1", p+".bn1", wd, in, 1, 1, 0)
				blk.c2 = loadConv(t, p+".conv2", p+".bn2", wd, wd, 3, stride, 1)
				blk.c3 = loadConv(t, p+".conv3", p+".bn3", wd*exp, wd, 1, 1, 0)
			} else {
				blk.c1 = loadConv(t, p+".conv1", p+".bn1", wd, in, 3, stride, 1)
				blk.c2 = loadConv(t, p+".conv2", p+".bn2", wd, wd, 3, 1, 1)
			}
			if t.has(p + ".downsample.0.weight") {
				blk.down = loadConv(t, p+".downsample.0", p+".downsample.1", wd*exp, in, 1, stride, 0)
			} else if b == 0 && (stride != 1 || in != wd*exp) {
				t.errs = append(t.errs, "missing tensor "+p+".downsample.0.weight")
			}
			in = wd * exp
			m.layers[L] = append(m.layers[L], blk)
		}
	}
	depth := map[[2]int]int{{8, 0}: 18, {16, 0}: 34, {16, 1}: 50, {33, 1}: 101, {50, 1}: 152}
	key := [2]int{total, 0}
	if bottleneck {
		key[1] = 1
	}
	name := "resnet" + strconv.Itoa(depth[key])
	if depth[key] == 0 {
		name = fmt.Sprintf("resnet-%dblocks", total)
	}
	const fpn = "backbone.fpn."
	s := t.shape(fpn + "inner_blocks.0.0.weight")
	if len(s) != 4 {
		return nil, fmt.Errorf("retinanet: no %sinner_blocks.0.0.weight (nor the old inner_blocks.0.weight)", fpn)
	}
	m.FPN = s[0]
	cin := [3]int{widths[1] * exp, widths[2] * exp, widths[3] * exp}
	for i := 0; i < 3; i++ {
		m.inner[i] = loadConv(t, fpn+"inner_blocks."+strconv.Itoa(i)+".0", "", m.FPN, cin[i], 1, 1, 0)
		m.layer[i] = loadConv(t, fpn+"layer_blocks."+strconv.Itoa(i)+".0", "", m.FPN, m.FPN, 3, 1, 1)
	}
	if ps := t.shape(fpn + "extra_blocks.p6.weight"); len(ps) == 4 && ps[1] != m.FPN {
		return nil, fmt.Errorf("retinanet: %sextra_blocks.p6 takes %d channels: a RetinaNet v2 (P6 from C5) is not supported, only v1 (P6 from P5)", fpn, ps[1])
	}
	m.p6 = loadConv(t, fpn+"extra_blocks.p6", "", m.FPN, m.FPN, 3, 2, 1)
	m.p7 = loadConv(t, fpn+"extra_blocks.p7", "", m.FPN, m.FPN, 3, 2, 1)
	const ch, rh = "head.classification_head.", "head.regression_head."
	if t.has(ch+"conv.0.1.weight") || t.has(ch+"conv.0.1.bias") {
		return nil, fmt.Errorf("retinanet: the head has GroupNorm (RetinaNet v2); only v1 is supported")
	}
	for i := 0; i < 4; i++ {
		m.clsT[i] = loadConv(t, ch+"conv."+strconv.Itoa(i)+".0", "", m.FPN, m.FPN, 3, 1, 1)
		m.regT[i] = loadConv(t, rh+"conv."+strconv.Itoa(i)+".0", "", m.FPN, m.FPN, 3, 1, 1)
	}
	cs := t.shape(ch + "cls_logits.weight")
	if len(cs) != 4 || cs[0]%NumAnchors != 0 || cs[0] == 0 {
		return nil, fmt.Errorf("retinanet: %scls_logits.weight has shape %v, want [%d·classes, %d, 3, 3]", ch, cs, NumAnchors, m.FPN)
	}
	m.Classes = cs[0] / NumAnchors
	m.cls = loadConv(t, ch+"cls_logits", "", NumAnchors*m.Classes, m.FPN, 3, 1, 1)
	m.reg = loadConv(t, rh+"bbox_reg", "", NumAnchors*4, m.FPN, 3, 1, 1)
	if err := t.err(); err != nil {
		return nil, err
	}
	m.Arch = fmt.Sprintf("%s-fpn%d", name, m.FPN)
	return m, nil
}
