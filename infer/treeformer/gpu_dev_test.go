//go:build !cuda

package treeformer

import (
	"testing"

	"github.com/canopy-hpc/canopy/infer/cuda"
	"github.com/canopy-hpc/canopy/infer/cuda/hostkern"
)

// testDevice is the host shim (kernels.cu on the CPU) in the default
// build; with -tags cuda it is GPU 0 (gpu_dev_cuda_test.go), so the same
// tests check the real kernels on a lent GPU (tools/gpu/check.sh).
func testDevice(t testing.TB) cuda.Device {
	d := hostkern.New()
	t.Cleanup(func() { d.Close() })
	return d
}
