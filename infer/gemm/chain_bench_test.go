package gemm

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// threadCPU is the calling thread's CPU time: what the benchmark's own
// thread spent, whatever else the machine runs.
func threadCPU() time.Duration {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts)
	return time.Duration(ts.Nano())
}

// BenchmarkChain times Chain against the compiled-in SGEMM (OpenBLAS) on
// the crop classifier's shapes (m out-channels, n = 16 crops' columns, k
// in-channels: layer4's 1×1 and its 3×3/2 im2col, layer1's), in GFLOP/s of
// the thread's CPU time (locked to one thread), steady on a shared machine.
// CANOPY_SIMD=avx2 OPENBLAS_CORETYPE=Haswell times the AVX2 clones.
func BenchmarkChain(b *testing.B) {
	runtime.LockOSThread()
	r := rand.New(rand.NewPCG(1, 2))
	for _, s := range [][3]int{{512, 784, 512}, {64, 4096, 64}, {256, 3136, 64}, {2048, 784, 512}, {512, 784, 4608}} {
		m, n, k := s[0], s[1], s[2]
		a, bb, c := fill(r, m*k), fill(r, k*n), make([]float32, m*n)
		for _, f := range []struct {
			name string
			fn   func()
		}{{"chain", func() { Chain(m, n, k, a, k, bb, n, c, n, Epi{}) }}, {"blas", func() { Mul(m, n, k, a, k, bb, n, c, n) }}} {
			b.Run(fmt.Sprintf("%s-%v", f.name, s), func(b *testing.B) {
				t0 := threadCPU()
				for i := 0; i < b.N; i++ {
					f.fn()
				}
				b.ReportMetric(float64(2*m*n*k)*float64(b.N)/(threadCPU()-t0).Seconds()/1e9, "cpuGFLOP/s")
			})
		}
	}
}

// BenchmarkChainStride times Chain with B's rows ldb apart: the crop
// classifier's 1×1 convolutions over 56×56 maps of 16 crops read B with
// ldb = 50,176 floats (49·4 KiB, every row in one cache set; Chain packs
// its panels), against a contiguous B and one 24 floats wider (read in
// place), which it now runs alike. In GFLOP/s of the thread's CPU time; CANOPY_SIMD=avx2 times the
// AVX2 clone.
func BenchmarkChainStride(b *testing.B) {
	runtime.LockOSThread()
	r := rand.New(rand.NewPCG(3, 4))
	for _, s := range [][4]int{{256, 384, 64, 50176}, {256, 384, 64, 50200}, {256, 384, 64, 384}, {64, 384, 256, 50176}, {64, 384, 256, 384}} {
		m, n, k, ldb := s[0], s[1], s[2], s[3]
		a, bb, c := fill(r, m*k), fill(r, k*ldb), make([]float32, m*n)
		b.Run(fmt.Sprintf("m%d-n%d-k%d-ldb%d", m, n, k, ldb), func(b *testing.B) {
			t0 := threadCPU()
			for i := 0; i < b.N; i++ {
				Chain(m, n, k, a, k, bb, ldb, c, n, Epi{})
			}
			b.ReportMetric(float64(2*m*n*k)*float64(b.N)/(threadCPU()-t0).Seconds()/1e9, "cpuGFLOP/s")
		})
	}
}
