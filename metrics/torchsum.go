package metrics

import "math/bits"

// torchLanes is the float32 vector width of torch's CPU kernels on the
// reference machine (AVX2: 8; AVX-512 builds would use 16).
const torchLanes = 8

// torchSum32 adds float32 values in the order torch's CPU sum kernel does
// for a contiguous 1-D float32 tensor of fewer than 32768 elements (one
// thread): cascade_sum in aten/src/ATen/native/cpu/SumKernel.cpp. Inputs of
// at least torchLanes elements are summed as vectors of torchLanes lanes in
// four interleaved partial sums (row_sum with ilp 4) over multi_row_sum's
// four-level cascade; the scalar tail is added first, then the lanes in
// order. Shorter inputs take the same route with scalars. Accumulation is
// float32 throughout (torch's opmath type for float).
func torchSum32(x []float32) float32 {
	if len(x) >= torchLanes {
		n := len(x) / torchLanes
		acc := rowSum(x, torchLanes, n)
		var final float32
		for _, v := range x[n*torchLanes:] {
			final = float32(final + v)
		}
		for _, v := range acc {
			final = float32(final + v)
		}
		return final
	}
	return rowSum(x, 1, len(x))[0]
}

// rowSum sums n elements of lanes floats each (element i is
// x[i*lanes:(i+1)*lanes]) as torch's row_sum does with ilp factor 4.
func rowSum(x []float32, lanes, n int) []float32 {
	const ilp = 4
	nIlp := n / ilp
	part := multiRowSum(x, lanes, ilp, nIlp)
	for i := nIlp * ilp; i < n; i++ {
		addInto(part[0], x[i*lanes:(i+1)*lanes])
	}
	for k := 1; k < ilp; k++ {
		addInto(part[0], part[k])
	}
	return part[0]
}

func addInto(acc, v []float32) {
	for l := range acc {
		acc[l] = float32(acc[l] + v[l])
	}
}

// multiRowSum is torch's multi_row_sum: rows of nrows elements (element
// (i, k) is element i*nrows+k), summed with a cascade of four levels whose
// step is 2^max(4, ceil(log2(size))/4).
func multiRowSum(x []float32, lanes, nrows, size int) [][]float32 {
	const levels = 4
	power := max(4, ceilLog2(size)/levels)
	step := 1 << power
	mask := step - 1
	var acc [levels][][]float32
	for j := range acc {
		acc[j] = make([][]float32, nrows)
		for k := range acc[j] {
			acc[j][k] = make([]float32, lanes)
		}
	}
	elem := func(i, k int) []float32 { o := (i*nrows + k) * lanes; return x[o : o+lanes] }
	i := 0
	for i+step <= size {
		for j := 0; j < step; j, i = j+1, i+1 {
			for k := 0; k < nrows; k++ {
				addInto(acc[0][k], elem(i, k))
			}
		}
		for j := 1; j < levels; j++ {
			for k := 0; k < nrows; k++ {
				addInto(acc[j][k], acc[j-1][k])
				clear(acc[j-1][k])
			}
			if i&(mask<<(j*power)) != 0 {
				break
			}
		}
	}
	for ; i < size; i++ {
		for k := 0; k < nrows; k++ {
			addInto(acc[0][k], elem(i, k))
		}
	}
	for j := 1; j < levels; j++ {
		for k := 0; k < nrows; k++ {
			addInto(acc[0][k], acc[j][k])
		}
	}
	return acc[0]
}

// ceilLog2 is c10::utils::CeilLog2.
func ceilLog2(x int) int {
	if x <= 2 {
		return max(x-1, 0)
	}
	return 64 - bits.LeadingZeros64(uint64(x-1))
}

// sparseTerm is one non-zero value of a long, mostly-zero float32 vector
// and its position.
type sparseTerm struct {
	pos int64
	v   float32
}

// torchSum32Sparse is torchSum32 of the length-n vector that is zero
// except at the given terms (positions strictly increasing, values not
// negative), without materialising the zeros. Adding +0 leaves every
// float32 partial sum unchanged, so only the non-zero terms and the
// cascade's flushes that move a non-zero partial sum matter; between two
// terms at most one flush per cascade level does, and those are replayed
// at their boundaries.
func torchSum32Sparse(n int64, terms []sparseTerm) float32 {
	if n < 64 { // short: materialise
		x := make([]float32, n)
		for _, t := range terms {
			x[t.pos] = t.v
		}
		return torchSum32(x)
	}
	const ilp, levels = 4, 4
	nVec := n / torchLanes
	size := nVec / ilp // multi_row_sum's rows of ilp vectors
	power := max(4, ceilLog2(int(size))/levels)
	step := int64(1) << power
	mask := step - 1
	fullEnd := (size / step) * step // flushes happen at step, 2·step, …, fullEnd
	var acc [levels][ilp][torchLanes]float32
	nonzero := func(l int) bool {
		for k := range acc[l] {
			for _, v := range acc[l][k] {
				if v != 0 {
					return true
				}
			}
		}
		return false
	}
	flush := func(b int64) { // the cascade at boundary b, as multiRowSum does it
		for j := 1; j < levels; j++ {
			for k := range acc[j] {
				for l := range acc[j][k] {
					acc[j][k][l] = float32(acc[j][k][l] + acc[j-1][k][l])
					acc[j-1][k][l] = 0
				}
			}
			if b&(mask<<(j*power)) != 0 {
				break
			}
		}
	}
	done := int64(0) // boundaries <= done are flushed
	// advance replays the flushes at boundaries in (done, to] that move a
	// non-zero partial sum: with level 0 non-zero the next boundary; else
	// with level j non-zero the next multiple of step^(j+1).
	advance := func(to int64) {
		to = min(to, fullEnd)
		for done < to {
			var next int64 = -1
			unit := step
			for l := 0; l < levels-1; l++ {
				if nonzero(l) {
					next = (done/unit + 1) * unit
					break
				}
				unit <<= power
				if unit > fullEnd {
					break
				}
			}
			if next < 0 || next > to {
				done = to
				return
			}
			flush(next)
			done = next
		}
	}
	var part [torchLanes]float32 // rowSum's part[0] after multi_row_sum
	combined := false
	combine := func() {
		advance(fullEnd)
		for j := 1; j < levels; j++ {
			for k := range acc[0] {
				for l := range acc[0][k] {
					acc[0][k][l] = float32(acc[0][k][l] + acc[j][k][l])
				}
			}
		}
		part = acc[0][0]
		combined = true
	}
	var tail []float32
	for _, t := range terms {
		q := t.pos / torchLanes
		switch {
		case q < size*ilp:
			g := q / ilp
			advance(g)
			acc[0][q%ilp][t.pos%torchLanes] = float32(acc[0][q%ilp][t.pos%torchLanes] + t.v)
		case q < nVec:
			if !combined {
				combine()
			}
			part[t.pos%torchLanes] = float32(part[t.pos%torchLanes] + t.v)
		default:
			if !combined {
				combine()
			}
			tail = append(tail, t.v)
		}
	}
	if !combined {
		combine()
	}
	for k := 1; k < ilp; k++ {
		for l := range part {
			part[l] = float32(part[l] + acc[0][k][l])
		}
	}
	var final float32
	for _, v := range tail {
		final = float32(final + v)
	}
	for _, v := range part {
		final = float32(final + v)
	}
	return final
}
