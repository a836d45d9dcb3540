//go:build !cuda

package cuda

// HaveCUDA reports whether this build has the cuda backend.
const HaveCUDA = false

// Count is the number of visible CUDA devices: none in this build.
func Count() (int, error) { return 0, nil }

// Open returns ErrNoCUDA in this build.
func Open(index int) (Device, error) { return nil, ErrNoCUDA }
