// Package gemm is canopy's single-precision matrix multiply: Chain (its
// own kernels, chain.go: under every convolution of the CPU engines, the
// RetinaNet and the crop classifier) and Mul, which the default build
// takes from OpenBLAS (cblas_sgemm, single-threaded: canopy parallelises
// above it, in fixed column blocks, so results never depend on the thread
// count; the point model's products) and the `noblas` build from gonum's
// pure Go, with the C kernels' Go twins.
package gemm

// Sgemm computes C = A·B (row-major, no transposes, beta 0):
// A is m×k with row stride lda, B is k×n with stride ldb, C is m×n with
// stride ldc. It must be safe to call from many goroutines at once.
type Sgemm func(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int)

// Backend names the implementation compiled in ("openblas" or "gonum").
func Backend() string { return backend }

// Mul is the compiled-in Sgemm.
var Mul Sgemm = mul

// Naive is the reference triple loop (k innermost, in order), for tests.
func Naive(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var s float32
			for p := 0; p < k; p++ {
				s += a[i*lda+p] * b[p*ldb+j]
			}
			c[i*ldc+j] = s
		}
	}
}

// reexecEnv marks a process that re-executed itself to choose OpenBLAS's
// kernels (openblas.go).
const reexecEnv = "CANOPY_OPENBLAS_CORETYPE_SET"
