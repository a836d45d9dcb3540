package jobs

import (
	"errors"
	"fmt"
	"hash/fnv"

	"github.com/canopy-hpc/canopy/mpi"
)

// Exit codes, the table printed by --help and written in the README and
// docs/design.md.
const (
	ExitOK         = 0 // success
	ExitInternal   = 1 // internal error (a bug, or an I/O failure of canopy's own files)
	ExitUsage      = 2 // bad command line, or an output folder holding a previous run or in use
	ExitInput      = 3 // bad input data (CSV, label map, predictions)
	ExitModel      = 4 // model or detector error
	ExitMPI        = 5 // MPI, launcher or topology error
	ExitDisagree   = 6 // ranks disagree on the metrics
	ExitRegression = 7 // regression detected (compare)
	ExitResumable  = 8 // interrupted, resumable
)

// ExitTable is the exit-code table as printed in --help.
const ExitTable = `EXIT CODES:
   0  success
   1  internal error, or an I/O error on canopy's own files (a full disk)
   2  usage error (bad flags, output folder holds a previous run or is in
      use by another run)
   3  bad input data (CSV, label map, predictions, an image over the pixel
      cap or too large for the rank's memory)
   4  model error
   5  MPI, launcher, topology or GPU error (no usable GPU in the cuda build,
      --device cuda with none visible, --exclusive-gpu refused a shared GPU,
      no usable cuDNN 9, a --plan file of another stack; --precision
      other than exact, --plan, --cudnn or --exclusive-gpu where no GPU
      runs)
   6  ranks disagree on the metrics
   7  regression detected (canopy compare)
   8  interrupted, resumable`

// Error carries an exit code. Collective errors are ones every rank sees
// identically (they come from bytes every rank holds): rank 0 prints them
// and every rank exits with the code. Local errors are seen by one rank
// only: that rank prints them with its rank and host and aborts the job.
type Error struct {
	Code       int
	Collective bool
	Err        error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

func collective(code int, format string, a ...any) *Error {
	return &Error{Code: code, Collective: true, Err: fmt.Errorf(format, a...)}
}

func localErr(code int, format string, a ...any) *Error {
	return &Error{Code: code, Err: fmt.Errorf(format, a...)}
}

// Code returns the exit code for err (0 for nil, 1 when err carries none).
func Code(err error) int {
	if err == nil {
		return ExitOK
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ExitInternal
}

// usageError is a command-line error: exit 2, unless err already carries
// another code (a GPU flag on a build without a GPU backend: 5).
func usageError(err error) error {
	code := ExitUsage
	if e := (*Error)(nil); errors.As(err, &e) {
		code = e.Code
	}
	return &Error{Code: code, Collective: true, Err: err}
}

func usageErr(format string, a ...any) *Error {
	return &Error{Code: ExitUsage, Collective: true, Err: fmt.Errorf(format, a...)}
}

// ioErr is an I/O failure on canopy's own files: exit 1.
func ioErr(format string, a ...any) *Error {
	return &Error{Code: ExitInternal, Collective: true, Err: fmt.Errorf(format, a...)}
}

// agreeErr is a collective: every rank passes its own error (or nil) and
// every rank returns the same outcome: nil when no rank failed, else a
// collective *Error naming the first failing rank with its message, with
// the largest exit code any rank proposed (code, or the error's own when
// it carries one). Rank 0 prints it once; no rank aborts or hangs.
func agreeErr(c mpi.Comm, code int, err error) error {
	var msg []byte
	if err != nil {
		if e := (*Error)(nil); errors.As(err, &e) {
			code = e.Code
		}
		msg = fmt.Appendf([]byte{byte(code)}, "%v", err)
	}
	all, gerr := mpi.AllgatherBytes(c, msg)
	if gerr != nil {
		return localErr(ExitMPI, "jobs: %w", gerr)
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
	return &Error{Code: worst, Collective: true, Err: errors.New(text)}
}

// agree compares a 64-bit digest of the metric bytes across ranks.
func agree(c mpi.Comm, metricJSON []byte) error {
	h := fnv.New64a()
	h.Write(metricJSON)
	if perturbForTest(c.Rank()) {
		h.Write([]byte{1})
	}
	d := h.Sum64()
	lo, err := c.AllreduceUint64([]uint64{d}, mpi.Min)
	if err != nil {
		return localErr(ExitMPI, "jobs: agreement check: %w", err)
	}
	hi, err := c.AllreduceUint64([]uint64{d}, mpi.Max)
	if err != nil {
		return localErr(ExitMPI, "jobs: agreement check: %w", err)
	}
	if lo[0] == hi[0] {
		return nil
	}
	all, err := c.AllgatherInt64(int64(d))
	if err != nil {
		return localErr(ExitMPI, "jobs: agreement check: %w", err)
	}
	var differ []int
	for r, v := range all {
		if v != all[0] {
			differ = append(differ, r)
		}
	}
	return collective(ExitDisagree, "jobs: ranks disagree on the metrics: ranks %v differ from rank 0", differ)
}

// finalStatus tells every rank whether rank 0 wrote its outputs (werr is
// rank 0's error), so all exit alike.
func finalStatus(c mpi.Comm, werr error, what string) error {
	code := int64(0)
	if werr != nil {
		code = ExitInternal
	}
	st, err := c.AllreduceInt64([]int64{code}, mpi.Max)
	if err != nil {
		return localErr(ExitMPI, "jobs: final status: %w", err)
	}
	if st[0] != 0 {
		if werr == nil {
			werr = fmt.Errorf("rank 0 could not write the %s", what)
		}
		return &Error{Code: int(st[0]), Collective: true, Err: fmt.Errorf("jobs: write %s: %w", what, werr)}
	}
	return nil
}

// detectErr maps detectShard's error to the job's: an interruption is
// resumable (exit 8; note says what to do), an error carrying a code keeps
// it, any other is a model error.
func detectErr(derr error, note string) error {
	switch {
	case derr == nil:
		return nil
	case errors.Is(derr, errInterrupted):
		return localErr(ExitResumable, "jobs: %s%w", note, derr)
	}
	code := ExitModel
	var e *Error
	if errors.As(derr, &e) {
		code = e.Code
	}
	return localErr(code, "jobs: detect: %w", derr)
}
