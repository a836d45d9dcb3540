package cpu

import (
	"sync"
	"sync/atomic"

	"github.com/canopy-hpc/canopy/infer/gemm"
	"github.com/canopy-hpc/canopy/infer/nn"
)

// Batch is N feature maps of one shape interleaved, in CHWN order: value
// (y, x) of channel c of image b is D[((c·H+y)·W+x)·N+b]. A channel's
// values of all the images are one row of H·W·N values, so a convolution
// of the whole batch is one matrix product over H·W·N columns (the crop
// classifier's maps, 7×7 to 112×112 on a 224×224 crop, give matrices far
// too narrow for a GEMM one crop at a time), and the N images' values of
// one pixel lie side by side, so the Winograd transforms, im2col and the
// max-pool work on N lanes at once at every map size (gemm's *L kernels).
// A batch of one image is a plain [C][H][W] map.
type Batch struct {
	C, N, H, W int
	D          []float32
}

// Plane is a copy of channel c of image b (H·W values, row-major).
func (x Batch) Plane(c, b int) []float32 {
	hw := x.H * x.W
	p := make([]float32, hw)
	src := x.D[c*hw*x.N : (c+1)*hw*x.N]
	for i := range p {
		p[i] = src[i*x.N+b]
	}
	return p
}

// SetImage writes image b from src, its C planes of H·W values one after
// another ([C][H][W]).
func (x Batch) SetImage(b int, src []float32) {
	n := x.C * x.H * x.W
	_, _ = src[n-1], x.D[n*x.N-1]
	for i, v := range src[:n] {
		x.D[i*x.N+b] = v
	}
}

// cols is the width of a channel's row: N·H·W.
func (x Batch) cols() int { return x.N * x.H * x.W }

// BatchEngine runs a network (nn.Backend over Batch) on a batch of
// images with canopy's own matrix product, gemm.Chain, in which every
// output value is one fused multiply-add chain over its row and column
// alone. So an image's bits never depend on the batch it is in, its place
// there, the thread count or the CPU's instruction set (the transforms
// and copies around the products give the same bits in every clone too):
// a crop gives the same bytes alone, in any batch, on AVX2 or AVX-512.
//
// Convolutions: 3×3 stride-1 ones (UseWinograd) as Winograd F(4×4,3×3)
// over the tiles of every image (4× fewer multiplications, at 7×7 and
// 14×14 too: 3.06×), 1×1 stride-1 ones as one product over the batch's
// columns, the rest (the stem, the stride-2 ones) as im2col and a product;
// bias, residual and ReLU are the product's epilogue (or the Winograd
// output transform's). Work is cut into jobs of columns (tiles) and rows
// run by threads workers; how it is cut changes no bit.
type BatchEngine struct {
	threads int
	free    [][]float32
	bufs    [][]float32 // per worker: im2col columns, max-pool rows
	v, m    []float32   // a Winograd layer's V and M
	direct  bool        // 3×3 stride-1 convolutions by im2col too (benchmarks)
	unfused bool        // no fused Winograd jobs (benchmarks)
	wbufs   [][]float32 // per worker: a fused Winograd job's V and M
}

var _ nn.Backend[Batch] = (*BatchEngine)(nil)

// NewBatchEngine is an engine of threads workers (at least 1).
func NewBatchEngine(threads int) *BatchEngine {
	threads = max(threads, 1)
	return &BatchEngine{threads: threads, bufs: make([][]float32, threads), wbufs: make([][]float32, threads)}
}

// Threads is the engine's worker count.
func (e *BatchEngine) Threads() int { return e.threads }

// Parallel runs f(worker, job) for job in [0, n) on the engine's workers.
func (e *BatchEngine) Parallel(n int, f func(worker, job int)) { parallel(e.threads, n, f) }

// Batch takes a batch from the free list (not zeroed), as Engine.Fmap.
func (e *BatchEngine) Batch(c, n, h, w int) Batch {
	return Batch{c, n, h, w, takeFree(&e.free, c*n*h*w)}
}

// Put returns dead batches for reuse.
func (e *BatchEngine) Put(xs ...Batch) {
	for _, x := range xs {
		if cap(x.D) > 0 {
			e.free = append(e.free, x.D[:cap(x.D)])
		}
	}
}

func (e *BatchEngine) Same(a, b Batch) bool {
	return len(a.D) > 0 && len(b.D) > 0 && &a.D[0] == &b.D[0]
}

// buf is worker w's scratch of at least n floats.
func (e *BatchEngine) buf(w, n int) []float32 {
	if cap(e.bufs[w]) < n {
		e.bufs[w] = nn.BigFloats(n)
	}
	return e.bufs[w][:n]
}

