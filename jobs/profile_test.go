package jobs

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestProfileWriteError: CANOPY_CPUPROFILE naming a file on a full disk
// (prefix.rank0 a link to /dev/full): the profile's write error is said
// once and a run that otherwise ended well exits 1 (canopy's own file),
// where it exited 0 with an empty profile; a profile that writes is not
// empty and the run exits 0.
func TestProfileWriteError(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full on this system")
	}
	dir := t.TempDir()
	run := func(prefix string) (int, string) {
		t.Setenv(ProfileEnv, prefix)
		var so, se bytes.Buffer
		code := MainWith(context.Background(), []string{"canopy", "version"}, &so, &se, nil)
		return code, se.String()
	}
	good := filepath.Join(dir, "good")
	if code, msg := run(good); code != ExitOK {
		t.Fatalf("a profile that writes: exit %d\n%s", code, msg)
	}
	if st, err := os.Stat(good + ".rank0"); err != nil || st.Size() == 0 {
		t.Fatalf("the profile was not written: %v", err)
	}
	full := filepath.Join(dir, "full")
	if err := os.Symlink("/dev/full", full+".rank0"); err != nil {
		t.Fatal(err)
	}
	code, msg := run(full)
	if code != ExitInternal || strings.Count(msg, "no space left on device") != 1 || !strings.Contains(msg, ProfileEnv) {
		t.Fatalf("a profile on a full disk: exit %d, want %d saying the write error once:\n%s", code, ExitInternal, msg)
	}
}
