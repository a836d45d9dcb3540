//go:build cuda

// The engine's check (doc.go): a C constructor, run by the loader before the
// Go runtime and so before gorgonia.org/cu's init(), exits 5 with what it
// found when this process has no usable GPU.

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
		"or run canopy-cuda (the front), which runs on the CPU without one\n",
		name, r == CUDA_SUCCESS ? "no devices" : desc, n, drv / 1000, (drv % 1000) / 10,
		vis ? (vis[0] ? vis : "(empty: no devices)") : "(unset: all devices)");
	exit(5);
}
*/
import "C"
