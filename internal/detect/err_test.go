package detect

import (
	"errors"
	"fmt"
	"testing"

	"github.com/canopy-hpc/canopy/internal/errkind"
)

// TestErr: no error stays none; an interruption is resumable whatever
// wraps it; a coded error keeps its code; any other is a model error.
func TestErr(t *testing.T) {
	if err := Err(nil, ""); err != nil {
		t.Fatalf("nil: %v", err)
	}
	for _, c := range []struct {
		err  error
		want int
	}{
		{fmt.Errorf("batch 3: %w", errkind.ErrInterrupted), errkind.ExitResumable},
		{&errkind.Error{Code: errkind.ExitInput, Err: errors.New("bad window")}, errkind.ExitInput},
		{fmt.Errorf("read: %w", &errkind.Error{Code: errkind.ExitMPI, Err: errors.New("gone")}), errkind.ExitMPI},
		{errors.New("NaN in the head"), errkind.ExitModel},
	} {
		if got := errkind.Code(Err(c.err, "")); got != c.want {
			t.Errorf("%v: exit %d, want %d", c.err, got, c.want)
		}
	}
}
