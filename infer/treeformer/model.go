package treeformer

import (
	"fmt"
	"math"
	"strconv"

	"github.com/canopy-hpc/canopy/infer/nn"
)

// linear is nn.Linear for token-major activations: y (N×Out) = x (N×In) ·
// Wt + B, Wt the weight transposed at load (In×Out).
type linear struct {
	In, Out int
	Wt, B   []float32
}

type layerNorm struct{ G, B []float32 }

// block is one PvtV2BlockLayer.
type block struct {
	ln1, ln2 layerNorm
	q        linear
	kv       linear // key and value fused: Out = 2·width
	proj     linear
	sr       linear // the spatial-reduction conv as a GEMM over r×r patches ((ky, kx, c) rows); In = 0 when sr = 1
	srLN     layerNorm
	fc1, fc2 linear
	dwW      []float32 // depthwise 3×3, tap-major: [9][hidden]
	dwB      []float32
}

type stage struct {
	width, heads, sr, hidden int
	embed                    *nn.Conv
	embedLN                  layerNorm
	blocks                   []block
	ln                       layerNorm
}

// channelAttention is the decoder's ChannelAttention: fc1 [C/16 × C],
// fc2 [C × C/16], both without bias.
type channelAttention struct {
	c, r     int
	fc1, fc2 []float32
}

// Model is a TreeFormer's point path: the PvT-v2 backbone, the four 1×1
// projections, the decoder up to the stride-4 density head res0 and the
// count head of yc0. The heads res1, res2 and the yc1/yc2 count paths,
// which DeepForest computes and the point path never reads, are checked
// at load and dropped.
type Model struct {
	Arch    Arch
	Classes int
	stages  [4]stage
	proj    [4]*nn.Conv
	ca      [3]channelAttention
	caConv  [3]*nn.Conv // ca0..ca2's conv-BN-ReLU
	v       [3]*nn.Conv // v1..v3's conv-BN-ReLU (after the ×2 upsampling)
	res0a   *nn.Conv
	res0b   *nn.Conv
	lin3    []float32 // cls_lin3 [128 × 256]
	lin4    []float32 // cls_lin4 [classes × 128]
	lin4B   []float32
}

// Convs lists the convolutions the CPU engine may prepare Winograd filters for.
func (m *Model) Convs() []*nn.Conv {
	out := []*nn.Conv{m.res0a, m.res0b}
	out = append(out, m.caConv[:]...)
	out = append(out, m.v[:]...)
	out = append(out, m.proj[:]...)
	for i := range m.stages {
		out = append(out, m.stages[i].embed)
	}
	return out
}

func takeLinear(t *nn.Take, name string, in, out int, bias bool) linear {
	w := t.Get(name+".weight", out, in)
	l := linear{In: in, Out: out, Wt: make([]float32, in*out), B: make([]float32, out)}
	for o := 0; o < out; o++ {
		for i := 0; i < in; i++ {
			l.Wt[i*out+o] = w[o*in+i]
		}
	}
	if bias {
		copy(l.B, t.Get(name+".bias", out))
	}
	return l
}

func takeLN(t *nn.Take, name string, c int) layerNorm {
	return layerNorm{G: t.Get(name+".weight", c), B: t.Get(name+".bias", c)}
}

// convBN is a Conv2d with bias followed by an eval-mode BatchNorm2d
// (eps 1e-5), folded: W·s, (b − mean)·s + beta with s = gamma/√(var+eps).
func convBN(t *nn.Take, conv, bn string, out, in int) *nn.Conv {
	c := nn.LoadConv(t, conv, "", out, in, 3, 1, 1)
	g := t.Get(bn+".weight", out)
	beta := t.Get(bn+".bias", out)
	mean := t.Get(bn+".running_mean", out)
	varr := t.Get(bn+".running_var", out)
	if t.Has(bn + ".num_batches_tracked") {
		t.Get(bn + ".num_batches_tracked")
	}
	kk := in * 9
	for o := 0; o < out; o++ {
		s := g[o] * float32(1/math.Sqrt(float64(varr[o]+nn.BNEps)))
		c.B[o] = (c.B[o]-mean[o])*s + beta[o]
		row := c.W[o*kk : (o+1)*kk]
		for i := range row {
			row[i] *= s
		}
	}
	return c
}

