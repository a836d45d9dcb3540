package retinanet

import (
	"errors"
	"fmt"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/infer/cpu"
	"github.com/canopy-hpc/canopy/infer/cuda"
	"github.com/canopy-hpc/canopy/infer/gpu"
	"github.com/canopy-hpc/canopy/infer/nn"
)

// GPURunner runs a Model on a cuda.Device. Images of one padded size that
// follow each other in a DetectBatch call go through the network as one
// batch; every output element is reduced by one thread in a fixed order, so
// an image's detections do not depend on the batch (tested on the host
// shim). The transform (normalize, resize, pad) runs on the device too
// (gpu_transform.go). Not safe for concurrent use.
type GPURunner struct {
	m     *Model
	g     *gpu.Engine
	cells cuda.Ptr // the levels' cell anchors (postprocess, losses), uploaded once
	// keys, while the detector holds windows (GPUDetector.HoldWindows),
	// are the batch's images by their first sample: each one's source is
	// held on the device under its input's Index after its transform.
	keys map[*float32]int
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
	r := &GPURunner{m: m, g: gpu.NewEngine(dev, p)}
	r.graphState.init(dev)
	return r
}

// Model is the runner's model.
func (r *GPURunner) Model() *Model { return r.m }

// Device is the runner's device.
func (r *GPURunner) Device() cuda.Device { return r.g.Dev }

// Precision is the convolution precision.
func (r *GPURunner) Precision() cuda.Precision { return r.g.Prec }

// Close frees the device memory the runner holds (not the device).
func (r *GPURunner) Close() error {
	r.dropGraphs()
	r.g.Close()
	if r.cells != 0 {
		r.g.Dev.Free(r.cells)
		r.cells = 0
	}
	return r.g.Err
}

// launched is a group whose forward is queued on the device.
type launched struct {
	prepared
	p        [5]gpu.Map
	cls, reg [5]gpu.Map
	// graph, when not nil, is the replayed graph whose buffers hold the
	// group's head outputs and detections.
	graph *fwdGraph
}

// launch queues a group's transform and forward: by replaying the graph
// captured for its batch shape (gpu_graph.go), or launch by launch.
func (r *GPURunner) launch(p prepared) launched {
	n := len(p.imgs)
	g := r.g
	g.ReuseFor(n, p.ph, p.pw)
	if fg := r.graphFor(p); fg != nil {
		return r.replay(p, fg)
	}
	return r.launchEager(p)
}

// launchEager queues a group's transform and forward launch by launch.
func (r *GPURunner) launchEager(p prepared) launched {
	g := r.g
	g.ReuseFor(len(p.imgs), p.ph, p.pw)
	x := r.transform(p)
	if g.DNN != nil { // the cuDNN path: NHWC (and BF16) from here on
		x = g.ToNHWC(x)
	}
	l := launched{prepared: p}
	l.p = features[gpu.Map](r.m, g, x)
	for L := 0; L < 5; L++ {
		l.cls[L], l.reg[L] = head[gpu.Map](r.m, g, l.p[L])
		if g.DNN != nil {
			l.cls[L], l.reg[L] = g.ToNCHW(l.cls[L]), g.ToNCHW(l.reg[L])
		}
	}
	return l
}

// collect postprocesses a launched group and computes its losses (when it
// has targets) on the device (gpu_postprocess.go, gpu_loss.go); with a trace, on the
// host (collectHost), which needs the head outputs.
// Head outputs, detections and losses that are not finite are a
// *NonFiniteError, as the CPU's (the device's postprocess skips NaN scores
// and clamps boxes, so its detections alone would hide them).
func (r *GPURunner) collect(l launched, tr *Trace) ([][]Detection, []box.Loss, error) {
	if tr != nil {
		return r.collectHost(l, tr)
	}
	bad := r.checkHeads(l)
	var losses []box.Loss
	if l.targets != nil {
		losses = r.losses(l)
	}
	var dets [][]Detection
	if l.graph != nil {
		dets = r.postDownload(l.graph.out, len(l.imgs))
	} else {
		dets = r.postprocess(l)
		for _, ds := range [][5]gpu.Map{l.cls, l.reg, l.p} {
			r.g.Put(ds[:]...)
		}
	}
	if bad == nil {
		bad = checkResults(dets, losses)
	}
	return dets, losses, bad
}

