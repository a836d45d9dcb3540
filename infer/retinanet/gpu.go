package retinanet

import (
	"errors"
	"fmt"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/infer/cpu"
	"github.com/canopy-hpc/canopy/infer/cuda"
	"github.com/canopy-hpc/canopy/infer/nn"
)

// dmap is a batch of feature maps on a cuda.Device: [n, c, h, w] float32,
// or on the cuDNN path (gpucudnn.go) [n, h, w, c] (nhwc), in BF16 (half).
type dmap struct {
	n, c, h, w int
	p          cuda.Ptr
	nhwc, half bool
}

func (d dmap) size() int { return d.n * d.c * d.h * d.w }

// words is the allocation's size in float32 words.
func (d dmap) words() int {
	if d.half {
		return (d.size() + 1) / 2
	}
	return d.size()
}

// gpuEngine runs the network on a cuda.Device: every layer is one kernel
// launch over the whole batch, queued in order; only the head outputs (and,
// when tracing, the pyramid levels) come back to the host, where the
// postprocessing is the CPU engine's, line for line. Launch errors are
// sticky (err): the forward runs to its end and the caller checks once.
type gpuEngine struct {
	dev   cuda.Device
	prec  cuda.Precision
	wts   map[*nn.Conv][2]cuda.Ptr // weights and bias, uploaded on first use
	free  map[int][]cuda.Ptr       // dead buffers by float count
	shape [3]int                   // the batch shape the free list was filled for
	// During a graph capture (gpugraph.go): owned collects every new
	// allocation, and put leaves the buffers in keep alone.
	owned *[]cuda.Ptr
	keep  map[cuda.Ptr]bool
	err   error
	times *nn.Times
	dnn   *dnn // the cuDNN path (fp32, tf32, bf16); nil for canopy's kernels
}

var _ nn.Backend[dmap] = (*gpuEngine)(nil)

func newGPUEngine(dev cuda.Device, p cuda.Precision) *gpuEngine {
	return &gpuEngine{dev: dev, prec: p, wts: map[*nn.Conv][2]cuda.Ptr{}, free: map[int][]cuda.Ptr{}}
}

func (g *gpuEngine) fail(err error) {
	if err != nil && g.err == nil {
		g.err = err
	}
}

func (g *gpuEngine) alloc(n, c, h, w int) dmap {
	return g.allocMap(dmap{n: n, c: c, h: h, w: w})
}

// allocAs allocates an NHWC map of the cuDNN path, BF16 when half.
func (g *gpuEngine) allocAs(n, c, h, w int, half bool) dmap {
	return g.allocMap(dmap{n: n, c: c, h: h, w: w, nhwc: true, half: half})
}

func (g *gpuEngine) allocMap(d dmap) dmap {
	sz := d.words()
	if l := g.free[sz]; len(l) > 0 {
		d.p = l[len(l)-1]
		g.free[sz] = l[:len(l)-1]
		return d
	}
	p, err := g.dev.Alloc(sz)
	g.fail(err)
	d.p = p
	if err == nil && g.owned != nil {
		*g.owned = append(*g.owned, p)
	}
	return d
}

func (g *gpuEngine) Put(xs ...dmap) {
	for _, x := range xs {
		if x.p != 0 && !g.keep[x.p] {
			g.free[x.words()] = append(g.free[x.words()], x.p)
		}
	}
}

// reuseFor frees the cached buffers when the batch shape changes, so a run
// of mixed sizes does not hold buffers of every size.
func (g *gpuEngine) reuseFor(n, h, w int) {
	if g.shape == [3]int{n, h, w} {
		return
	}
	g.shape = [3]int{n, h, w}
	g.release()
}

func (g *gpuEngine) release() {
	g.fail(g.dev.Sync())
	for _, l := range g.free {
		for _, p := range l {
			g.dev.Free(p)
		}
	}
	g.free = map[int][]cuda.Ptr{}
}

func (g *gpuEngine) Same(a, b dmap) bool { return a.p != 0 && a.p == b.p }

// timed measures a layer group when layer times are on: it waits for the
// device before and after, so the time is the group's own.
func (g *gpuEngine) timed(group string) func() {
	if g.times == nil {
		return func() {}
	}
	g.fail(g.dev.Sync())
	t := g.times.Now()
	return func() {
		g.fail(g.dev.Sync())
		g.times.Add(group, t)
	}
}

func (g *gpuEngine) weights(c *nn.Conv) [2]cuda.Ptr {
	if w, ok := g.wts[c]; ok {
		return w
	}
	var w [2]cuda.Ptr
	for i, src := range [][]float32{c.W, c.B} {
		p, err := g.dev.Alloc(len(src))
		g.fail(err)
		if err == nil {
			g.fail(g.dev.Upload(p, src))
		}
		w[i] = p
	}
	g.wts[c] = w
	return w
}

