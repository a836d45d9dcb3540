package confine

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/canopy-hpc/canopy/internal/dataset"
)

// tree makes root/in.png, root/sub/, outside.png beside root, and links
// root/up -> .. (out of the root) and root/ok -> sub (inside).
func tree(t *testing.T) (root, outside string) {
	t.Helper()
	dir := t.TempDir()
	root = filepath.Join(dir, "root")
	outside = filepath.Join(dir, "outside.png")
	for _, f := range []string{filepath.Join(root, "in.png"), filepath.Join(root, "sub", "a.png"), outside} {
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, []byte("0123456789"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("..", filepath.Join(root, "up")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("sub", filepath.Join(root, "ok")); err != nil {
		t.Fatal(err)
	}
	return root, outside
}

func TestCheck(t *testing.T) {
	root, outside := tree(t)
	c := New(root)
	for _, p := range []string{"in.png", "sub/a.png", "ok/a.png", "missing.png"} {
		if err := c.Check(p); err != nil {
			t.Errorf("Check(%q): %v, want nil", p, err)
		}
	}
	for _, c2 := range []struct{ p, why string }{
		{outside, "an absolute path"},
		{"../outside.png", `a ".." element`},
		{"sub/../../outside.png", `a ".." element`},
		{"up/outside.png", "a symlink to"},
	} {
		err := c.Check(c2.p)
		if err == nil || !strings.Contains(err.Error(), c2.why) || !errors.Is(err, dataset.ErrInput) {
			t.Errorf("Check(%q): %v, want an input error saying %q", c2.p, err, c2.why)
		}
	}
	// a root that does not exist: only the textual checks apply
	if err := New(filepath.Join(root, "nope")).Check("in.png"); err != nil {
		t.Errorf("missing root: %v", err)
	}
	if got := ImageFile(root, "sub/a.png"); got != filepath.Join(root, "sub", "a.png") {
		t.Errorf("ImageFile relative: %q", got)
	}
	if got := ImageFile(root, outside); got != outside {
		t.Errorf("ImageFile absolute: %q", got)
	}
}

func TestRecordedReader(t *testing.T) {
	root, outside := tree(t)
	read := RecordedReader(context.Background())
	if b, err := read(root, "in.png", 10); err != nil || string(b) != "0123456789" {
		t.Fatalf("inside, at the cap: %q %v", b, err)
	}
	if b, err := read(root, filepath.Join(root, "sub", "a.png"), 10); err != nil || len(b) != 10 {
		t.Fatalf("inside, absolute: %q %v", b, err)
	}
	// a relative path is the file under root that was checked, never the
	// one of that name in the working folder (which may lie outside root)
	wd := t.TempDir()
	if err := os.WriteFile(filepath.Join(wd, "in.png"), []byte("outside!"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Chdir(wd)
	if b, err := read(root, "in.png", 10); err != nil || string(b) != "0123456789" {
		t.Fatalf("relative path with a namesake in the working folder: %q %v", b, err)
	}
	for _, c := range []struct {
		root, p string
		limit   int64
		why     string
	}{
		{root, "in.png", 9, "10 bytes, over the cap of 9"},
		{root, outside, 100, "outside the report's root folder"},
		{root, "up/outside.png", 100, "outside the report's root folder"},
		{"", "in.png", 100, "records no root folder"},
		{root, "sub", 100, "not read"},
	} {
		if b, err := read(c.root, c.p, c.limit); err == nil || !strings.Contains(err.Error(), c.why) {
			t.Errorf("read(%q, %q, %d) = %d bytes, %v; want an error saying %q", c.root, c.p, c.limit, len(b), err, c.why)
		}
	}
}

// A read that hangs (a stalled filesystem) ends at RecordedFileTimeout, or
// at once when the context is cancelled.
func TestRecordedReaderGivesUp(t *testing.T) {
	root, _ := tree(t)
	block := make(chan struct{})
	defer close(block)
	hook, timeout := ReadHook, RecordedFileTimeout
	t.Cleanup(func() { ReadHook, RecordedFileTimeout = hook, timeout })
	ReadHook = func(string) { <-block }
	RecordedFileTimeout = 50 * time.Millisecond
	if _, err := RecordedReader(context.Background())(root, "in.png", 100); err == nil || !strings.Contains(err.Error(), "not read within") {
		t.Fatalf("stalled read: %v, want the timeout", err)
	}
	RecordedFileTimeout = time.Hour
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(20*time.Millisecond, cancel)
	if _, err := RecordedReader(ctx)(root, "in.png", 100); err == nil || !strings.Contains(err.Error(), "interrupted") {
		t.Fatalf("cancelled read: %v, want interrupted", err)
	}
	if _, err := RecordedReader(ctx)(root, "in.png", 100); err == nil || !strings.Contains(err.Error(), "interrupted") {
		t.Fatalf("read after the cancel: %v, want interrupted", err)
	}
}

// A regular file and a FIFO nobody writes to are read (the FIFO as empty,
// without hanging in open); a device is refused.
func TestReadNamedInput(t *testing.T) {
	root, _ := tree(t)
	if b, err := ReadNamedInput(filepath.Join(root, "in.png")); err != nil || string(b) != "0123456789" {
		t.Fatalf("regular file: %q %v", b, err)
	}
	fifo := filepath.Join(root, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	type result struct {
		b   []byte
		err error
	}
	done := make(chan result, 1)
	go func() { b, err := ReadNamedInput(fifo); done <- result{b, err} }()
	select {
	case r := <-done:
		if r.err != nil || len(r.b) != 0 {
			t.Fatalf("FIFO without a writer: %q %v, want empty", r.b, r.err)
		}
	case <-time.After(10 * time.Second): // the read takes microseconds
		t.Fatal("FIFO without a writer: ReadNamedInput hangs (in open)")
	}
	if _, err := ReadNamedInput("/dev/zero"); err == nil || !strings.Contains(err.Error(), "not a regular file or a pipe") {
		t.Fatalf("/dev/zero: %v, want refused", err)
	}
	if _, err := ReadNamedInput(filepath.Join(root, "missing")); err == nil {
		t.Fatal("a missing file read")
	}
}
