package gemm

import "math"

// The point model's element-wise kernels (infer/treeformer): C clones
// (kernels_body.h) where the C kernels are built, these Go twins
// otherwise, the same bits either way (the same float64 operations in the
// same order; explicit conversions keep Go from fusing a product into an
// add).

// ExpFast is e^x to about 1e-8 relative (far below float32's 6e-8 ulp):
// n = ⌊x·log₂e + ½⌋, r = x − n·ln2, the Taylor polynomial of degree 8
// (remainder r⁹/9! < 1e-9 for |r| ≤ ln2/2), times 2ⁿ from the bits of
// n + 1023 + 1.5·2⁵²; 0 below −708, +∞ above 709.
func ExpFast(x float64) float64 {
	xc := min(max(x, -708), 709)
	n := math.Floor(float64(xc*1.4426950408889634) + 0.5)
	r := xc - float64(n*0.69314718055994529)
	p := 1 + float64(r*(1+float64(r*(1.0/2+float64(r*(1.0/6+float64(r*(1.0/24+float64(r*(1.0/120+float64(r*(1.0/720+float64(r*(1.0/5040+float64(r*(1.0/40320))))))))))))))))
	m := n + 1023.0 + 6755399441055744.0
	v := p * math.Float64frombits(math.Float64bits(m)<<52)
	switch {
	case x < -708:
		return 0
	case x > 709:
		return math.Inf(1)
	}
	return v
}

// GELU is erf's GELU, x/2·(1 + erf(x/√2)), in float64 rounded once, erf
// by Abramowitz–Stegun 7.1.26 (absolute error < 1.5e-7, so GELU's below
// 7.5e-8·|x|); for x < 0 the formula's erfc term is used as it is, so the
// tail keeps its relative accuracy.
func GELU(xf float32) float32 {
	v := float64(xf)
	z := math.Abs(v) * 0.70710678118654757
	t := 1 / (1 + float64(0.3275911*z))
	poly := 0.254829592 + float64(t*(-0.284496736+float64(t*(1.421413741+float64(t*(-1.453152027+float64(t*1.061405429)))))))
	erfc := float64(float64(t*poly) * ExpFast(-float64(z*z)))
	if v < 0 {
		return float32(float64(0.5*v) * erfc)
	}
	return float32(float64(0.5*v) * (2 - erfc))
}

// GELURow applies GELU in place.
func GELURow(x []float32) {
	if len(x) > 0 {
		geluRow(x)
	}
}

func geluRowGo(x []float32) {
	for i, v := range x {
		x[i] = GELU(v)
	}
}

// SoftmaxRow is a float32 softmax in place: exp(x − max) (the difference
// in float32, as torch), the float64 sum in order, each times 1/sum.
func SoftmaxRow(x []float32) {
	if len(x) > 0 {
		softmaxRow(x)
	}
}

func softmaxRowGo(x []float32) {
	m := x[0]
	for _, v := range x {
		if v > m {
			m = v
		}
	}
	for i, v := range x {
		x[i] = float32(ExpFast(float64(v - m)))
	}
	var s float64
	for _, v := range x {
		s += float64(v)
	}
	inv := 1 / s
	for i, v := range x {
		x[i] = float32(float64(v) * inv)
	}
}

// DWConvGELURow computes output row y of the Mix-FFN's depthwise 3×3
// convolution (zero padding 1, bias) of an h×wd token-major map of c
// channels, taps in (ky, kx) order added to the bias, then GELU, into out
// (the whole map's buffer). w is tap-major [9][c].
func DWConvGELURow(x []float32, h, wd, c int, w, b []float32, y int, out []float32) {
	if len(x) < h*wd*c || len(out) < h*wd*c || len(w) < 9*c || len(b) < c || y < 0 || y >= h {
		panic("gemm: DWConvGELURow: buffers do not fit the shape")
	}
	dwconvGELURow(x, h, wd, c, w, b, y, out)
}

func dwconvGELURowGo(x []float32, h, wd, c int, w, b []float32, y int, out []float32) {
	acc := out[y*wd*c : (y+1)*wd*c]
	for xx := 0; xx < wd; xx++ {
		copy(acc[xx*c:(xx+1)*c], b[:c])
	}
	for ky := 0; ky < 3; ky++ {
		sy := y + ky - 1
		if sy < 0 || sy >= h {
			continue
		}
		for kx := 0; kx < 3; kx++ {
			wk := w[(ky*3+kx)*c : (ky*3+kx+1)*c]
			for xx := max(0, 1-kx); xx < min(wd, wd+1-kx); xx++ {
				src := x[(sy*wd+xx+kx-1)*c:][:c]
				dst := acc[xx*c:][:c]
				wk := wk[:c]
				for ch := range dst {
					dst[ch] += float32(wk[ch] * src[ch])
				}
			}
		}
	}
	geluRowGo(acc)
}
