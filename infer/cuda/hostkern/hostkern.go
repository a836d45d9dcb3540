// Package hostkern is a cuda.Device that runs canopy's CUDA kernels
// (infer/cuda/kernels/kernels.cu) on the CPU: the same source, compiled by
// the host C++ compiler over a thread-index shim (kernels/shim.h), launched
// with the geometry the GPU launcher uses. It is slow (one core, a coroutine
// per CUDA thread) and exists so that CI, which has no GPU, runs every kernel
// and the GPU engine that drives them against the CPU backend.
package hostkern

/*
#cgo CXXFLAGS: -I${SRCDIR}/../kernels -O2 -std=c++17
#cgo CFLAGS: -I${SRCDIR}/../kernels
#cgo LDFLAGS: -lstdc++ -lm
#include <stdlib.h>
#include <string.h>
#include "launch.h"
#include "nhwc.h"
*/
import "C"

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/canopy-hpc/canopy/infer/cuda"
	"github.com/canopy-hpc/canopy/infer/cuda/kernels"
)

// Device is the host shim. A Device is not safe for concurrent use;
// launches of all Devices take turns (the shim's scheduler and the
// kernels' shared memory are process globals), so in-process ranks may
// each hold one.
type Device struct {
	mem  map[cuda.Ptr]alloc
	info cuda.Info
	// A capture in progress records launches instead of running them.
	capturing bool
	rec       []func()
	recErr    error
	graphs    map[cuda.Graph][]func()
	nextGraph cuda.Graph
}

var launchMu sync.Mutex

type alloc struct {
	p unsafe.Pointer
	n int
}

var (
	_ cuda.Device   = (*Device)(nil)
	_ cuda.Capturer = (*Device)(nil)
)

// New returns a host-shim device.
func New() *Device { return NewAs(cuda.Info{Name: "host shim (kernels.cu on the CPU)", UUID: "none"}) }

// NewAs returns a host-shim device that describes itself as info (tests of
// device placement give each fake GPU a name and UUID).
func NewAs(info cuda.Info) *Device {
	info.Backend = "hostkern"
	return &Device{mem: map[cuda.Ptr]alloc{}, info: info, graphs: map[cuda.Graph][]func(){}}
}

func (d *Device) Alloc(n int) (cuda.Ptr, error) {
	p := C.malloc(C.size_t(max(n, 1) * 4))
	if p == nil {
		return 0, fmt.Errorf("hostkern: out of memory for %d floats", n)
	}
	d.mem[cuda.Ptr(p)] = alloc{p, n}
	return cuda.Ptr(p), nil
}

func (d *Device) Free(p cuda.Ptr) {
	if a, ok := d.mem[p]; ok {
		delete(d.mem, p)
		C.free(a.p)
	}
}

func (d *Device) check(p cuda.Ptr, n int) (unsafe.Pointer, error) {
	a, ok := d.mem[p]
	if !ok || a.n < n {
		return nil, fmt.Errorf("hostkern: %d floats at %#x: not an allocation that large", n, uintptr(p))
	}
	return a.p, nil
}

func (d *Device) Upload(dst cuda.Ptr, src []float32) error {
	if err := d.noCapture("an upload"); err != nil {
		return err
	}
	p, err := d.check(dst, len(src))
	if err != nil {
		return err
	}
	if len(src) > 0 {
		C.memcpy(p, unsafe.Pointer(&src[0]), C.size_t(4*len(src)))
	}
	return nil
}

func (d *Device) Download(dst []float32, src cuda.Ptr) error {
	if err := d.noCapture("a download"); err != nil {
		return err
	}
	p, err := d.check(src, len(dst))
	if err != nil {
		return err
	}
	if len(dst) > 0 {
		C.memcpy(unsafe.Pointer(&dst[0]), p, C.size_t(4*len(dst)))
	}
	return nil
}

// fp is the host address of an allocation (nil for 0, the absent residual).
func (d *Device) fp(p cuda.Ptr) *C.float { return (*C.float)(d.mem[p].p) }

func cbool(b bool) C.int {
	if b {
		return 1
	}
	return 0
}

// run runs a launch on the CPU, or records it during a capture.
func (d *Device) run(f func()) {
	if d.capturing {
		d.rec = append(d.rec, f)
		return
	}
	launchMu.Lock()
	defer launchMu.Unlock()
	f()
}

// noCapture fails a copy during a capture, as a GPU's synchronizing copy
// would break it.
func (d *Device) noCapture(what string) error {
	if !d.capturing {
		return nil
	}
	err := fmt.Errorf("hostkern: %s during a graph capture", what)
	if d.recErr == nil {
		d.recErr = err
	}
	return err
}

func (d *Device) BeginCapture() error {
	if d.capturing {
		return fmt.Errorf("hostkern: a capture is already in progress")
	}
	d.capturing, d.rec, d.recErr = true, nil, nil
	return nil
}

func (d *Device) EndCapture() (cuda.Graph, error) {
	if !d.capturing {
		return 0, fmt.Errorf("hostkern: no capture in progress")
	}
	d.capturing = false
	rec, err := d.rec, d.recErr
	d.rec, d.recErr = nil, nil
	if err != nil {
		return 0, err
	}
	d.nextGraph++
	d.graphs[d.nextGraph] = rec
	return d.nextGraph, nil
}

