package metrics

// pairwiseSum adds a as numpy's float64 add.reduce does (np.sum / np.mean on
// a contiguous array): the identity 0 plus a pairwise sum with 8-way
// unrolled blocks of at most 128 elements. Matching it bit for bit is what
// lets canopy reproduce np.mean in evaluate_boxes exactly.
func pairwiseSum(a []float64) float64 {
	return 0 + pairwise(a)
}

// pairwise is numpy's pairwise_sum in T's arithmetic (float32 sums keep
// float32 accumulators, as numpy's FLOAT loop does).
func pairwise[T float32 | float64](a []T) T {
	n := len(a)
	switch {
	case n < 8:
		var res T
		for _, x := range a {
			res += x
		}
		return res
	case n <= 128:
		var r [8]T
		copy(r[:], a[:8])
		i := 8
		for ; i < n-n%8; i += 8 {
			for j := 0; j < 8; j++ {
				r[j] += a[i+j]
			}
		}
		res := ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
		for ; i < n; i++ {
			res += a[i]
		}
		return res
	default:
		n2 := n / 2
		n2 -= n2 % 8
		return pairwise(a[:n2]) + pairwise(a[n2:])
	}
}
