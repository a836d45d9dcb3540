//go:build cudafront && !cuda

package cuda

import (
	"errors"
	"fmt"

	"github.com/canopy-hpc/canopy/infer/cuda/gpucheck"
)

// HaveCUDA reports whether this build has the cuda backend: the front is
// the cuda build (--device cuda is accepted, and without a GPU refused
// with exit 5, as the engine refuses it), though its GPU work runs in the
// engine it execs on a node with a GPU (gpucheck.Front).
const HaveCUDA = true

// Build describes this build for doctor and version.
func Build() string {
	return "cuda front (its GPU work runs in canopy-cuda" + gpucheck.EngineSuffix + ", which it starts on a node with a GPU)"
}

// NoGPU says what the probe saw: the driver's library absent, its error,
// or GPUs with an engine that could not start.
func NoGPU() string {
	if err := gpucheck.EngineErr(); err != nil {
		return err.Error()
	}
	return gpucheck.Run().String()
}

// Count is the number of devices this process can use: none, since the
// front runs on the CPU. A node with GPUs whose engine could not start is
// an error, so that --device auto does not quietly run on its CPU.
func Count() (int, error) {
	if err := gpucheck.EngineErr(); err != nil {
		return 0, fmt.Errorf("cuda: %w", err)
	}
	return 0, nil
}

// Open fails: the front has no GPU backend.
func Open(index int) (Device, error) {
	return nil, errors.New("cuda: the cuda build's front runs no GPU work (" + NoGPU() + ")")
}
