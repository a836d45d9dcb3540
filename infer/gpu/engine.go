// Package gpu is canopy's GPU engine: any network built from infer/nn's
// layers (nn.Backend over Map, a batch on a cuda.Device) runs on canopy's
// kernels (exact, kernel-tf32) or cuDNN's fused convolutions (fp32, tf32,
// bf16: DNN, its plans pinned per layer shape), with the device seam's
// launches (Device.Launch: LaunchN) for kernels beyond the layers. It knows
// no network: infer/retinanet's GPU runner drives it.
package gpu

import (
	"unsafe"

	"github.com/canopy-hpc/canopy/infer/cuda"
	"github.com/canopy-hpc/canopy/infer/cuda/kernels"
	"github.com/canopy-hpc/canopy/infer/nn"
)

// Map is a batch of feature maps on a cuda.Device: [n, c, h, w] float32,
// or on the cuDNN path (cudnn.go) [n, h, w, c] (nhwc), in BF16 (half).
type Map struct {
	N, C, H, W int
	P          cuda.Ptr
	NHWC, Half bool
}

// Size is the element count.
func (d Map) Size() int { return d.N * d.C * d.H * d.W }

// Words is the allocation's size in float32 words.
func (d Map) Words() int {
	if d.Half {
		return (d.Size() + 1) / 2
	}
	return d.Size()
}

// Engine runs a network on a cuda.Device: every layer is one kernel
// launch over the whole batch, queued in order; only the head outputs (and,
// when tracing, the pyramid levels) come back to the host, where the
// postprocessing is the CPU engine's, line for line. Launch errors are
// sticky (Err): the forward runs to its end and the caller checks once.
type Engine struct {
	Dev   cuda.Device
	Prec  cuda.Precision
	wts   map[*nn.Conv][2]cuda.Ptr // weights and bias, uploaded on first use
	Free  map[int][]cuda.Ptr       // dead buffers by float count
	shape [3]int                   // the batch shape the free list was filled for
	// During a graph capture (retinanet's gpu_graph.go, which sets the
	// free list aside): Owned collects every new allocation, and Put
	// leaves the buffers in Keep alone.
	Owned *[]cuda.Ptr
	Keep  map[cuda.Ptr]bool
	Err   error
	Times *nn.Times
	DNN   *DNN // the cuDNN path (fp32, tf32, bf16); nil for canopy's kernels
	// Uploads counts the source images UploadSource sent up.
	Uploads int
	held    *Held // the sources kept after use (HoldSources; nil: none)
}

var _ nn.Backend[Map] = (*Engine)(nil)

// NewEngine is an engine on dev computing at precision p.
func NewEngine(dev cuda.Device, p cuda.Precision) *Engine {
	return &Engine{Dev: dev, Prec: p, wts: map[*nn.Conv][2]cuda.Ptr{}, Free: map[int][]cuda.Ptr{}}
}

// Fail keeps the first error (sticky: Err).
func (g *Engine) Fail(err error) {
	if err != nil && g.Err == nil {
		g.Err = err
	}
}

// Alloc allocates an NCHW FP32 map from the free list.
func (g *Engine) Alloc(n, c, h, w int) Map {
	return g.allocMap(Map{N: n, C: c, H: h, W: w})
}

// AllocAs allocates an NHWC map of the cuDNN path, BF16 when half.
func (g *Engine) AllocAs(n, c, h, w int, half bool) Map {
	return g.allocMap(Map{N: n, C: c, H: h, W: w, NHWC: true, Half: half})
}

func (g *Engine) allocMap(d Map) Map {
	sz := d.Words()
	if l := g.Free[sz]; len(l) > 0 {
		d.P = l[len(l)-1]
		g.Free[sz] = l[:len(l)-1]
		return d
	}
	p, err := g.Dev.Alloc(sz)
	g.Fail(err)
	d.P = p
	if err == nil && g.Owned != nil {
		*g.Owned = append(*g.Owned, p)
	}
	return d
}

// Put returns dead maps to the free list (not those a capture keeps).
func (g *Engine) Put(xs ...Map) {
	for _, x := range xs {
		if x.P != 0 && !g.Keep[x.P] {
			g.Free[x.Words()] = append(g.Free[x.Words()], x.P)
		}
	}
}

// ReuseFor frees the cached buffers when the batch shape changes, so a run
// of mixed sizes does not hold buffers of every size.
func (g *Engine) ReuseFor(n, h, w int) {
	if g.shape == [3]int{n, h, w} {
		return
	}
	g.shape = [3]int{n, h, w}
	g.Release()
}

// Release waits for the device and frees the free list.
func (g *Engine) Release() {
	g.Fail(g.Dev.Sync())
	for _, l := range g.Free {
		for _, p := range l {
			g.Dev.Free(p)
		}
	}
	g.Free = map[int][]cuda.Ptr{}
}

// Same reports whether a and b are one allocation.
func (g *Engine) Same(a, b Map) bool { return a.P != 0 && a.P == b.P }

// Timed measures a layer group when layer times are on: it waits for the
// device before and after, so the time is the group's own.
func (g *Engine) Timed(group string) func() {
	if g.Times == nil {
		return func() {}
	}
	g.Fail(g.Dev.Sync())
	t := g.Times.Now()
	return func() {
		g.Fail(g.Dev.Sync())
		g.Times.Add(group, t)
	}
}

// Weights are c's weights and bias on the device, uploaded on first use.
func (g *Engine) Weights(c *nn.Conv) [2]cuda.Ptr {
	if w, ok := g.wts[c]; ok {
		return w
	}
	var w [2]cuda.Ptr
	for i, src := range [][]float32{c.W, c.B} {
		p, err := g.Dev.Alloc(len(src))
		g.Fail(err)
		if err == nil {
			g.Fail(g.Dev.Upload(p, src))
		}
		w[i] = p
	}
	g.wts[c] = w
	return w
}

