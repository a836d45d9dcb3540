// Package bound derives the tolerances of tests that compare two
// implementations of a convolution: two engines, two ISAs, two kernel
// paths (docs/testing.md, "Tolerances are derived, never tuned").
//
// One layer. Each side's output is within its own bound of the exact
// result of the input that side holds, so two sides holding inputs x_A
// and x_B differ by at most
//
//	|ŷ_A − ŷ_B| ≤ |W|·|x_A − x_B| + |res_A − res_B| + e_A + e_B,
//	e_s = c_s·(Σ_s|terms|) (+ u_store·|ŷ_s| where the side stores BF16),
//
// per element, whatever order each side sums in (ReLU and max-pool are
// 1-Lipschitz, so they keep the bound):
//
//   - direct convolution (im2col + SGEMM of any blocking: OpenBLAS's
//     kernels of any ISA, gonum's under -tags noblas; the GPU engine's
//     fmaf chain; the fake cuDNN): a dot product of K = in·kh·kw terms
//     plus the bias and the residual, K+2 terms, so (Higham, Accuracy and
//     Stability of Numerical Algorithms, 3.5) c = γ_{K+2}, Σ|terms| =
//     Σ|w|·|x| + |b| + |res|; with the operands rounded to TF32 (or the
//     filters to BF16) first, c = (1+u_x)(1+u_w)(1+γ_{K+2}) − 1.
//   - Winograd (the CPU engine's 3×3/1 layers): every term passes through
//     the input transform (infer/gemm/kernels_body.h: 3 rounded operations
//     per pass, two passes, for F(4×4,3×3); 1 per pass for F(2×2,3×3)),
//     the filter transform (float64, rounded once), the channel dot
//     product (in terms), the output transform (3 per pass F(4×4), 2 per
//     pass F(2×2)) and the bias and residual adds: c = γ_{in+15} (F(4×4))
//     or γ_{in+9} (F(2×2)), relative not to Σ|w||x| but to the same
//     product with every transform matrix replaced by its absolute value,
//     |Aᵀ|[Σ_c (|G||g_c||Gᵀ|) ⊙ (|Bᵀ||d_c||B|)]|A| (WinoAbs: F(4×4)'s ±5
//     and ±8 make it up to several times Σ|w||x|).
//
// The bounds are rigorous (every rounding the worst way), so they hold on
// any ISA and in any summation order; the typical error is about √K·u,
// measured 0.002–0.14 of the bound in FP32.
package bound

import (
	"math"

	"github.com/canopy-hpc/canopy/infer/nn"
	"github.com/canopy-hpc/canopy/internal/testsupport/approx"
)

// Side is one implementation's arithmetic as the bound sees it.
type Side struct {
	Name string
	// Tile is the Winograd tile a layer runs with (2 or 4; 0: direct).
	// Nil: every layer direct.
	Tile   func(*nn.Conv) int
	UX, UW float64 // activations, filters (and bias) rounded before the products
	UStore float64 // every stored value rounded (BF16 data)
}

// Rel is c_s of side s for convolution c, and its Winograd tile (0:
// direct).
func (s Side) Rel(c *nn.Conv) (cs float64, tile int) {
	n := c.In*c.KH*c.KW + 2 // K products, the bias, the residual
	if s.Tile != nil {
		tile = s.Tile(c)
	}
	switch tile {
	case 4:
		n = c.In + 15 // 6 (input) + 1 (filter) + in (dot) + 6 (output) + 2 (bias, residual)
	case 2:
		n = c.In + 9 // 2 + 1 + in + 4 + 2
	}
	return approx.Chain(s.UX, s.UW, approx.Gamma32(n)), tile
}

// Conv is the one-layer bound on |ŷ_A − ŷ_B| for sides a and b holding
// inputs xa, xb (and residuals ra, rb, or nil), yb side b's output (for
// its storage rounding). Every part but the Winograd one is |W| applied
// to something, so it takes one float64 convolution of |Δx| + c_a·|x_a| +
// c_b·|x_b| (two with a Winograd side, which must be a).
func Conv(c *nn.Conv, h, w int, a, b Side, xa, xb, ra, rb, yb []float32) []float64 {
	ca, tileA := a.Rel(c)
	cb, tileB := b.Rel(c)
	if tileB != 0 {
		panic("bound.Conv: side b runs Winograd; put it first")
	}
	in := make([]float64, len(xa))
	for i := range xa {
		va, vb := float64(xa[i]), float64(xb[i])
		in[i] = math.Abs(va-vb) + cb*math.Abs(vb)
		if tileA == 0 {
			in[i] += ca * math.Abs(va)
		}
	}
	bound := Conv64(c, in, h, w, true)
	if tileA != 0 {
		for i := range in {
			in[i] = math.Abs(float64(xa[i]))
		}
		for i, v := range WinoAbs(c, in, h, w, tileA) {
			bound[i] += ca * v
		}
	}
	hw := len(bound) / c.Out
	for i := range bound {
		bound[i] += (ca+cb)*math.Abs(float64(c.B[i/hw])) + b.UStore/(1-b.UStore)*math.Abs(float64(yb[i]))
		if ra != nil {
			bound[i] += math.Abs(float64(ra[i])-float64(rb[i])) + ca*math.Abs(float64(ra[i])) + cb*math.Abs(float64(rb[i]))
		}
	}
	return bound
}

