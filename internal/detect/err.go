package detect

import (
	"errors"

	"github.com/canopy-hpc/canopy/internal/errkind"
)

// Err maps Shard's error to the job's: an interruption is
// resumable (exit 8; note says what to do), an error carrying a code keeps
// it, any other is a model error.
func Err(derr error, note string) error {
	switch {
	case derr == nil:
		return nil
	case errors.Is(derr, errkind.ErrInterrupted):
		return errkind.Local(errkind.ExitResumable, "jobs: %s%w", note, derr)
	}
	code := errkind.ExitModel
	var e *errkind.Error
	if errors.As(derr, &e) {
		code = e.Code
	}
	return errkind.Local(code, "jobs: detect: %w", derr)
}
