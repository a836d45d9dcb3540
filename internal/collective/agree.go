package collective

import (
	"errors"
	"fmt"
	"hash/fnv"

	"github.com/canopy-hpc/canopy/internal/errkind"
	"github.com/canopy-hpc/canopy/internal/testhook"
	"github.com/canopy-hpc/canopy/mpi"
)

// AgreeErr is a collective: every rank passes its own error (or nil) and
// every rank returns the same outcome: nil when no rank failed, else a
// collective *Error naming the first failing rank with its message, with
// the largest exit code any rank proposed (code, or the error's own when
// it carries one). Rank 0 prints it once; no rank aborts or hangs.
func AgreeErr(c mpi.Comm, code int, err error) error {
	var msg []byte
	if err != nil {
		if e := (*errkind.Error)(nil); errors.As(err, &e) {
			code = e.Code
		}
		msg = fmt.Appendf([]byte{byte(code)}, "%v", err)
	}
	all, gerr := mpi.AllgatherBytes(c, msg)
	if gerr != nil {
		return errkind.Local(errkind.ExitMPI, "jobs: %w", gerr)
	}
	first, worst, n := -1, 0, 0
	for r, m := range all {
		if len(m) == 0 {
			continue
		}
		n++
		if first < 0 {
			first = r
		}
		worst = max(worst, int(m[0]))
	}
	if first < 0 {
		return nil
	}
	text := string(all[first][1:])
	if c.Size() > 1 {
		text = fmt.Sprintf("rank %d: %s", first, text)
		if n > 1 {
			text += fmt.Sprintf(" (and %d more ranks failed)", n-1)
		}
	}
	return &errkind.Error{Code: worst, Collective: true, Err: errors.New(text)}
}

// Agree compares a 64-bit digest of the metric bytes across ranks.
func Agree(c mpi.Comm, metricJSON []byte) error {
	h := fnv.New64a()
	h.Write(metricJSON)
	if testhook.Perturb(c.Rank()) {
		h.Write([]byte{1})
	}
	d := h.Sum64()
	lo, err := c.AllreduceUint64([]uint64{d}, mpi.Min)
	if err != nil {
		return errkind.Local(errkind.ExitMPI, "jobs: agreement check: %w", err)
	}
	hi, err := c.AllreduceUint64([]uint64{d}, mpi.Max)
	if err != nil {
		return errkind.Local(errkind.ExitMPI, "jobs: agreement check: %w", err)
	}
	if lo[0] == hi[0] {
		return nil
	}
	all, err := c.AllgatherInt64(int64(d))
	if err != nil {
		return errkind.Local(errkind.ExitMPI, "jobs: agreement check: %w", err)
	}
	var differ []int
	for r, v := range all {
		if v != all[0] {
			differ = append(differ, r)
		}
	}
	return errkind.Collective(errkind.ExitDisagree, "jobs: ranks disagree on the metrics: ranks %v differ from rank 0", differ)
}

// FinalStatus tells every rank whether rank 0 wrote its outputs (werr is
// rank 0's error), so all exit alike.
func FinalStatus(c mpi.Comm, werr error, what string) error {
	code := int64(0)
	if werr != nil {
		code = errkind.ExitInternal
	}
	st, err := c.AllreduceInt64([]int64{code}, mpi.Max)
	if err != nil {
		return errkind.Local(errkind.ExitMPI, "jobs: final status: %w", err)
	}
	if st[0] != 0 {
		if werr == nil {
			werr = fmt.Errorf("rank 0 could not write the %s", what)
		}
		return &errkind.Error{Code: int(st[0]), Collective: true, Err: fmt.Errorf("jobs: write %s: %w", what, werr)}
	}
	return nil
}