func (g *gpuEngine) Conv(c *nn.Conv, x dmap, relu bool, res *dmap) dmap {
	defer g.timed(nn.GroupOf(c.Name))()
	if g.dnn != nil {
		return g.dnnConv(c, x, relu, res)
	}
	oh := (x.h+2*c.Pad-c.KH)/c.Stride + 1
	ow := (x.w+2*c.Pad-c.KW)/c.Stride + 1
	y := g.alloc(x.n, c.Out, oh, ow)
	w := g.weights(c)
	a := cuda.ConvArgs{X: x.p, W: w[0], B: w[1], Y: y.p,
		N: x.n, C: x.c, H: x.h, Wd: x.w, M: c.Out, KH: c.KH, KW: c.KW, S: c.Stride, P: c.Pad,
		OH: oh, OW: ow, Relu: relu}
	if res != nil {
		a.Res = res.p
	}
	if g.err == nil {
		g.fail(g.dev.Conv(a, g.prec))
	}
	return y
}

func (g *gpuEngine) MaxPool3s2(x dmap) dmap {
	defer g.timed("maxpool")()
	oh, ow := (x.h+2-3)/2+1, (x.w+2-3)/2+1
	if x.nhwc {
		y := g.allocAs(x.n, x.c, oh, ow, x.half)
		if g.err == nil {
			g.fail(g.dev.NHWC(cuda.NHWCArgs{Op: cuda.MaxPool3s2NHWC, X: x.p, Y: y.p, N: x.n, C: x.c, H: x.h, W: x.w, OH: oh, OW: ow, BF16: x.half}))
		}
		return y
	}
	y := g.alloc(x.n, x.c, oh, ow)
	if g.err == nil {
		g.fail(g.dev.MaxPool3s2(x.p, y.p, x.n, x.c, x.h, x.w, oh, ow))
	}
	return y
}

func (g *gpuEngine) UpsampleAdd(lat, top dmap) {
	defer g.timed("fpn")()
	if lat.nhwc {
		if g.err == nil {
			g.fail(g.dev.NHWC(cuda.NHWCArgs{Op: cuda.UpsampleAddNHWC, X: lat.p, Y: top.p, N: lat.n, C: lat.c, H: lat.h, W: lat.w, OH: top.h, OW: top.w, BF16: lat.half}))
		}
		return
	}
	if g.err == nil {
		g.fail(g.dev.UpsampleAdd(lat.p, top.p, lat.n, lat.c, lat.h, lat.w, top.h, top.w))
	}
}

func (g *gpuEngine) ReluCopy(x dmap) dmap {
	defer g.timed("fpn")()
	if x.nhwc {
		y := g.allocAs(x.n, x.c, x.h, x.w, x.half)
		if g.err == nil {
			g.fail(g.dev.NHWC(cuda.NHWCArgs{Op: cuda.ReluAny, X: x.p, Y: y.p, N: x.n, C: x.c, H: x.h, W: x.w, BF16: x.half}))
		}
		return y
	}
	y := g.alloc(x.n, x.c, x.h, x.w)
	if g.err == nil {
		g.fail(g.dev.ReluCopy(x.p, y.p, x.size()))
	}
	return y
}

func (g *gpuEngine) download(x dmap) []float32 {
	if x.nhwc { // a level of a trace on the cuDNN path: NCHW FP32 first
		x.p, x.nhwc, x.half = g.nchwCopy(x), false, false
		defer g.Put(x)
	}
	out := make([]float32, x.size())
	if g.err == nil {
		g.fail(g.dev.Download(out, x.p))
	}
	return out
}

// GPURunner runs a Model on a cuda.Device. Images of one padded size that
// follow each other in a DetectBatch call go through the network as one
// batch; every output element is reduced by one thread in a fixed order, so
// an image's detections do not depend on the batch (tested on the host
// shim). The transform (normalize, resize, pad) runs on the device too
// (gputransform.go). Not safe for concurrent use.
type GPURunner struct {
	m     *Model
	g     *gpuEngine
	cells cuda.Ptr // the levels' cell anchors (postprocess, losses), uploaded once
	graphState
}

// errReleased refuses a model whose 3×3 weights the CPU detector dropped.
var errReleased = errors.New("retinanet: the model's 3×3 weights were dropped for the CPU detector (NewDetector); load it again to run it on a GPU")

// NewGPURunner runs m on dev at precision p. The weights are uploaded on
// the first image. It panics on a model a CPU detector released
// (NewGPURunnerWith returns that error).
func NewGPURunner(m *Model, dev cuda.Device, p cuda.Precision) *GPURunner {
	if m.Released() {
		panic(errReleased)
	}
	r := &GPURunner{m: m, g: newGPUEngine(dev, p)}
	r.graphState.init(dev)
	return r
}

