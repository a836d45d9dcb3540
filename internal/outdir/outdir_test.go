package outdir

import (
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/canopy-hpc/canopy/internal/errkind"
)

// names are a command's outputs as the commands declare them.
var names = Names{Reports: []string{"predictions.csv", "report.json"}, Others: []string{"parts"}}

func write(t *testing.T, path, s string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func text(s string) func(io.Writer) error {
	return func(w io.Writer) error { _, err := io.WriteString(w, s); return err }
}

// One run at a time: a second lock is refused with exit 2 naming the
// holder; after Release the folder can be locked again. --out naming a
// file is a usage error.
func TestLockIsExclusive(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out")
	l, err := TakeLock(dir)
	if err != nil {
		t.Fatal(err)
	}
	_, err = TakeLock(dir)
	if errkind.Code(err) != errkind.ExitUsage || !strings.Contains(err.Error(), "in use by another canopy run") ||
		!strings.Contains(err.Error(), "pid ") {
		t.Fatalf("second lock: %v, want exit 2 naming the holder", err)
	}
	l.Release()
	l2, err := TakeLock(dir)
	if err != nil {
		t.Fatalf("lock after Release: %v", err)
	}
	l2.Release()
	file := filepath.Join(dir, "f")
	write(t, file, "x")
	if _, err := TakeLock(file); errkind.Code(err) != errkind.ExitUsage || !strings.Contains(err.Error(), "not a folder") {
		t.Fatalf("--out a file: %v", err)
	}
}

// A folder holding any declared output is refused without --force, and
// the refusal leaves the lock free.
func TestPrepareRefusesAPreviousRun(t *testing.T) {
	dir := t.TempDir()
	if o, err := Prepare(dir, false, names); err != nil {
		t.Fatalf("an empty folder: %v", err)
	} else {
		o.Finish(nil)
	}
	write(t, filepath.Join(dir, "parts", "0.part"), "p")
	_, err := Prepare(dir, false, names)
	if errkind.Code(err) != errkind.ExitUsage || !strings.Contains(err.Error(), "holds a previous run (parts)") {
		t.Fatalf("%v, want exit 2 naming parts", err)
	}
	o, err := Prepare(dir, true, names)
	if err != nil {
		t.Fatalf("--force after a refusal: %v", err)
	}
	o.Finish(nil)
}

// --force: the previous run is set aside, comes back when the new run
// fails before it commits, and is removed once it commits.
func TestForceRestoresOrCommits(t *testing.T) {
	for _, commit := range []bool{false, true} {
		dir := t.TempDir()
		write(t, filepath.Join(dir, "report.json"), "old report")
		write(t, filepath.Join(dir, "parts", "0.part"), "old part")
		write(t, filepath.Join(dir, "mine.txt"), "not canopy's")
		o, err := Prepare(dir, true, names)
		if err != nil {
			t.Fatal(err)
		}
		if !o.Aside() || len(names.Present(dir)) != 0 {
			t.Fatalf("after Prepare --force: aside %v, present %v", o.Aside(), names.Present(dir))
		}
		write(t, filepath.Join(dir, "report.json"), "new report")
		if commit {
			if err := o.Commit(); err != nil {
				t.Fatal(err)
			}
		}
		restored := o.Finish(errors.New("the run failed"))
		if restored == commit {
			t.Fatalf("commit %v: restored %v", commit, restored)
		}
		want := map[bool]string{false: "old report", true: "new report"}[commit]
		if got := read(t, filepath.Join(dir, "report.json")); got != want {
			t.Fatalf("commit %v: report.json %q, want %q", commit, got, want)
		}
		if _, err := os.Stat(filepath.Join(dir, "parts", "0.part")); (err == nil) == commit {
			t.Fatalf("commit %v: old part present = %v", commit, err == nil)
		}
		if _, err := os.Stat(filepath.Join(dir, PreviousDir)); err == nil {
			t.Fatalf("commit %v: %s left behind", commit, PreviousDir)
		}
		if read(t, filepath.Join(dir, "mine.txt")) != "not canopy's" {
			t.Fatal("a file canopy does not own was touched")
		}
	}
}

// stageNew stages "new NAME" as predictions.csv and report.json in dir,
// over an old report.json; each staged file carries the sha256 of its
// bytes.
func stageNew(t *testing.T, dir string) []Staged {
	t.Helper()
	write(t, filepath.Join(dir, "report.json"), "old")
	var set []Staged
	for _, n := range []string{"predictions.csv", "report.json"} {
		s, err := Stage(dir, n, text("new "+n))
		if err != nil {
			t.Fatal(err)
		}
		if s.SHA256 != SHA256Hex([]byte("new "+n)) || s.Name != n || !strings.HasPrefix(s.Tmp, "."+n+".tmp") {
			t.Fatalf("staged %+v", s)
		}
		set = append(set, s)
	}
	return set
}

// Publish puts a staged set in place and removes its journal; each staged
// file carries the sha256 of its bytes.
func TestPublish(t *testing.T) {
	dir := t.TempDir()
	set := stageNew(t, dir)
	var order []string
	PublishHook = func(name string) { order = append(order, name) }
	defer func() { PublishHook = nil }()
	if err := Publish(dir, set); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"predictions.csv", "report.json"} {
		if got := read(t, filepath.Join(dir, n)); got != "new "+n {
			t.Fatalf("%s: %q", n, got)
		}
	}
	if !slices.Equal(order, []string{"predictions.csv", "report.json"}) {
		t.Fatalf("published in order %v", order)
	}
	if _, found, err := ReadJournal(dir); found || err != nil {
		t.Fatalf("journal left: found %v, %v", found, err)
	}
}

