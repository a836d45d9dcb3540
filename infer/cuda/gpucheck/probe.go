//go:build cudafront && !cuda

package gpucheck

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

// The driver API's few entry points the probe calls, declared here so the
// front builds without CUDA's headers (CUresult is an int enum).
typedef int (*canopy_cu_init)(unsigned int);
typedef int (*canopy_cu_int)(int *);
typedef int (*canopy_cu_str)(int, const char **);

typedef struct {
	int loaded;       // dlopen succeeded
	char err[512];    // dlerror, or what the library lacks
	int driver;       // cuDriverGetVersion (0: unknown)
	int result;       // cuInit, then cuDeviceGetCount (0: success)
	int count;        // devices
	char name[64];    // cuGetErrorName(result)
	char desc[256];   // cuGetErrorString(result)
} canopy_probe;

static void canopy_copy(char *dst, size_t n, const char *src)
{
	if (!src)
		src = "";
	strncpy(dst, src, n - 1);
	dst[n - 1] = 0;
}

// canopy_probe_run opens lib as the loader finds it (never linked), and
// asks the driver for its devices. The library stays open: the process
// either execs the engine or runs on the CPU.
static void canopy_probe_run(const char *lib, canopy_probe *p)
{
	memset(p, 0, sizeof *p);
	void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		canopy_copy(p->err, sizeof p->err, dlerror());
		return;
	}
	canopy_cu_init init = (canopy_cu_init)dlsym(h, "cuInit");
	canopy_cu_int count = (canopy_cu_int)dlsym(h, "cuDeviceGetCount");
	canopy_cu_int ver = (canopy_cu_int)dlsym(h, "cuDriverGetVersion");
	canopy_cu_str ename = (canopy_cu_str)dlsym(h, "cuGetErrorName");
	canopy_cu_str estr = (canopy_cu_str)dlsym(h, "cuGetErrorString");
	if (!init || !count) {
		canopy_copy(p->err, sizeof p->err, "it has no cuInit or cuDeviceGetCount: not the NVIDIA driver's library");
		return;
	}
	p->loaded = 1;
	if (ver)
		ver(&p->driver);
	p->result = init(0);
	if (p->result == 0)
		p->result = count(&p->count);
	if (p->result != 0) {
		const char *s = NULL;
		if (ename && ename(p->result, &s) == 0)
			canopy_copy(p->name, sizeof p->name, s);
		s = NULL;
		if (estr && estr(p->result, &s) == 0)
			canopy_copy(p->desc, sizeof p->desc, s);
	}
}
*/
import "C"

import (
	"cmp"
	"fmt"
	"os"
	"sync"
	"unsafe"
)

// DriverLib is the driver library the probe asks the loader for, as the
// engine's link names it.
const DriverLib = "libcuda.so.1"

// Probe is what the front found: whether the NVIDIA driver's library
// loads, and what it says about the devices this process may use.
type Probe struct {
	Loaded  bool   // libcuda.so.1 opened and is the driver's
	LoadErr string // the loader's message when not
	Driver  int    // the driver API version (12020 for 12.2; 0 unknown)
	Result  int    // CUresult of cuInit, then cuDeviceGetCount (0: success)
	ErrName string // e.g. CUDA_ERROR_NO_DEVICE
	ErrDesc string
	Devices int // visible devices (after CUDA_VISIBLE_DEVICES)
}

// Usable says whether this process sees at least one GPU.
func (p Probe) Usable() bool { return p.Loaded && p.Result == 0 && p.Devices > 0 }

// String says what the probe saw, in one line.
func (p Probe) String() string {
	vis, ok := os.LookupEnv("CUDA_VISIBLE_DEVICES")
	switch {
	case !ok:
		vis = "unset"
	case vis == "":
		vis = `"" (no devices)`
	}
	if !p.Loaded {
		return fmt.Sprintf("%s cannot be loaded (no NVIDIA driver on this node?): %s", DriverLib, p.LoadErr)
	}
	drv := "driver API version unknown"
	if p.Driver > 0 {
		drv = fmt.Sprintf("driver API %d.%d", p.Driver/1000, p.Driver%1000/10)
	}
	if p.Result != 0 {
		name, desc := p.ErrName, p.ErrDesc
		if name == "" || desc == "" {
			// a stub cannot name its own errors
			k := known[p.Result]
			name, desc = cmp.Or(name, k[0], fmt.Sprintf("CUresult %d", p.Result)), cmp.Or(desc, k[1], "no description")
		}
		return fmt.Sprintf("%s loads (%s) but cuInit/cuDeviceGetCount says %s (%s); CUDA_VISIBLE_DEVICES=%s", DriverLib, drv, name, desc, vis)
	}
	return fmt.Sprintf("%s loads (%s): %d device(s) visible; CUDA_VISIBLE_DEVICES=%s", DriverLib, drv, p.Devices, vis)
}

// known names the results a node without a usable GPU gives, for a
// library that cannot name them itself (CUDA's stub).
var known = map[int][2]string{
	3:   {"CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
	34:  {"CUDA_ERROR_STUB_LIBRARY", "CUDA's link stub, not the driver's library: no NVIDIA driver is installed here"},
	35:  {"CUDA_ERROR_INSUFFICIENT_DRIVER", "the driver is older than the CUDA version"},
	46:  {"CUDA_ERROR_DEVICES_UNAVAILABLE", "all devices are busy or unavailable"},
	100: {"CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
	101: {"CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
	803: {"CUDA_ERROR_SYSTEM_DRIVER_MISMATCH", "the driver library and the kernel module differ in version"},
	999: {"CUDA_ERROR_UNKNOWN", "unknown error"},
}

var (
	probeOnce sync.Once
	probed    Probe
)

// Run probes once per process (later calls return the first answer).
func Run() Probe {
	probeOnce.Do(func() {
		lib := C.CString(DriverLib)
		defer C.free(unsafe.Pointer(lib))
		var p C.canopy_probe
		C.canopy_probe_run(lib, &p)
		probed = Probe{
			Loaded:  p.loaded != 0,
			LoadErr: C.GoString(&p.err[0]),
			Driver:  int(p.driver),
			Result:  int(p.result),
			ErrName: C.GoString(&p.name[0]),
			ErrDesc: C.GoString(&p.desc[0]),
			Devices: int(p.count),
		}
	})
	return probed
}
