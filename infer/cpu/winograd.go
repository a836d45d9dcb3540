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
	H, W := x.H, x.W
	y := e.Fmap(c.Out, H, W)
	tile := WinoTile(c)
	var u []float32
	comps, block := 16, winoBlock
	winoIn, winoOut := gemm.WinoIn, gemm.WinoOut
	if tile == 4 {
		u, comps, block = c.WinogradU4(), 36, wino4Block
		winoIn, winoOut = gemm.WinoIn4, gemm.WinoOut4
	} else {
		u = c.WinogradU() // only the filters of the tile in use are ever made
	}
	th, tw := (H+tile-1)/tile, (W+tile-1)/tile
	tiles := th * tw
	block = balancedBlock(tiles, block)
	blocks := (tiles + block - 1) / block
	e.Parallel(blocks, func(w, j int) {
		t0 := j * block
		nb := min(block, tiles-t0)
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
		// Input transform: V[ξ][ci][t].
		winoIn(x.D, c.In, H, W, tw, t0, nb, v, vs)
		// One SGEMM per component: M[ξ] (out × nb) = U[ξ] (out × in) · V[ξ] (in × nb).
		for xi := 0; xi < comps; xi++ {
			gemm.Chain(c.Out, nb, c.In, u[xi*c.Out*c.In:], c.In, v[xi*vs:], nb, m[xi*ms:], nb, gemm.Epi{})
		}
		// Output transform, bias, residual, ReLU.
		var rd []float32
		if res != nil {
			rd = res.D
		}
		winoOut(m, ms, nb, c.Out, tw, t0, H, W, c.B, rd, relu, y.D)
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