// New builds the point path of a TreeFormer state dict (DeepForest's
// TreeFormerModel keys, without "model.") of arch a. Every tensor must be
// there with its shape, and no other.
func New(w nn.Weights, a Arch) (*Model, error) {
	t := nn.NewTake(w, "treeformer")
	classes := 1
	if s := t.Shape("regression.res0.3.weight"); len(s) == 4 {
		classes = s[0]
	}
	if classes < 1 || classes > 1<<10 {
		return nil, fmt.Errorf("treeformer: %d classes", classes)
	}
	m := &Model{Arch: a, Classes: classes}
	in := 3
	for i := range m.stages {
		s := &m.stages[i]
		c := a.Widths[i]
		s.width, s.heads, s.sr, s.hidden = c, a.Heads[i], a.SR[i], c*a.MLPRatios[i]
		p := "backbone.encoder.layers." + strconv.Itoa(i) + "."
		k, st := 3, 2
		if i == 0 {
			k, st = 7, 4
		}
		s.embed = nn.LoadConv(t, p+"patch_embedding.proj", "", c, in, k, st, k/2)
		s.embedLN = takeLN(t, p+"patch_embedding.layer_norm", c)
		for b := 0; b < a.Depths[i]; b++ {
			q := p + "blocks." + strconv.Itoa(b) + "."
			var bl block
			bl.ln1 = takeLN(t, q+"layer_norm_1", c)
			bl.q = takeLinear(t, q+"attention.query", c, c, true)
			key := takeLinear(t, q+"attention.key", c, c, true)
			val := takeLinear(t, q+"attention.value", c, c, true)
			bl.kv = linear{In: c, Out: 2 * c, Wt: make([]float32, 2*c*c), B: append(append([]float32{}, key.B...), val.B...)}
			for r := 0; r < c; r++ {
				copy(bl.kv.Wt[r*2*c:], key.Wt[r*c:(r+1)*c])
				copy(bl.kv.Wt[r*2*c+c:], val.Wt[r*c:(r+1)*c])
			}
			bl.proj = takeLinear(t, q+"attention.proj", c, c, true)
			if r := s.sr; r > 1 {
				sw := t.Get(q+"attention.spatial_reduction.weight", c, c, r, r)
				bl.sr = linear{In: r * r * c, Out: c, Wt: make([]float32, r*r*c*c), B: t.Get(q+"attention.spatial_reduction.bias", c)}
				for o := 0; o < c; o++ {
					for ci := 0; ci < c; ci++ {
						for ky := 0; ky < r; ky++ {
							for kx := 0; kx < r; kx++ {
								bl.sr.Wt[((ky*r+kx)*c+ci)*c+o] = sw[((o*c+ci)*r+ky)*r+kx]
							}
						}
					}
				}
				bl.srLN = takeLN(t, q+"attention.layer_norm", c)
			}
			bl.ln2 = takeLN(t, q+"layer_norm_2", c)
			h := s.hidden
			bl.fc1 = takeLinear(t, q+"mlp.dense1", c, h, true)
			dw := t.Get(q+"mlp.dwconv.dwconv.weight", h, 1, 3, 3)
			bl.dwW = make([]float32, 9*h)
			for ch := 0; ch < h; ch++ {
				for k := 0; k < 9; k++ {
					bl.dwW[k*h+ch] = dw[ch*9+k]
				}
			}
			bl.dwB = t.Get(q+"mlp.dwconv.dwconv.bias", h)
			bl.fc2 = takeLinear(t, q+"mlp.dense2", h, c, true)
			s.blocks = append(s.blocks, bl)
		}
		s.ln = takeLN(t, p+"layer_norm", c)
		m.proj[i] = nn.LoadConv(t, "proj."+strconv.Itoa(i), "", RegDims[i], c, 1, 1, 0)
		in = c
	}
	for i, c := range []int{128, 256, 512} {
		n := "regression.ca" + strconv.Itoa(i)
		r := c / 16
		m.ca[i] = channelAttention{c: c, r: r, fc1: t.Get(n+".0.fc.0.weight", r, c), fc2: t.Get(n+".0.fc.2.weight", c, r)}
		m.caConv[i] = convBN(t, n+".1", n+".2", c, c)
		v := "regression.v" + strconv.Itoa(i+1)
		m.v[i] = convBN(t, v+".1", v+".2", c, 2*c)
	}
	m.res0a = convBN(t, "regression.res0.0", "regression.res0.1", 64, 128)
	m.res0b = nn.LoadConv(t, "regression.res0.3", "", classes, 64, 3, 1, 1)
	m.lin3 = t.Get("regression.cls_lin3.weight", 128, 256)
	m.lin4 = t.Get("regression.cls_lin4.weight", classes, 128)
	m.lin4B = t.Get("regression.cls_lin4.bias", classes)
	// the heads the point path never reads: checked, then dropped
	convBN(t, "regression.res1.0", "regression.res1.1", 128, 256)
	convBN(t, "regression.res1.3", "regression.res1.4", 64, 128)
	nn.LoadConv(t, "regression.res1.6", "", classes, 64, 3, 1, 1)
	convBN(t, "regression.res2.0", "regression.res2.1", 256, 512)
	convBN(t, "regression.res2.3", "regression.res2.4", 128, 256)
	nn.LoadConv(t, "regression.res2.6", "", classes, 128, 3, 1, 1)
	t.Get("regression.cls_lin1.weight", 512, 1024)
	t.Get("regression.cls_lin2.weight", 256, 512)
	if err := t.Err(); err != nil {
		return nil, err
	}
	return m, nil
}
