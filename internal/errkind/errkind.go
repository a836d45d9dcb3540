// Package errkind holds canopy's error kinds and exit codes in one place:
// the codes, the *Error that carries one (collective or local), and the
// sentinel errors that more than one room tests for (ErrInterrupted).
// Every room below jobs/ returns these; jobs/ maps them to the process's
// exit status. It imports nothing of canopy's.
package errkind

import (
	"errors"
	"fmt"
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

// Collective is an error every rank sees alike, with its exit code.
func Collective(code int, format string, a ...any) *Error {
	return &Error{Code: code, Collective: true, Err: fmt.Errorf(format, a...)}
}

// Local is an error one rank alone sees, with its exit code.
func Local(code int, format string, a ...any) *Error {
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

// UsageError is a command-line error: exit 2, unless err already carries
// another code (a GPU flag on a build without a GPU backend: 5).
func UsageError(err error) error {
	code := ExitUsage
	if e := (*Error)(nil); errors.As(err, &e) {
		code = e.Code
	}
	return &Error{Code: code, Collective: true, Err: err}
}

// Usage is a collective usage error: exit 2.
func Usage(format string, a ...any) *Error {
	return &Error{Code: ExitUsage, Collective: true, Err: fmt.Errorf(format, a...)}
}

// IO is an I/O failure on canopy's own files: exit 1.
func IO(format string, a ...any) *Error {
	return &Error{Code: ExitInternal, Collective: true, Err: fmt.Errorf(format, a...)}
}

// ErrInterrupted is returned by a rank's detection loop when a signal
// asked the job to stop: the images finished so far are saved, and the
// job exits 8 (resumable).
var ErrInterrupted = errors.New("interrupted by a signal; finished images are saved, continue with --resume")

// Join is err with a later error added, one found while cleaning up
// after it (a file's close): the later alone when err is nil, else both
// ("err; later", one line), err first so that it keeps its code and kind.
// Neither is dropped. An err that carries no code yet keeps that too: its
// caller gives it one from what it is (detect.Err: a model error, exit 4;
// a point run's input error, exit 3), so errors.As finds no *Error in
// later through the pair then (errors.Is still finds later's cause).
func Join(err, later error) error {
	switch {
	case later == nil:
		return err
	case err == nil:
		return later
	}
	var e *Error
	return &joined{err: err, later: later, hide: !errors.As(err, &e)}
}

// joined is Join's pair: errors.Is sees both, err first; errors.As sees
// later only when err carries a code of its own (hide false).
type joined struct {
	err, later error
	hide       bool
}

func (j *joined) Error() string { return j.err.Error() + "; " + j.later.Error() }
func (j *joined) Unwrap() []error {
	if j.hide {
		return []error{j.err}
	}
	return []error{j.err, j.later}
}

// Is finds later's chain when Unwrap hides it.
func (j *joined) Is(target error) bool { return j.hide && errors.Is(j.later, target) }
