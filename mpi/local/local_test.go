package local_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/canopy-hpc/canopy/mpi"
	"github.com/canopy-hpc/canopy/mpi/local"
	"github.com/canopy-hpc/canopy/mpi/mpitest"
)

func TestConformance(t *testing.T) {
	for n := 1; n <= 5; n++ {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			mpitest.RunGroup(t, local.New(n))
		})
	}
}

// runBounded runs local.Run and fails the test instead of hanging.
func runBounded(t *testing.T, n int, f func(c mpi.Comm) error) []error {
	t.Helper()
	ch := make(chan []error, 1)
	go func() { ch <- local.Run(n, f) }()
	select {
	case errs := <-ch:
		return errs
	case <-time.After(30 * time.Second):
		t.Fatalf("local.Run(%d) hung", n)
		return nil
	}
}

func TestAbort(t *testing.T) {
	for n := 1; n <= 4; n++ {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			aborter := n - 1
			errs := runBounded(t, n, func(c mpi.Comm) error {
				if err := c.Barrier(); err != nil {
					return err
				}
				if c.Rank() == aborter {
					time.Sleep(20 * time.Millisecond) // let the others block first
					c.Abort(3)
					return errors.New("Abort returned")
				}
				// Pending collective: fails once the peer aborts.
				_, err := c.AllgatherInt64(1)
				if err == nil {
					return errors.New("collective succeeded despite the abort")
				}
				// And every later one fails the same way.
				if err2 := c.Barrier(); !errors.Is(err2, local.ErrAborted) {
					return fmt.Errorf("later Barrier: %v", err2)
				}
				return err
			})
			for r, err := range errs {
				if !errors.Is(err, local.ErrAborted) {
					t.Errorf("rank %d: %v, want ErrAborted", r, err)
					continue
				}
				if code, ok := local.AbortCode(err); !ok || code != 3 {
					t.Errorf("rank %d: AbortCode(%v) = %d, %v; want 3", r, err, code, ok)
				}
			}
		})
	}
}

func TestAbortBeforeFirstCollective(t *testing.T) {
	errs := runBounded(t, 3, func(c mpi.Comm) error {
		if c.Rank() == 1 {
			c.Abort(7)
		}
		time.Sleep(10 * time.Millisecond)
		_, err := c.Bcast([]byte("x"), 0)
		return err
	})
	for r, err := range errs {
		if code, ok := local.AbortCode(err); !ok || code != 7 {
			t.Errorf("rank %d: %v, want abort code 7", r, err)
		}
	}
}

func TestMismatchedCollectives(t *testing.T) {
	errs := runBounded(t, 3, func(c mpi.Comm) error {
		var err error
		if c.Rank() == 1 {
			err = c.Barrier()
		} else {
			_, err = c.AllgatherInt64(5)
		}
		if !errors.Is(err, local.ErrMismatch) {
			return fmt.Errorf("got %v, want ErrMismatch", err)
		}
		// Still aligned afterwards.
		v, err := c.AllgatherInt64(int64(c.Rank()))
		if err != nil || v[2] != 2 {
			return fmt.Errorf("after mismatch: %v %v", v, err)
		}
		// Disagreeing arguments.
		_, err = c.AllreduceInt64(make([]int64, c.Rank()+1), mpi.Sum)
		if !errors.Is(err, local.ErrMismatch) {
			return fmt.Errorf("lengths: got %v, want ErrMismatch", err)
		}
		_, err = c.Bcast(nil, c.Rank())
		if !errors.Is(err, local.ErrMismatch) {
			return fmt.Errorf("roots: got %v, want ErrMismatch", err)
		}
		counts := []int64{1, 1, 1}
		if c.Rank() == 2 {
			counts = []int64{1, 2, 0}
		}
		err = c.Allgatherv(make([]byte, counts[c.Rank()]), counts, make([]byte, 3))
		if !errors.Is(err, local.ErrMismatch) {
			return fmt.Errorf("counts: got %v, want ErrMismatch", err)
		}
		return c.Barrier()
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

func TestOneRankBadArguments(t *testing.T) {
	errs := runBounded(t, 3, func(c mpi.Comm) error {
		counts := []int64{1, 1, 1}
		send := make([]byte, 1)
		if c.Rank() == 0 {
			send = nil // only rank 0 is wrong: everyone fails, nobody hangs
		}
		if err := c.Allgatherv(send, counts, make([]byte, 3)); !errors.Is(err, mpi.ErrCounts) {
			return fmt.Errorf("got %v, want ErrCounts", err)
		}
		return c.Barrier()
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

func TestRankExitDoesNotHang(t *testing.T) {
	errs := runBounded(t, 3, func(c mpi.Comm) error {
		if c.Rank() == 0 {
			return nil // leaves early
		}
		return c.Barrier()
	})
	if errs[0] != nil {
		t.Errorf("rank 0: %v", errs[0])
	}
	for r := 1; r < 3; r++ {
		if !errors.Is(errs[r], local.ErrRankExited) {
			t.Errorf("rank %d: %v, want ErrRankExited", r, errs[r])
		}
	}
}

func TestPanicAbortsGroup(t *testing.T) {
	errs := runBounded(t, 2, func(c mpi.Comm) error {
		if c.Rank() == 0 {
			panic("boom")
		}
		return c.Barrier()
	})
	if errs[0] == nil {
		t.Errorf("rank 0: no error for a panic")
	}
	if code, ok := local.AbortCode(errs[1]); !ok || code != 1 {
		t.Errorf("rank 1: %v, want abort code 1", errs[1])
	}
}

func TestIdentity(t *testing.T) {
	cs := local.New(3)
	for r, c := range cs {
		if c.Rank() != r || c.Size() != 3 || c.LocalRank() != r || c.LocalSize() != 3 {
			t.Errorf("rank %d: %d/%d local %d/%d", r, c.Rank(), c.Size(), c.LocalRank(), c.LocalSize())
		}
		if c.Implementation() != "in-process" || c.Host() == "" {
			t.Errorf("rank %d: %q %q", r, c.Implementation(), c.Host())
		}
	}
}

func BenchmarkAllgatherv(b *testing.B) {
	mpitest.BenchAllgathervGroup(b, local.New(4))
}