// Model is the runner's model.
func (r *GPURunner) Model() *Model { return r.m }

// Device is the runner's device.
func (r *GPURunner) Device() cuda.Device { return r.g.dev }

// Precision is the convolution precision.
func (r *GPURunner) Precision() cuda.Precision { return r.g.prec }

// Close frees the device memory the runner holds (not the device).
func (r *GPURunner) Close() error {
	r.dropGraphs()
	r.g.release()
	for _, w := range r.g.wts {
		r.g.dev.Free(w[0])
		r.g.dev.Free(w[1])
	}
	r.g.wts = map[*nn.Conv][2]cuda.Ptr{}
	if r.g.dnn != nil {
		g := r.g
		g.fail(g.dnn.close(g.dev))
		g.dnn = nil
	}
	if r.cells != 0 {
		r.g.dev.Free(r.cells)
		r.cells = 0
	}
	return r.g.err
}

// launched is a group whose forward is queued on the device.
type launched struct {
	prepared
	p        [5]dmap
	cls, reg [5]dmap
	// graph, when not nil, is the replayed graph whose buffers hold the
	// group's head outputs and detections.
	graph *fwdGraph
}

// launch queues a group's transform and forward: by replaying the graph
// captured for its batch shape (gpugraph.go), or launch by launch.
func (r *GPURunner) launch(p prepared) launched {
	n := len(p.imgs)
	g := r.g
	g.reuseFor(n, p.ph, p.pw)
	if fg := r.graphFor(p); fg != nil {
		return r.replay(p, fg)
	}
	return r.launchEager(p)
}

// launchEager queues a group's transform and forward launch by launch.
func (r *GPURunner) launchEager(p prepared) launched {
	g := r.g
	g.reuseFor(len(p.imgs), p.ph, p.pw)
	x := r.transform(p)
	if g.dnn != nil { // the cuDNN path: NHWC (and BF16) from here on
		x = g.toNHWC(x)
	}
	l := launched{prepared: p}
	l.p = features[dmap](r.m, g, x)
	for L := 0; L < 5; L++ {
		l.cls[L], l.reg[L] = head[dmap](r.m, g, l.p[L])
		if g.dnn != nil {
			l.cls[L], l.reg[L] = g.toNCHW(l.cls[L]), g.toNCHW(l.reg[L])
		}
	}
	return l
}

// collect postprocesses a launched group and computes its losses (when it
// has targets) on the device (gpupost.go, gpuloss.go); with a trace, on the
// host (collectHost), which needs the head outputs.
func (r *GPURunner) collect(l launched, tr *Trace) ([][]Detection, []box.Loss) {
	if tr != nil {
		return r.collectHost(l, tr)
	}
	var losses []box.Loss
	if l.targets != nil {
		losses = r.losses(l)
	}
	if l.graph != nil {
		return r.postDownload(l.graph.out, len(l.imgs)), losses
	}
	dets := r.postprocess(l)
	for _, ds := range [][5]dmap{l.cls, l.reg, l.p} {
		r.g.Put(ds[:]...)
	}
	return dets, losses
}

// collectHost downloads a launched group's head outputs and postprocesses
// each image on the host, computing the losses when the group has targets.
func (r *GPURunner) collectHost(l launched, tr *Trace) ([][]Detection, []box.Loss) {
	g := r.g
	n := len(l.imgs)
	all := make([][]cand, n)
	var accs []*lossAcc
	if l.targets != nil {
		t0 := g.times.Now()
		gr := grids(l.p, func(d dmap) (int, int) { return d.h, d.w })
		for i, img := range l.imgs {
			accs = append(accs, r.m.newLossAcc(l.targets[i], img.H, img.W, l.rh[i], l.rw[i], l.ph, l.pw, gr))
		}
		g.times.Add("loss", t0)
	}
	var levels [5][]float32
	for L := 0; L < 5; L++ {
		cls, reg := g.download(l.cls[L]), g.download(l.reg[L])
		if tr != nil {
			levels[L] = g.download(l.p[L])
		}
		g.Put(l.cls[L], l.reg[L], l.p[L])
		if g.err != nil {
			for _, rest := range [][5]dmap{l.cls, l.reg, l.p} {
				g.Put(rest[L+1:]...)
			}
			return nil, nil
		}
		t1 := g.times.Now()
		gh, gw := l.p[L].h, l.p[L].w
		cs, rs := len(cls)/n, len(reg)/n
		for i := 0; i < n; i++ {
			lo := levelOut{gh: gh, gw: gw,
				cls: cpu.Fmap{C: l.cls[L].c, H: gh, W: gw, D: cls[i*cs : (i+1)*cs]},
				reg: cpu.Fmap{C: l.reg[L].c, H: gh, W: gw, D: reg[i*rs : (i+1)*rs]}}
			if accs != nil {
				accs[i].addLevel(lo, L)
			}
			all[i] = append(all[i], r.m.levelCandidates(lo, L, l.ph, l.pw, l.rh[i], l.rw[i], tr)...)
		}
		if tr != nil {
			tr.Levels[L] = cpu.Fmap{C: l.p[L].c, H: gh, W: gw, D: levels[L]}
		}
		g.times.Add("postprocess", t1)
	}
	t2 := g.times.Now()
	defer g.times.Add("postprocess", t2)
	out := make([][]Detection, n)
	for i, img := range l.imgs {
		out[i] = r.m.finish(all[i], img.H, img.W, l.ph, l.pw, l.rh[i], l.rw[i], tr)
	}
	var losses []box.Loss
	for _, a := range accs {
		losses = append(losses, a.result())
	}
	return out, losses
}

