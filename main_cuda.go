//go:build cuda

package main

// The cuda build checks for a usable GPU before anything else runs (exit 5).
import _ "github.com/canopy-hpc/canopy/infer/cuda/gpucheck"
