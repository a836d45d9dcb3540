// Package gpucheck is the cuda build's start, in two parts.
//
// The engine (-tags cuda, canopy-cuda-engine) links gorgonia.org/cu, whose
// init() ends the process (exit 1, one terse line) when cuInit fails, before
// main runs, and whose libcuda.so.1 the loader must find before any code
// runs. Its check (gpucheck.go) is a C constructor, which the loader runs
// before the Go runtime starts: without a usable GPU it says what it found
// and exits 5.
//
// The front (-tags cudafront, canopy-cuda) links no CUDA library: it opens
// libcuda.so.1 at run time (probe.go), and with a usable GPU execs the
// engine beside it before MPI starts (front.go); without one, or without
// the driver at all, it runs as the CPU build does, so --help, version,
// doctor and --device cpu/auto work on any node, and --device cuda exits 5
// saying what the probe saw.
//
// Import it for its side effect (the engine's main does) or call Front
// (the front's main does).
package gpucheck
