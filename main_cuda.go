//go:build cuda

package main

// The cuda build's engine (canopy-cuda-engine; the front, canopy-cuda,
// starts it on a node with a GPU) checks for a usable GPU before anything
// else runs (exit 5).
import _ "github.com/canopy-hpc/canopy/infer/cuda/gpucheck"