// Conv computes relu?(conv(x) + b [+ res]) for every image of x.
func (e *BatchEngine) Conv(c *nn.Conv, x Batch, relu bool, res *Batch) Batch {
	oh := (x.H+2*c.Pad-c.KH)/c.Stride + 1
	ow := (x.W+2*c.Pad-c.KW)/c.Stride + 1
	y := e.Batch(c.Out, x.N, oh, ow)
	var rd []float32
	if res != nil {
		rd = res.D
	}
	switch {
	case UseWinograd(c) && !e.direct:
		e.winograd(c, x, y, rd, relu)
	case isPointwise(c):
		e.pointwise(c, x, y, rd, relu)
	default:
		e.im2col(c, x, y, rd, relu)
	}
	return y
}

// colChunk is the most columns (or tiles) of a job: 8 tiles of the AVX-512
// product's 48 columns.
const colChunk = 384

// grid cuts rows × cols into jobs: column chunks of a multiple of 48 (at
// most colChunk), and row chunks of a multiple of 8 when there are too few
// column chunks to give each worker four jobs. It returns the chunk sizes
// and counts.
func grid(rows, cols, threads int) (rc, cc, nr, nc int) {
	cc = min(colChunk, max(48, (cols+4*threads-1)/(4*threads)+47)/48*48)
	nc = (cols + cc - 1) / cc
	nr = max(1, min((4*threads+nc-1)/nc, rows/8))
	rc = ((rows+nr-1)/nr + 7) / 8 * 8
	nr = (rows + rc - 1) / rc
	return rc, cc, nr, nc
}

// pointwise is a 1×1 stride-1 convolution: Y = W·X over all the columns.
func (e *BatchEngine) pointwise(c *nn.Conv, x, y Batch, rd []float32, relu bool) {
	n := x.cols()
	rc, cc, nr, nc := grid(c.Out, n, e.threads)
	e.Parallel(nr*nc, func(_, j int) {
		i0, j0 := j/nc*rc, j%nc*cc
		rows, cols := min(rc, c.Out-i0), min(cc, n-j0)
		ep := gemm.Epi{Bias: c.B[i0 : i0+rows], ReLU: relu, LdRes: n}
		if rd != nil {
			ep.Res = rd[i0*n+j0:]
		}
		gemm.Chain(rows, cols, c.In, c.W[i0*c.In:], c.In, x.D[j0:], n, y.D[i0*n+j0:], n, ep)
	})
}

var _ nn.PairBackend[Batch] = (*BatchEngine)(nil)

// isPointwise reports whether c is a 1×1 stride-1 convolution.
func isPointwise(c *nn.Conv) bool {
	return c.KH == 1 && c.KW == 1 && c.Stride == 1 && c.Pad == 0
}

// CanPair reports whether ConvPair runs c1 and c2 on x in shared jobs:
// both 1×1 stride-1, c2 reading c1's output, and enough columns that
// grid cuts them by columns alone (so the jobs hold every row of c1's
// output: 14×14 maps and larger of 16 crops).
func (e *BatchEngine) CanPair(c1, c2 *nn.Conv, x Batch) bool {
	if !isPointwise(c1) || !isPointwise(c2) || c2.In != c1.Out || x.C != c1.In {
		return false
	}
	_, _, nr, _ := grid(max(c1.Out, c2.Out), x.cols(), e.threads)
	return nr == 1
}

// ConvPair is a = relu(conv(c1, x) + b1 + res), b = relu(conv(c2, a) +
// b2) for two pointwise convolutions (CanPair), in jobs of columns: each
// job computes its columns of a, then at once its columns of b from
// them while they are in its cache, instead of the whole of a (51 MB at
// 56×56 and 256 channels for 16 crops) going to memory and coming back.
// Every value is the same chain as Conv's.
func (e *BatchEngine) ConvPair(c1 *nn.Conv, x Batch, res *Batch, c2 *nn.Conv) (Batch, Batch) {
	if !e.CanPair(c1, c2, x) {
		a := e.Conv(c1, x, true, res)
		return a, e.Conv(c2, a, true, nil)
	}
	a, b := e.Batch(c1.Out, x.N, x.H, x.W), e.Batch(c2.Out, x.N, x.H, x.W)
	n := x.cols()
	_, cc, _, nc := grid(max(c1.Out, c2.Out), n, e.threads)
	e.Parallel(nc, func(_, j int) {
		j0 := j * cc
		cols := min(cc, n-j0)
		ep := gemm.Epi{Bias: c1.B, ReLU: true, LdRes: n}
		if res != nil {
			ep.Res = res.D[j0:]
		}
		gemm.Chain(c1.Out, cols, c1.In, c1.W, c1.In, x.D[j0:], n, a.D[j0:], n, ep)
		gemm.Chain(c2.Out, cols, c2.In, c2.W, c2.In, a.D[j0:], n, b.D[j0:], n, gemm.Epi{Bias: c2.B, ReLU: true})
	})
	return a, b
}

