//go:build cuda

package cuda

/*
#cgo LDFLAGS: -lcuda
#include <cuda.h>
#include <stdlib.h>
*/
import "C"

import (
	"fmt"
	"runtime"
	"unsafe"

	"gorgonia.org/cu"

	"github.com/canopy-hpc/canopy/infer/cuda/kernels"
)

// HaveCUDA reports whether this build has the cuda backend.
const HaveCUDA = true

// Build describes this build for doctor and version.
func Build() string {
	return "cuda engine (kernels: compute_80 PTX + sm_90, embedded; needs libcuda.so.1 only)"
}

// NoGPU is "": the engine starts only with a usable GPU (gpucheck).
func NoGPU() string { return "" }

// Count is the number of CUDA devices this process sees (after
// CUDA_VISIBLE_DEVICES).
func Count() (int, error) { return cu.NumDevices() }

// gpu is the Device on the CUDA driver API. Every call runs on one OS
// thread (a goroutine locked to it) where the device's primary context is
// current, in one non-blocking stream; kernel arguments live in C memory.
type gpu struct {
	work    chan func()
	dev     cu.Device
	ctx     cu.CUContext
	mod     cu.Module
	nhwc    cu.Module // kernels.NHWCFatbin: the cuDNN path's data movement
	fn      map[string]cu.Function
	stream  cu.Stream
	pinned  unsafe.Pointer // page-locked staging for uploads and downloads
	pinnedN int            // its size in floats
	// up is the double-buffered page-locked staging of UploadBytes: a
	// buffer is refilled only after the copy that last read it (its event).
	up     [2]stagingBuf
	upNext int
	// graphs are the instantiated CUDA graphs (Capturer), by handle.
	graphs    map[Graph]graphPair
	nextGraph Graph
	capturing bool
	args      unsafe.Pointer // C memory for kernel arguments
	info      Info
	closed    bool
}

var (
	_ Device   = (*gpu)(nil)
	_ Capturer = (*gpu)(nil)
)

// graphPair is a captured graph and its executable.
type graphPair struct {
	g C.CUgraph
	x C.CUgraphExec
}

// cstream is the stream's driver handle (cu.Stream wraps just that).
func (g *gpu) cstream() C.CUstream { return *(*C.CUstream)(unsafe.Pointer(&g.stream)) }

// BeginCapture starts recording the stream's work (relaxed mode: device
// allocations stay allowed while the capture runs).
func (g *gpu) BeginCapture() error {
	return g.do(func() error {
		if g.capturing {
			return fmt.Errorf("cuda: a capture is already in progress")
		}
		if r := C.cuStreamBeginCapture(g.cstream(), C.CU_STREAM_CAPTURE_MODE_RELAXED); r != C.CUDA_SUCCESS {
			return fmt.Errorf("cuda: beginning a graph capture: CUresult %d", int(r))
		}
		g.capturing = true
		return nil
	})
}

// EndCapture ends the recording and instantiates the graph.
func (g *gpu) EndCapture() (Graph, error) {
	var id Graph
	err := g.do(func() error {
		if !g.capturing {
			return fmt.Errorf("cuda: no capture in progress")
		}
		g.capturing = false
		var cg C.CUgraph
		if r := C.cuStreamEndCapture(g.cstream(), &cg); r != C.CUDA_SUCCESS {
			return fmt.Errorf("cuda: ending a graph capture: CUresult %d (an operation in it could not be captured)", int(r))
		}
		var x C.CUgraphExec
		if r := C.cuGraphInstantiateWithFlags(&x, cg, 0); r != C.CUDA_SUCCESS {
			C.cuGraphDestroy(cg)
			return fmt.Errorf("cuda: instantiating a graph: CUresult %d", int(r))
		}
		if g.graphs == nil {
			g.graphs = map[Graph]graphPair{}
		}
		g.nextGraph++
		g.graphs[g.nextGraph] = graphPair{cg, x}
		id = g.nextGraph
		return nil
	})
	return id, err
}

// Replay launches a graph in the stream.
func (g *gpu) Replay(id Graph) error {
	return g.do(func() error {
		p, ok := g.graphs[id]
		if !ok {
			return fmt.Errorf("cuda: no graph %d", id)
		}
		if r := C.cuGraphLaunch(p.x, g.cstream()); r != C.CUDA_SUCCESS {
			return fmt.Errorf("cuda: launching a graph: CUresult %d", int(r))
		}
		return nil
	})
}

