//go:build !cuda && !cudafront

package cuda

// HaveCUDA reports whether this build has the cuda backend.
const HaveCUDA = false

// Count is the number of visible CUDA devices: none in this build.
func Count() (int, error) { return 0, nil }

// Open returns ErrNoCUDA in this build.
func Open(index int) (Device, error) { return nil, ErrNoCUDA }

// Build describes this build for doctor and version.
func Build() string { return "CPU only (no cuda tag)" }

// NoGPU says why this process has no GPU, where the build knows more than
// "none visible" (the cuda build's front); "" here.
func NoGPU() string { return "" }
