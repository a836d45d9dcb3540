// Package mpitest is the conformance suite that every mpi.Comm
// implementation passes, plus the shared Allgatherv benchmark.
//
// The suite is a list of collective-aligned cases (Cases). Each case is a
// function of one rank; all ranks run the same cases in the same order.
//
//   - Real MPI (one rank per process, launched by mpirun): each process's
//     test calls Run(t, comm); every case becomes a subtest.
//   - In-process ranks (mpi/local): a test calls RunGroup(t, comms); each
//     case becomes a subtest in which one goroutine per rank runs the case,
//     bounded by a timeout.
//
// Cases report with Errorf only (safe from any goroutine) and keep calling
// every collective even after a wrong result, so ranks stay aligned; a
// collective that itself fails ends the rank with Abort, so no peer waits
// forever (mpirun then exits non-zero; the local group fails its test).
//
// Files: mpitest.go the harness (R, Run, RunGroup, the byte patterns),
// cases.go the cases, bench.go the Allgatherv benchmark, large.go the
// > 2 GiB Allgatherv check.
package mpitest

import (
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/canopy-hpc/canopy/mpi"
)

// TB is the part of testing.TB a case uses.
type TB interface {
	Helper()
	Errorf(format string, args ...any)
	Logf(format string, args ...any)
}

// BlockSetter is implemented by communicators with a blocked Allgatherv
// path (cmpi.Comm); the suite then also runs Allgatherv forced through it
// with tiny blocks, so padding and compaction are exercised.
type BlockSetter interface {
	SetBlockSize(n int) (prev int)
	SetForceBlocked(on bool) (prev bool)
}

// R is one rank's view of a running case.
type R struct {
	tb TB
	C  mpi.Comm
}

// Errorf reports a failure, prefixed with the rank.
func (r *R) Errorf(format string, args ...any) {
	r.tb.Helper()
	r.tb.Errorf("rank %d/%d: %s", r.C.Rank(), r.C.Size(), fmt.Sprintf(format, args...))
}

// Logf logs, prefixed with the rank.
func (r *R) Logf(format string, args ...any) {
	r.tb.Helper()
	r.tb.Logf("rank %d/%d: %s", r.C.Rank(), r.C.Size(), fmt.Sprintf(format, args...))
}

// Must ends the rank with Abort(2) when a collective failed: its peers may
// be inside a collective this rank will never enter.
func (r *R) Must(err error, what string) {
	r.tb.Helper()
	if err == nil {
		return
	}
	r.Errorf("%s: %v (aborting)", what, err)
	fmt.Fprintf(os.Stderr, "mpitest: rank %d: %s: %v: aborting\n", r.C.Rank(), what, err)
	r.C.Abort(2)
}

// Run runs the suite for one rank of a real communicator: every rank of
// the job calls it with its own Comm (same flags, so the same subtests).
func Run(t *testing.T, c mpi.Comm) {
	for _, tc := range Cases() {
		t.Run(tc.Name, func(t *testing.T) { tc.F(&R{tb: t, C: c}) })
	}
}

// GroupTimeout bounds one case of RunGroup.
var GroupTimeout = 2 * time.Minute

// RunGroup runs the suite on in-process ranks: comms[r] is rank r, and each
// case runs with one goroutine per rank. A case whose ranks aborted or hung
// fails, and the remaining cases are skipped (the group is unusable).
func RunGroup(t *testing.T, comms []mpi.Comm) {
	for _, tc := range Cases() {
		ok := t.Run(tc.Name, func(t *testing.T) {
			if !RunCaseGroup(t, comms, tc.F) {
				t.Fatalf("ranks aborted or hung; the group is unusable")
			}
		})
		if !ok && groupDead(comms) {
			t.Errorf("skipping the cases after %s", tc.Name)
			return
		}
	}
}

var dead sync.Map // mpi.Comm (rank 0 of a group) -> true

func groupDead(comms []mpi.Comm) bool {
	_, d := dead.Load(comms[0])
	return d
}

// RunCaseGroup runs f on every rank of comms, one goroutine each, and
// reports whether all returned normally within GroupTimeout (false after
// an Abort, a runtime.Goexit or a timeout).
func RunCaseGroup(t *testing.T, comms []mpi.Comm, f func(r *R)) bool {
	t.Helper()
	var wg sync.WaitGroup
	var mu sync.Mutex
	finished := 0
	for _, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(&R{tb: t, C: c})
			mu.Lock()
			finished++
			mu.Unlock()
		}()
	}
	ch := make(chan struct{})
	go func() { wg.Wait(); close(ch) }()
	select {
	case <-ch:
	case <-time.After(GroupTimeout):
		t.Errorf("ranks still running after %v", GroupTimeout)
		dead.Store(comms[0], true)
		return false
	}
	if finished != len(comms) {
		t.Errorf("%d of %d ranks did not finish (Abort or Goexit)", len(comms)-finished, len(comms))
		dead.Store(comms[0], true)
		return false
	}
	return true
}

// Pattern is the deterministic content byte i of rank's buffer number salt.
func Pattern(rank, salt int, i int64) byte {
	x := uint64(i)*0x9E3779B97F4A7C15 + uint64(rank)*0xBF58476D1CE4E5B9 + uint64(salt)*0x94D049BB133111EB
	return byte(x>>56) ^ byte(i)
}

// Fill writes Pattern(rank, salt, off+i) into b[i].
func Fill(b []byte, rank, salt int, off int64) {
	for i := range b {
		b[i] = Pattern(rank, salt, off+int64(i))
	}
}

// CheckPattern returns the index of the first byte of b that is not
// Pattern(rank, salt, i), or -1.
func CheckPattern(b []byte, rank, salt int) int64 {
	for i := range b {
		if b[i] != Pattern(rank, salt, int64(i)) {
			return int64(i)
		}
	}
	return -1
}

// NewR returns a rank's view for a single-rank-per-process test that calls
// a case function (such as CheckLarge) directly.
func NewR(t TB, c mpi.Comm) *R { return &R{tb: t, C: c} }