// DropGraph frees a graph (after the work queued before it).
func (g *gpu) DropGraph(id Graph) {
	g.do(func() error {
		if p, ok := g.graphs[id]; ok {
			g.stream.Synchronize()
			C.cuGraphExecDestroy(p.x)
			C.cuGraphDestroy(p.g)
			delete(g.graphs, id)
		}
		return nil
	})
}

// stagingBuf is one page-locked upload buffer and the event recorded after
// its last copy.
type stagingBuf struct {
	p   unsafe.Pointer
	n   int
	ev  cu.Event
	has bool // ev was recorded
}

// Open makes device index (among the visible ones) ready: its primary
// context, the embedded module (compute_80 PTX, sm_90 code) and a stream.
func Open(index int) (Device, error) {
	n, err := cu.NumDevices()
	if err != nil {
		return nil, fmt.Errorf("cuda: counting devices: %w", err)
	}
	if index < 0 || index >= n {
		return nil, fmt.Errorf("cuda: device %d: this process sees %d", index, n)
	}
	g := &gpu{work: make(chan func()), fn: map[string]cu.Function{}}
	ready := make(chan error)
	go g.loop(index, ready)
	if err := <-ready; err != nil {
		return nil, err
	}
	return g, nil
}

func (g *gpu) loop(index int, ready chan<- error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := g.init(index); err != nil {
		g.release()
		ready <- err
		return
	}
	ready <- nil
	for f := range g.work {
		f()
	}
}

// release frees what init made (on the device's thread).
func (g *gpu) release() error {
	var err error
	if g.stream != (cu.Stream{}) {
		err = g.stream.Synchronize()
		g.stream.Destroy()
	}
	if g.pinned != nil {
		C.cuMemFreeHost(g.pinned)
		g.pinned = nil
	}
	for id, p := range g.graphs {
		C.cuGraphExecDestroy(p.x)
		C.cuGraphDestroy(p.g)
		delete(g.graphs, id)
	}
	for i := range g.up {
		b := &g.up[i]
		if b.p != nil {
			C.cuMemFreeHost(b.p)
		}
		if b.ev != (cu.Event{}) {
			cu.DestroyEvent(&b.ev)
		}
		*b = stagingBuf{}
	}
	if g.args != nil {
		C.free(g.args)
		g.args = nil
	}
	if g.mod != (cu.Module{}) {
		g.mod.Unload()
	}
	if g.nhwc != (cu.Module{}) {
		g.nhwc.Unload()
	}
	if g.ctx != (cu.CUContext{}) {
		if rerr := g.dev.ReleasePrimaryCtx(); err == nil {
			err = rerr
		}
	}
	return err
}

func (g *gpu) init(index int) error {
	var err error
	if g.dev, err = cu.GetDevice(index); err != nil {
		return fmt.Errorf("cuda: device %d: %w", index, err)
	}
	if g.ctx, err = g.dev.RetainPrimaryCtx(); err != nil {
		return fmt.Errorf("cuda: device %d: primary context: %w", index, err)
	}
	if err = cu.SetCurrentContext(g.ctx); err != nil {
		return fmt.Errorf("cuda: device %d: %w", index, err)
	}
	if g.mod, err = cu.LoadFatBinary(string(kernels.Fatbin)); err != nil {
		return fmt.Errorf("cuda: loading the kernels (compute_80 PTX, sm_90) on device %d: %w (the driver must support CUDA 11.8 and the GPU be sm_80 or newer)", index, err)
	}
	for _, name := range kernels.Names {
		f, err := g.mod.Function(name)
		if err != nil {
			return fmt.Errorf("cuda: kernel %s: %w", name, err)
		}
		g.fn[name] = f
	}
	if g.nhwc, err = cu.LoadFatBinary(string(kernels.NHWCFatbin)); err != nil {
		return fmt.Errorf("cuda: loading the NHWC kernels on device %d: %w", index, err)
	}
	for _, name := range kernels.NHWCNames {
		f, err := g.nhwc.Function(name)
		if err != nil {
			return fmt.Errorf("cuda: kernel %s: %w", name, err)
		}
		g.fn[name] = f
	}
	if g.stream, err = cu.MakeStream(cu.NonBlocking); err != nil {
		return fmt.Errorf("cuda: stream: %w", err)
	}
	g.args = C.malloc(32 * 8)
	name, _ := g.dev.Name()
	id, _ := g.dev.UUID()
	major, minor, _ := g.dev.ComputeCapability()
	sms, _ := g.dev.Attribute(cu.MultiprocessorCount)
	g.info = Info{Index: index, Name: name, UUID: "GPU-" + id.String(), SM: fmt.Sprintf("%d.%d", major, minor), SMs: sms, Backend: "cuda"}
	return nil
}

