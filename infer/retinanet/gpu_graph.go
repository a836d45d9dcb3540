package retinanet

import (
	"github.com/canopy-hpc/canopy/infer/cuda"
	"github.com/canopy-hpc/canopy/infer/gpu"
)

// CUDA graphs: the forward of a batch shape (n images padded to ph×pw),
// from the transformed batch through the backbone, the FPN, the heads and
// the postprocess kernels, is captured once as a graph (cuda.Capturer) and
// replayed for every later batch of that shape: one launch instead of a few
// hundred. The first batch of a shape runs launch by launch (it uploads the
// weights, which a capture cannot), the second is captured and replayed.
// What changes between batches of a shape, the transform (each image's own
// size) and the image sizes the postprocess reads, runs before the replay
// into the graph's own input buffers. The losses run after it, launch by
// launch, on the graph's head outputs (their truth-box count varies). A
// device that cannot capture, a failed capture (the reason is kept:
// GraphError), layer times (which synchronize around every group) or
// DisableGraphs give the launch-by-launch path, whose bytes are the same
// (TestGraphsMatchEager).

// maxGraphs bounds the graphs a runner keeps (each holds the buffers of a
// whole forward); the oldest goes first.
const maxGraphs = 2

// fwdGraph is a captured forward: its graph, the buffers it reads and
// writes (owned: all of them, freed with it), its input batch, the image
// sizes and the outputs.
type fwdGraph struct {
	id          cuda.Graph
	key         [3]int
	x, ip, out  gpu.Map
	p, cls, reg [5]gpu.Map
	owned       []cuda.Ptr
}

// graphState is a GPURunner's graphs.
type graphState struct {
	cap     cuda.Capturer // nil: the device cannot capture
	off     bool          // DisableGraphs
	graphs  []*fwdGraph   // oldest first
	seen    map[[3]int]int
	failed  map[[3]int]bool
	err     error // the last failed capture's reason
	replays int
}

func (s *graphState) init(dev cuda.Device) {
	s.cap, _ = dev.(cuda.Capturer)
	s.seen, s.failed = map[[3]int]int{}, map[[3]int]bool{}
}

// DisableGraphs makes the runner launch every kernel itself (the path
// without CUDA graphs).
func (r *GPURunner) DisableGraphs() {
	r.dropGraphs()
	r.off = true
}

// GraphError is why the last graph capture failed (nil if none did).
func (r *GPURunner) GraphError() error { return r.err }

// graphFor is the graph for p's batch shape: captured now if this is the
// shape's second batch, nil for the launch-by-launch path.
func (r *GPURunner) graphFor(p prepared) *fwdGraph {
	// The cuDNN path runs launch by launch (its plans are not captured).
	if r.cap == nil || r.off || r.g.Times != nil || r.g.Err != nil || r.g.DNN != nil {
		return nil
	}
	key := [3]int{len(p.imgs), p.ph, p.pw}
	for _, fg := range r.graphs {
		if fg.key == key {
			return fg
		}
	}
	if r.failed[key] {
		return nil
	}
	if r.seen[key]++; r.seen[key] < 2 {
		return nil
	}
	return r.capture(key, p)
}

// capture records the forward of p's shape. Its buffers are new ones
// (the free list is set aside meanwhile), so nothing outside the graph
// ever reuses them; within it, buffers are reused as launch by launch.
func (r *GPURunner) capture(key [3]int, p prepared) *fwdGraph {
	g := r.g
	var owned []cuda.Ptr
	saved, savedErr := g.Free, g.Err
	g.Free, g.Owned = map[int][]cuda.Ptr{}, &owned
	fg := &fwdGraph{key: key}
	fg.x = g.Alloc(key[0], 3, key[1], key[2])
	fg.ip = g.Scratch(4 * key[0])
	g.Keep = map[cuda.Ptr]bool{fg.x.P: true, fg.ip.P: true}
	err := g.Err
	if err == nil {
		err = r.cap.BeginCapture()
	}
	if err == nil {
		l := launched{prepared: p}
		l.p = features[gpu.Map](r.m, g, fg.x)
		for L := 0; L < 5; L++ {
			l.cls[L], l.reg[L] = head[gpu.Map](r.m, g, l.p[L])
		}
		fg.out = r.postLaunch(l, fg.ip)
		fg.p, fg.cls, fg.reg = l.p, l.cls, l.reg
		id, cerr := r.cap.EndCapture()
		fg.id, err = id, cerr
		if g.Err != nil {
			err = g.Err
		}
	}
	g.Free, g.Owned, g.Keep, g.Err = saved, nil, nil, savedErr
	fg.owned = owned
	if err != nil {
		if fg.id != 0 {
			r.cap.DropGraph(fg.id)
		}
		for _, b := range owned {
			g.Dev.Free(b)
		}
		r.err = err
		r.failed[key] = true
		return nil
	}
	if len(r.graphs) == maxGraphs {
		r.drop(r.graphs[0])
		r.graphs = r.graphs[1:]
	}
	r.graphs = append(r.graphs, fg)
	return fg
}

// replay transforms p into the graph's input, writes its image sizes and
// queues the graph.
func (r *GPURunner) replay(p prepared, fg *fwdGraph) launched {
	g := r.g
	r.transformInto(p, fg.x)
	l := launched{prepared: p, p: fg.p, cls: fg.cls, reg: fg.reg, graph: fg}
	r.imageSizes(l, fg.ip)
	if g.Err == nil {
		g.Fail(r.cap.Replay(fg.id))
		r.replays++
	}
	return l
}

func (r *GPURunner) drop(fg *fwdGraph) {
	r.g.Fail(r.g.Dev.Sync())
	r.cap.DropGraph(fg.id)
	for _, b := range fg.owned {
		r.g.Dev.Free(b)
	}
}

func (r *GPURunner) dropGraphs() {
	for _, fg := range r.graphs {
		r.drop(fg)
	}
	r.graphs = nil
}
