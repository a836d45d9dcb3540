// Package gputest gives the GPU engine's tests their device and cuDNN:
// the host shim (infer/cuda/hostkern) and the fake libcudnn.so.9 in the
// default build; with -tags cuda the GPU (device 0) and the real cuDNN
// that CANOPY_CUDNN names (tools/gpu/check.sh), so the same tests check
// the real kernels.
package gputest

import (
	"os"
	"sync"
	"testing"

	"github.com/canopy-hpc/canopy/infer/cuda"
	"github.com/canopy-hpc/canopy/infer/cuda/cudnn"
	"github.com/canopy-hpc/canopy/infer/cuda/cudnn/fake"
	"github.com/canopy-hpc/canopy/infer/cuda/hostkern"
)

var lib struct {
	once sync.Once
	lib  *cudnn.Lib
	err  error
}

// CUDNN is the cuDNN library of the tests on dev: the fake (built once per
// test binary) on the host shim, CANOPY_CUDNN on a GPU; on a GPU without
// CANOPY_CUDNN the test is skipped (the fake computes on host memory).
// The fake's build folder is removed once the library is loaded (the
// loader keeps its mapping), so no test binary leaves it behind.
func CUDNN(t testing.TB, dev cuda.Device) *cudnn.Lib {
	t.Helper()
	_, shim := dev.(*hostkern.Device)
	if !shim && os.Getenv("CANOPY_CUDNN") == "" {
		t.Skip("on a GPU these tests need the real cuDNN: set CANOPY_CUDNN (the fake computes on host memory)")
	}
	lib.once.Do(func() {
		path := os.Getenv("CANOPY_CUDNN")
		if shim {
			dir, err := os.MkdirTemp("", "fakecudnn")
			if err != nil {
				lib.err = err
				return
			}
			defer os.RemoveAll(dir)
			if path, err = fake.Build(dir); err != nil {
				lib.err = err
				return
			}
		}
		lib.lib, lib.err = cudnn.Find(cudnn.Search{Flag: path})
	})
	if lib.err != nil {
		t.Fatal(lib.err)
	}
	return lib.lib
}
