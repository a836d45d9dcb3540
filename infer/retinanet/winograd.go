package retinanet

import (
	"sync"

	"github.com/canopy-hpc/canopy/infer/gemm"
)

// Winograd F(2×2, 3×3) for the 3×3, stride-1, pad-1 convolutions (the FPN
// outputs, the heads' 8 convolutions per level, the Bottleneck conv2 of
// stride 1: about two thirds of RetinaNet's FLOPs). Each 2×2 output tile
// comes from a 4×4 input tile: V = Bᵀ d B, M = U ⊙ V summed over input
// channels (16 SGEMMs of [out × in]·[in × tiles]), Y = Aᵀ M A, with
// U = G g Gᵀ precomputed per filter:
//
//	Bᵀ = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]
//	G  = [1 0 0; ½ ½ ½; ½ -½ ½; 0 0 1]
//	Aᵀ = [1 1 1 0; 0 1 -1 -1]
//
// It needs 2.25× fewer multiplications than im2col. The transforms only add,
// subtract and halve, so the result differs from the direct convolution by
// float32 rounding alone (measured: relative 1e-6 on a layer; the golden
// fixtures hold to the same tolerances). Tiles are cut into fixed blocks of
// winoBlock whatever the thread count, so results stay independent of it.

// winoBlock is the number of tiles per block (the SGEMMs' N).
const winoBlock = 96

// winograd holds a filter transformed to U: 16 matrices of [out × in].
type winograd struct {
	once sync.Once
	u    []float32 // [16][out][in]
}

func useWinograd(c *conv) bool {
	return c.kh == 3 && c.kw == 3 && c.stride == 1 && c.pad == 1 && c.in >= 32 && c.out >= 32
}

// transform computes U = G g Gᵀ for every (out, in) filter.
func (c *conv) winogradU() []float32 {
	c.wino.once.Do(func() {
		n := c.out * c.in
		u := make([]float32, 16*n)
		for o := 0; o < c.out; o++ {
			for i := 0; i < c.in; i++ {
				g := c.w[(o*c.in+i)*9 : (o*c.in+i)*9+9]
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
						u[(r*4+s)*n+o*c.in+i] = row[s]
					}
				}
			}
		}
		c.wino.u = u
	})
	return c.wino.u
}

// winoBufs are one worker's block buffers.
type winoBufs struct {
	v, m []float32
}

// convWinograd is conv for useWinograd layers.
func (e *engine) convWinograd(c *conv, x fmap, relu bool, res *fmap) fmap {
	u := c.winogradU()
	H, W := x.h, x.w
	y := e.fmap(c.out, H, W)
	th, tw := (H+1)/2, (W+1)/2
	tiles := th * tw
	blocks := (tiles + winoBlock - 1) / winoBlock
	e.parallel(blocks, func(w, j int) {
		t0 := j * winoBlock
		nb := min(winoBlock, tiles-t0)
		b := &e.wino[w]
		if cap(b.v) < 16*c.in*winoBlock {
			b.v = make([]float32, 16*c.in*winoBlock)
		}
		if cap(b.m) < 16*c.out*winoBlock {
			b.m = make([]float32, 16*c.out*winoBlock)
		}
		v := b.v[:16*c.in*nb]
		m := b.m[:16*c.out*nb]
		// Input transform: V[ξ][ci][t].
		for ci := 0; ci < c.in; ci++ {
			plane := x.d[ci*H*W : (ci+1)*H*W]
			for k := 0; k < nb; k++ {
				t := t0 + k
				ty, tx := t/tw, t%tw
				y0, x0 := 2*ty-1, 2*tx-1
				var d [4][4]float32
				if y0 >= 0 && x0 >= 0 && y0+3 < H && x0+3 < W {
					for r := 0; r < 4; r++ {
						row := plane[(y0+r)*W+x0 : (y0+r)*W+x0+4]
						d[r] = [4]float32{row[0], row[1], row[2], row[3]}
					}
				} else {
					for r := 0; r < 4; r++ {
						yy := y0 + r
						if yy < 0 || yy >= H {
							continue
						}
						for s := 0; s < 4; s++ {
							if xx := x0 + s; xx >= 0 && xx < W {
								d[r][s] = plane[yy*W+xx]
							}
						}
					}
				}
				// t = Bᵀ d (rows), then V = t B (columns).
				var q [4][4]float32
				for s := 0; s < 4; s++ {
					q[0][s] = d[0][s] - d[2][s]
					q[1][s] = d[1][s] + d[2][s]
					q[2][s] = d[2][s] - d[1][s]
					q[3][s] = d[1][s] - d[3][s]
				}
				base := ci*nb + k
				stride := c.in * nb
				for r := 0; r < 4; r++ {
					v[(r*4+0)*stride+base] = q[r][0] - q[r][2]
					v[(r*4+1)*stride+base] = q[r][1] + q[r][2]
					v[(r*4+2)*stride+base] = q[r][2] - q[r][1]
					v[(r*4+3)*stride+base] = q[r][1] - q[r][3]
				}
			}
		}
		// 16 SGEMMs: M[ξ] (out × nb) = U[ξ] (out × in) · V[ξ] (in × nb).
		for xi := 0; xi < 16; xi++ {
			gemm.Mul(c.out, nb, c.in, u[xi*c.out*c.in:], c.in, v[xi*c.in*nb:], nb, m[xi*c.out*nb:], nb)
		}
		// Output transform, bias, residual, ReLU.
		stride := c.out * nb
		for o := 0; o < c.out; o++ {
			bias := c.b[o]
			out := y.d[o*H*W : (o+1)*H*W]
			var rp []float32
			if res != nil {
				rp = res.d[o*H*W : (o+1)*H*W]
			}
			for k := 0; k < nb; k++ {
				t := t0 + k
				ty, tx := t/tw, t%tw
				idx := o*nb + k
				var mm [16]float32
				for xi := 0; xi < 16; xi++ {
					mm[xi] = m[xi*stride+idx]
				}
				// s = Aᵀ M (2×4), then Y = s A (2×2).
				var s [2][4]float32
				for col := 0; col < 4; col++ {
					s[0][col] = mm[col] + mm[4+col] + mm[8+col]
					s[1][col] = mm[4+col] - mm[8+col] - mm[12+col]
				}
				for r := 0; r < 2; r++ {
					yy := 2*ty + r
					if yy >= H {
						break
					}
					vals := [2]float32{s[r][0] + s[r][1] + s[r][2], s[r][1] - s[r][2] - s[r][3]}
					for q := 0; q < 2; q++ {
						xx := 2*tx + q
						if xx >= W {
							break
						}
						p := yy*W + xx
						val := vals[q] + bias
						if rp != nil {
							val += rp[p]
						}
						if relu && val < 0 {
							val = 0
						}
						out[p] = val
					}
				}
			}
		}
	})
	return y
}
