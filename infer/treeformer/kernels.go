package treeformer

import (
	"math"

	"github.com/canopy-hpc/canopy/infer/gemm"
)

// The transformer's kernels over token-major activations (N tokens × C
// channels, row-major). Each output element is computed by one worker in
// a fixed order whatever the thread count, so results are the same bytes
// for any --threads.

// rowBlock is the token block a GEMM or a row kernel is cut into: fixed,
// never derived from the thread count.
const rowBlock = 64

type parallel func(n int, f func(worker, job int))

// linearRows computes out = x·Wt + B (+ res) for n token rows: the GEMM of
// each block of rows, then the bias, then the residual, in that order
// (torch's addmm, then the block's residual add).
func linearRows(par parallel, l *linear, x []float32, n int, res, out []float32) {
	blocks := (n + rowBlock - 1) / rowBlock
	par(blocks, func(_, j int) {
		r0 := j * rowBlock
		nb := min(rowBlock, n-r0)
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

// expFast is e^x in float64 to about 1e-8 relative (far below float32's
// 6e-8 ulp): Cody–Waite reduction x = n·ln2 + r, |r| ≤ ln2/2, then the
// Taylor polynomial of degree 8 (its remainder r⁹/9! < 1e-9) and 2ⁿ from
// the exponent bits; 0 below −708 (e^x then underflows float32 anyway).
func expFast(x float64) float64 {
	if x < -708 {
		return 0
	}
	if x > 709 {
		return math.Inf(1)
	}
	n := math.Floor(x*math.Log2E + 0.5)
	r := x - n*math.Ln2
	p := 1 + r*(1+r*(1.0/2+r*(1.0/6+r*(1.0/24+r*(1.0/120+r*(1.0/720+r*(1.0/5040+r*(1.0/40320))))))))
	return p * math.Float64frombits(uint64(int64(n)+1023)<<52)
}

// gelu is erf's GELU (nn.GELU(), approximate="none"): x/2·(1 + erf(x/√2)),
// in float64 and rounded once, erf by Abramowitz–Stegun 7.1.26 (absolute
// error below 1.5e-7, so GELU's below 7.5e-8·|x|: about one float32 ulp
// of x). For x < 0, 1 + erf(x/√2) is the formula's erfc term itself, so
// the tail keeps its relative accuracy instead of cancelling.
func gelu(x float32) float32 {
	v := float64(x)
	z := math.Abs(v) * (1 / math.Sqrt2)
	t := 1 / (1 + 0.3275911*z)
	erfc := t * (0.254829592 + t*(-0.284496736+t*(1.421413741+t*(-1.453152027+t*1.061405429)))) * expFast(-z*z)
	if v < 0 {
		return float32(0.5 * v * erfc)
	}
	return float32(0.5 * v * (2 - erfc))
}

// softmaxRow is a float32 softmax in place: exp(x − max) (x − max in
// float32, as torch; exp in float64, rounded), their float64 sum, each
// over the sum.
func softmaxRow(x []float32) {
	m := x[0]
	for _, v := range x {
		m = max(m, v)
	}
	var s float64
	for i, v := range x {
		e := float32(expFast(float64(v - m)))
		x[i] = e
		s += float64(e)
	}
	inv := 1 / s
	for i, v := range x {
		x[i] = float32(float64(v) * inv)
	}
}

// dwconvGELU is the Mix-FFN's depthwise 3×3 convolution (zero padding 1,
// bias) of an h×w token map of c channels, then GELU: out[y,x,ch] =
// gelu(b[ch] + Σ taps in (ky, kx) order). w is tap-major [9][c].
func dwconvGELU(par parallel, x []float32, h, wd, c int, w, b, out []float32) {
	par(h, func(_, y int) {
		acc := out[y*wd*c : (y+1)*wd*c]
		for xx := 0; xx < wd; xx++ {
			copy(acc[xx*c:(xx+1)*c], b)
		}
		for ky := 0; ky < 3; ky++ {
			sy := y + ky - 1
			if sy < 0 || sy >= h {
				continue
			}
			for kx := 0; kx < 3; kx++ {
				wk := w[(ky*3+kx)*c : (ky*3+kx+1)*c]
				for xx := max(0, 1-kx); xx < min(wd, wd+1-kx); xx++ {
					sx := xx + kx - 1
					src := x[(sy*wd+sx)*c : (sy*wd+sx+1)*c]
					dst := acc[xx*c : (xx+1)*c]
					src, wk := src[:len(dst)], wk[:len(dst)]
					for ch := range dst {
						dst[ch] += wk[ch] * src[ch]
					}
				}
			}
		}
		for i, v := range acc {
			acc[i] = gelu(v)
		}
	})
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