// im2col is any other convolution: per job, the patch matrix of a chunk
// of output columns (positions × images), then its product.
func (e *BatchEngine) im2col(c *nn.Conv, x, y Batch, rd []float32, relu bool) {
	n := y.cols()
	k := c.In * c.KH * c.KW
	_, cc, _, nc := grid(8, n, e.threads)
	e.Parallel(nc, func(w, j int) {
		j0 := j * cc
		cols := min(cc, n-j0)
		col := e.buf(w, k*cols)
		gemm.Im2colL(x.D, c.In, x.H, x.W, x.N, c.KH, c.KW, c.Stride, c.Pad, y.W, j0, cols, col, cols)
		ep := gemm.Epi{Bias: c.B, ReLU: relu, LdRes: n}
		if rd != nil {
			ep.Res = rd[j0:]
		}
		gemm.Chain(c.Out, cols, k, c.W, k, col, cols, y.D[j0:], n, ep)
	})
}

// winograd is a 3×3 stride-1 convolution as F(4×4,3×3) over the tiles of
// all the images (column j of V and M: image j%N of tile j/N): the input
// transform of every tile (V: 36 matrices of In × columns), then per job
// of rows and columns the 36 products M[ξ] = U[ξ]·V[ξ] and the output
// transform with bias, residual and ReLU.
func (e *BatchEngine) winograd(c *nn.Conv, x, y Batch, rd []float32, relu bool) {
	u := c.WinogradU4()
	T := x.N * ((x.W + 3) / 4) * ((x.H + 3) / 4)
	if e.fused(T) {
		e.winogradFused(c, x, y, rd, relu, u, T)
		return
	}
	vs, ms := c.In*T, c.Out*T
	if cap(e.v) < 36*vs {
		e.v = nn.BigFloats(36 * vs)
	}
	if cap(e.m) < 36*ms {
		e.m = nn.BigFloats(36 * ms)
	}
	v, m := e.v[:36*vs], e.m[:36*ms]
	_, cc, _, nc := grid(8, T, e.threads)
	e.Parallel(nc, func(_, j int) {
		j0 := j * cc
		gemm.WinoIn4L(x.D, c.In, x.H, x.W, x.N, j0, min(cc, T-j0), v[j0:], vs, T)
	})
	rc, cc, nr, nc := winoGrid(c.Out, T, e.threads)
	cs := x.cols()
	e.Parallel(nr*nc, func(_, j int) {
		i0, t0 := j/nc*rc, j%nc*cc
		rows, cols := min(rc, c.Out-i0), min(cc, T-t0)
		for xi := 0; xi < 36; xi++ {
			gemm.Chain(rows, cols, c.In, u[xi*c.Out*c.In+i0*c.In:], c.In, v[xi*vs+t0:], T, m[xi*ms+i0*T+t0:], T, gemm.Epi{})
		}
		var r []float32
		if rd != nil {
			r = rd[i0*cs:]
		}
		gemm.WinoOut4L(m[i0*T+t0:], ms, T, t0, cols, rows, x.H, x.W, x.N, c.B[i0:], r, relu, y.D[i0*cs:])
	})
}

// winoGrid cuts the products of an unfused Winograd layer (rows × T
// columns) into jobs. Where the columns fit one chunk (colChunk) every job
// takes all of them and the rows are cut for four jobs a worker, so that
// each row of U is read by one job only: at 7×7 (16 crops: 64 columns;
// U 36·512·512 floats, 38 MB, far beyond the caches) grid's cut into
// 48 and 16 columns read U twice (13% more CPU on the layer at 2 workers
// on AVX2, BenchmarkBatchResNet50). Otherwise grid's cut. How the work is
// cut changes no bit.
func winoGrid(rows, T, threads int) (rc, cc, nr, nc int) {
	if T > colChunk {
		return grid(rows, T, threads)
	}
	nr = max(1, min(4*threads, rows/8))
	rc = ((rows+nr-1)/nr + 7) / 8 * 8
	return rc, T, (rows + rc - 1) / rc, 1
}

// fuseCols is the columns of a fused Winograd job.
const fuseCols = 48

// fused reports whether a Winograd layer of T columns runs in fused jobs
// of fuseCols columns: each job transforms its input, multiplies and
// transforms its output while its V and M (36·(In+Out)·fuseCols floats)
// are still in the core's cache, instead of the whole layer's V and M
// (36·(In+Out)·T floats: 58 MB at 56×56 and 64 channels for 16 crops)
// going to memory and back (1.3–1.4× less CPU at 56×56 and 28×28,
// BenchmarkBatchConv). A job multiplies all the layer's rows, so it is
// used where there are at least two jobs per worker; below (7×7: 64
// columns) the layer's products are cut by rows as well. How the columns
// are cut changes no bit.
func (e *BatchEngine) fused(T int) bool {
	return !e.unfused && T >= 2*e.threads*fuseCols
}

