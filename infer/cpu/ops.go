// Package cpu is canopy's CPU engine: the kernels that run any network
// built from infer/nn's layers (nn.Backend over Fmap), knowing none.
//
// Layout: feature maps are CHW float32; a 3×3 stride-1 convolution is
// Winograd F(4×4,3×3) (F(2×2,3×3) for layers of more than 256×256
// channels), any other im2col + a product, over blocks of a width fixed by
// the layer's shape handed to a worker pool, with bias, residual add and
// ReLU fused into the product's store or the output transform. Every
// product is gemm.Chain (canopy's kernels: one fused multiply-add chain
// per value, the same bits on AVX2 and AVX-512; on AVX-512 it takes 1.7×
// less CPU per RetinaNet image than OpenBLAS 0.3.21 did). Frozen
// batch norm (eps 1e-5) is folded into the preceding convolution at load
// (nn.LoadConv).
package cpu

import (
	"github.com/canopy-hpc/canopy/infer/gemm"
	"github.com/canopy-hpc/canopy/infer/nn"
)

// Fmap is a CHW float32 feature map.
type Fmap struct {
	C, H, W int
	D       []float32
}

func NewFmap(c, h, w int) Fmap { return Fmap{c, h, w, make([]float32, c*h*w)} }

// Fmap allocates a feature map from the engine's free list (not zeroed:
// every user writes all of it); put returns maps that are dead. The network
// puts every intermediate as soon as its last reader is done, so the live
// set is a few maps (not every activation of the image), and an image in
// steady state allocates nothing. A map takes the smallest free buffer
// that holds it, whatever size that buffer was made for, so layer2's maps
// reuse layer1's buffers instead of adding their own.
func (e *Engine) Fmap(c, h, w int) Fmap {
	return Fmap{c, h, w, takeFree(&e.free, c*h*w)}
}

// put returns dead maps to the free list (not while tracing: a Trace keeps
// the pyramid levels).
func (e *Engine) Put(fs ...Fmap) {
	if e.Keep {
		return
	}
	for _, f := range fs {
		if cap(f.D) > 0 {
			e.free = append(e.free, f.D[:cap(f.D)])
		}
	}
}

// ReuseFor keeps the free list only while images keep one size, so a set
// of mixed sizes does not pile up buffers of every size.
func (e *Engine) ReuseFor(h, w int) {
	if e.shape != [2]int{h, w} {
		e.free = nil
		e.shape = [2]int{h, w}
	}
}

// colBlock is the width of the column blocks a convolution is cut
// into. It never depends on the thread count: each output element is computed
// by the same SGEMM call whichever worker runs it, which is what makes the
// result independent of --threads.
const colBlock = 256

// minBlocks is the number of blocks a small layer is cut into at least
// (when its blocks may be that narrow), so that two or four workers share
// the small pyramid levels and layer4 instead of one or two doing all.
const minBlocks = 4

// splitBlock is the block width for n columns (or tiles) of full width
// full: full, or for a layer of fewer than minBlocks full blocks, n/minBlocks
// rounded up to a multiple of 8 (at least least). It depends on the shape
// only, never on the thread count.
func splitBlock(n, full, least int) int {
	if n >= minBlocks*full {
		return full
	}
	b := (n + minBlocks - 1) / minBlocks
	b = (b + 7) / 8 * 8
	return min(full, max(b, least))
}

// Engine runs the layers with a fixed number of workers; each worker owns its
// im2col buffer, reused across layers and images.
type Engine struct {
	threads int
	bufs    [][]float32
	wino    []winoBufs
	// Direct turns Winograd off (tests compare the two paths).
	Direct bool
	free   [][]float32 // dead buffers, each at its full capacity
	shape  [2]int      // the image size the free list was filled for
	Keep   bool        // tracing: put keeps everything
	Times  *nn.Times
}

var _ nn.Backend[Fmap] = (*Engine)(nil)

// NewEngine is an engine of threads workers (at least 1).
func NewEngine(threads int) *Engine {
	if threads < 1 {
		threads = 1
	}
	return &Engine{threads: threads, bufs: make([][]float32, threads), wino: make([]winoBufs, threads)}
}

// Threads is the engine's worker count.
func (e *Engine) Threads() int { return e.threads }

// Parallel runs f(worker, job) for job in [0, n) on the engine's workers.
func (e *Engine) Parallel(n int, f func(worker, job int)) { parallel(e.threads, n, f) }

