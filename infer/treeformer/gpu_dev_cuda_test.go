//go:build cuda

package treeformer

import (
	"testing"

	"github.com/canopy-hpc/canopy/infer/cuda"
)

// testDevice is GPU 0 in the cuda build (tools/gpu/check.sh runs these
// tests there, cuDNN from CANOPY_CUDNN).
func testDevice(t testing.TB) cuda.Device {
	d, err := cuda.Open(0)
	if err != nil {
		t.Fatalf("GPU 0: %v", err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}
