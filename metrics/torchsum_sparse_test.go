package metrics

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestTorchSum32SparseEqualsDense: the sum with the zeros left implicit
// equals torchSum32 over the materialised vector bit for bit, at lengths
// crossing every cascade level (a row of the cascade is 4 vectors of 8
// lanes; step 16 rows: flushes at 512, 8,192 and 131,072 elements) and
// densities from one term to all.
func TestTorchSum32SparseEqualsDense(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 9))
	lengths := []int{0, 1, 7, 8, 63, 64, 65, 100, 511, 512, 513, 4000, 8191, 8192, 8193, 20000, 131071, 131072, 131073, 300000, 600000}
	for _, n := range lengths {
		for _, density := range []float64{0, 1e-5, 1e-3, 0.05, 0.5, 1} {
			x := make([]float32, n)
			var terms []sparseTerm
			for p := range x {
				if rng.Float64() < density {
					x[p] = float32(rng.Float64())
					if rng.IntN(4) == 0 {
						x[p] = float32(rng.IntN(3)) / 7 // ties and explicit zeros
					}
					if x[p] != 0 {
						terms = append(terms, sparseTerm{int64(p), x[p]})
					}
				}
			}
			want := torchSum32(x)
			got := torchSum32Sparse(int64(n), terms)
			if math.Float32bits(got) != math.Float32bits(want) {
				t.Fatalf("n %d density %v: sparse %v, dense %v", n, density, got, want)
			}
		}
	}
}