// Batch is Conv for a batch of images laid end to end (ra, rb nil without
// a residual).
func Batch(c *nn.Conv, h, w int, a, b Side, xa, xb, ra, rb, yb []float32) []float64 {
	oh, ow := OutSize(c, h, w)
	per, po := c.In*h*w, c.Out*oh*ow
	var out []float64
	for i := 0; i < len(xa)/per; i++ {
		var ri, rj []float32
		if ra != nil {
			ri, rj = ra[i*po:(i+1)*po], rb[i*po:(i+1)*po]
		}
		out = append(out, Conv(c, h, w, a, b, xa[i*per:(i+1)*per], xb[i*per:(i+1)*per], ri, rj, yb[i*po:(i+1)*po])...)
	}
	return out
}

// Within holds got to want within bound, element by element: it returns
// the largest |Δ|/bound (+Inf for a NaN) and the elements outside.
func Within(got, want []float32, bound []float64) (worst float64, bad []int) {
	for i := range want {
		d := approx.Diff(float64(got[i]), float64(want[i]))
		r := d / bound[i]
		if bound[i] == 0 && d == 0 {
			r = 0
		}
		if !(r <= worst) {
			worst = math.Inf(1)
			if r == r {
				worst = r
			}
		}
		if approx.Far(d, bound[i]) {
			bad = append(bad, i)
		}
	}
	return worst, bad
}

// OutSize is a convolution's output size.
func OutSize(c *nn.Conv, h, w int) (int, int) {
	return (h+2*c.Pad-c.KH)/c.Stride + 1, (w+2*c.Pad-c.KW)/c.Stride + 1
}

// Conv64 is Σ w·x (abs: Σ |w|·x) in float64, without the bias.
func Conv64(c *nn.Conv, x []float64, h, w int, abs bool) []float64 {
	oh, ow := OutSize(c, h, w)
	y := make([]float64, c.Out*oh*ow)
	for o := 0; o < c.Out; o++ {
		yo := y[o*oh*ow : (o+1)*oh*ow]
		for ci := 0; ci < c.In; ci++ {
			xc := x[ci*h*w : (ci+1)*h*w]
			for ky := 0; ky < c.KH; ky++ {
				for kx := 0; kx < c.KW; kx++ {
					wv := float64(c.W[((o*c.In+ci)*c.KH+ky)*c.KW+kx])
					if abs {
						wv = math.Abs(wv)
					}
					if wv == 0 {
						continue
					}
					for oy := 0; oy < oh; oy++ {
						iy := oy*c.Stride - c.Pad + ky
						if iy < 0 || iy >= h {
							continue
						}
						row, out := xc[iy*w:(iy+1)*w], yo[oy*ow:(oy+1)*ow]
						for ox := range out {
							if ix := ox*c.Stride - c.Pad + kx; ix >= 0 && ix < w {
								out[ox] += wv * row[ix]
							}
						}
					}
				}
			}
		}
	}
	return y
}

