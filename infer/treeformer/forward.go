package treeformer

import (
	"fmt"
	"math"

	"github.com/canopy-hpc/canopy/infer/cpu"
	"github.com/canopy-hpc/canopy/infer/gemm"
	"github.com/canopy-hpc/canopy/infer/tile"
)

// Trace receives each stage's output when set (tests compare them with
// DeepForest's): name, then the values in torch's layout (CHW maps,
// token-major N×C for the transformer's tokens).
type Trace func(name string, shape []int, v []float32)

// Density is a window's density map as DeepForest's forward gives it to
// the postprocess: the stride-4 map of the padded window cropped to
// (h/4)×(w/4), normalised to sum to one and scaled by the predicted count.
type Density struct {
	H, W       int       // the map's size, (h/4)×(w/4)
	PadH, PadW int       // the input's size padded to a multiple of 32
	Map        []float32 // H×W
	Count      float32   // the count the map was scaled to
}

// Image is an RGB image as infer/imagefile reads it: three planes (R, G,
// B) of H rows of W values k/255 in float32 (torch's image/255).
type Image struct {
	W, H int
	Pix  []float32
}

// Normalize turns window win of im into the network's input: the window's
// values zero padded on the right and bottom to a multiple of 32, then
// (x − mean)/std per channel in float32 (so padding is −mean/std), as
// TreeFormerModel.forward and PvtImageProcessor do. It returns the CHW
// input and its padded size.
func Normalize(im Image, win tile.Window) ([]float32, int, int) {
	h, w := win.H, win.W
	ph, pw := (h+31)/32*32, (w+31)/32*32
	out := make([]float32, 3*ph*pw)
	for c := 0; c < 3; c++ {
		pad := (0 - Mean[c]) / Std[c]
		plane := out[c*ph*pw : (c+1)*ph*pw]
		src := im.Pix[c*im.W*im.H:]
		for y := 0; y < ph; y++ {
			for x := 0; x < pw; x++ {
				v := pad
				if y < h && x < w {
					v = (src[(win.Y+y)*im.W+win.X+x] - Mean[c]) / Std[c]
				}
				plane[y*pw+x] = v
			}
		}
	}
	return out, ph, pw
}

// Runner runs a Model on one CPU engine (one window at a time; the
// engine's workers share each layer).
type Runner struct {
	m     *Model
	e     *cpu.Engine
	Trace Trace
	bufs  [][]float32 // per worker scratch of the attention
}

// NewRunner is a runner of threads workers.
func NewRunner(m *Model, threads int) *Runner {
	e := cpu.NewEngine(threads)
	return &Runner{m: m, e: e, bufs: make([][]float32, e.Threads())}
}

func (r *Runner) trace(name string, v []float32, shape ...int) {
	if r.Trace != nil {
		r.Trace(name, shape, v)
	}
}

// Forward runs the network on window win of im (predict_image: the whole
// image).
func (r *Runner) Forward(im Image, win tile.Window) (Density, error) {
	h, w := win.H, win.W
	if err := checkWindow(im, win); err != nil {
		return Density{}, err
	}
	x, ph, pw := Normalize(im, win)
	r.trace("input", x, 1, 3, ph, pw)
	feats := r.backbone(cpu.Fmap{C: 3, H: ph, W: pw, D: x})
	y0, count := r.decoder(feats, h, w)
	return densityOf(y0.D, y0.W, h, w, ph, pw, count), nil
}

// checkWindow refuses a window outside the image, or too small for the
// density map.
func checkWindow(im Image, win tile.Window) error {
	h, w := win.H, win.W
	if len(im.Pix) != 3*im.W*im.H || win.X < 0 || win.Y < 0 || win.X+w > im.W || win.Y+h > im.H {
		return fmt.Errorf("treeformer: window %+v of a %d×%d image (%d values)", win, im.W, im.H, len(im.Pix))
	}
	if h < Stride || w < Stride {
		return fmt.Errorf("treeformer: a %d×%d window is too small for the stride-%d density map", w, h, Stride)
	}
	return nil
}

// densityOf crops the stride-4 map y0 (rows of y0W values; channel 0) to
// the window's (h/4)×(w/4) and normalises it as _normalize_density does:
// map/(sum + 1e-4)·count in float32, the sum in float64 in row order.
func densityOf(y0 []float32, y0W, h, w, ph, pw int, count float32) Density {
	oh, ow := h/Stride, w/Stride
	crop := make([]float32, oh*ow)
	var s float64
	for i := 0; i < oh; i++ {
		copy(crop[i*ow:(i+1)*ow], y0[i*y0W:i*y0W+ow])
	}
	for _, v := range crop {
		s += float64(v)
	}
	den := float32(s) + float32(1e-4)
	for i, v := range crop {
		crop[i] = v / den * count
	}
	return Density{H: oh, W: ow, PadH: ph, PadW: pw, Map: crop, Count: count}
}

