package detect

import (
	"errors"
	"strings"
	"testing"

	"github.com/canopy-hpc/canopy/internal/errkind"
)

// countClose counts its closes and fails each with err.
type countClose struct {
	n   int
	err error
}

func (c *countClose) Close() error { c.n++; return c.err }

// TestCloser: a failed close is a local exit-5 error naming what did not
// close and wrapping the cause; the engine closes once, however often
// Close and Join are called; Join adds the close error to the run's,
// which keeps its code; nothing to close is no error.
func TestCloser(t *testing.T) {
	cause := errors.New("late fault")
	c := &countClose{err: cause}
	k := NewCloser(c, "the detector")
	err := k.Close()
	var e *errkind.Error
	if !errors.As(err, &e) || e.Collective || e.Code != errkind.ExitMPI || !errors.Is(err, cause) || !strings.Contains(err.Error(), "close the detector: late fault") {
		t.Fatalf("close error %v (%+v), want a local exit 5 naming the detector and wrapping the cause", err, e)
	}
	var runErr error
	k.Join(&runErr)
	if c.n != 1 || runErr != nil || k.Close() != nil {
		t.Fatalf("closed %d times, Join after Close gave %v; want once, nil", c.n, runErr)
	}

	c = &countClose{err: cause}
	runErr = errkind.Collective(errkind.ExitInput, "bad csv")
	NewCloser(c, "the detector").Join(&runErr)
	if c.n != 1 || errkind.Code(runErr) != errkind.ExitInput || !errors.Is(runErr, cause) {
		t.Fatalf("Join on the way out: closed %d times, %v (exit %d); want once, the run's exit 3 with the close error", c.n, runErr, errkind.Code(runErr))
	}
	runErr = nil
	NewCloser(&countClose{err: cause}, "the detector").Join(&runErr)
	if errkind.Code(runErr) != errkind.ExitMPI {
		t.Fatalf("Join of a run without error: %v, want exit 5", runErr)
	}
	runErr = nil
	NewCloser(nil, "nothing").Join(&runErr)
	if runErr != nil || NewCloser(&countClose{}, "ok").Close() != nil {
		t.Fatalf("a close without error gave %v", runErr)
	}
}