func (d *Device) Replay(g cuda.Graph) error {
	rec, ok := d.graphs[g]
	if !ok {
		return fmt.Errorf("hostkern: no graph %d", g)
	}
	if err := d.noCapture("a replay"); err != nil {
		return err
	}
	launchMu.Lock()
	defer launchMu.Unlock()
	for _, f := range rec {
		f()
	}
	return nil
}

func (d *Device) DropGraph(g cuda.Graph) { delete(d.graphs, g) }

func (d *Device) Conv(a cuda.ConvArgs, p cuda.Precision) error {
	if p.Cudnn() {
		return fmt.Errorf("hostkern: Conv runs canopy's kernels (exact, kernel-tf32), not %s (cuDNN)", p)
	}
	tf := p == cuda.KernelTF32
	g := kernels.Conv(a.M, a.N*a.OH*a.OW, tf)
	x, w, b, res, y := d.fp(a.X), d.fp(a.W), d.fp(a.B), d.fp(a.Res), d.fp(a.Y)
	d.run(func() {
		C.hk_conv(cbool(tf), C.int(g.GridX), C.int(g.GridY), C.int(g.Block), x, w, b, res, y,
			C.int(a.N), C.int(a.C), C.int(a.H), C.int(a.Wd), C.int(a.M), C.int(a.KH), C.int(a.KW),
			C.int(a.S), C.int(a.P), C.int(a.OH), C.int(a.OW), cbool(a.Relu))
	})
	return nil
}

func (d *Device) MaxPool3s2(x, y cuda.Ptr, n, c, h, w, oh, ow int) error {
	g := kernels.Elem(n * c * oh * ow)
	px, py := d.fp(x), d.fp(y)
	d.run(func() {
		C.hk_maxpool3s2(C.int(g.GridX), C.int(g.Block), px, py, C.int(n), C.int(c), C.int(h), C.int(w), C.int(oh), C.int(ow))
	})
	return nil
}

func (d *Device) UpsampleAdd(lat, top cuda.Ptr, n, c, h, w, th, tw int) error {
	g := kernels.Elem(n * c * h * w)
	pl, pt := d.fp(lat), d.fp(top)
	d.run(func() {
		C.hk_upsample_add(C.int(g.GridX), C.int(g.Block), pl, pt, C.int(n), C.int(c), C.int(h), C.int(w), C.int(th), C.int(tw))
	})
	return nil
}

func (d *Device) ReluCopy(x, y cuda.Ptr, n int) error {
	g := kernels.Elem(n)
	px, py := d.fp(x), d.fp(y)
	d.run(func() { C.hk_relu_copy(C.int(g.GridX), C.int(g.Block), px, py, C.longlong(n)) })
	return nil
}

func (d *Device) UploadBytes(dst cuda.Ptr, src []byte) error {
	if err := d.noCapture("an upload"); err != nil {
		return err
	}
	p, err := d.check(dst, (len(src)+3)/4)
	if err != nil {
		return err
	}
	if len(src) > 0 {
		C.memcpy(p, unsafe.Pointer(&src[0]), C.size_t(len(src)))
	}
	return nil
}

// Launch runs kernel name on the CPU (launch.cc's table), after checking
// that every Ptr argument is 0 or an allocation of this device.
func (d *Device) Launch(name string, g kernels.Dim, args ...any) error {
	slots, err := cuda.Slots(name, args)
	if err != nil {
		return err
	}
	for i, a := range args {
		if p, ok := a.(cuda.Ptr); ok && p != 0 {
			if _, ok := d.mem[p]; !ok {
				return fmt.Errorf("hostkern: %s: argument %d (%#x) is not an allocation", name, i, uintptr(p))
			}
		}
	}
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	cs := make([]C.ulonglong, len(slots)+1)
	for i, v := range slots {
		cs[i] = C.ulonglong(v)
	}
	if rc := C.hk_check(cname, C.int(len(slots))); rc != 0 {
		if rc == -1 {
			return fmt.Errorf("hostkern: no kernel %s", name)
		}
		return fmt.Errorf("hostkern: %s: %d arguments, not the kernel's count", name, len(slots))
	}
	d.run(func() {
		n := C.CString(name)
		C.hk_launch(n, C.int(g.GridX), C.int(g.GridY), C.int(g.Block), &cs[0], C.int(len(slots)))
		C.free(unsafe.Pointer(n))
	})
	return nil
}

// NHWC runs one of the cuDNN path's data-movement kernels (nhwc.cc).
func (d *Device) NHWC(a cuda.NHWCArgs) error {
	x, y := unsafe.Pointer(d.fp(a.X)), unsafe.Pointer(d.fp(a.Y))
	if x == nil || y == nil {
		return fmt.Errorf("hostkern: NHWC op %d on an address that is not an allocation", a.Op)
	}
	launchMu.Lock()
	defer launchMu.Unlock()
	C.hk_nhwc(C.int(a.Op), x, y, C.int(a.N), C.int(a.C), C.int(a.H), C.int(a.W), C.int(a.OH), C.int(a.OW), cbool(a.BF16))
	return nil
}

// WithStream runs f with stream 0 (the shim has none; a library called
// there, the fake cuDNN, computes on the host at once).
func (d *Device) WithStream(f func(stream uintptr) error) error {
	launchMu.Lock()
	defer launchMu.Unlock()
	return f(0)
}

func (d *Device) Sync() error { return nil }

func (d *Device) Info() cuda.Info { return d.info }

func (d *Device) Close() error {
	for p := range d.mem {
		d.Free(p)
	}
	return nil
}
