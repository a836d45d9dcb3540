//go:build !noblas

package gemm

/*
#cgo CFLAGS: -I/usr/include/x86_64-linux-gnu/openblas-pthread -O3
#cgo pkg-config: openblas
#cgo LDFLAGS: -lm
#include <cblas.h>
#include "wino.h"
void openblas_set_num_threads(int);
char* openblas_get_corename(void);
static void canopy_blas_init(void) { openblas_set_num_threads(1); }
static void canopy_sgemm(int m, int n, int k, const float *a, int lda, const float *b, int ldb, float *c, int ldc) {
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, ldc);
}
*/
import "C"

import (
	"os"
	"strings"
	"syscall"
	"unsafe"
)

const backend = "openblas"

// Core is the kernel set OpenBLAS chose (openblas_get_corename).
func Core() string { return C.GoString(C.openblas_get_corename()) }

func init() {
	C.canopy_blas_init()
	fixCore()
}

// fixCore works around OpenBLAS's CPU detection on CPUs newer than the
// library (Debian's 0.3.21 calls a Sapphire Rapids VM "Prescott" and runs its
// SSE3 kernels, 4–5× slower): when the chosen kernels lack AVX2 but the CPU
// has it, canopy sets OPENBLAS_CORETYPE to the newest kernel set the CPU can
// run and re-executes itself once (OpenBLAS reads the variable when it is
// loaded, before any Go code runs). OPENBLAS_CORETYPE set by the user is
// left alone.
func fixCore() {
	if _, set := os.LookupEnv("OPENBLAS_CORETYPE"); set {
		return
	}
	switch strings.ToLower(Core()) {
	case "prescott", "core2", "penryn", "dunnington", "nehalem", "atom", "katmai", "coppermine", "northwood", "banias", "sandybridge":
	default:
		return
	}
	want := coreFor(cpuFlags())
	if want == "" {
		return
	}
	exe, err := os.Executable()
	if err != nil {
		return
	}
	os.Setenv("OPENBLAS_CORETYPE", want)
	os.Setenv(reexecEnv, want)
	syscall.Exec(exe, os.Args, os.Environ()) // returns only on failure: keep going as we are
	os.Unsetenv("OPENBLAS_CORETYPE")
	os.Unsetenv(reexecEnv)
}

// cpuFlags reads the first "flags" line of /proc/cpuinfo.
func cpuFlags() map[string]bool {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return nil
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "flags" {
			m := map[string]bool{}
			for _, f := range strings.Fields(v) {
				m[f] = true
			}
			return m
		}
	}
	return nil
}

// coreFor names the OpenBLAS kernel set for a CPU's flags ("" when there is
// nothing better than what OpenBLAS chose).
func coreFor(f map[string]bool) string {
	switch {
	case f["avx512f"] && f["avx512bw"] && f["avx512vl"] && f["avx512dq"]:
		return "SkylakeX"
	case f["avx2"] && f["fma"]:
		return "Haswell"
	}
	return ""
}

func mul(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	if m == 0 || n == 0 {
		return
	}
	if k == 0 {
		for i := 0; i < m; i++ {
			clear(c[i*ldc : i*ldc+n])
		}
		return
	}
	C.canopy_sgemm(C.int(m), C.int(n), C.int(k),
		fptr(a), C.int(lda), fptr(b), C.int(ldb), fptr(c), C.int(ldc))
}

func detectSIMD() SIMD { return SIMD(C.canopy_simd_detect()) }

func winoIn(x []float32, c, h, w, tw, t0, nb int, v []float32, vs int) {
	if c == 0 || nb == 0 {
		return
	}
	C.canopy_wino_in(C.int(simd), fptr(x), C.int(c), C.int(h), C.int(w), C.int(tw), C.int(t0), C.int(nb), fptr(v), C.long(vs))
}

func winoOut(m []float32, ms, nb, o, tw, t0, h, w int, bias, res []float32, relu bool, y []float32) {
	if o == 0 || nb == 0 {
		return
	}
	C.canopy_wino_out(C.int(simd), fptr(m), C.long(ms), C.int(nb), C.int(o), C.int(tw), C.int(t0), C.int(h), C.int(w),
		fptr(bias), fptr(res), cbool(relu), fptr(y))
}

func wino4In(x []float32, c, cs, h, w, tw, t0, nb int, v []float32, vs, ldv int) {
	if c == 0 || nb == 0 {
		return
	}
	C.canopy_wino4_in(C.int(simd), fptr(x), C.int(c), C.long(cs), C.int(h), C.int(w), C.int(tw), C.int(t0), C.int(nb), fptr(v), C.long(vs), C.long(ldv))
}

