//go:build !cuda

package gputest

import (
	"testing"

	"github.com/canopy-hpc/canopy/infer/cuda"
	"github.com/canopy-hpc/canopy/infer/cuda/hostkern"
)

// Device is the host shim in the default build (device_cuda.go: the GPU).
// It is not closed when the test ends (a test's runner may outlive it);
// its memory is the test binary's.
func Device(t testing.TB) cuda.Device { return hostkern.New() }
