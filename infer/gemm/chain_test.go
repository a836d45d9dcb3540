package gemm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// Every clone of Chain gives the Go chain's bits (one FMA rounding per
// step, in k order: the bound is 0 ulp) on shapes with row and column
// edges of every tile width, k of 0, under and over a k block (256), with
// and without bias, residual and ReLU, and with strides wider than the
// matrices; B's panels packed (a row block of more than one row tile and
// B's rows a multiple of 512 floats apart: over CH_MC rows too, with a
// last block of one tile read in place) and read in place; a NaN in A reaches its row's outputs through the ReLU.
func TestChainMatchesGo(t *testing.T) {
	forEachClone(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(21, 22))
		for _, s := range [][3]int{{1, 1, 1}, {8, 48, 16}, {13, 97, 300}, {4, 24, 0}, {9, 17, 5}, {16, 64, 513}, {3, 7, 2}, {33, 130, 64}, {136, 50, 260}, {131, 30, 10}} {
			m, n, k := s[0], s[1], s[2]
			lda, ldb, ldc := k+3, n+5, n+2
			if m > 128 {
				ldb = 1024 // packed by every clone
			}
			a, b := fill(r, m*lda), fill(r, max(k, 1)*ldb)
			if m > 2 && k > 0 {
				a[2*lda] = float32(math.NaN())
			}
			for _, ep := range []Epi{{}, {Bias: fill(r, m)}, {Bias: fill(r, m), Res: fill(r, m*(n+1)), LdRes: n + 1, ReLU: true}, {ReLU: true}} {
				c1, c2 := fill(r, m*ldc), make([]float32, m*ldc)
				copy(c2, c1) // what lies between the rows must be kept too
				Chain(m, n, k, a, lda, b, ldb, c1, ldc, ep)
				chainGo(m, n, k, a, lda, b, ldb, c2, ldc, ep)
				sameBits(t, c1, c2, fmt.Sprintf("%v bias %v res %v relu %v", s, ep.Bias != nil, ep.Res != nil, ep.ReLU))
				if m > 2 && k > 0 && !math.IsNaN(float64(c1[2*ldc])) {
					t.Fatalf("%v: the NaN of row 2 was lost: %v", s, c1[2*ldc])
				}
			}
		}
	})
}

// A column's values do not depend on the columns beside it: C of [B1 | B2]
// is C of B1 beside C of B2, whatever the split (the property the batched
// crop engine rests on).
func TestChainColumnsIndependent(t *testing.T) {
	forEachClone(t, func(t *testing.T) {
		r := rand.New(rand.NewPCG(23, 24))
		m, n, k := 24, 150, 700
		a, b := fill(r, m*k), fill(r, k*n)
		ep := Epi{Bias: fill(r, m), ReLU: true}
		whole := make([]float32, m*n)
		Chain(m, n, k, a, k, b, n, whole, n, ep)
		for _, split := range []int{1, 7, 16, 47, 101} {
			parts := make([]float32, m*n)
			Chain(m, split, k, a, k, b, n, parts, n, ep)
			Chain(m, n-split, k, a, k, b[split:], n, parts[split:], n, ep)
			sameBits(t, parts, whole, fmt.Sprintf("split at %d", split))
		}
	})
}

// Chain is a matrix product: within float32 rounding of the float64 one.
// Each value is a chain of k fused steps, each rounding once (relative
// error u = 2⁻²⁴), so |C − AB| ≤ γ_k·Σ|a||b| with γ_k = k·u/(1−k·u); the
// test takes that bound per value.
func TestChainIsProduct(t *testing.T) {
	r := rand.New(rand.NewPCG(25, 26))
	m, n, k := 11, 53, 300
	a, b := fill(r, m*k), fill(r, k*n)
	c := make([]float32, m*n)
	Chain(m, n, k, a, k, b, n, c, n, Epi{})
	u := math.Ldexp(1, -24)
	gamma := float64(k) * u / (1 - float64(k)*u)
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var s, abs float64
			for p := 0; p < k; p++ {
				s += float64(a[i*k+p]) * float64(b[p*n+j])
				abs += math.Abs(float64(a[i*k+p]) * float64(b[p*n+j]))
			}
			if d := math.Abs(float64(c[i*n+j]) - s); !(d <= gamma*abs) {
				t.Fatalf("C[%d][%d] = %v, float64 %v: off by %g > γ_k·Σ|ab| = %g", i, j, c[i*n+j], s, d, gamma*abs)
			}
		}
	}
}
