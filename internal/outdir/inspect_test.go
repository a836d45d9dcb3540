package outdir

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// doctor --out's reading of the transaction: the lock's holder while it
// is held, each unsettled state named.
func TestInspect(t *testing.T) {
	dir := t.TempDir()
	if b := Busy(dir); b != "" {
		t.Fatalf("no lock file, busy %q", b)
	}
	l, err := TakeLock(dir)
	if err != nil {
		t.Fatal(err)
	}
	if b := Busy(dir); !strings.HasPrefix(b, "in use by a running canopy job (") {
		t.Errorf("locked, busy %q", b)
	}
	l.Release()
	if b := Busy(dir); b != "" {
		t.Errorf("released, busy %q", b)
	}
	if msg, ok := Unsettled(dir); ok || Publishing(dir) {
		t.Fatalf("an empty folder is unsettled: %q", msg)
	}
	write := func(name, s string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(JournalName, "[{]")
	if msg, ok := Unsettled(dir); !ok || !strings.HasPrefix(msg, "damaged: ") || !Publishing(dir) {
		t.Errorf("torn journal: %q %v", msg, ok)
	}
	write(JournalName, "[]")
	if msg, ok := Unsettled(dir); ok {
		t.Errorf("a readable journal alone is unsettled: %q", msg)
	}
	write(filepath.Join(PreviousDir, MovedList), "not json")
	if msg, ok := Unsettled(dir); !ok || !strings.Contains(msg, "unreadable "+MovedList) {
		t.Errorf("unreadable list: %q %v", msg, ok)
	}
	write(filepath.Join(PreviousDir, MovedList), `["report.json"]`)
	if msg, ok := Unsettled(dir); !ok || !strings.Contains(msg, "stopped while publishing its complete outputs") {
		t.Errorf("--force run publishing: %q %v", msg, ok)
	}
	os.Remove(filepath.Join(dir, JournalName))
	if msg, ok := Unsettled(dir); !ok || !strings.Contains(msg, "stopped before it committed") {
		t.Errorf("--force run not committed: %q %v", msg, ok)
	}

}

// ReadRegular refuses what is not a regular file of the size allowed.
func TestReadRegular(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	os.WriteFile(p, []byte("12345"), 0o644)
	if b, err := ReadRegular(p, 5); err != nil || string(b) != "12345" {
		t.Fatalf("%q %v", b, err)
	}
	if _, err := ReadRegular(p, 4); err == nil {
		t.Error("read 5 bytes under a cap of 4")
	}
	os.Symlink(p, filepath.Join(dir, "l"))
	if _, err := ReadRegular(filepath.Join(dir, "l"), 5); err == nil {
		t.Error("followed a link")
	}
}