// Conv computes relu?(conv(x) + b [+ res]) (on cuDNN when DNN is set).
func (g *Engine) Conv(c *nn.Conv, x Map, relu bool, res *Map) Map {
	defer g.Timed(nn.GroupOf(c.Name))()
	if g.DNN != nil {
		return g.dnnConv(c, x, relu, res)
	}
	oh := (x.H+2*c.Pad-c.KH)/c.Stride + 1
	ow := (x.W+2*c.Pad-c.KW)/c.Stride + 1
	y := g.Alloc(x.N, c.Out, oh, ow)
	w := g.Weights(c)
	a := cuda.ConvArgs{X: x.P, W: w[0], B: w[1], Y: y.P,
		N: x.N, C: x.C, H: x.H, Wd: x.W, M: c.Out, KH: c.KH, KW: c.KW, S: c.Stride, P: c.Pad,
		OH: oh, OW: ow, Relu: relu}
	if res != nil {
		a.Res = res.P
	}
	if g.Err == nil {
		g.Fail(g.Dev.Conv(a, g.Prec))
	}
	return y
}

// MaxPool3s2 is the stem's 3×3 stride-2 max-pool.
func (g *Engine) MaxPool3s2(x Map) Map {
	defer g.Timed("maxpool")()
	oh, ow := (x.H+2-3)/2+1, (x.W+2-3)/2+1
	if x.NHWC {
		y := g.AllocAs(x.N, x.C, oh, ow, x.Half)
		if g.Err == nil {
			g.Fail(g.Dev.NHWC(cuda.NHWCArgs{Op: cuda.MaxPool3s2NHWC, X: x.P, Y: y.P, N: x.N, C: x.C, H: x.H, W: x.W, OH: oh, OW: ow, BF16: x.Half}))
		}
		return y
	}
	y := g.Alloc(x.N, x.C, oh, ow)
	if g.Err == nil {
		g.Fail(g.Dev.MaxPool3s2(x.P, y.P, x.N, x.C, x.H, x.W, oh, ow))
	}
	return y
}

// UpsampleAdd adds the nearest-upsampled top to lat in place.
func (g *Engine) UpsampleAdd(lat, top Map) {
	defer g.Timed("fpn")()
	if lat.NHWC {
		if g.Err == nil {
			g.Fail(g.Dev.NHWC(cuda.NHWCArgs{Op: cuda.UpsampleAddNHWC, X: lat.P, Y: top.P, N: lat.N, C: lat.C, H: lat.H, W: lat.W, OH: top.H, OW: top.W, BF16: lat.Half}))
		}
		return
	}
	if g.Err == nil {
		g.Fail(g.Dev.UpsampleAdd(lat.P, top.P, lat.N, lat.C, lat.H, lat.W, top.H, top.W))
	}
}

// ReluCopy is relu(x) in a new map.
func (g *Engine) ReluCopy(x Map) Map {
	defer g.Timed("fpn")()
	if x.NHWC {
		y := g.AllocAs(x.N, x.C, x.H, x.W, x.Half)
		if g.Err == nil {
			g.Fail(g.Dev.NHWC(cuda.NHWCArgs{Op: cuda.ReluAny, X: x.P, Y: y.P, N: x.N, C: x.C, H: x.H, W: x.W, BF16: x.Half}))
		}
		return y
	}
	y := g.Alloc(x.N, x.C, x.H, x.W)
	if g.Err == nil {
		g.Fail(g.Dev.ReluCopy(x.P, y.P, x.Size()))
	}
	return y
}

// Close frees the device memory the engine holds: the free list, the
// weights, the cuDNN state (not the device). Its error is in Err.
func (g *Engine) Close() {
	g.DropHeld(func(int) bool { return true })
	g.Release()
	for _, w := range g.wts {
		g.Dev.Free(w[0])
		g.Dev.Free(w[1])
	}
	g.wts = map[*nn.Conv][2]cuda.Ptr{}
	if g.DNN != nil {
		g.Fail(g.DNN.Close(g.Dev))
		g.DNN = nil
	}
}

// Download copies x to the host (NCHW FP32, converting an NHWC map).
func (g *Engine) Download(x Map) []float32 {
	if x.NHWC { // a level of a trace on the cuDNN path: NCHW FP32 first
		x.P, x.NHWC, x.Half = g.NCHWCopy(x), false, false
		defer g.Put(x)
	}
	out := make([]float32, x.Size())
	if g.Err == nil {
		g.Fail(g.Dev.Download(out, x.P))
	}
	return out
}

// UploadAsync copies v to p through the device's double-buffered byte
// upload, which waits only for its staging buffer's previous copy (Upload
// drains the stream first: a wait inside a batch that the data do not
// need).
func (g *Engine) UploadAsync(p cuda.Ptr, v []float32) {
	if g.Err == nil && len(v) > 0 {
		g.Fail(g.Dev.UploadBytes(p, unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 4*len(v))))
	}
}

// LaunchN queues kernel name over count threads (elementwise geometry);
// nothing for none.
func (g *Engine) LaunchN(name string, count int, args ...any) {
	if g.Err == nil && count > 0 {
		g.Fail(g.Dev.Launch(name, kernels.Elem(count), args...))
	}
}

// Scratch is a device buffer of n floats from the free list.
func (g *Engine) Scratch(n int) Map { return g.Alloc(1, 1, 1, max(n, 1)) }