// do runs f on the device's thread.
func (g *gpu) do(f func() error) error {
	done := make(chan error, 1)
	g.work <- func() { done <- f() }
	return <-done
}

func (g *gpu) Alloc(n int) (Ptr, error) {
	var p cu.DevicePtr
	err := g.do(func() (err error) {
		p, err = cu.MemAlloc(int64(max(n, 1)) * 4)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("cuda: allocating %d MiB on %s: %w", (n*4)>>20, g.info.Name, err)
	}
	return Ptr(p), nil
}

func (g *gpu) Free(p Ptr) {
	g.do(func() error { return cu.MemFree(cu.DevicePtr(p)) })
}

// stage makes the pinned staging buffer hold n floats (after the stream
// has drained: an earlier copy may still read it).
func (g *gpu) stage(n int) error {
	if n <= g.pinnedN {
		return nil
	}
	if g.pinned != nil {
		C.cuMemFreeHost(g.pinned)
		g.pinned, g.pinnedN = nil, 0
	}
	var p unsafe.Pointer
	if r := C.cuMemHostAlloc(&p, C.size_t(n*4), 0); r != C.CUDA_SUCCESS {
		return fmt.Errorf("cuda: %d MiB of pinned host memory: CUresult %d", (n*4)>>20, int(r))
	}
	g.pinned, g.pinnedN = p, n
	return nil
}

func (g *gpu) Upload(dst Ptr, src []float32) error {
	if len(src) == 0 {
		return nil
	}
	return g.do(func() error {
		if err := g.stream.Synchronize(); err != nil {
			return err
		}
		if err := g.stage(len(src)); err != nil {
			return err
		}
		copy(unsafe.Slice((*float32)(g.pinned), len(src)), src)
		return cu.MemcpyHtoDAsync(cu.DevicePtr(dst), g.pinned, int64(len(src))*4, g.stream)
	})
}

func (g *gpu) Download(dst []float32, src Ptr) error {
	if len(dst) == 0 {
		return nil
	}
	return g.do(func() error {
		if err := g.stream.Synchronize(); err != nil {
			return fmt.Errorf("cuda: %w", err)
		}
		if err := g.stage(len(dst)); err != nil {
			return err
		}
		if err := cu.MemcpyDtoHAsync(g.pinned, cu.DevicePtr(src), int64(len(dst))*4, g.stream); err != nil {
			return err
		}
		if err := g.stream.Synchronize(); err != nil {
			return err
		}
		copy(dst, unsafe.Slice((*float32)(g.pinned), len(dst)))
		return nil
	})
}

// UploadBytes copies src through the staging buffer not used by the
// previous call, waiting only for that buffer's last copy: the host fills
// one while the other's transfer runs.
func (g *gpu) UploadBytes(dst Ptr, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	return g.do(func() error {
		b := &g.up[g.upNext]
		g.upNext ^= 1
		if b.has {
			if err := b.ev.Synchronize(); err != nil {
				return fmt.Errorf("cuda: %w", err)
			}
		}
		if b.n < len(src) {
			if b.p != nil {
				C.cuMemFreeHost(b.p)
				b.p, b.n = nil, 0
			}
			var p unsafe.Pointer
			if r := C.cuMemHostAlloc(&p, C.size_t(len(src)), 0); r != C.CUDA_SUCCESS {
				return fmt.Errorf("cuda: %d MiB of pinned host memory: CUresult %d", len(src)>>20, int(r))
			}
			b.p, b.n = p, len(src)
		}
		if b.ev == (cu.Event{}) {
			ev, err := cu.MakeEvent(cu.DisableTiming)
			if err != nil {
				return fmt.Errorf("cuda: event: %w", err)
			}
			b.ev = ev
		}
		copy(unsafe.Slice((*byte)(b.p), len(src)), src)
		if err := cu.MemcpyHtoDAsync(cu.DevicePtr(dst), b.p, int64(len(src)), g.stream); err != nil {
			return fmt.Errorf("cuda: upload: %w", err)
		}
		if err := b.ev.Record(g.stream); err != nil {
			return fmt.Errorf("cuda: %w", err)
		}
		b.has = true
		return nil
	})
}

// Launch implements Device.
func (g *gpu) Launch(name string, d kernels.Dim, args ...any) error {
	if _, ok := g.fn[name]; !ok {
		return fmt.Errorf("cuda: no kernel %s in the module", name)
	}
	return g.launch(name, d, args...)
}

// launch queues kernel name with the given arguments (Slots), written to
// C memory.
func (g *gpu) launch(name string, d kernels.Dim, args ...any) error {
	vals, err := Slots(name, args)
	if err != nil {
		return err
	}
	if len(vals) > 32 {
		return fmt.Errorf("cuda: %s: %d arguments (at most 32)", name, len(vals))
	}
	return g.do(func() error {
		slots := unsafe.Slice((*uint64)(g.args), 32)
		params := make([]unsafe.Pointer, len(vals))
		for i, v := range vals {
			// cu's Launch copies 8 bytes per argument; the kernel reads
			// its parameter's own size (little-endian) from the slot.
			slots[i] = v
			params[i] = unsafe.Add(g.args, i*8)
		}
		if err := g.fn[name].Launch(d.GridX, d.GridY, 1, d.Block, 1, 1, 0, g.stream, params); err != nil {
			return fmt.Errorf("cuda: launching %s: %w", name, err)
		}
		return nil
	})
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func (g *gpu) Conv(a ConvArgs, p Precision) error {
	if p.Cudnn() {
		return fmt.Errorf("cuda: Conv runs canopy's kernels (exact, kernel-tf32), not %s (cuDNN)", p)
	}
	name := kernels.ConvF32
	if p == KernelTF32 {
		name = kernels.ConvTF32
	}
	return g.launch(name, kernels.Conv(a.M, a.N*a.OH*a.OW, p == KernelTF32), a.X, a.W, a.B, a.Res, a.Y,
		a.N, a.C, a.H, a.Wd, a.M, a.KH, a.KW, a.S, a.P, a.OH, a.OW, b2i(a.Relu))
}

func (g *gpu) MaxPool3s2(x, y Ptr, n, c, h, w, oh, ow int) error {
	return g.launch(kernels.MaxPool3s2, kernels.Elem(n*c*oh*ow), x, y, n, c, h, w, oh, ow)
}

func (g *gpu) UpsampleAdd(lat, top Ptr, n, c, h, w, th, tw int) error {
	return g.launch(kernels.UpsampleAdd, kernels.Elem(n*c*h*w), lat, top, n, c, h, w, th, tw)
}

func (g *gpu) ReluCopy(x, y Ptr, n int) error {
	return g.launch(kernels.ReluCopy, kernels.Elem(n), x, y, int64(n))
}

func (g *gpu) NHWC(a NHWCArgs) error {
	name := kernels.NHWCNames[a.Op]
	bf := b2i(a.BF16)
	switch a.Op {
	case ToNHWC, ToNCHW:
		return g.launch(name, kernels.Elem(a.N*a.C*a.H*a.W), a.X, a.Y, a.N, a.C, a.H, a.W, bf)
	case MaxPool3s2NHWC:
		return g.launch(name, kernels.Elem(a.N*a.C*a.OH*a.OW), a.X, a.Y, a.N, a.C, a.H, a.W, a.OH, a.OW, bf)
	case UpsampleAddNHWC:
		return g.launch(name, kernels.Elem(a.N*a.C*a.H*a.W), a.X, a.Y, a.N, a.C, a.H, a.W, a.OH, a.OW, bf)
	case ReluAny:
		n := a.N * a.C * a.H * a.W
		return g.launch(name, kernels.Elem(n), a.X, a.Y, int64(n), bf)
	}
	return fmt.Errorf("cuda: NHWC op %d", a.Op)
}

// WithStream runs f on the device's thread (the primary context current)
// with the stream's CUstream.
func (g *gpu) WithStream(f func(stream uintptr) error) error {
	return g.do(func() error { return f(uintptr(unsafe.Pointer(g.stream.C()))) })
}

func (g *gpu) Sync() error {
	return g.do(func() error { return g.stream.Synchronize() })
}

func (g *gpu) Info() Info { return g.info }

// Close waits for the queued work (returning a late kernel fault), frees
// the device's resources and ends its thread. A second Close does nothing.
func (g *gpu) Close() error {
	if g.closed {
		return nil
	}
	g.closed = true
	err := g.do(g.release)
	close(g.work)
	if err != nil {
		return fmt.Errorf("cuda: closing %s: %w", g.info.Name, err)
	}
	return nil
}
