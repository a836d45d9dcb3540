package errkind

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// Code reads the exit code through any wrapping; an error without one is
// internal (1), nil is success.
func TestCode(t *testing.T) {
	plain := errors.New("plain")
	for _, c := range []struct {
		err  error
		want int
	}{
		{nil, ExitOK},
		{plain, ExitInternal},
		{Collective(ExitInput, "bad csv"), ExitInput},
		{Local(ExitModel, "no weights"), ExitModel},
		{fmt.Errorf("rank 3: %w", Local(ExitMPI, "launcher")), ExitMPI},
		{Usage("bad flag"), ExitUsage},
		{IO("disk full"), ExitInternal},
		{UsageError(plain), ExitUsage},
		{UsageError(fmt.Errorf("--plan: %w", Local(ExitMPI, "no GPU"))), ExitMPI},
	} {
		if got := Code(c.err); got != c.want {
			t.Errorf("Code(%v) = %d, want %d", c.err, got, c.want)
		}
	}
}

// Collective errors are printed by rank 0 alone, local ones by their rank:
// the flag must be what the constructor says, and the message and the
// wrapped error must come through.
func TestCollectiveAndLocal(t *testing.T) {
	base := errors.New("base")
	for _, c := range []struct {
		e          *Error
		collective bool
	}{
		{Collective(ExitInput, "csv: %w", base), true},
		{Usage("flag: %w", base), true},
		{IO("write: %w", base), true},
		{UsageError(base).(*Error), true},
		{Local(ExitModel, "load: %w", base), false},
	} {
		if c.e.Collective != c.collective {
			t.Errorf("%v: Collective = %v, want %v", c.e, c.e.Collective, c.collective)
		}
		if !errors.Is(c.e, base) || !strings.HasSuffix(c.e.Error(), "base") {
			t.Errorf("%v does not carry the wrapped error", c.e)
		}
	}
}

// The --help table lists every code once, in order, with the constants'
// values.
func TestExitTableListsEveryCode(t *testing.T) {
	codes := []int{ExitOK, ExitInternal, ExitUsage, ExitInput, ExitModel, ExitMPI, ExitDisagree, ExitRegression, ExitResumable}
	var listed []int
	for _, line := range strings.Split(ExitTable, "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		if n, err := strconv.Atoi(f[0]); err == nil {
			listed = append(listed, n)
		}
	}
	if fmt.Sprint(listed) != fmt.Sprint(codes) {
		t.Fatalf("the table lists codes %v, the constants are %v", listed, codes)
	}
	for i, c := range codes {
		if c != i {
			t.Fatalf("exit codes are not 0..8 in order: %v", codes)
		}
	}
}

// Join keeps both errors, the first's code and kind ahead; either alone
// is itself.
func TestJoin(t *testing.T) {
	first := Collective(ExitInput, "bad csv")
	later := Local(ExitInternal, "close part file")
	if Join(nil, nil) != nil || Join(first, nil) != error(first) || Join(nil, later) != error(later) {
		t.Fatalf("Join of one error is not that error")
	}
	j := Join(first, later)
	var e *Error
	if !errors.As(j, &e) || e != first || Code(j) != ExitInput || !errors.Is(j, later) || j.Error() != "bad csv; close part file" {
		t.Fatalf("Join(first, later) = %v: want the first's code and kind with the later kept", j)
	}
}

// Join of an error that carries no code yet: errors.As finds no code in
// the pair (its caller gives the first one, detect.Err a model error),
// errors.Is still finds the later's cause, and the message holds both.
func TestJoinUncodedFirst(t *testing.T) {
	first := errors.New("forward failed")
	cause := errors.New("disk full")
	j := Join(first, Local(ExitInternal, "close part file: %w", cause))
	var e *Error
	if errors.As(j, &e) || Code(j) != ExitInternal || !errors.Is(j, first) || !errors.Is(j, cause) || j.Error() != "forward failed; close part file: disk full" {
		t.Fatalf("Join(uncoded, coded) = %v (As found %+v): want no code, both causes", j, e)
	}
	coded := Join(Local(ExitModel, "m"), Join(first, Local(ExitMPI, "gpu")))
	if Code(coded) != ExitModel {
		t.Fatalf("a nested join: exit %d, want the first's 4", Code(coded))
	}
}
