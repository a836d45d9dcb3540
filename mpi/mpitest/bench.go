package mpitest

import (
	"errors"
	"flag"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/canopy-hpc/canopy/mpi"
)

// BenchSizes are the Allgatherv totals of BenchAllgatherv: 1 MiB, 64 MiB
// and 512 MiB.
var BenchSizes = []int64{1 << 20, 64 << 20, 512 << 20}

// BenchCounts splits total bytes over size ranks, unevenly (rank r gets a
// share proportional to r+1).
func BenchCounts(total int64, size int) []int64 {
	counts := make([]int64, size)
	w := int64(size) * int64(size+1) / 2
	var sum int64
	for x := range counts {
		counts[x] = total * int64(x+1) / w
		sum += counts[x]
	}
	counts[size-1] += total - sum
	return counts
}

func sizeName(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%dGiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	}
	return fmt.Sprintf("%dB", n)
}

// FixedBenchtime reports whether -test.benchtime is an iteration count
// ("Nx"). Across processes every rank must run the same b.N sequence,
// which only a fixed count guarantees.
func FixedBenchtime() bool {
	f := flag.Lookup("test.benchtime")
	return f != nil && strings.HasSuffix(f.Value.String(), "x")
}

// BenchAllgatherv benchmarks Allgatherv of each of BenchSizes for one rank
// of a real communicator (all ranks call it). It reports the gathered bytes
// per second (the total every rank receives) as MB/s and bytes/s. With more
// than one rank it needs -test.benchtime=Nx.
func BenchAllgatherv(b *testing.B, c mpi.Comm) {
	if c.Size() > 1 && !FixedBenchtime() {
		b.Skip("with several ranks run with -test.benchtime=Nx so every rank runs the same iterations")
	}
	for _, total := range BenchSizes {
		b.Run(sizeName(total), func(b *testing.B) {
			counts := BenchCounts(total, c.Size())
			send := make([]byte, counts[c.Rank()])
			Fill(send, c.Rank(), 1, 0)
			recv := make([]byte, total)
			if err := c.Allgatherv(send, counts, recv); err != nil { // warm up
				b.Fatal(err)
			}
			if err := c.Barrier(); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(total)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := c.Allgatherv(send, counts, recv); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(total)*float64(b.N)/b.Elapsed().Seconds(), "bytes/s")
		})
	}
}

// BenchAllgathervGroup is BenchAllgatherv for in-process ranks.
func BenchAllgathervGroup(b *testing.B, comms []mpi.Comm) {
	for _, total := range BenchSizes {
		b.Run(sizeName(total), func(b *testing.B) {
			size := len(comms)
			counts := BenchCounts(total, size)
			sends := make([][]byte, size)
			recvs := make([][]byte, size)
			for x := range comms {
				sends[x] = make([]byte, counts[x])
				Fill(sends[x], x, 1, 0)
				recvs[x] = make([]byte, total)
			}
			b.SetBytes(total)
			b.ResetTimer()
			var wg sync.WaitGroup
			errs := make([]error, size)
			for x, c := range comms {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < b.N; i++ {
						if err := c.Allgatherv(sends[x], counts, recvs[x]); err != nil {
							errs[x] = err
							return
						}
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			if err := errors.Join(errs...); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(total)*float64(b.N)/b.Elapsed().Seconds(), "bytes/s")
		})
	}
}
