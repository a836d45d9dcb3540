//go:build cuda

package gputest

import (
	"testing"

	"github.com/canopy-hpc/canopy/infer/cuda"
)

// Device is the GPU (device 0) in the cuda build, closed when the test
// ends.
func Device(t testing.TB) cuda.Device {
	d, err := cuda.Open(0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}
