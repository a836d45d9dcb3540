package retinanet

import (
	"testing"

	"github.com/canopy-hpc/canopy/infer/cuda"
	"github.com/canopy-hpc/canopy/infer/cuda/cudnn"
	"github.com/canopy-hpc/canopy/internal/testsupport/gputest"
)

// newTestDevice is the host shim in the default build; with -tags cuda it
// is the GPU, so the same tests check the real kernels (gputest).
func newTestDevice(t testing.TB) cuda.Device { return gputest.Device(t) }

// testCUDNN is the fake cuDNN on the host shim, CANOPY_CUDNN on a GPU.
func testCUDNN(t testing.TB, dev cuda.Device) *cudnn.Lib { return gputest.CUDNN(t, dev) }
