package shareddata

import (
	"path/filepath"
	"testing"
)

// TestNeed: a present file passes, an absent one skips, and fails with
// CANOPY_REQUIRE_SHARED=1.
func TestNeed(t *testing.T) {
	present := t.TempDir()
	absent := filepath.Join(present, "missing")
	run := func(require, path string) (skipped, failed bool) {
		t.Setenv(RequireEnv, require)
		// Need runs on a stand-in that records a skip or a failure.
		st := &recorder{TB: t}
		func() {
			defer func() { recover() }()
			Need(st, path, "the file")
		}()
		return st.skipped, st.failed
	}
	for _, c := range []struct {
		require, path   string
		skipped, failed bool
	}{
		{"", present, false, false},
		{"1", present, false, false},
		{"", absent, true, false},
		{"0", absent, true, false},
		{"1", absent, false, true},
	} {
		if s, f := run(c.require, c.path); s != c.skipped || f != c.failed {
			t.Errorf("%s=%q, %s: skipped %v failed %v, want %v %v", RequireEnv, c.require, filepath.Base(c.path), s, f, c.skipped, c.failed)
		}
	}
}

// recorder is a testing.TB whose Skipf and Fatalf record and stop.
type recorder struct {
	testing.TB
	skipped, failed bool
}

func (r *recorder) Helper() {}
func (r *recorder) Skipf(string, ...any) {
	r.skipped = true
	panic("skip")
}
func (r *recorder) Fatalf(string, ...any) {
	r.failed = true
	panic("fatal")
}
