package gemm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
)

func fill(r *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = r.Float32()*2 - 1
	}
	return v
}

// The compiled-in backend against the naive loop, on shapes with edges that
// are not multiples of any kernel tile, and on strided sub-matrices (the
// convolution writes column blocks of a wider output).
func TestAgainstNaive(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, s := range [][3]int{{1, 1, 1}, {3, 5, 7}, {64, 100, 147}, {17, 33, 2304}, {256, 513, 64}} {
		m, n, k := s[0], s[1], s[2]
		lda, ldb, ldc := k+3, n+5, n+7
		a, b := fill(r, m*lda), fill(r, k*ldb)
		got, want := make([]float32, m*ldc), make([]float32, m*ldc)
		Mul(m, n, k, a, lda, b, ldb, got, ldc)
		Naive(m, n, k, a, lda, b, ldb, want, ldc)
		for i := 0; i < m; i++ {
			for j := 0; j < n; j++ {
				g, w := got[i*ldc+j], want[i*ldc+j]
				// float32 sums of k products of |x|<1: error bound ~ k·eps·sum|terms|.
				if d := math.Abs(float64(g - w)); d > float64(k)*1.2e-7*float64(k)/4+1e-6 {
					t.Fatalf("%s %v: C[%d,%d] = %v, naive %v", Backend(), s, i, j, g, w)
				}
			}
			for j := n; j < ldc; j++ {
				if got[i*ldc+j] != 0 {
					t.Fatalf("%s wrote outside the %d columns", Backend(), n)
				}
			}
		}
	}
}

// Concurrent calls on separate outputs give the same bytes as serial calls:
// the backend is safe and its result does not depend on what else runs.
func TestConcurrentDeterministic(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	m, n, k := 64, 300, 576
	a, b := fill(r, m*k), fill(r, k*n)
	ref := make([]float32, m*n)
	Mul(m, n, k, a, k, b, n, ref, n)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := make([]float32, m*n)
			for it := 0; it < 20; it++ {
				Mul(m, n, k, a, k, b, n, c, n)
				for i := range c {
					if c[i] != ref[i] {
						errs <- fmt.Errorf("element %d differs under concurrency", i)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func BenchmarkSgemm(b *testing.B) {
	for _, s := range [][3]int{{256, 2304, 10000}, {1024, 1024, 1024}} {
		m, k, n := s[0], s[1], s[2]
		b.Run(fmt.Sprintf("%s/%dx%dx%d", Backend(), m, k, n), func(b *testing.B) {
			r := rand.New(rand.NewPCG(5, 6))
			x, y, c := fill(r, m*k), fill(r, k*n), make([]float32, m*n)
			b.SetBytes(0)
			for b.Loop() {
				Mul(m, n, k, x, k, y, n, c, n)
			}
			b.ReportMetric(2*float64(m)*float64(n)*float64(k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}
