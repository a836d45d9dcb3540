package retinanet

import (
	"sync"
	"sync/atomic"

	"github.com/canopy-hpc/canopy/infer/gemm"
)

// fmap is a CHW float32 feature map.
type fmap struct {
	c, h, w int
	d       []float32
}

func newFmap(c, h, w int) fmap { return fmap{c, h, w, make([]float32, c*h*w)} }

// fmap allocates a feature map from the engine's free list (not zeroed:
// every user writes all of it); put returns maps that are dead. The network
// puts every intermediate as soon as its last reader is done, so the live
// set is a few maps (not every activation of the image), and an image in
// steady state allocates nothing. A map takes the smallest free buffer
// that holds it, whatever size that buffer was made for, so layer2's maps
// reuse layer1's buffers instead of adding their own.
func (e *engine) fmap(c, h, w int) fmap {
	n := c * h * w
	best := -1
	for i, b := range e.free {
		if cap(b) >= n && (best < 0 || cap(b) < cap(e.free[best])) {
			best = i
		}
	}
	var d []float32
	if best >= 0 {
		d = e.free[best][:n]
		last := len(e.free) - 1
		e.free[best], e.free[last] = e.free[last], nil
		e.free = e.free[:last]
	} else {
		d = bigFloats(n)
	}
	return fmap{c, h, w, d}
}

// put returns dead maps to the free list (not while tracing: a Trace keeps
// the pyramid levels).
func (e *engine) put(fs ...fmap) {
	if e.keep {
		return
	}
	for _, f := range fs {
		if cap(f.d) > 0 {
			e.free = append(e.free, f.d[:cap(f.d)])
		}
	}
}

// reuseFor keeps the free list only while images keep one size, so a set
// of mixed sizes does not pile up buffers of every size.
func (e *engine) reuseFor(h, w int) {
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

// engine runs the layers with a fixed number of workers; each worker owns its
// im2col buffer, reused across layers and images.
type engine struct {
	threads int
	bufs    [][]float32
	wino    []winoBufs
	// direct turns Winograd off (tests compare the two paths).
	direct bool
	free   [][]float32 // dead buffers, each at its full capacity
	shape  [2]int      // the image size the free list was filled for
	keep   bool        // tracing: put keeps everything
	times  *layerTimes
}

func newEngine(threads int) *engine {
	if threads < 1 {
		threads = 1
	}
	return &engine{threads: threads, bufs: make([][]float32, threads), wino: make([]winoBufs, threads)}
}

// parallel runs f(worker, job) for job in [0, n) on the engine's workers.
func (e *engine) parallel(n int, f func(worker, job int)) {
	if e.threads == 1 || n == 1 {
		for j := 0; j < n; j++ {
			f(0, j)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	workers := min(e.threads, n)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for {
				j := int(next.Add(1) - 1)
				if j >= n {
					return
				}
				f(w, j)
			}
		}(w)
	}
	wg.Wait()
}

// conv computes relu?(conv(x) + b [+ res]).
func (e *engine) conv(c *conv, x fmap, relu bool, res *fmap) fmap {
	oh := (x.h+2*c.pad-c.kh)/c.stride + 1
	ow := (x.w+2*c.pad-c.kw)/c.stride + 1
	if e.times != nil {
		defer e.times.addConv(c, oh, ow, e.times.now())
	}
	if !e.direct && useWinograd(c) {
		return e.convWinograd(c, x, relu, res)
	}
	y := e.fmap(c.out, oh, ow)
	n := oh * ow
	k := c.in * c.kh * c.kw
	direct := c.kh == 1 && c.kw == 1 && c.stride == 1 && c.pad == 0
	cb := splitBlock(n, colBlock, 64)
	blocks := (n + cb - 1) / cb
	e.parallel(blocks, func(w, j int) {
		j0 := j * cb
		nb := min(cb, n-j0)
		if direct {
			gemm.Mul(c.out, nb, k, c.w, k, x.d[j0:], n, y.d[j0:], n)
		} else {
			if cap(e.bufs[w]) < k*colBlock {
				e.bufs[w] = bigFloats(k * colBlock)
			}
			col := e.bufs[w][:k*nb]
			gemm.Im2col(x.d, c.in, x.h, x.w, c.kh, c.kw, c.stride, c.pad, ow, j0, nb, col)
			gemm.Mul(c.out, nb, k, c.w, k, col, nb, y.d[j0:], n)
		}
		var rd []float32
		if res != nil {
			rd = res.d[j0:]
		}
		gemm.Epilogue(y.d[j0:], n, c.out, nb, c.b, rd, n, relu)
	})
	return y
}

// maxpool3s2 is torchvision's stem max-pool: 3×3, stride 2, padding 1
// (padding never wins: it is −inf).
func (e *engine) maxpool3s2(x fmap) fmap {
	if e.times != nil {
		defer e.times.add("maxpool", e.times.now())
	}
	oh, ow := (x.h+2-3)/2+1, (x.w+2-3)/2+1
	y := e.fmap(x.c, oh, ow)
	// Separable (infer/gemm's C clones): the max over each row's 3-wide
	// windows, then over 3 rows. max is exact, so the order does not
	// change a bit; NaN propagates as in torch.
	e.parallel(x.c, func(w, c int) {
		if cap(e.bufs[w]) < x.h*ow {
			e.bufs[w] = make([]float32, x.h*ow)
		}
		gemm.MaxPool3s2(x.d[c*x.h*x.w:(c+1)*x.h*x.w], x.h, x.w, e.bufs[w][:x.h*ow], y.d[c*oh*ow:(c+1)*oh*ow])
	})
	return y
}

// addUpsampled sets lat += nearest(top, lat's size) with torch's legacy
// "nearest": src = floor(dst·(in/out)) in float32, capped at in−1; exactly
// dst>>1 when out = 2·in. par runs the channels (each alone: the bytes do
// not depend on how they are shared).
func addUpsampled(lat fmap, top fmap, par func(n int, f func(worker, job int))) {
	iy := nearestIdx(top.h, lat.h)
	ix := nearestIdx(top.w, lat.w)
	par(lat.c, func(_, c int) {
		l := lat.d[c*lat.h*lat.w:]
		t := top.d[c*top.h*top.w:]
		for y := 0; y < lat.h; y++ {
			trow := t[iy[y]*top.w:]
			lrow := l[y*lat.w : (y+1)*lat.w]
			for x := range lrow {
				lrow[x] += trow[ix[x]]
			}
		}
	})
}

func nearestIdx(in, out int) []int {
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

func (e *engine) upsampleAdd(lat, top fmap) { addUpsampled(lat, top, e.parallel) }

func (e *engine) same(a, b fmap) bool { return len(a.d) > 0 && len(b.d) > 0 && &a.d[0] == &b.d[0] }

func (e *engine) reluCopy(x fmap) fmap {
	y := e.fmap(x.c, x.h, x.w)
	for i, v := range x.d {
		y.d[i] = max(v, 0)
	}
	return y
}