func wino4Out(m []float32, ms, ldm, nb, o, tw, t0, h, w, cs int, bias, res []float32, relu bool, y []float32) {
	if o == 0 || nb == 0 {
		return
	}
	C.canopy_wino4_out(C.int(simd), fptr(m), C.long(ms), C.long(ldm), C.int(nb), C.int(o), C.int(tw), C.int(t0), C.int(h), C.int(w), C.long(cs),
		fptr(bias), fptr(res), cbool(relu), fptr(y))
}

func epilogue(y []float32, ldy, rows, cols int, bias, res []float32, ldr int, relu bool) {
	C.canopy_epilogue(C.int(simd), fptr(y), C.long(ldy), C.int(rows), C.int(cols), fptr(bias), fptr(res), C.long(ldr), cbool(relu))
}

func maxpool(src []float32, h, w int, tmp, dst []float32) {
	C.canopy_maxpool(C.int(simd), fptr(src), C.int(h), C.int(w), fptr(tmp), fptr(dst))
}

func im2col(x []float32, cin, cs, h, w, kh, kw, stride, pad, ow, j0, nb int, col []float32, ldc int) {
	C.canopy_im2col(C.int(simd), fptr(x), C.int(cin), C.long(cs), C.int(h), C.int(w), C.int(kh), C.int(kw),
		C.int(stride), C.int(pad), C.int(ow), C.int(j0), C.int(nb), fptr(col), C.long(ldc))
}

// fptr is the C pointer to a slice's first element, nil for an empty slice.
func fptr(s []float32) *C.float {
	if len(s) == 0 {
		return nil
	}
	return (*C.float)(unsafe.Pointer(&s[0]))
}

func cbool(b bool) C.int {
	if b {
		return 1
	}
	return 0
}

func resizeFMA(r0, r1 []float32, i0, i1 []int32, l0, l1 []float32, h0, h1 float32, out []float32) bool {
	C.canopy_resize_fma(C.int(simd), fptr(r0), fptr(r1), (*C.int)(unsafe.Pointer(&i0[0])), (*C.int)(unsafe.Pointer(&i1[0])),
		fptr(l0), fptr(l1), C.float(h0), C.float(h1), C.int(len(out)), fptr(out))
	return true
}

func chain(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int, ep Epi) {
	C.canopy_chain(C.int(simd), C.int(m), C.int(n), C.int(k), fptr(a), C.long(lda), fptr(b), C.long(ldb), fptr(c), C.long(ldc),
		fptr(ep.Bias), fptr(ep.Res), C.long(ep.LdRes), cbool(ep.ReLU))
}

func geluRow(x []float32) { C.canopy_gelu_row(C.int(simd), fptr(x), C.int(len(x))) }

func softmaxRow(x []float32) { C.canopy_softmax_row(C.int(simd), fptr(x), C.int(len(x))) }

func dwconvGELURow(x []float32, h, wd, c int, w, b []float32, y int, out []float32) {
	C.canopy_dwconv_gelu_row(C.int(simd), fptr(x), C.int(h), C.int(wd), C.int(c), fptr(w), fptr(b), C.int(y), fptr(out))
}

func wino4InL(x []float32, c, h, w, n, j0, nb int, v []float32, vs, ldv int) {
	C.canopy_wino4_in_l(C.int(simd), fptr(x), C.int(c), C.int(h), C.int(w), C.int(n), C.int(j0), C.int(nb), fptr(v), C.long(vs), C.long(ldv))
}

func wino4OutL(m []float32, ms, ldm, j0, nb, o, h, w, n int, bias, res []float32, relu bool, y []float32) {
	C.canopy_wino4_out_l(C.int(simd), fptr(m), C.long(ms), C.long(ldm), C.int(j0), C.int(nb), C.int(o), C.int(h), C.int(w), C.int(n),
		fptr(bias), fptr(res), cbool(relu), fptr(y))
}

func im2colL(x []float32, cin, h, w, n, kh, kw, stride, pad, ow, j0, nb int, col []float32, ldc int) {
	C.canopy_im2col_l(C.int(simd), fptr(x), C.int(cin), C.int(h), C.int(w), C.int(n), C.int(kh), C.int(kw),
		C.int(stride), C.int(pad), C.int(ow), C.int(j0), C.int(nb), fptr(col), C.long(ldc))
}

func maxpoolL(src []float32, h, w, n int, tmp, dst []float32) {
	C.canopy_maxpool_l(C.int(simd), fptr(src), C.int(h), C.int(w), C.int(n), fptr(tmp), fptr(dst))
}