// winoCoef is T[i][k][m] = Σ_ξ |Aᵀ[i][ξ]|·|G[ξ][k]|·|Bᵀ[ξ][m]| of F(tile×tile,
// 3×3): the weight of |g_k|·|d_m| in output i of the absolute-value
// Winograd product (signed, it is 1 where m = i+k and 0 elsewhere:
// TestWinoCoef).
func winoCoef(tile int, abs bool) [][3][]float64 {
	var at, g, bt [][]float64
	if tile == 4 {
		at = [][]float64{{1, 1, 1, 1, 1, 0}, {0, 1, -1, 2, -2, 0}, {0, 1, 1, 4, 4, 0}, {0, 1, -1, 8, -8, 1}}
		g = [][]float64{{0.25, 0, 0}, {-1.0 / 6, -1.0 / 6, -1.0 / 6}, {-1.0 / 6, 1.0 / 6, -1.0 / 6},
			{1.0 / 24, 1.0 / 12, 1.0 / 6}, {1.0 / 24, -1.0 / 12, 1.0 / 6}, {0, 0, 1}}
		bt = [][]float64{{4, 0, -5, 0, 1, 0}, {0, -4, -4, 1, 1, 0}, {0, 4, -4, -1, 1, 0},
			{0, -2, -1, 2, 1, 0}, {0, 2, -1, -2, 1, 0}, {0, 4, 0, -5, 0, 1}}
	} else {
		at = [][]float64{{1, 1, 1, 0}, {0, 1, -1, -1}}
		g = [][]float64{{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}}
		bt = [][]float64{{1, 0, -1, 0}, {0, 1, 1, 0}, {0, -1, 1, 0}, {0, 1, 0, -1}}
	}
	f := func(v float64) float64 {
		if abs {
			return math.Abs(v)
		}
		return v
	}
	n := tile + 2
	T := make([][3][]float64, tile)
	for i := range T {
		for k := 0; k < 3; k++ {
			T[i][k] = make([]float64, n)
			for m := 0; m < n; m++ {
				for xi := 0; xi < n; xi++ {
					T[i][k][m] += f(at[i][xi]) * f(g[xi][k]) * f(bt[xi][m])
				}
			}
		}
	}
	return T
}

// WinoAbs is |Aᵀ|[Σ_c (|G||g_c||Gᵀ|) ⊙ (|Bᵀ||d_c||B|)]|A| for every output
// of a 3×3/1/pad-1 convolution, on the engine's tiles (output rows and
// columns tile·t.., input from tile·t − 1, zero outside), x ≥ 0.
func WinoAbs(c *nn.Conv, x []float64, h, w, tile int) []float64 {
	T := winoCoef(tile, true)
	n := tile + 2
	y := make([]float64, c.Out*h*w)
	q := make([]float64, 9*h*w) // q[k·3+l][y·w+x]: the tile sum for tap (k,l)
	for ci := 0; ci < c.In; ci++ {
		xc := x[ci*h*w : (ci+1)*h*w]
		clear(q)
		for oy := 0; oy < h; oy++ {
			ty, i := oy/tile, oy%tile
			for ox := 0; ox < w; ox++ {
				tx, j := ox/tile, ox%tile
				for m := 0; m < n; m++ {
					iy := tile*ty - 1 + m
					if iy < 0 || iy >= h {
						continue
					}
					for nn := 0; nn < n; nn++ {
						ix := tile*tx - 1 + nn
						if ix < 0 || ix >= w {
							continue
						}
						d := xc[iy*w+ix]
						if d == 0 {
							continue
						}
						for k := 0; k < 3; k++ {
							tk := T[i][k][m] * d
							for l := 0; l < 3; l++ {
								q[(k*3+l)*h*w+oy*w+ox] += tk * T[j][l][nn]
							}
						}
					}
				}
			}
		}
		for o := 0; o < c.Out; o++ {
			yo := y[o*h*w : (o+1)*h*w]
			for kl := 0; kl < 9; kl++ {
				wv := math.Abs(float64(c.W[(o*c.In+ci)*9+kl]))
				for p, v := range q[kl*h*w : (kl+1)*h*w] {
					yo[p] += wv * v
				}
			}
		}
	}
	return y
}

// MaxPool3s2 bounds the 3×3 stride-2 (padding 1) max-pool of planes
// planes of h×w, each side holding its input (xa, xb): the pool is exact
// on each side and 1-Lipschitz in the max norm, so an output differs by at
// most the largest |Δx| of its window.
func MaxPool3s2(xa, xb []float32, planes, h, w int) []float64 {
	oh, ow := (h+2-3)/2+1, (w+2-3)/2+1
	lim := make([]float64, planes*oh*ow)
	for ch := 0; ch < planes; ch++ {
		for oy := 0; oy < oh; oy++ {
			for ox := 0; ox < ow; ox++ {
				o := (ch*oh+oy)*ow + ox
				for iy := max(2*oy-1, 0); iy <= min(2*oy+1, h-1); iy++ {
					for ix := max(2*ox-1, 0); ix <= min(2*ox+1, w-1); ix++ {
						i := (ch*h+iy)*w + ix
						lim[o] = max(lim[o], math.Abs(float64(xa[i])-float64(xb[i])))
					}
				}
			}
		}
	}
	return lim
}
