// Package mpi defines canopy's communicator: the Comm interface that every
// rank uses for its collectives, and the convenience layer built on it.
//
// Two implementations satisfy Comm and pass the same conformance suite
// (mpi/mpitest): the cgo binding to the MPI C API in mpi/cmpi, and the
// in-process one in mpi/local (N ranks as goroutines) used to unit-test
// everything above this package without mpirun.
//
// Rules every caller follows: every rank calls every collective, in the same
// order, even with nothing to send; any fatal error that only one rank sees
// ends in Abort with a non-zero code so no peer waits forever.
package mpi

import (
	"errors"
	"fmt"
)

// Op is a reduction operator for the Allreduce calls.
type Op int

// Reduction operators.
const (
	Sum Op = iota
	Min
	Max
)

func (o Op) String() string {
	switch o {
	case Sum:
		return "sum"
	case Min:
		return "min"
	case Max:
		return "max"
	}
	return fmt.Sprintf("Op(%d)", int(o))
}

// Comm is a communicator over a fixed group of ranks.
//
// All methods except Rank, Size, LocalRank, LocalSize, Host, Implementation
// and Abort are collectives: every rank of the group must call them in the
// same order with compatible arguments.
type Comm interface {
	// Rank is this process's rank in [0, Size()).
	Rank() int
	// Size is the number of ranks.
	Size() int
	// LocalRank and LocalSize describe the ranks that share this node
	// (MPI_Comm_split_type with MPI_COMM_TYPE_SHARED).
	LocalRank() int
	LocalSize() int
	// Host is this rank's host name (MPI_Get_processor_name).
	Host() string
	// Implementation names the MPI library and version, e.g. "Open MPI v4.1.4".
	Implementation() string

	// Barrier blocks until all ranks have entered it.
	Barrier() error
	// Bcast returns root's buf on every rank. Non-root ranks may pass nil;
	// the length travels first, so they need not know it.
	Bcast(buf []byte, root int) ([]byte, error)
	// AllgatherInt64 returns every rank's v, indexed by rank.
	AllgatherInt64(v int64) ([]int64, error)
	// AllreduceInt64, AllreduceUint64 and AllreduceFloat64 reduce v
	// element-wise over all ranks; every rank passes the same length.
	AllreduceInt64(v []int64, op Op) ([]int64, error)
	AllreduceUint64(v []uint64, op Op) ([]uint64, error)
	AllreduceFloat64(v []float64, op Op) ([]float64, error)
	// Allgatherv is the thin typed layer: counts[r] is rank r's byte count
	// (known on every rank, e.g. from AllgatherInt64), len(send) ==
	// counts[Rank()], and recv has room for the sum of counts; rank r's part
	// lands at offset sum(counts[:r]). Counts and totals are int64: parts
	// above 2 GiB are legal.
	Allgatherv(send []byte, counts []int64, recv []byte) error
	// NewCounter is a collective: a shared int64, starting at 0, held by
	// rank 0, that any rank then adds to alone (Counter.FetchAdd: MPI-3
	// MPI_Fetch_and_op on an RMA window, passive target), as a run-time
	// dealer of work uses it. Every rank frees it (Counter.Free, a
	// collective) before the next NewCounter.
	NewCounter() (Counter, error)

	// Abort ends every rank of the job with the given exit code. It does
	// not return.
	Abort(code int)
}

// Counter is a shared counter (Comm.NewCounter).
type Counter interface {
	// FetchAdd adds n and returns the value before, atomically with
	// respect to every rank's FetchAdd. It is not a collective.
	FetchAdd(n int64) (int64, error)
	// Free releases the counter: a collective.
	Free() error
}

// ErrCounts reports an Allgatherv whose arguments disagree with the counts.
var ErrCounts = errors.New("mpi: send/recv lengths disagree with counts")

// AllgatherBytes is the convenient layer over Allgatherv: it exchanges the
// byte counts, gathers every rank's buffer and returns them sliced by rank
// (parts alias one contiguous buffer). A rank with nothing to send passes
// nil and still takes part.
func AllgatherBytes(c Comm, send []byte) ([][]byte, error) {
	counts, err := c.AllgatherInt64(int64(len(send)))
	if err != nil {
		return nil, fmt.Errorf("mpi: allgather counts: %w", err)
	}
	var total int64
	for r, n := range counts {
		if n < 0 {
			return nil, fmt.Errorf("mpi: rank %d sent negative count %d", r, n)
		}
		total += n
	}
	recv := make([]byte, total)
	if err := c.Allgatherv(send, counts, recv); err != nil {
		return nil, fmt.Errorf("mpi: allgatherv: %w", err)
	}
	parts := make([][]byte, len(counts))
	var off int64
	for r, n := range counts {
		parts[r] = recv[off : off+n : off+n]
		off += n
	}
	return parts, nil
}

// CheckAllgatherv validates Allgatherv arguments; implementations call it
// first so both report the same error.
func CheckAllgatherv(rank int, send []byte, counts []int64, recv []byte) error {
	if rank < 0 || rank >= len(counts) {
		return fmt.Errorf("%w: rank %d with %d counts", ErrCounts, rank, len(counts))
	}
	if int64(len(send)) != counts[rank] {
		return fmt.Errorf("%w: send %d bytes, counts[%d]=%d", ErrCounts, len(send), rank, counts[rank])
	}
	var total int64
	for _, n := range counts {
		if n < 0 {
			return fmt.Errorf("%w: negative count %d", ErrCounts, n)
		}
		total += n
	}
	if int64(len(recv)) < total {
		return fmt.Errorf("%w: recv %d bytes < total %d", ErrCounts, len(recv), total)
	}
	return nil
}