// checkHeads downloads a launched group's head outputs and checks them as
// the CPU's forward pass does (levelOut.check), image by image, level by
// level.
func (r *GPURunner) checkHeads(l launched) error {
	g := r.g
	n := len(l.imgs)
	var cls, reg [5][]float32
	for L := 0; L < 5; L++ {
		cls[L], reg[L] = g.Download(l.cls[L]), g.Download(l.reg[L])
	}
	if g.Err != nil {
		return nil // the caller reports the device's error
	}
	for i := 0; i < n; i++ {
		for L := 0; L < 5; L++ {
			cs, rs := len(cls[L])/n, len(reg[L])/n
			lo := levelOut{cls: cpu.Fmap{D: cls[L][i*cs : (i+1)*cs]}, reg: cpu.Fmap{D: reg[L][i*rs : (i+1)*rs]}}
			if err := lo.check(L); err != nil {
				return err
			}
		}
	}
	return nil
}

// collectHost downloads a launched group's head outputs and postprocesses
// each image on the host, computing the losses when the group has targets.
func (r *GPURunner) collectHost(l launched, tr *Trace) ([][]Detection, []box.Loss, error) {
	g := r.g
	n := len(l.imgs)
	all := make([][]cand, n)
	var accs []*lossAcc
	if l.targets != nil {
		t0 := g.Times.Now()
		gr := grids(l.p, func(d gpu.Map) (int, int) { return d.H, d.W })
		for i, img := range l.imgs {
			accs = append(accs, r.m.newLossAcc(l.targets[i], img.H, img.W, l.rh[i], l.rw[i], l.ph, l.pw, gr))
		}
		g.Times.Add("loss", t0)
	}
	var levels [5][]float32
	var bad error
	for L := 0; L < 5; L++ {
		cls, reg := g.Download(l.cls[L]), g.Download(l.reg[L])
		if tr != nil {
			levels[L] = g.Download(l.p[L])
		}
		g.Put(l.cls[L], l.reg[L], l.p[L])
		if g.Err != nil {
			for _, rest := range [][5]gpu.Map{l.cls, l.reg, l.p} {
				g.Put(rest[L+1:]...)
			}
			return nil, nil, nil
		}
		t1 := g.Times.Now()
		gh, gw := l.p[L].H, l.p[L].W
		cs, rs := len(cls)/n, len(reg)/n
		for i := 0; i < n; i++ {
			lo := levelOut{gh: gh, gw: gw,
				cls: cpu.Fmap{C: l.cls[L].C, H: gh, W: gw, D: cls[i*cs : (i+1)*cs]},
				reg: cpu.Fmap{C: l.reg[L].C, H: gh, W: gw, D: reg[i*rs : (i+1)*rs]}}
			if err := lo.check(L); err != nil && bad == nil {
				bad = err
			}
			if accs != nil {
				accs[i].addLevel(lo, L)
			}
			all[i] = append(all[i], r.m.levelCandidates(lo, L, l.ph, l.pw, l.rh[i], l.rw[i], tr)...)
		}
		if tr != nil {
			tr.Levels[L] = cpu.Fmap{C: l.p[L].C, H: gh, W: gw, D: levels[L]}
		}
		g.Times.Add("postprocess", t1)
	}
	t2 := g.Times.Now()
	defer g.Times.Add("postprocess", t2)
	out := make([][]Detection, n)
	for i, img := range l.imgs {
		out[i] = r.m.finish(all[i], img.H, img.W, l.ph, l.pw, l.rh[i], l.rw[i], tr)
	}
	var losses []box.Loss
	for _, a := range accs {
		losses = append(losses, a.result())
	}
	if bad == nil {
		bad = checkResults(out, losses)
	}
	return out, losses, bad
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
		dets, ls, bad := r.collect(l, nil)
		if r.g.Err != nil {
			return nil, nil, fmt.Errorf("retinanet: %s: %w", r.g.Dev.Info().Backend, r.g.Err)
		}
		if bad != nil {
			return nil, nil, bad
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
	dets, _, bad := r.collect(l, tr)
	if r.g.Err != nil {
		return nil, nil, fmt.Errorf("retinanet: %s: %w", r.g.Dev.Info().Backend, r.g.Err)
	}
	if bad != nil {
		return nil, nil, bad
	}
	return dets[0], tr, nil
}

// EnableLayerTimes makes the runner time every layer group, waiting for
// the device around each (slower; for profiles).
func (r *GPURunner) EnableLayerTimes() {
	r.g.Times = nn.NewTimes()
}

// LayerTimes returns the time per layer group so far, slowest first.
func (r *GPURunner) LayerTimes() []nn.LayerTime { return r.g.Times.List() }
