// Package local is the in-process implementation of mpi.Comm: n ranks as
// goroutines of one process, for unit tests that need no mpirun.
//
// Collectives have real rendezvous semantics: the k-th collective of every
// rank forms one round, which completes only when all n ranks have entered
// it, and no rank leaves a round before every rank has read the others'
// inputs (so buffers may be reused as soon as a call returns, as in MPI).
// A round whose ranks called different collectives, or disagree on
// arguments that must match (root, lengths, counts), fails on every rank
// with an error wrapping ErrMismatch instead of corrupting data.
//
// Abort does not end the process: it ends the calling goroutine
// (runtime.Goexit) and makes every pending and later collective of the
// other ranks fail with an *AbortError (errors.Is(err, ErrAborted)) that
// carries the code; AbortCode extracts it. A rank whose function returns
// under Run while peers still wait for it fails their rounds with
// ErrRankExited, so a test fails rather than hangs.
package local

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"

	"github.com/canopy-hpc/canopy/mpi"
)

var _ mpi.Comm = (*Comm)(nil)

// ErrAborted is matched (errors.Is) by the *AbortError of an aborted group.
var ErrAborted = errors.New("local: aborted")

// ErrMismatch reports ranks that called different collectives in the same
// round, or the same one with disagreeing arguments.
var ErrMismatch = errors.New("local: mismatched collective")

// ErrRankExited reports a round that can never complete because a rank's
// function returned (under Run) before entering it.
var ErrRankExited = errors.New("local: rank exited before the collective")

// AbortError is how an Abort shows up: Rank called Abort(Code).
type AbortError struct {
	Rank int
	Code int
}

func (e *AbortError) Error() string {
	return fmt.Sprintf("local: rank %d aborted with code %d", e.Rank, e.Code)
}

// Is makes errors.Is(err, ErrAborted) true.
func (e *AbortError) Is(target error) bool { return target == ErrAborted }

// AbortCode returns the code of the Abort behind err, if any.
func AbortCode(err error) (int, bool) {
	var ae *AbortError
	if errors.As(err, &ae) {
		return ae.Code, true
	}
	return 0, false
}

type round struct {
	seq     uint64
	kinds   []string
	in      []any
	arrived int
	done    chan struct{} // closed when all arrived, or on failure
	err     error         // set before done is closed
	leave   sync.WaitGroup
}

type group struct {
	n      int
	host   string
	mu     sync.Mutex
	seq    []uint64 // next round of each rank
	exited []bool
	rounds map[uint64]*round
	abort  chan struct{}
	aerr   *AbortError
}

// Comm is one rank of an in-process group.
type Comm struct {
	g    *group
	rank int
}

// New returns the n ranks of a fresh group; rank r is element r. Each rank
// must be driven by its own goroutine. Abort ends the calling goroutine, so
// call it only from goroutines you started (Run does that for you).
func New(n int) []mpi.Comm {
	if n < 1 {
		panic(fmt.Sprintf("local: New(%d): need at least one rank", n))
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	g := &group{
		n:      n,
		host:   host,
		seq:    make([]uint64, n),
		exited: make([]bool, n),
		rounds: make(map[uint64]*round),
		abort:  make(chan struct{}),
	}
	cs := make([]mpi.Comm, n)
	for r := range cs {
		cs[r] = &Comm{g: g, rank: r}
	}
	return cs
}

// Run runs f on n ranks, each in its own goroutine, and returns each rank's
// result. A rank that called Abort gets its *AbortError; a rank that
// panicked gets an error with the stack (and aborts the group with code 1
// so no peer hangs).
func Run(n int, f func(c mpi.Comm) error) []error {
	cs := New(n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lc := c.(*Comm)
			finished := false
			defer func() {
				if p := recover(); p != nil {
					errs[r] = fmt.Errorf("local: rank %d panicked: %v\n%s", r, p, debug.Stack())
					lc.g.doAbort(r, 1)
				} else if !finished {
					lc.g.mu.Lock()
					ae := lc.g.aerr
					lc.g.mu.Unlock()
					if ae != nil {
						errs[r] = ae
					} else {
						errs[r] = fmt.Errorf("local: rank %d called runtime.Goexit", r)
					}
				}
				lc.g.exit(r)
			}()
			errs[r] = f(c)
			finished = true
		}()
	}
	wg.Wait()
	return errs
}

func (g *group) doAbort(rank, code int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.aerr == nil {
		g.aerr = &AbortError{Rank: rank, Code: code}
		close(g.abort)
	}
}