// A folder's fsync that fails (an I/O error of the disk or server) at any
// of a publication's syncs fails it, exit 1 naming the error, where it
// was dropped; the next start finishes the publication. A filesystem that
// cannot sync a folder (EINVAL, ENOTSUP, EBADF) is taken as it is; a
// filesystem gone read-only since the renames (EROFS) fails it.
func TestPublishSyncError(t *testing.T) {
	calls, fail := 0, 0
	var failWith error
	syncDir = func(d *os.File) error {
		if calls++; calls == fail {
			return failWith
		}
		return d.Sync()
	}
	defer func() { syncDir = (*os.File).Sync }()
	dir := t.TempDir()
	calls = 0
	if err := Publish(dir, stageNew(t, dir)); err != nil {
		t.Fatal(err)
	}
	syncs := calls
	if syncs < 3 {
		t.Fatalf("a publication synced its folder %d times", syncs)
	}
	for k := 1; k <= syncs; k++ {
		for _, e := range []error{syscall.EIO, syscall.EROFS, syscall.EINVAL, syscall.ENOTSUP, syscall.EBADF} {
			dir := t.TempDir()
			set := stageNew(t, dir)
			calls, fail, failWith = 0, k, e
			err := Publish(dir, set)
			fail = 0
			if e != syscall.EIO && e != syscall.EROFS {
				if err != nil {
					t.Fatalf("sync %d of %d: %v (no folder sync here) failed the publication: %v", k, syncs, e, err)
				}
				continue
			}
			if !errors.Is(err, e) || errkind.Code(err) != errkind.ExitInternal || !strings.Contains(err.Error(), "sync the folder") {
				t.Fatalf("sync %d of %d failing: %v, want exit 1 naming the folder's sync", k, syncs, err)
			}
			o, err := Open(dir, names)
			if err != nil {
				t.Fatalf("sync %d: the next start: %v", k, err)
			}
			o.Finish(nil)
			for _, n := range []string{"predictions.csv", "report.json"} {
				if got := read(t, filepath.Join(dir, n)); got != "new "+n {
					t.Fatalf("sync %d failed: after the next start %s holds %q", k, n, got)
				}
			}
		}
	}
}

// A kill after the journal was written is finished at the next start
// (Open's tidy-up), and the leftovers of a killed run go; other files
// stay.
func TestOpenFinishesAPublicationAndTidies(t *testing.T) {
	dir := t.TempDir()
	s, err := Stage(dir, "report.json", text("published after the kill"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal([]Staged{s})
	if err := WriteAtomic(dir, JournalName, func(w io.Writer) error { _, err := w.Write(b); return err }); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{".predictions.csv.tmp123", ".canopy-probe-abc", DiscardPrefix + "x/y", FaultPrefix + "-1", "keep.csv.tmp"} {
		write(t, filepath.Join(dir, f), "leftover")
	}
	o, err := Open(dir, names)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Finish(nil)
	if got := read(t, filepath.Join(dir, "report.json")); got != "published after the kill" {
		t.Fatalf("report.json %q", got)
	}
	ents, _ := os.ReadDir(dir)
	var left []string
	for _, e := range ents {
		left = append(left, e.Name())
	}
	if want := []string{LockName, "keep.csv.tmp", "report.json"}; !slices.Equal(left, want) {
		t.Fatalf("folder holds %v, want %v", left, want)
	}
}

// A journal naming a path outside the folder is refused, never followed.
func TestJournalOutsideRefused(t *testing.T) {
	dir := t.TempDir()
	b, _ := json.Marshal([]Staged{{Tmp: "../escape", Name: "report.json"}})
	write(t, filepath.Join(dir, JournalName), string(b))
	if _, err := Open(dir, names); err == nil || !strings.Contains(err.Error(), "outside the folder") {
		t.Fatalf("%v, want the journal refused", err)
	}
}

func TestHashes(t *testing.T) {
	const abc = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" // sha256("abc"), FIPS 180-2
	if SHA256Hex([]byte("abc")) != abc {
		t.Fatalf("SHA256Hex(abc) = %s", SHA256Hex([]byte("abc")))
	}
	p := filepath.Join(t.TempDir(), "f")
	write(t, p, "abc")
	if FileSHA(p) != abc || FileSHA(p+".missing") != "" {
		t.Fatalf("FileSHA %q, missing %q", FileSHA(p), FileSHA(p+".missing"))
	}
	if ShortSHA(abc) != "ba7816bf8f01…" || ShortSHA(abc[:13]) != "ba7816bf8f01…" || ShortSHA(abc[:12]) != abc[:12] {
		t.Fatalf("ShortSHA %q", ShortSHA(abc))
	}
}