// backbone runs the four PvT stages; it returns each stage's output
// projected to RegDims (the decoder's inputs, CHW).
func (r *Runner) backbone(x cpu.Fmap) [4]cpu.Fmap {
	var feats [4]cpu.Fmap
	par := parallel(r.e.Parallel)
	for i := range r.m.stages {
		s := &r.m.stages[i]
		y := r.e.Conv(s.embed, x, false, nil)
		h, w, c := y.H, y.W, s.width
		n := h * w
		tok := make([]float32, n*c)
		toTokens(par, y.D, c, n, tok)
		layerNormRows(par, tok, n, c, s.embedLN, tok)
		r.trace(fmt.Sprintf("embed%d", i), tok, 1, n, c)
		for b := range s.blocks {
			tok = r.block(s, &s.blocks[b], tok, h, w)
			if b == 0 {
				r.trace(fmt.Sprintf("block%d_0", i), tok, 1, n, c)
			}
		}
		layerNormRows(par, tok, n, c, s.ln, tok)
		out := cpu.NewFmap(c, h, w)
		toCHW(par, tok, n, c, out.D)
		r.trace(fmt.Sprintf("stage%d", i), out.D, 1, c, h, w)
		feats[i] = r.e.Conv(r.m.proj[i], out, false, nil)
		r.trace(fmt.Sprintf("proj%d", i), feats[i].D, 1, feats[i].C, h, w)
		x = out
	}
	return feats
}

// block is PvtV2BlockLayer: h += proj(attention(LN1(h))); h +=
// fc2(gelu(dwconv(fc1(LN2(h))))).
func (r *Runner) block(s *stage, bl *block, h []float32, hh, ww int) []float32 {
	par := parallel(r.e.Parallel)
	c, n := s.width, hh*ww
	t := make([]float32, n*c)
	layerNormRows(par, h, n, c, bl.ln1, t)
	q := make([]float32, n*c)
	linearRows(par, &bl.q, t, n, nil, q)
	kvIn, m := t, n
	if s.sr > 1 {
		rh, rw := hh/s.sr, ww/s.sr
		m = rh * rw
		p := make([]float32, m*bl.sr.In)
		patches(t, hh, ww, c, s.sr, p)
		red := make([]float32, m*c)
		linearRows(par, &bl.sr, p, m, nil, red)
		layerNormRows(par, red, m, c, bl.srLN, red)
		kvIn = red
	}
	kv := make([]float32, m*2*c)
	linearRows(par, &bl.kv, kvIn, m, nil, kv)
	// keys transposed (C × M) so each head's scores are one GEMM
	kt := make([]float32, c*m)
	for j := 0; j < m; j++ {
		for ch := 0; ch < c; ch++ {
			kt[ch*m+j] = kv[j*2*c+ch]
		}
	}
	ctx := t // LN1's output is dead: the context reuses it
	d := c / s.heads
	scale := float32(math.Sqrt(float64(d)))
	rb := rowsFor(n)
	blocks := (n + rb - 1) / rb
	par(s.heads*blocks, func(wk, job int) {
		hd, j := job/blocks, job%blocks
		r0 := j * rb
		nb := min(rb, n-r0)
		if cap(r.bufs[wk]) < rb*m {
			r.bufs[wk] = make([]float32, rb*m)
		}
		sc := r.bufs[wk][:nb*m]
		gemm.Mul(nb, m, d, q[r0*c+hd*d:], c, kt[hd*d*m:], m, sc, m)
		for i := 0; i < nb; i++ {
			row := sc[i*m : (i+1)*m]
			for k := range row {
				row[k] /= scale
			}
			softmaxRow(row)
		}
		gemm.Mul(nb, d, m, sc, m, kv[c+hd*d:], 2*c, ctx[r0*c+hd*d:], c)
	})
	h2 := q // q is dead
	linearRows(par, &bl.proj, ctx, n, h, h2)
	layerNormRows(par, h2, n, c, bl.ln2, t)
	hid := make([]float32, n*s.hidden)
	linearRows(par, &bl.fc1, t, n, nil, hid)
	act := make([]float32, n*s.hidden)
	dwconvGELU(par, hid, hh, ww, s.hidden, bl.dwW, bl.dwB, act)
	out := h // the block's input is dead once it is added
	linearRows(par, &bl.fc2, act, n, h2, out)
	return out
}

