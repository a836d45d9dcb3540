//go:build cudafront && !cuda

package main

import "github.com/canopy-hpc/canopy/infer/cuda/gpucheck"

// The cuda build's front (canopy-cuda): with a usable GPU it becomes the
// engine (canopy-cuda-engine) before MPI starts; without one it runs on the
// CPU (infer/cuda/gpucheck).
func init() { gpucheck.Front() }
