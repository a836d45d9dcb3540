package mpitest

import "time"

// LargeCounts is the > 2 GiB layout of the large test: rank 0 sends
// 2.1 GiB, every other rank 0.1 GiB.
func LargeCounts(size int) []int64 {
	counts := make([]int64, size)
	for x := range counts {
		counts[x] = (1 << 30) / 10
	}
	counts[0] = 21 * (1 << 30) / 10
	return counts
}

// CheckLarge runs one Allgatherv with LargeCounts for one rank and checks
// every byte.
func CheckLarge(r *R) {
	c := r.C
	counts := LargeCounts(c.Size())
	var total int64
	for _, n := range counts {
		total += n
	}
	send := make([]byte, counts[c.Rank()])
	Fill(send, c.Rank(), 9, 0)
	recv := make([]byte, total)
	start := time.Now()
	r.Must(c.Allgatherv(send, counts, recv), "large Allgatherv")
	el := time.Since(start)
	send = nil
	var off int64
	for x, n := range counts {
		if i := CheckPattern(recv[off:off+n], x, 9); i >= 0 {
			r.Errorf("large Allgatherv: rank %d's part (%d bytes) wrong at byte %d", x, n, i)
		}
		off += n
	}
	if c.Rank() == 0 {
		r.Logf("large Allgatherv of %d bytes (rank 0: %d) in %v (%.2f GB/s)", total, counts[0], el, float64(total)/el.Seconds()/1e9)
	}
}
