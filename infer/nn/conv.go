package nn

import (
	"math"
	"sync"
)

// BNEps is FrozenBatchNorm2d's epsilon as torchvision builds DeepForest's
// hub models (ResNet50_Weights backbone default: 1e-5).
const BNEps = 1e-5

// Conv is one convolution with folded batch norm: W is [out, in·kh·kw].
type Conv struct {
	Name                         string
	Out, In, KH, KW, Stride, Pad int
	W, B                         []float32
	wino                         winograd // U of a 3×3 stride-1 filter, made on first use
}

// LoadConv takes a conv weight (and its BN, or its bias) from t.
func LoadConv(t *Take, name, bn string, out, in, k, stride, pad int) *Conv {
	c := &Conv{Name: name, Out: out, In: in, KH: k, KW: k, Stride: stride, Pad: pad}
	w := t.Get(name+".weight", out, in, k, k)
	c.W = BigFloats(len(w))
	copy(c.W, w)
	c.B = make([]float32, out)
	if bn == "" {
		copy(c.B, t.Get(name+".bias", out))
		return c
	}
	g := t.Get(bn+".weight", out)
	beta := t.Get(bn+".bias", out)
	mean := t.Get(bn+".running_mean", out)
	varr := t.Get(bn+".running_var", out)
	kk := in * k * k
	for o := 0; o < out; o++ {
		// FrozenBatchNorm2d: scale = w·rsqrt(var+eps), bias = b − mean·scale.
		scale := g[o] * float32(1/math.Sqrt(float64(varr[o]+BNEps)))
		c.B[o] = beta[o] - mean[o]*scale
		row := c.W[o*kk : (o+1)*kk]
		for i := range row {
			row[i] *= scale
		}
	}
	return c
}

// winograd holds a filter transformed to U: 16 matrices of [out × in] for
// F(2×2,3×3), 36 for F(4×4,3×3).
type winograd struct {
	once, once4 sync.Once
	u           []float32 // [16][out][in]
	u4          []float32 // [36][out][in]
}

// WinogradU computes U = G g Gᵀ of F(2×2,3×3) for every (out, in) filter,
// once (the CPU engine's Winograd convolutions read it).
func (c *Conv) WinogradU() []float32 {
	c.wino.once.Do(func() {
		n := c.Out * c.In
		u := BigFloats(16 * n)
		for o := 0; o < c.Out; o++ {
			for i := 0; i < c.In; i++ {
				g := c.W[(o*c.In+i)*9 : (o*c.In+i)*9+9]
				// t = G g (4×3), then U = t Gᵀ (4×4).
				var t [4][3]float32
				for k := 0; k < 3; k++ {
					g0, g1, g2 := g[k], g[3+k], g[6+k]
					t[0][k] = g0
					t[1][k] = 0.5 * (g0 + g1 + g2)
					t[2][k] = 0.5 * (g0 - g1 + g2)
					t[3][k] = g2
				}
				for r := 0; r < 4; r++ {
					a0, a1, a2 := t[r][0], t[r][1], t[r][2]
					row := [4]float32{a0, 0.5 * (a0 + a1 + a2), 0.5 * (a0 - a1 + a2), a2}
					for s := 0; s < 4; s++ {
						u[(r*4+s)*n+o*c.In+i] = row[s]
					}
				}
			}
		}
		c.wino.u = u
	})
	return c.wino.u
}

// WinogradU4 computes U = G g Gᵀ of F(4×4,3×3) for every (out, in) filter,
// in float64, rounded once to float32:
//
//	G = [¼ 0 0; -⅙ -⅙ -⅙; -⅙ ⅙ -⅙; 1/24 1/12 ⅙; 1/24 -1/12 ⅙; 0 0 1]
func (c *Conv) WinogradU4() []float32 {
	c.wino.once4.Do(func() {
		G := [6][3]float64{{0.25, 0, 0}, {-1.0 / 6, -1.0 / 6, -1.0 / 6}, {-1.0 / 6, 1.0 / 6, -1.0 / 6},
			{1.0 / 24, 1.0 / 12, 1.0 / 6}, {1.0 / 24, -1.0 / 12, 1.0 / 6}, {0, 0, 1}}
		n := c.Out * c.In
		u := BigFloats(36 * n)
		for o := 0; o < c.Out; o++ {
			for i := 0; i < c.In; i++ {
				g := c.W[(o*c.In+i)*9 : (o*c.In+i)*9+9]
				var t [6][3]float64 // G g
				for r := 0; r < 6; r++ {
					for k := 0; k < 3; k++ {
						t[r][k] = G[r][0]*float64(g[k]) + G[r][1]*float64(g[3+k]) + G[r][2]*float64(g[6+k])
					}
				}
				for r := 0; r < 6; r++ {
					for s := 0; s < 6; s++ {
						v := t[r][0]*G[s][0] + t[r][1]*G[s][1] + t[r][2]*G[s][2]
						u[(r*6+s)*n+o*c.In+i] = float32(v)
					}
				}
			}
		}
		c.wino.u4 = u
	})
	return c.wino.u4
}

// WinogradMade is the length of the F(2×2,3×3) and F(4×4,3×3) filters
// made so far (0 for those not made).
func (c *Conv) WinogradMade() (u, u4 int) { return len(c.wino.u), len(c.wino.u4) }
