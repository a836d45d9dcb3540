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

// winoBlock is the most tiles per block (the SGEMMs' N) of F(2×2,3×3);
// wino4Block that of F(4×4,3×3). balancedBlock cuts a layer's tiles into
// near-equal blocks of at most that. F(4×4,3×3)'s 192 (at 48, OpenBLAS
// packs each 256×256 filter matrix for a GEMM of 48 columns: 43 cpu-ms per
// 256-channel 100×100 convolution against 34 at 192, BenchmarkConv3x3)
// costs 36·(in+out)·192 floats of block buffers per worker (11 MB at 256
// channels).
const (
	winoBlock  = 96
	wino4Block = 192
)

// winoPad separates the 16 matrices of a block buffer (16 floats: one
// cache line).
const winoPad = 16

// winograd holds a filter transformed to U: 16 matrices of [out × in] for
// F(2×2,3×3), 36 for F(4×4,3×3).
type winograd struct {
	once, once4 sync.Once
	u           []float32 // [16][out][in]
	u4          []float32 // [36][out][in]
}

func useWinograd(c *conv) bool {
	return c.kh == 3 && c.kw == 3 && c.stride == 1 && c.pad == 1 && c.in >= 32 && c.out >= 32
}

// winoTile is the output tile of a useWinograd layer: 4, F(4×4,3×3), with
// 4× fewer multiplications than a direct convolution against F(2×2,3×3)'s
// 2.25×, on every map (a map smaller than its tiles, P7's 7×7 at 800×800,
// still costs fewer multiplications than F(2×2,3×3) would), so that each
// filter keeps one transformed copy; 2 for the convolutions of more than
// 256×256 channels (ResNet-50's layer4, on a 25×25 map at 800×800), whose
// F(4×4,3×3) filters would cost 42 MB more memory for 2% of the work. It
// depends on the layer's shape alone. F(4×4,3×3)'s transforms multiply by
// up to 5 and 8, so its rounding error is larger (TestWinogradMatchesDirect
// states both bounds; the golden tests hold torchvision's tolerances with
// it).
func winoTile(c *conv) int {
	if wino2Only || c.in*c.out > 256*256 {
		return 2
	}
	return 4
}

// wino2Only turns F(4×4,3×3) off (tests compare the two).
var wino2Only = false

// transform computes U = G g Gᵀ for every (out, in) filter.
func (c *conv) winogradU() []float32 {
	c.wino.once.Do(func() {
		n := c.out * c.in
		u := bigFloats(16 * n)
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

// winogradU4 computes U = G g Gᵀ of F(4×4,3×3) for every (out, in) filter,
// in float64, rounded once to float32:
//
//	G = [¼ 0 0; -⅙ -⅙ -⅙; -⅙ ⅙ -⅙; 1/24 1/12 ⅙; 1/24 -1/12 ⅙; 0 0 1]
func (c *conv) winogradU4() []float32 {
	c.wino.once4.Do(func() {
		G := [6][3]float64{{0.25, 0, 0}, {-1.0 / 6, -1.0 / 6, -1.0 / 6}, {-1.0 / 6, 1.0 / 6, -1.0 / 6},
			{1.0 / 24, 1.0 / 12, 1.0 / 6}, {1.0 / 24, -1.0 / 12, 1.0 / 6}, {0, 0, 1}}
		n := c.out * c.in
		u := bigFloats(36 * n)
		for o := 0; o < c.out; o++ {
			for i := 0; i < c.in; i++ {
				g := c.w[(o*c.in+i)*9 : (o*c.in+i)*9+9]
				var t [6][3]float64 // G g
				for r := 0; r < 6; r++ {
					for k := 0; k < 3; k++ {
						t[r][k] = G[r][0]*float64(g[k]) + G[r][1]*float64(g[3+k]) + G[r][2]*float64(g[6+k])
					}
				}
				for r := 0; r < 6; r++ {
					for s := 0; s < 6; s++ {
						v := t[r][0]*G[s][0] + t[r][1]*G[s][1] + t[r][2]*G[s][2]
						u[(r*6+s)*n+o*c.in+i] = float32(v)
					}
				}
			}
		}
		c.wino.u4 = u
	})
	return c.wino.u4
}

// winoBufs are one worker's block buffers.
type winoBufs struct {
	v, m []float32
}

// convWinograd is conv for useWinograd layers.
func (e *engine) convWinograd(c *conv, x fmap, relu bool, res *fmap) fmap {
	H, W := x.h, x.w
	y := e.fmap(c.out, H, W)
	tile := winoTile(c)
	var u []float32
	comps, block := 16, winoBlock
	winoIn, winoOut := gemm.WinoIn, gemm.WinoOut
	if tile == 4 {
		u, comps, block = c.winogradU4(), 36, wino4Block
		winoIn, winoOut = gemm.WinoIn4, gemm.WinoOut4
	} else {
		u = c.winogradU() // only the filters of the tile in use are ever made
	}
	th, tw := (H+tile-1)/tile, (W+tile-1)/tile
	tiles := th * tw
	block = balancedBlock(tiles, block)
	blocks := (tiles + block - 1) / block
	e.parallel(blocks, func(w, j int) {
		t0 := j * block
		nb := min(block, tiles-t0)
		b := &e.wino[w]
		// The matrices of a buffer sit winoPad floats further apart than
		// their size: at a power-of-two multiple of 4 KiB (256·96·4 bytes
		// is 24·4096) the rows a tile touches would share one L1 set.
		vs, ms := c.in*nb+winoPad, c.out*nb+winoPad
		if n := comps * (c.in*block + winoPad); cap(b.v) < n {
			b.v = bigFloats(n)
		}
		if n := comps * (c.out*block + winoPad); cap(b.m) < n {
			b.m = bigFloats(n)
		}
		v := b.v[:comps*vs]
		m := b.m[:comps*ms]
		// Input transform: V[ξ][ci][t].
		winoIn(x.d, c.in, H, W, tw, t0, nb, v, vs)
		// One SGEMM per component: M[ξ] (out × nb) = U[ξ] (out × in) · V[ξ] (in × nb).
		for xi := 0; xi < comps; xi++ {
			gemm.Mul(c.out, nb, c.in, u[xi*c.out*c.in:], c.in, v[xi*vs:], nb, m[xi*ms:], nb)
		}
		// Output transform, bias, residual, ReLU.
		var rd []float32
		if res != nil {
			rd = res.d
		}
		winoOut(m, ms, nb, c.out, tw, t0, H, W, c.b, rd, relu, y.d)
	})
	return y
}

// balancedBlock is the tile block of a Winograd layer of n tiles, at most
// full: the tiles are cut into a multiple of minBlocks blocks (or one
// block per tile) of near-equal width, so two or four workers finish
// together. It depends on the shape only, never on the thread count.
func balancedBlock(n, full int) int {
	k := (n + full - 1) / full
	k = (k + minBlocks - 1) / minBlocks * minBlocks
	return max((n+k-1)/k, 1)
}
