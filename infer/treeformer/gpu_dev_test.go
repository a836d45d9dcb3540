package treeformer

import (
	"testing"

	"github.com/canopy-hpc/canopy/infer/cuda"
	"github.com/canopy-hpc/canopy/internal/testsupport/gputest"
)

// testDevice is the host shim (kernels.cu on the CPU) in the default
// build; with -tags cuda it is GPU 0, so the same tests check the real
// kernels on a lent GPU (tools/gpu/check.sh, cuDNN from CANOPY_CUDNN).
func testDevice(t testing.TB) cuda.Device { return gputest.Device(t) }