// exit marks rank as gone and fails every round it will never join.
func (g *group) exit(rank int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.exited[rank] = true
	err := fmt.Errorf("%w (rank %d)", ErrRankExited, rank)
	if g.aerr != nil {
		err = g.aerr // the rank left by aborting: report the abort
	}
	for s, r := range g.rounds {
		if s >= g.seq[rank] {
			g.fail(r, err)
		}
	}
}

// fail ends round r with err; g.mu is held.
func (g *group) fail(r *round, err error) {
	r.err = err
	delete(g.rounds, r.seq)
	close(r.done)
}

// enter joins rank's next round with the given kind and input and waits for
// it to complete.
func (g *group) enter(rank int, kind string, in any) (*round, error) {
	g.mu.Lock()
	if g.aerr != nil {
		g.mu.Unlock()
		return nil, g.aerr
	}
	s := g.seq[rank]
	g.seq[rank]++
	r := g.rounds[s]
	if r == nil {
		r = &round{
			seq:   s,
			kinds: make([]string, g.n),
			in:    make([]any, g.n),
			done:  make(chan struct{}),
		}
		r.leave.Add(g.n)
		g.rounds[s] = r
		for x, gone := range g.exited {
			if gone && g.seq[x] <= s {
				g.fail(r, fmt.Errorf("%w (rank %d)", ErrRankExited, x))
				break
			}
		}
	}
	if r.err == nil {
		r.kinds[rank] = kind
		r.in[rank] = in
		r.arrived++
		if r.arrived == g.n {
			for x, k := range r.kinds {
				if k != kind {
					r.err = fmt.Errorf("%w: rank %d called %s, rank %d called %s", ErrMismatch, rank, kind, x, k)
					break
				}
			}
			delete(g.rounds, s)
			close(r.done)
		}
	}
	g.mu.Unlock()

	select {
	case <-r.done:
	case <-g.abort:
		// If the round completed before the abort (the aborter left it
		// first), finish it: the others wait for this rank to leave.
		select {
		case <-r.done:
		default:
			return nil, g.aerr
		}
	}
	if r.err != nil {
		return nil, r.err
	}
	return r, nil
}

// collective runs one round: f reads every rank's input (in rank order) and
// fills this rank's result; no rank leaves before all have read.
func (c *Comm) collective(kind string, in any, f func(ins []any) error) error {
	r, err := c.g.enter(c.rank, kind, in)
	if err != nil {
		return fmt.Errorf("local: rank %d: %s: %w", c.rank, kind, err)
	}
	err = f(r.in)
	r.leave.Done()
	r.leave.Wait()
	if err != nil {
		return fmt.Errorf("local: rank %d: %s: %w", c.rank, kind, err)
	}
	return nil
}

// Rank implements mpi.Comm.
func (c *Comm) Rank() int { return c.rank }

// Size implements mpi.Comm.
func (c *Comm) Size() int { return c.g.n }

// LocalRank implements mpi.Comm: every rank shares the node, so it is Rank.
func (c *Comm) LocalRank() int { return c.rank }

// LocalSize implements mpi.Comm: Size.
func (c *Comm) LocalSize() int { return c.g.n }

// Host implements mpi.Comm: os.Hostname.
func (c *Comm) Host() string { return c.g.host }

// Implementation implements mpi.Comm.
func (c *Comm) Implementation() string { return "in-process" }

// Abort fails every other rank's pending and later collectives with an
// *AbortError carrying code, then ends the calling goroutine.
func (c *Comm) Abort(code int) {
	c.g.doAbort(c.rank, code)
	runtime.Goexit()
}

// Barrier implements mpi.Comm.
func (c *Comm) Barrier() error {
	return c.collective("Barrier", nil, func([]any) error { return nil })
}

type bcastIn struct {
	root int
	buf  []byte
}

