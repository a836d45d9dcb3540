package gemm

// Chain computes C = relu?((A·B + bias) + res) with A m×k (rows lda
// apart), B k×n (rows ldb apart) and C m×n (rows ldc apart), row-major, as
// canopy's own kernels (kernels_body.h chain, -tags noblas in Go): each C
// value is one chain of fused multiply-adds over k in order,
// acc = fma(A[i][p], B[p][j], acc) for p = 0..k-1 from acc = +0, each
// rounded once to float32, then + bias[i], + res[i][j], ReLU (NaN kept).
// So a value depends on its row of A and its column of B alone: never on
// n, on its column's place, on the blocking, on the clone (generic, AVX2,
// AVX-512) or on the build; that is what lets infer/cpu's Batch put many
// crops side by side in one matrix and give each the bits it gets alone.
// It must be safe to call from many goroutines at once (on disjoint C).
func Chain(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int, ep Epi) {
	if m == 0 || n == 0 {
		return
	}
	// Bounds, checked before C reads and writes.
	_ = c[(m-1)*ldc+n-1]
	if k > 0 {
		_, _ = a[(m-1)*lda+k-1], b[(k-1)*ldb+n-1]
	}
	if ep.Bias != nil {
		_ = ep.Bias[m-1]
	}
	if ep.Res != nil {
		_ = ep.Res[(m-1)*ep.LdRes+n-1]
	}
	chain(m, n, k, a, lda, b, ldb, c, ldc, ep)
}

// Epi is Chain's epilogue: a bias per row and a residual (each nil for
// none; LdRes is the residual's row stride) and ReLU.
type Epi struct {
	Bias, Res []float32
	LdRes     int
	ReLU      bool
}

// chainGo is Chain in Go (the noblas build's, and the reference the C
// clones are tested against): FMA32 rounds once, as the instruction.
func chainGo(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int, ep Epi) {
	acc := make([]float32, n)
	for i := 0; i < m; i++ {
		clear(acc)
		row := a[i*lda : i*lda+k]
		for p, av := range row {
			bp := b[p*ldb : p*ldb+n]
			for j, bv := range bp {
				acc[j] = FMA32(av, bv, acc[j])
			}
		}
		out := c[i*ldc : i*ldc+n]
		for j, v := range acc {
			if ep.Bias != nil {
				v += ep.Bias[i]
			}
			if ep.Res != nil {
				v += ep.Res[i*ep.LdRes+j]
			}
			if ep.ReLU && v < 0 {
				v = 0
			}
			out[j] = v
		}
	}
}
