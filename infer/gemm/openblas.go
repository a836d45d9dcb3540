//go:build !noblas

package gemm

/*
#cgo CFLAGS: -I/usr/include/x86_64-linux-gnu/openblas-pthread
#cgo pkg-config: openblas
#include <cblas.h>
void openblas_set_num_threads(int);
static void canopy_blas_init(void) { openblas_set_num_threads(1); }
static void canopy_sgemm(int m, int n, int k, const float *a, int lda, const float *b, int ldb, float *c, int ldc) {
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, ldc);
}
*/
import "C"

import "unsafe"

const backend = "openblas"

func init() { C.canopy_blas_init() }

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
		(*C.float)(unsafe.Pointer(&a[0])), C.int(lda),
		(*C.float)(unsafe.Pointer(&b[0])), C.int(ldb),
		(*C.float)(unsafe.Pointer(&c[0])), C.int(ldc))
}
