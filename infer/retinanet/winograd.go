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

// winoPad separates the 16 matrices of a block buffer (16 floats: one
// cache line).
const winoPad = 16

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
		// The 16 matrices of a buffer sit winoPad floats further apart than
		// their size: at a power-of-two multiple of 4 KiB (256·96·4 bytes
		// is 24·4096) the 16 rows a tile touches would share one L1 set.
		vs, ms := c.in*nb+winoPad, c.out*nb+winoPad
		if cap(b.v) < 16*(c.in*winoBlock+winoPad) {
			b.v = make([]float32, 16*(c.in*winoBlock+winoPad))
		}
		if cap(b.m) < 16*(c.out*winoBlock+winoPad) {
			b.m = make([]float32, 16*(c.out*winoBlock+winoPad))
		}
		v := b.v[:16*vs]
		m := b.m[:16*ms]
		// Input transform: V[ξ][ci][t].
		gemm.WinoIn(x.d, c.in, H, W, tw, t0, nb, v, vs)
		// 16 SGEMMs: M[ξ] (out × nb) = U[ξ] (out × in) · V[ξ] (in × nb).
		for xi := 0; xi < 16; xi++ {
			gemm.Mul(c.out, nb, c.in, u[xi*c.out*c.in:], c.in, v[xi*vs:], nb, m[xi*ms:], nb)
		}
		// Output transform, bias, residual, ReLU.
		var rd []float32
		if res != nil {
			rd = res.d
		}
		gemm.WinoOut(m, ms, nb, c.out, tw, t0, H, W, c.b, rd, relu, y.d)
	})
	return y
}
