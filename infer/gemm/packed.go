package gemm

import "fmt"

// PackRows is the height of a Packed panel.
const PackRows = 8

// Packed is an m×k matrix (a convolution's weights, fixed for the run)
// packed once for MulPacked: panels of PackRows rows, each panel its k
// columns of PackRows values (rows past m are 0).
type Packed struct {
	M, K int
	d    []float32
}

// Pack packs the m×k matrix a (row stride lda).
func Pack(m, k int, a []float32, lda int) Packed {
	if m < 0 || k < 0 || (m > 0 && k > 0 && len(a) < (m-1)*lda+k) {
		panic(fmt.Sprintf("gemm: Pack(%d, %d) of %d values at stride %d", m, k, len(a), lda))
	}
	panels := (m + PackRows - 1) / PackRows
	d := make([]float32, panels*PackRows*k)
	for p := 0; p < panels; p++ {
		for q := 0; q < k; q++ {
			dst := d[(p*k+q)*PackRows:]
			for i := 0; i < PackRows; i++ {
				if r := p*PackRows + i; r < m {
					dst[i] = a[r*lda+q]
				}
			}
		}
	}
	return Packed{M: m, K: k, d: d}
}

// Bytes is the packed matrix's memory.
func (p Packed) Bytes() int64 { return int64(len(p.d)) * 4 }

// MulPacked computes C = A·B (row-major, beta 0) for the packed m×k A, the
// k×n B (row stride ldb) and the m×n C (row stride ldc). Each element of C
// is one chain of fused multiply-adds over k in order on the AVX2 and
// AVX-512 clones (the same bits on both, and for any n or blocking);
// the generic clone and the noblas build multiply and add separately. It is
// safe to call from many goroutines at once.
func MulPacked(a Packed, n int, b []float32, ldb int, c []float32, ldc int) {
	if a.M == 0 || n == 0 {
		return
	}
	if len(b) < (a.K-1)*ldb+n || len(c) < (a.M-1)*ldc+n {
		panic(fmt.Sprintf("gemm: MulPacked %dx%dx%d: B has %d values (stride %d), C %d (stride %d)", a.M, a.K, n, len(b), ldb, len(c), ldc))
	}
	mulPacked(a, n, b, ldb, c, ldc)
}

// mulPackedGo is MulPacked without fused multiply-adds (the noblas build;
// the generic C clone computes the same way).
func mulPackedGo(a Packed, n int, b []float32, ldb int, c []float32, ldc int) {
	for i := 0; i < a.M; i++ {
		p, r := i/PackRows, i%PackRows
		row := c[i*ldc : i*ldc+n]
		clear(row)
		for q := 0; q < a.K; q++ {
			ai := a.d[(p*a.K+q)*PackRows+r]
			bq := b[q*ldb : q*ldb+n]
			for j, bv := range bq {
				t := ai * bv
				row[j] = row[j] + float32(t)
			}
		}
	}
}
