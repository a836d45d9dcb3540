//go:build cuda

package retinanet

import (
	"testing"

	"github.com/canopy-hpc/canopy/infer/cuda"
)

// newTestDevice is the GPU (device 0) in the cuda build: built with
// -tags cuda, TestGoldenHostShim checks the real kernels against
// torchvision's fixture (the GPU check runs it: tools/gpu/check.sh).
func newTestDevice(t testing.TB) cuda.Device {
	d, err := cuda.Open(0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}
