package treeformer

import (
	"math"

	"github.com/canopy-hpc/canopy/infer/gemm"
)

// The transformer's kernels over token-major activations (N tokens × C
// channels, row-major). Each output element is computed by one worker in
// a fixed order whatever the thread count, so results are the same bytes
// for any --threads.

// rowBlock is the smallest token block a GEMM or a row kernel is cut
// into; rowsFor picks the block of a layer from its token count alone
// (never from the thread count): n/8 rounded up to a multiple of 16, in
// [rowBlock, maxRowBlock], so the big maps pack each weight a few times
// and the small ones still give every worker a share.
const (
	rowBlock    = 64
	maxRowBlock = 512
)

func rowsFor(n int) int { return min(maxRowBlock, max(rowBlock, (n/8+15)/16*16)) }

type parallel func(n int, f func(worker, job int))

// linearRows computes out = x·Wt + B (+ res) for n token rows: the GEMM of
// each block of rows, then the bias, then the residual, in that order
// (torch's addmm, then the block's residual add).
func linearRows(par parallel, l *linear, x []float32, n int, res, out []float32) {
	rb := rowsFor(n)
	blocks := (n + rb - 1) / rb
	par(blocks, func(_, j int) {
		r0 := j * rb
		nb := min(rb, n-r0)
		o := out[r0*l.Out : (r0+nb)*l.Out]
		gemm.Mul(nb, l.Out, l.In, x[r0*l.In:], l.In, l.Wt, l.Out, o, l.Out)
		for r := 0; r < nb; r++ {
			row := o[r*l.Out : (r+1)*l.Out]
			for c := range row {
				row[c] += l.B[c]
			}
			if res != nil {
				rr := res[(r0+r)*l.Out : (r0+r+1)*l.Out]
				for c := range row {
					row[c] += rr[c]
				}
			}
		}
	})
}

// layerNormRow is LayerNorm over one token's channels (eps 1e-6): the
// mean and the biased variance summed in float64 (two passes), then
// (x − mean)·rstd·g + b rounded to float32.
func layerNormRow(x, out []float32, ln layerNorm) {
	var s float64
	for _, v := range x {
		s += float64(v)
	}
	mean := s / float64(len(x))
	var q float64
	for _, v := range x {
		d := float64(v) - mean
		q += d * d
	}
	rstd := 1 / math.Sqrt(q/float64(len(x))+LNEps)
	for i, v := range x {
		out[i] = float32((float64(v)-mean)*rstd)*ln.G[i] + ln.B[i]
	}
}

// layerNormRows applies layerNormRow to n rows of c channels (in place
// when out is x).
func layerNormRows(par parallel, x []float32, n, c int, ln layerNorm, out []float32) {
	blocks := (n + rowBlock - 1) / rowBlock
	par(blocks, func(_, j int) {
		for r := j * rowBlock; r < min(n, (j+1)*rowBlock); r++ {
			layerNormRow(x[r*c:(r+1)*c], out[r*c:(r+1)*c], ln)
		}
	})
}

// gelu and softmaxRow are infer/gemm's kernels (C clones where built,
// Go twins otherwise, the same bits): erf's GELU by Abramowitz–Stegun's
// erf (absolute error < 1.5e-7) with a float64 exp, and a float32 softmax
// (x − max in float32, float64 exp, float64 sum).
func gelu(x float32) float32 { return gemm.GELU(x) }

func softmaxRow(x []float32) { gemm.SoftmaxRow(x) }

// dwconvGELU is the Mix-FFN's depthwise 3×3 convolution (zero padding 1,
// bias) of an h×w token map of c channels, then GELU: out[y,x,ch] =
// gelu(b[ch] + Σ taps in (ky, kx) order). w is tap-major [9][c].
func dwconvGELU(par parallel, x []float32, h, wd, c int, w, b, out []float32) {
	par(h, func(_, y int) { gemm.DWConvGELURow(x, h, wd, c, w, b, y, out) })
}

// toTokens transposes a CHW map (c × n) into token-major rows (n × c).
func toTokens(par parallel, chw []float32, c, n int, out []float32) {
	blocks := (n + rowBlock - 1) / rowBlock
	par(blocks, func(_, j int) {
		for r := j * rowBlock; r < min(n, (j+1)*rowBlock); r++ {
			row := out[r*c : (r+1)*c]
			for ch := range row {
				row[ch] = chw[ch*n+r]
			}
		}
	})
}

// toCHW transposes token-major rows (n × c) into a CHW map (c × n).
func toCHW(par parallel, tok []float32, n, c int, out []float32) {
	par(c, func(_, ch int) {
		dst := out[ch*n : (ch+1)*n]
		for r := range dst {
			dst[r] = tok[r*c+ch]
		}
	})
}

// patches gathers the r×r stride-r patches of an h×w token map (c
// channels) into rows of r·r·c in (ky, kx, ch) order: the spatial
// reduction's im2col.
func patches(x []float32, h, w, c, r int, out []float32) {
	oh, ow := h/r, w/r
	for oy := 0; oy < oh; oy++ {
		for ox := 0; ox < ow; ox++ {
			row := out[(oy*ow+ox)*r*r*c:]
			for ky := 0; ky < r; ky++ {
				for kx := 0; kx < r; kx++ {
					s := ((oy*r+ky)*w + ox*r + kx) * c
					copy(row[(ky*r+kx)*c:(ky*r+kx+1)*c], x[s:s+c])
				}
			}
		}
	}
}

// upsample2 is bilinear ×2 with align_corners=True of a CHW map: source
// coordinate dst·(in−1)/(out−1) (float32), taps i0 = ⌊src⌋ and i0+1
// (clamped), weights λ and 1−λ; out = h0·(w0·a + w1·b) + h1·(w0·c + w1·d).
func upsample2(par parallel, x []float32, c, h, w int, out []float32) {
	oh, ow := 2*h, 2*w
	ty0, ty1, tyl := alignTaps(h, oh)
	tx0, tx1, txl := alignTaps(w, ow)
	par(c, func(_, ch int) {
		src := x[ch*h*w : (ch+1)*h*w]
		dst := out[ch*oh*ow : (ch+1)*oh*ow]
		for y := 0; y < oh; y++ {
			r0, r1 := src[ty0[y]*w:], src[ty1[y]*w:]
			h1 := tyl[y]
			h0 := 1 - h1
			row := dst[y*ow : (y+1)*ow]
			for xx := range row {
				w1 := txl[xx]
				w0 := 1 - w1
				a := w0*r0[tx0[xx]] + w1*r0[tx1[xx]]
				b := w0*r1[tx0[xx]] + w1*r1[tx1[xx]]
				row[xx] = h0*a + h1*b
			}
		}
	})
}

func alignTaps(in, out int) (i0, i1 []int, l []float32) {
	i0, i1, l = make([]int, out), make([]int, out), make([]float32, out)
	var scale float32
	if out > 1 {
		scale = float32(in-1) / float32(out-1)
	}
	for d := 0; d < out; d++ {
		src := scale * float32(d)
		k := min(int(src), in-1)
		i0[d] = k
		i1[d] = min(k+1, in-1)
		l[d] = src - float32(k)
	}
	return
}
