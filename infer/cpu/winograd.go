package cpu

import (
	"github.com/canopy-hpc/canopy/infer/gemm"
	"github.com/canopy-hpc/canopy/infer/nn"
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
// fixtures hold to the same tolerances). Tiles are cut into blocks; each
// tile's transforms and each column of the products (gemm.Chain) are
// computed alone, so results are independent of the blocking and so of the
// thread count.

// winoBlock is the most tiles per block (the products' N) of F(2×2,3×3);
// wino4Block that of F(4×4,3×3). tileBlock cuts a layer's tiles into
// near-equal blocks of at most that, as many as the workers need. F(4×4,3×3)'s
// 192 (chosen when OpenBLAS ran the products: at 48 it packed each 256×256
// filter matrix for a GEMM of 48 columns, 43 cpu-ms per 256-channel
// 100×100 convolution against 34 at 192, BenchmarkConv3x3) costs
// 36·(in+out)·192 floats of block buffers per worker (11 MB at 256
// channels).
const (
	winoBlock  = 96
	wino4Block = 192
)

// winoPad separates the 16 matrices of a block buffer (16 floats: one
// cache line).
const winoPad = 16

func UseWinograd(c *nn.Conv) bool {
	return c.KH == 3 && c.KW == 3 && c.Stride == 1 && c.Pad == 1 && c.In >= 32 && c.Out >= 32
}

// WinoTile is the output tile of a useWinograd layer: 4, F(4×4,3×3), with
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
func WinoTile(c *nn.Conv) int {
	if Wino2Only || c.In*c.Out > 256*256 {
		return 2
	}
	return 4
}

// Wino2Only turns F(4×4,3×3) off (tests compare the two).
var Wino2Only = false

// winoBufs are one worker's block buffers.
type winoBufs struct {
	v, m []float32
}

// convWinograd is conv for useWinograd layers.
func (e *Engine) convWinograd(c *nn.Conv, x Fmap, relu bool, res *Fmap) Fmap {
	var rs []Fmap
	if res != nil {
		rs = []Fmap{*res}
	}
	return e.winograd(c, []Fmap{x}, rs, relu)[0]
}

// ConvLevels is Conv (no residual) of each of xs, with the same bits: a
// Winograd F(4×4,3×3) layer runs the tiles of all the maps in one set of
// blocks, so that small maps (the upper pyramid levels, which a head's
// convolutions share) fill the products' columns together instead of
// each running narrow ones.
func (e *Engine) ConvLevels(c *nn.Conv, xs []Fmap, relu bool) []Fmap {
	if len(xs) == 1 || e.Direct || !UseWinograd(c) || WinoTile(c) != 4 {
		ys := make([]Fmap, len(xs))
		for i, x := range xs {
			ys[i] = e.Conv(c, x, relu, nil)
		}
		return ys
	}
	t0 := e.Times.Now()
	ys := e.winograd(c, xs, nil, relu)
	for i, x := range xs {
		if i == 0 {
			e.Times.AddConv(c, x.H, x.W, t0)
		} else {
			e.Times.AddFLOPs(c, x.H, x.W)
		}
	}
	return ys
}

// winograd runs a useWinograd layer over the tiles of every map of xs
// (with res[i] added to map i's output when res is not nil), cut into
// blocks (tileBlock) handed to the workers. A tile's transforms involve
// that tile alone and each column of gemm.Chain its own column alone, so
// no bit depends on the blocking, the thread count or the other maps.
// F(2×2,3×3) runs one map at a time.
func (e *Engine) winograd(c *nn.Conv, xs, res []Fmap, relu bool) []Fmap {
	tile := WinoTile(c)
	var u []float32
	comps, full := 16, winoBlock
	if tile == 4 {
		u, comps, full = c.WinogradU4(), 36, wino4Block
	} else {
		u = c.WinogradU() // only the filters of the tile in use are ever made
		if len(xs) != 1 {
			panic("cpu: F(2×2,3×3) over several maps")
		}
	}
	ys := make([]Fmap, len(xs))
	offs := make([]int, len(xs)+1) // map i's tiles are [offs[i], offs[i+1]) of all
	for i, x := range xs {
		ys[i] = e.Fmap(c.Out, x.H, x.W)
		offs[i+1] = offs[i] + ((x.H+tile-1)/tile)*((x.W+tile-1)/tile)
	}
	tiles := offs[len(xs)]
	block := e.tileBlock(tiles, full)
	blocks := (tiles + block - 1) / block
	e.Parallel(blocks, func(w, j int) {
		g0 := j * block
		nb := min(block, tiles-g0)
		b := &e.wino[w]
		// The matrices of a buffer sit winoPad floats further apart than
		// their size: at a power-of-two multiple of 4 KiB (256·96·4 bytes
		// is 24·4096) the rows a tile touches would share one L1 set.
		vs, ms := c.In*nb+winoPad, c.Out*nb+winoPad
		if n := comps * (c.In*block + winoPad); cap(b.v) < n {
			b.v = nn.BigFloats(n)
		}
		if n := comps * (c.Out*block + winoPad); cap(b.m) < n {
			b.m = nn.BigFloats(n)
		}
		v := b.v[:comps*vs]
		m := b.m[:comps*ms]
		// The block's tiles, map by map: tiles [first, first+count) of map
		// i are the block's columns [off, off+count).
		segs := func(f func(i, first, count, off int)) {
			for i := range xs {
				lo, hi := max(g0, offs[i]), min(g0+nb, offs[i+1])
				if lo < hi {
					f(i, lo-offs[i], hi-lo, lo-g0)
				}
			}
		}
		// Input transform: V[ξ][ci][t].
		segs(func(i, first, count, off int) {
			x := xs[i]
			tw := (x.W + tile - 1) / tile
			if tile == 4 {
				gemm.WinoIn4Ld(x.D, c.In, x.H, x.W, tw, first, count, v[off:], vs, nb)
			} else {
				gemm.WinoIn(x.D, c.In, x.H, x.W, tw, first, count, v, vs)
			}
		})
		// One product per component: M[ξ] (out × nb) = U[ξ] (out × in) · V[ξ] (in × nb).
		for xi := 0; xi < comps; xi++ {
			gemm.Chain(c.Out, nb, c.In, u[xi*c.Out*c.In:], c.In, v[xi*vs:], nb, m[xi*ms:], nb, gemm.Epi{})
		}
		// Output transform, bias, residual, ReLU.
		segs(func(i, first, count, off int) {
			x := xs[i]
			tw := (x.W + tile - 1) / tile
			var rd []float32
			if res != nil {
				rd = res[i].D
			}
			if tile == 4 {
				gemm.WinoOut4Ld(m[off:], ms, nb, count, c.Out, tw, first, x.H, x.W, c.B, rd, relu, ys[i].D)
			} else {
				gemm.WinoOut(m, ms, count, c.Out, tw, first, x.H, x.W, c.B, rd, relu, ys[i].D)
			}
		})
	})
	return ys
}

// tileBlock is the block width for n tiles, at most full: the fewest
// blocks of at most full tiles, their count rounded up to a multiple of
// the workers so that they finish together, of near-equal width. Neither
// the width nor the thread count changes a bit (winograd), only how wide
// the products are.
func (e *Engine) tileBlock(n, full int) int {
	k := (n + full - 1) / full
	k = (k + e.threads - 1) / e.threads * e.threads
	return max((n+k-1)/k, 1)
}
