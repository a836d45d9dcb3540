//go:build !cuda

package retinanet

import (
	"testing"

	"github.com/canopy-hpc/canopy/infer/cuda"
	"github.com/canopy-hpc/canopy/infer/cuda/hostkern"
)

// newTestDevice is the host shim in the default build; with -tags cuda it
// is the GPU (gpu_dev_cuda_test.go), so the same tests check the real kernels.
func newTestDevice(t testing.TB) cuda.Device { return hostkern.New() }
