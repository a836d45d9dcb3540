//go:build cuda

// Package gpucheck stops a cuda build of canopy, with a message and exit
// code 5, when this machine has no usable GPU. gorgonia.org/cu's init()
// ends the process (exit 1, one terse line) when cuInit fails, before main
// runs; the check here is a C constructor, which the loader runs before the
// Go runtime starts, so it comes first. Import it for its side effect (the
// cuda build's main does).
//
// A machine without the NVIDIA driver at all cannot start the binary: the
// loader refuses it for want of libcuda.so.1 before any code runs. Use the
// default (CPU) build there.
package gpucheck

/*
#cgo LDFLAGS: -lcuda
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void canopy_gpucheck(void) __attribute__((constructor));

static void canopy_gpucheck(void)
{
	CUresult r = cuInit(0);
	int n = 0;
	if (r == CUDA_SUCCESS)
		r = cuDeviceGetCount(&n);
	if (r == CUDA_SUCCESS && n > 0)
		return;
	const char *name = NULL, *desc = NULL;
	if (cuGetErrorName(r, &name) != CUDA_SUCCESS || !name)
		name = "unknown CUresult";
	if (cuGetErrorString(r, &desc) != CUDA_SUCCESS || !desc)
		desc = "no description";
	const char *vis = getenv("CUDA_VISIBLE_DEVICES");
	int drv = 0;
	cuDriverGetVersion(&drv);
	fprintf(stderr,
		"canopy: this is the cuda build and it finds no usable GPU: cuInit/cuDeviceGetCount: %s (%s), "
		"%d device(s); CUDA driver API %d.%d; CUDA_VISIBLE_DEVICES=%s\n"
		"canopy: run it on a GPU node (srun --gpus-per-task=1, or check nvidia-smi and CUDA_VISIBLE_DEVICES), "
		"or use the default build (make build), which runs on the CPU\n",
		name, r == CUDA_SUCCESS ? "no devices" : desc, n, drv / 1000, (drv % 1000) / 10,
		vis ? (vis[0] ? vis : "(empty: no devices)") : "(unset: all devices)");
	exit(5);
}
*/
import "C"
