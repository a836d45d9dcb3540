package detect

import (
	"io"

	"github.com/canopy-hpc/canopy/internal/errkind"
)

// Closer closes a rank's detector (or another engine whose Close can
// fail, eval-crops' crop model) once, so that its error is the run's. On
// the GPU engine Close waits for the queued work: its error can be an
// asynchronous CUDA fault found only there. A pipeline calls Close once
// the engine's work is done and before anything more is published; a
// deferred Join closes it on the way out of any other path, joining the
// error with the one that ended the run. Either way the close error is
// local to this rank (another rank's engine closed, or did not), exit 5
// as any other GPU error, printed once by runJob's rule.
type Closer struct {
	c    io.Closer
	what string
}

// NewCloser closes c (nil: nothing to close); what names it in the error
// ("the detector").
func NewCloser(c io.Closer, what string) *Closer { return &Closer{c: c, what: what} }

// Close closes the engine now (a second call does nothing): nil, or a
// local exit-5 error naming what did not close.
func (k *Closer) Close() error {
	c := k.c
	k.c = nil
	if c == nil {
		return nil
	}
	if err := c.Close(); err != nil {
		return errkind.Local(errkind.ExitMPI, "jobs: close %s: %w", k.what, err)
	}
	return nil
}

// Join is Close deferred on the way out of the run whose error is *err:
// the close error (if any) is joined with *err, which keeps its code and
// kind (errkind.Join: one that carries none yet keeps that too).
func (k *Closer) Join(err *error) { *err = errkind.Join(*err, k.Close()) }