// winogradFused is winograd in jobs of fuseCols columns, each with its
// own V and M (the same bits: every value goes through the same
// operations).
func (e *BatchEngine) winogradFused(c *nn.Conv, x, y Batch, rd []float32, relu bool, u []float32, T int) {
	const cc = fuseCols
	vs, ms := c.In*cc, c.Out*cc
	cs := x.cols()
	e.Parallel((T+cc-1)/cc, func(w, j int) {
		j0 := j * cc
		cols := min(cc, T-j0)
		if cap(e.wbufs[w]) < 36*(vs+ms) {
			e.wbufs[w] = nn.BigFloats(36 * (vs + ms))
		}
		v, m := e.wbufs[w][:36*vs], e.wbufs[w][36*vs:36*(vs+ms)]
		gemm.WinoIn4L(x.D, c.In, x.H, x.W, x.N, j0, cols, v, vs, cc)
		for xi := 0; xi < 36; xi++ {
			gemm.Chain(c.Out, cols, c.In, u[xi*c.Out*c.In:], c.In, v[xi*vs:], cc, m[xi*ms:], cc, gemm.Epi{})
		}
		gemm.WinoOut4L(m, ms, cc, j0, cols, c.Out, x.H, x.W, x.N, c.B, rd, relu, y.D[:c.Out*cs])
	})
}

// MaxPool3s2 is the stem's max-pool of every channel of every image.
func (e *BatchEngine) MaxPool3s2(x Batch) Batch {
	oh, ow := (x.H+2-3)/2+1, (x.W+2-3)/2+1
	y := e.Batch(x.C, x.N, oh, ow)
	in, out := x.cols(), y.cols()
	e.Parallel(x.C, func(w, c int) {
		gemm.MaxPool3s2L(x.D[c*in:(c+1)*in], x.H, x.W, x.N, e.buf(w, x.H*ow*x.N), y.D[c*out:(c+1)*out])
	})
	return y
}

// UpsampleAdd adds top, upsampled (nearest, as AddUpsampled), to lat.
func (e *BatchEngine) UpsampleAdd(lat, top Batch) {
	iy := NearestIndex(top.H, lat.H)
	ix := NearestIndex(top.W, lat.W)
	n := lat.N
	e.Parallel(lat.C, func(_, c int) {
		for y := 0; y < lat.H; y++ {
			for x := 0; x < lat.W; x++ {
				l := lat.D[((c*lat.H+y)*lat.W+x)*n:][:n]
				t := top.D[((c*top.H+iy[y])*top.W+ix[x])*n:][:n]
				for b, v := range t {
					l[b] += v
				}
			}
		}
	})
}

func (e *BatchEngine) ReluCopy(x Batch) Batch {
	y := e.Batch(x.C, x.N, x.H, x.W)
	for i, v := range x.D {
		y.D[i] = max(v, 0)
	}
	return y
}

// BatchFilters is a network's state for the BatchEngine: the F(4×4,3×3)
// filters of its Winograd convolutions, made once (Prepare); the 3×3
// weights are kept (the GPU engine reads them).
type BatchFilters struct {
	once sync.Once
	done atomic.Bool
}

// Bytes is the memory Prepare will add (0 once made).
func (f *BatchFilters) Bytes(convs []*nn.Conv) int64 {
	if f.done.Load() {
		return 0
	}
	var n int64
	for _, c := range convs {
		if c != nil && UseWinograd(c) {
			if _, u4 := c.WinogradMade(); u4 == 0 {
				n += 36 * int64(c.Out*c.In) * 4
			}
		}
	}
	return n
}

// Prepare makes the filters, once.
func (f *BatchFilters) Prepare(convs []*nn.Conv) {
	f.once.Do(func() {
		for _, c := range convs {
			if c != nil && UseWinograd(c) {
				c.WinogradU4()
			}
		}
		f.done.Store(true)
	})
}

// parallel runs f(worker, job) for job in [0, n) on threads workers.
func parallel(threads, n int, f func(worker, job int)) {
	if threads == 1 || n == 1 {
		for j := 0; j < n; j++ {
			f(0, j)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < min(threads, n); w++ {
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

// takeFree takes the smallest free buffer that holds n floats (or a new
// one) from a free list.
func takeFree(free *[][]float32, n int) []float32 {
	best := -1
	for i, b := range *free {
		if cap(b) >= n && (best < 0 || cap(b) < cap((*free)[best])) {
			best = i
		}
	}
	if best < 0 {
		return nn.BigFloats(n)
	}
	fl := *free
	d := fl[best][:n]
	last := len(fl) - 1
	fl[best], fl[last] = fl[last], nil
	*free = fl[:last]
	return d
}