// groups cuts imgs into runs of one padded size, at most maxBatch long.
func (r *GPURunner) groups(imgs []Image, maxBatch int) [][]Image {
	var out [][]Image
	var key [2]int
	for _, img := range imgs {
		oh, ow := resizeSize(img.H, img.W, r.m.Opt)
		k := [2]int{(oh + 31) / 32 * 32, (ow + 31) / 32 * 32}
		if len(out) == 0 || k != key || len(out[len(out)-1]) == maxBatch {
			out = append(out, nil)
			key = k
		}
		out[len(out)-1] = append(out[len(out)-1], img)
	}
	return out
}

// DetectBatch runs imgs, batching runs of one padded size (at most
// maxBatch images). While the device computes a group, the host transforms
// the next one.
func (r *GPURunner) DetectBatch(imgs []Image, maxBatch int) ([][]Detection, error) {
	out, _, err := r.detectBatch(imgs, nil, nil, maxBatch)
	return out, err
}

// DetectBatchLoss is DetectBatch that also computes each image's losses
// against targets[i] (Runner.DetectLoss); an image's losses, like its
// detections, do not depend on the batch.
func (r *GPURunner) DetectBatchLoss(imgs []Image, targets [][]Target, maxBatch int) ([][]Detection, []box.Loss, error) {
	if targets == nil {
		targets = make([][]Target, len(imgs))
	}
	return r.detectBatch(imgs, nil, targets, maxBatch)
}

// detectBatch runs imgs; u8, when not nil, holds their 8-bit samples as
// the decoders made them (nil for one to make here).
func (r *GPURunner) detectBatch(imgs []Image, u8 [][]byte, targets [][]Target, maxBatch int) ([][]Detection, []box.Loss, error) {
	if maxBatch < 1 {
		maxBatch = 1
	}
	gs := r.groups(imgs, maxBatch)
	out := make([][]Detection, 0, len(imgs))
	var losses []box.Loss
	// prep prepares the group starting at image `at`.
	at := 0
	prep := func(grp []Image) prepared {
		var tg [][]Target
		var b [][]byte
		if targets != nil {
			tg = targets[at : at+len(grp)]
		}
		if u8 != nil {
			b = u8[at : at+len(grp)]
		}
		at += len(grp)
		return r.prepare(grp, b, tg)
	}
	var next prepared
	if len(gs) > 0 {
		next = prep(gs[0])
	}
	for i := range gs {
		l := r.launch(next)
		if i+1 < len(gs) {
			next = prep(gs[i+1])
		}
		dets, ls := r.collect(l, nil)
		if r.g.err != nil {
			return nil, nil, fmt.Errorf("retinanet: %s: %w", r.g.dev.Info().Backend, r.g.err)
		}
		out = append(out, dets...)
		losses = append(losses, ls...)
	}
	return out, losses, nil
}

// DetectTrace runs one image and records the transform sizes, the pyramid
// levels and the per-level top scores, as Runner.DetectTrace.
func (r *GPURunner) DetectTrace(img Image) ([]Detection, *Trace, error) {
	tr := &Trace{}
	l := r.launchEager(r.prepare([]Image{img}, nil, nil)) // collectHost reads and frees the head outputs
	dets, _ := r.collect(l, tr)
	if r.g.err != nil {
		return nil, nil, fmt.Errorf("retinanet: %s: %w", r.g.dev.Info().Backend, r.g.err)
	}
	return dets[0], tr, nil
}

// EnableLayerTimes makes the runner time every layer group, waiting for
// the device around each (slower; for profiles).
func (r *GPURunner) EnableLayerTimes() {
	r.g.times = nn.NewTimes()
}

// LayerTimes returns the time per layer group so far, slowest first.
func (r *GPURunner) LayerTimes() []nn.LayerTime { return r.g.times.List() }
