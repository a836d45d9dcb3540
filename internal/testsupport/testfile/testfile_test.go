package testfile

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// recorder is a testing.TB that records a Fatal instead of ending the
// test (Fatal's Goexit is caught by running the read in its own
// goroutine).
type recorder struct {
	testing.TB
	failed bool
}

func (r *recorder) Helper()               {}
func (r *recorder) Fatal(...any)          { r.failed = true; runtime.Goexit() }
func (r *recorder) Fatalf(string, ...any) { r.failed = true; runtime.Goexit() }
func fails(t *testing.T, read func(tb testing.TB)) bool {
	t.Helper()
	r := &recorder{TB: t}
	done := make(chan struct{})
	go func() { defer close(done); read(r) }()
	<-done
	return r.failed
}

func TestReadJSONAndCSV(t *testing.T) {
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "good.json"), filepath.Join(dir, "bad.json")
	os.WriteFile(good, []byte(`{"a": [1, 2]}`), 0o644)
	os.WriteFile(bad, []byte(`{"a": [1, 2}`), 0o644)
	var v struct{ A []int }
	ReadJSON(t, good, &v)
	if len(v.A) != 2 || v.A[1] != 2 {
		t.Fatalf("%+v", v)
	}
	if !fails(t, func(tb testing.TB) { ReadJSON(tb, bad, &v) }) {
		t.Error("malformed JSON passed")
	}
	if !fails(t, func(tb testing.TB) { ReadJSON(tb, filepath.Join(dir, "absent"), &v) }) {
		t.Error("a missing file passed")
	}
	csvFile, ragged := filepath.Join(dir, "a.csv"), filepath.Join(dir, "b.csv")
	os.WriteFile(csvFile, []byte("x,y\n1,\"2,3\"\n"), 0o644)
	os.WriteFile(ragged, []byte("x,y\n1\n"), 0o644)
	if recs := ReadCSV(t, csvFile); len(recs) != 2 || recs[1][1] != "2,3" {
		t.Fatalf("%q", recs)
	}
	if !fails(t, func(tb testing.TB) { ReadCSV(tb, ragged) }) {
		t.Error("a ragged CSV passed")
	}
}