// channelMeans is each channel's mean over the map, summed in float64 in
// the map's order and rounded once to float32 (the channel attention's avg
// and the count head's global average pool).
func channelMeans(x cpu.Fmap) []float32 {
	hw := x.H * x.W
	m := make([]float32, x.C)
	for ch := range m {
		var s float64
		for _, v := range x.D[ch*hw : (ch+1)*hw] {
			s += float64(v)
		}
		m[ch] = float32(s / float64(hw))
	}
	return m
}

// channelAttention scales each channel of x by sigmoid(fc2(relu(fc1(avg)))),
// avg the channel's mean (float64 sum over the map).
func (r *Runner) channelAttention(a *channelAttention, x cpu.Fmap) cpu.Fmap {
	hw := x.H * x.W
	avg := channelMeans(x)
	mid := make([]float32, a.r)
	for i := range mid {
		var s float32
		for ch, v := range avg {
			s += a.fc1[i*a.c+ch] * v
		}
		mid[i] = max(s, 0)
	}
	out := cpu.NewFmap(x.C, x.H, x.W)
	r.e.Parallel(a.c, func(_, ch int) {
		var s float32
		for i, v := range mid {
			s += a.fc2[ch*a.r+i] * v
		}
		g := float32(1 / (1 + math.Exp(-float64(s))))
		src, dst := x.D[ch*hw:(ch+1)*hw], out.D[ch*hw:(ch+1)*hw]
		for k, v := range src {
			dst[k] = g * v
		}
	})
	return out
}

// decoder is Regression's point path: x2_1 = ca2(x2) + v3(x3), x1_1 =
// ca1(x1) + v2(x2_1), x0_1 = ca0(x0) + v1(x1_1), y0 = res0(x0_1); and the
// count yc0 = cls_lin4(cls_lin3(mean(x1)))·h·w, |·| clamped at 1e-4.
func (r *Runner) decoder(f [4]cpu.Fmap, h, w int) (cpu.Fmap, float32) {
	par := parallel(r.e.Parallel)
	up := func(x cpu.Fmap) cpu.Fmap {
		u := cpu.NewFmap(x.C, 2*x.H, 2*x.W)
		upsample2(par, x.D, x.C, x.H, x.W, u.D)
		return u
	}
	top := f[3]
	names := [3]string{"0", "1", "2"}
	for i := 2; i >= 0; i-- {
		ca := r.e.Conv(r.m.caConv[i], r.channelAttention(&r.m.ca[i], f[i]), true, nil)
		r.trace("ca"+names[i], ca.D, 1, ca.C, ca.H, ca.W)
		v := r.e.Conv(r.m.v[i], up(top), true, nil)
		r.trace("v"+string(rune('1'+i)), v.D, 1, v.C, v.H, v.W)
		for k := range ca.D {
			ca.D[k] += v.D[k]
		}
		top = ca
	}
	a := r.e.Conv(r.m.res0a, top, true, nil)
	y0 := r.e.Conv(r.m.res0b, a, true, nil)
	r.trace("res0", y0.D, 1, y0.C, y0.H, y0.W)
	count := r.m.countHead(channelMeans(f[1]), h, w, r.trace)
	return y0, count
}

// countHead is the count of an h×w window from gap, proj1's channel
// means (256): cls_lin3 (no bias) and cls_lin4 in float64, rounded once
// each, times h·w, |·| clamped at 1e-4.
func (m *Model) countHead(gap []float32, h, w int, trace func(string, []float32, ...int)) float32 {
	l3 := make([]float32, 128)
	for i := range l3 {
		var s float64
		for ch, v := range gap {
			s += float64(m.lin3[i*len(gap)+ch]) * float64(v)
		}
		l3[i] = float32(s)
	}
	trace("cls_lin3", l3, 1, 128)
	var s float64
	for i, v := range l3 {
		s += float64(m.lin4[i]) * float64(v)
	}
	yc := float32(s) + m.lin4B[0]
	trace("cls_lin4", []float32{yc}, 1, 1)
	return max(abs32(yc*float32(h*w)), 1e-4)
}

func abs32(x float32) float32 { return float32(math.Abs(float64(x))) }

// WindowBytes estimates what one forward pass of an h×w window holds at
// its peak, for a pre-flight check: per stride-4 token of the padded
// input, stage 1's block (the residual stream, LayerNorm's output, the
// queries and the context, 64 channels each, and the Mix-FFN's two
// 512-channel maps) and the decoder's stride-4 maps kept alongside (the
// 128-channel projection, the channel attention's input and output, the
// upsampled 256 channels, the 128 of v1 and the 64 of res0): about 1,500
// float32 values, doubled for the garbage the collector has not yet
// reclaimed. (A 512² window: about 200 MB.)
func WindowBytes(h, w int) int64 {
	ph, pw := int64((h+31)/32*32), int64((w+31)/32*32)
	return (ph / 4) * (pw / 4) * 1500 * 4 * 2
}
