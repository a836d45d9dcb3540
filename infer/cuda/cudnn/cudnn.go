// Package cudnn is canopy's own binding of cuDNN 9's graph (backend) API:
// a small C shim (shim.c) that dlopens libcudnn.so.9 and dlsyms the 15
// functions of that API, so nothing links cuDNN at build time and the cuda
// binary still starts with only libcuda.so.1. On top of it: finding the
// library (Find), fused convolution graphs in NHWC with their engines
// pinned (graph.go), the engine filter that keeps determinism (no
// NONDETERMINISTIC engine, no split reduction), and the plan file of
// canopy gpu-plan (planfile.go).
//
// Machines without a GPU load a fake libcudnn.so.9 (infer/cuda/cudnn/fake)
// through the same path; it computes over host memory, so the host shim
// (infer/cuda/hostkern) can run the GPU engine with cuDNN in CI.
package cudnn

/*
#cgo LDFLAGS: -ldl
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"unsafe"
)

// Lib is a loaded cuDNN 9 library. It is safe for concurrent use (cuDNN's
// functions are; canopy calls them from each device's thread).
type Lib struct {
	c *C.cdn_lib
	// Path is the file the loader opened; Where says how it was found
	// ("--cudnn", "CANOPY_CUDNN", "system loader path", "VIRTUAL_ENV", …).
	Path, Where string
	// Version is cudnnGetVersion(): major·10000 + minor·100 + patch.
	Version int
}

// VersionString is "9.19.0" for 91900.
func (l *Lib) VersionString() string {
	return fmt.Sprintf("%d.%d.%d", l.Version/10000, l.Version/100%100, l.Version%100)
}

// Tried is one place Find looked, and why it was not used.
type Tried struct{ Where, Path, Why string }

// NotFoundError says that no usable cuDNN 9 was found, naming every place
// searched.
type NotFoundError struct{ Tried []Tried }

func (e *NotFoundError) Error() string {
	var b strings.Builder
	b.WriteString("cudnn: no usable cuDNN 9 (libcudnn.so.9) found; searched:")
	for _, t := range e.Tried {
		fmt.Fprintf(&b, "\n  %s: %s: %s", t.Where, t.Path, t.Why)
	}
	b.WriteString("\n(pass --cudnn PATH, the library or its folder, e.g. a PyTorch environment's site-packages/nvidia/cudnn/lib; or set CANOPY_CUDNN)")
	return b.String()
}

// ErrNotFound is what a NotFoundError wraps (errors.Is).
var ErrNotFound = errors.New("cudnn: no usable cuDNN 9")

func (e *NotFoundError) Unwrap() error { return ErrNotFound }

// Soname is the library Find looks for.
const Soname = "libcudnn.so.9"

// Open loads the library at path (a file, a folder holding libcudnn.so.9,
// or a bare soname for the system loader path) and checks that it is
// cuDNN 9.x.
func Open(path, where string) (*Lib, error) {
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		path = filepath.Join(path, Soname)
	}
	// A path (not a bare soname for the loader) must be a regular file:
	// dlopen of a FIFO blocks in open() forever, and a device is no
	// library.
	if strings.Contains(path, "/") {
		if st, err := os.Stat(path); err == nil && !st.Mode().IsRegular() {
			return nil, fmt.Errorf("not a regular file (%s)", st.Mode().Type())
		}
	}
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var buf [1024]C.char
	c := C.cdn_open(cpath, &buf[0], C.size_t(len(buf)))
	if c == nil {
		return nil, errors.New(C.GoString(&buf[0]))
	}
	v := int(C.cdn_version(c))
	if v/10000 != 9 {
		C.cdn_close(c)
		return nil, fmt.Errorf("cudnnGetVersion() is %d: not cuDNN 9.x", v)
	}
	C.cdn_origin(c, &buf[0], C.size_t(len(buf)))
	l := &Lib{c: c, Path: C.GoString(&buf[0]), Where: where, Version: v}
	if l.Path == "" {
		l.Path = path
	}
	return l, nil
}

// Search is where Find looks: the --cudnn flag's value and the
// environment (Getenv; nil means os.Getenv), and the user's home for the
// user site-packages ("" means os.UserHomeDir).
type Search struct {
	Flag   string
	Getenv func(string) string
	Home   string
}

// Place is one candidate location.
type Place struct{ Where, Path string }

// Places lists the candidates in search order: --cudnn (or, without it,
// CANOPY_CUDNN) alone when given; else the system loader path (bare
// soname: LD_LIBRARY_PATH, ld.so.cache), then nvidia/cudnn/lib (and the
// CUDA-13 wheels' nvidia/cu*/lib) under the site-packages of VIRTUAL_ENV,
// CONDA_PREFIX and the user's site, then CUDA_HOME's lib64 and lib.
func (s Search) Places() []Place {
	env := s.Getenv
	if env == nil {
		env = os.Getenv
	}
	if s.Flag != "" {
		return []Place{{"--cudnn", s.Flag}}
	}
	if p := env("CANOPY_CUDNN"); p != "" {
		return []Place{{"CANOPY_CUDNN", p}}
	}
	out := []Place{{"system loader path", Soname}}
	site := func(where, prefix string) {
		if prefix == "" {
			return
		}
		pats := []string{"lib/python3*/site-packages", "lib64/python3*/site-packages"}
		var dirs []string
		for _, p := range pats {
			m, _ := filepath.Glob(filepath.Join(prefix, p))
			dirs = append(dirs, m...)
		}
		sort.Strings(dirs)
		if len(dirs) == 0 {
			out = append(out, Place{where, filepath.Join(prefix, "lib/python3*/site-packages/nvidia/cudnn/lib", Soname)})
			return
		}
		for _, d := range dirs {
			out = append(out, Place{where, filepath.Join(d, "nvidia/cudnn/lib", Soname)})
			cu, _ := filepath.Glob(filepath.Join(d, "nvidia/cu[0-9]*/lib", Soname))
			sort.Strings(cu)
			for _, p := range cu {
				out = append(out, Place{where, p})
			}
		}
	}
	site("VIRTUAL_ENV", env("VIRTUAL_ENV"))
	site("CONDA_PREFIX", env("CONDA_PREFIX"))
	home := s.Home
	if home == "" {
		home, _ = os.UserHomeDir()
	}
	if home != "" {
		site("user site-packages", filepath.Join(home, ".local"))
	}
	if ch := env("CUDA_HOME"); ch != "" {
		out = append(out, Place{"CUDA_HOME", filepath.Join(ch, "lib64", Soname)}, Place{"CUDA_HOME", filepath.Join(ch, "lib", Soname)})
	} else {
		out = append(out, Place{"CUDA_HOME", "(unset)"})
	}
	return out
}