// Bcast implements mpi.Comm.
func (c *Comm) Bcast(buf []byte, root int) ([]byte, error) {
	if root < 0 || root >= c.g.n {
		return nil, fmt.Errorf("local: bcast: root %d out of range [0,%d)", root, c.g.n)
	}
	var out []byte
	err := c.collective("Bcast", bcastIn{root, buf}, func(ins []any) error {
		for x, in := range ins {
			if in.(bcastIn).root != root {
				return fmt.Errorf("%w: root %d here, %d on rank %d", ErrMismatch, root, in.(bcastIn).root, x)
			}
		}
		if c.rank == root {
			out = buf
		} else {
			out = append([]byte{}, ins[root].(bcastIn).buf...)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// AllgatherInt64 implements mpi.Comm.
func (c *Comm) AllgatherInt64(v int64) ([]int64, error) {
	out := make([]int64, c.g.n)
	err := c.collective("AllgatherInt64", v, func(ins []any) error {
		for x, in := range ins {
			out[x] = in.(int64)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

type reduceIn[T any] struct {
	v  []T
	op mpi.Op
}

func allreduce[T int64 | uint64 | float64](c *Comm, kind string, v []T, op mpi.Op) ([]T, error) {
	if op != mpi.Sum && op != mpi.Min && op != mpi.Max {
		return nil, fmt.Errorf("local: allreduce: unknown op %v", op)
	}
	out := make([]T, len(v))
	copy(out, v)
	err := c.collective(kind, reduceIn[T]{v, op}, func(ins []any) error {
		for x, a := range ins {
			in := a.(reduceIn[T])
			if in.op != op || len(in.v) != len(v) {
				return fmt.Errorf("%w: %v of %d here, %v of %d on rank %d", ErrMismatch, op, len(v), in.op, len(in.v), x)
			}
		}
		for i := range out {
			acc := ins[0].(reduceIn[T]).v[i]
			for _, a := range ins[1:] {
				y := a.(reduceIn[T]).v[i]
				switch op {
				case mpi.Sum:
					acc += y
				case mpi.Min:
					if y < acc {
						acc = y
					}
				case mpi.Max:
					if y > acc {
						acc = y
					}
				}
			}
			out[i] = acc
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// AllreduceInt64 implements mpi.Comm.
func (c *Comm) AllreduceInt64(v []int64, op mpi.Op) ([]int64, error) {
	return allreduce(c, "AllreduceInt64", v, op)
}

// AllreduceUint64 implements mpi.Comm.
func (c *Comm) AllreduceUint64(v []uint64, op mpi.Op) ([]uint64, error) {
	return allreduce(c, "AllreduceUint64", v, op)
}

// AllreduceFloat64 implements mpi.Comm.
func (c *Comm) AllreduceFloat64(v []float64, op mpi.Op) ([]float64, error) {
	return allreduce(c, "AllreduceFloat64", v, op)
}

type gathervIn struct {
	send   []byte
	counts []int64
	bad    error
}

// Allgatherv implements mpi.Comm. A rank whose arguments fail
// mpi.CheckAllgatherv still enters the round, so every rank fails alike
// (the offending one with the check's error) instead of hanging.
func (c *Comm) Allgatherv(send []byte, counts []int64, recv []byte) error {
	bad := mpi.CheckAllgatherv(c.rank, send, counts, recv)
	if bad == nil && len(counts) != c.g.n {
		bad = fmt.Errorf("%w: %d counts for %d ranks", mpi.ErrCounts, len(counts), c.g.n)
	}
	return c.collective("Allgatherv", gathervIn{send, counts, bad}, func(ins []any) error {
		if bad != nil {
			return bad
		}
		for x, a := range ins {
			in := a.(gathervIn)
			if in.bad != nil {
				return fmt.Errorf("%w: rank %d passed bad arguments: %v", mpi.ErrCounts, x, in.bad)
			}
			for i, n := range in.counts {
				if n != counts[i] {
					return fmt.Errorf("%w: counts[%d]=%d here, %d on rank %d", ErrMismatch, i, counts[i], n, x)
				}
			}
		}
		var off int64
		for x, a := range ins {
			dst, src := recv[off:off+counts[x]], a.(gathervIn).send
			// In place (send is this part of recv): peers are reading it.
			if len(src) > 0 && &dst[0] != &src[0] {
				copy(dst, src)
			}
			off += counts[x]
		}
		return nil
	})
}

// counter is the in-process shared counter: one int64 all ranks' handles
// point at.
type counter struct {
	c *Comm
	v *atomic.Int64
}

// NewCounter implements mpi.Comm: rank 0's counter, shared by all.
func (c *Comm) NewCounter() (mpi.Counter, error) {
	mine := &atomic.Int64{}
	var got *atomic.Int64
	err := c.collective("NewCounter", mine, func(ins []any) error {
		got = ins[0].(*atomic.Int64)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &counter{c: c, v: got}, nil
}

// FetchAdd implements mpi.Counter; after an Abort it fails as a
// collective would.
func (k *counter) FetchAdd(n int64) (int64, error) {
	select {
	case <-k.c.g.abort:
		k.c.g.mu.Lock()
		defer k.c.g.mu.Unlock()
		return 0, k.c.g.aerr
	default:
	}
	return k.v.Add(n) - n, nil
}

// Free implements mpi.Counter.
func (k *counter) Free() error {
	return k.c.collective("CounterFree", nil, func([]any) error { return nil })
}