// conv computes relu?(conv(x) + b [+ res]).
func (e *Engine) Conv(c *nn.Conv, x Fmap, relu bool, res *Fmap) Fmap {
	oh := (x.H+2*c.Pad-c.KH)/c.Stride + 1
	ow := (x.W+2*c.Pad-c.KW)/c.Stride + 1
	if e.Times != nil {
		defer e.Times.AddConv(c, oh, ow, e.Times.Now())
	}
	if !e.Direct && UseWinograd(c) {
		return e.convWinograd(c, x, relu, res)
	}
	y := e.Fmap(c.Out, oh, ow)
	n := oh * ow
	k := c.In * c.KH * c.KW
	direct := c.KH == 1 && c.KW == 1 && c.Stride == 1 && c.Pad == 0
	cb := splitBlock(n, colBlock, 64)
	blocks := (n + cb - 1) / cb
	e.Parallel(blocks, func(w, j int) {
		j0 := j * cb
		nb := min(cb, n-j0)
		var rd []float32
		if res != nil {
			rd = res.D[j0:]
		}
		ep := gemm.Epi{Bias: c.B, Res: rd, LdRes: n, ReLU: relu}
		if direct {
			gemm.Chain(c.Out, nb, k, c.W, k, x.D[j0:], n, y.D[j0:], n, ep)
		} else {
			if cap(e.bufs[w]) < k*colBlock {
				e.bufs[w] = nn.BigFloats(k * colBlock)
			}
			col := e.bufs[w][:k*nb]
			gemm.Im2col(x.D, c.In, x.H, x.W, c.KH, c.KW, c.Stride, c.Pad, ow, j0, nb, col)
			gemm.Chain(c.Out, nb, k, c.W, k, col, nb, y.D[j0:], n, ep)
		}
	})
	return y
}

// maxpool3s2 is torchvision's stem max-pool: 3×3, stride 2, padding 1
// (padding never wins: it is −inf).
func (e *Engine) MaxPool3s2(x Fmap) Fmap {
	if e.Times != nil {
		defer e.Times.Add("maxpool", e.Times.Now())
	}
	oh, ow := (x.H+2-3)/2+1, (x.W+2-3)/2+1
	y := e.Fmap(x.C, oh, ow)
	// Separable (infer/gemm's C clones): the max over each row's 3-wide
	// windows, then over 3 rows. max is exact, so the order does not
	// change a bit; NaN propagates as in torch.
	e.Parallel(x.C, func(w, c int) {
		if cap(e.bufs[w]) < x.H*ow {
			e.bufs[w] = make([]float32, x.H*ow)
		}
		gemm.MaxPool3s2(x.D[c*x.H*x.W:(c+1)*x.H*x.W], x.H, x.W, e.bufs[w][:x.H*ow], y.D[c*oh*ow:(c+1)*oh*ow])
	})
	return y
}

// AddUpsampled sets lat += nearest(top, lat's size) with torch's legacy
// "nearest": src = floor(dst·(in/out)) in float32, capped at in−1; exactly
// dst>>1 when out = 2·in. par runs the channels (each alone: the bytes do
// not depend on how they are shared).
func AddUpsampled(lat Fmap, top Fmap, par func(n int, f func(worker, job int))) {
	iy := NearestIndex(top.H, lat.H)
	ix := NearestIndex(top.W, lat.W)
	par(lat.C, func(_, c int) {
		l := lat.D[c*lat.H*lat.W:]
		t := top.D[c*top.H*top.W:]
		for y := 0; y < lat.H; y++ {
			trow := t[iy[y]*top.W:]
			lrow := l[y*lat.W : (y+1)*lat.W]
			for x := range lrow {
				lrow[x] += trow[ix[x]]
			}
		}
	})
}

// NearestIndex is torch's nearest upsampling index from out positions to
// in (float32 scale in/out, exact halving when out is 2·in): the CPU
// engine's UpsampleAdd, and the GPU engine's tests' reference.
func NearestIndex(in, out int) []int {
	idx := make([]int, out)
	scale := float32(in) / float32(out)
	for d := range idx {
		if out == 2*in {
			idx[d] = d >> 1
			continue
		}
		idx[d] = min(int(float32(d)*scale), in-1)
	}
	return idx
}

func (e *Engine) UpsampleAdd(lat, top Fmap) { AddUpsampled(lat, top, e.Parallel) }

func (e *Engine) Same(a, b Fmap) bool { return len(a.D) > 0 && len(b.D) > 0 && &a.D[0] == &b.D[0] }

func (e *Engine) ReluCopy(x Fmap) Fmap {
	y := e.Fmap(x.C, x.H, x.W)
	for i, v := range x.D {
		y.D[i] = max(v, 0)
	}
	return y
}