// Find loads the first usable cuDNN 9 of s.Places(). When none is, the
// error is a *NotFoundError naming every place and why it failed.
func Find(s Search) (*Lib, error) {
	nf := &NotFoundError{}
	for _, p := range s.Places() {
		if p.Path == "(unset)" {
			nf.Tried = append(nf.Tried, Tried{p.Where, p.Path, "not set"})
			continue
		}
		if strings.Contains(p.Path, "/") {
			if _, err := os.Stat(p.Path); err != nil {
				nf.Tried = append(nf.Tried, Tried{p.Where, p.Path, "no such file"})
				continue
			}
		}
		l, err := Open(p.Path, p.Where)
		if err != nil {
			nf.Tried = append(nf.Tried, Tried{p.Where, p.Path, err.Error()})
			continue
		}
		return l, nil
	}
	return nil, nf
}

// Close unloads the library (after every handle is destroyed).
func (l *Lib) Close() {
	if l != nil && l.c != nil {
		C.cdn_close(l.c)
		l.c = nil
	}
}

// Error is a cuDNN call that failed.
type Error struct {
	Call   string
	Status int
	Msg    string
}

func (e *Error) Error() string {
	return fmt.Sprintf("cudnn: %s: status %d (%s)", e.Call, e.Status, e.Msg)
}

func (l *Lib) check(call string, s C.cdn_status) error {
	if s == statusSuccess {
		return nil
	}
	var buf [1024]C.char
	C.cdn_error(l.c, s, &buf[0], C.size_t(len(buf)))
	return &Error{Call: call, Status: int(s), Msg: C.GoString(&buf[0])}
}

// Handle is a cuDNN handle bound to one stream (one per device stream).
type Handle struct {
	l *Lib
	h C.cdn_handle
}

// NewHandle makes a handle on the calling thread's current context (the
// device's primary context: cuDNN works through the CUDA runtime) and
// binds it to stream (a CUstream; 0 is the default stream, and on the
// host shim there is none).
func (l *Lib) NewHandle(stream uintptr) (*Handle, error) {
	var h C.cdn_handle
	if err := l.check("cudnnCreate", C.cdn_create(l.c, &h)); err != nil {
		return nil, err
	}
	if err := l.check("cudnnSetStream", C.cdn_set_stream(l.c, h, C.uintptr_t(stream))); err != nil {
		C.cdn_destroy(l.c, h)
		return nil, err
	}
	return &Handle{l: l, h: h}, nil
}

// Close destroys the handle.
func (h *Handle) Close() error {
	if h == nil || h.h == nil {
		return nil
	}
	err := h.l.check("cudnnDestroy", C.cdn_destroy(h.l.c, h.h))
	h.h = nil
	return err
}
