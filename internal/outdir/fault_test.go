package outdir

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/canopy-hpc/canopy/internal/errkind"
)

// The fault markers as a pair: what WriteFault leaves, HasFault sees and
// FaultOf reads back (the lowest rank's code and message, printable);
// Failed counts a usage, input or model error, not an interruption.
func TestFault(t *testing.T) {
	dir := t.TempDir()
	if _, _, ok := FaultOf(dir); ok || HasFault(dir) {
		t.Fatal("a fault without markers")
	}
	WriteFault(dir, 1, errkind.ExitMPI, errors.New("rank 1's"))
	if !HasFault(dir) {
		t.Fatal("HasFault misses rank 1's marker")
	}
	if msg, code, ok := FaultOf(dir); !ok || code != errkind.ExitMPI || msg != "rank 1's" {
		t.Errorf("FaultOf: %q %d %v, want rank 1's MPI error", msg, code, ok)
	}
	WriteFault(dir, 0, errkind.ExitInput, errors.New("bad \x1b[2Jcsv"))
	msg, code, ok := Failed(dir)
	if !ok || code != errkind.ExitInput || msg != `bad \x1b[2Jcsv` {
		t.Errorf("Failed: %q %d %v, want rank 0's input error, printable", msg, code, ok)
	}
	WriteFault(dir, 0, errkind.ExitResumable, errors.New("interrupted"))
	if _, code, ok := Failed(dir); ok || code != errkind.ExitResumable {
		t.Errorf("an interruption counts as a failure (code %d)", code)
	}
	// a marker without a code is skipped for the next rank's
	if err := os.WriteFile(filepath.Join(dir, FaultPrefix+"-0"), []byte("torn"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, code, ok := FaultOf(dir); !ok || code != errkind.ExitMPI {
		t.Errorf("a torn marker: code %d %v, want rank 1's", code, ok)
	}
}

// The interruption's line: the first claim says it, a second is silent
// once the first has said it, and says it itself when the first never
// does within sayWait; a folder that takes no claim says it; the next
// run's Tidy removes the claim.
func TestClaimSay(t *testing.T) {
	dir := t.TempDir()
	done, say := ClaimSay(dir)
	if !say {
		t.Fatal("the first claim does not say the line")
	}
	old := sayWait
	defer func() { sayWait = old }()
	sayWait = 50 * time.Millisecond
	if _, say := ClaimSay(dir); !say {
		t.Error("a claim lost to a rank that never said its line stays silent: nobody says it")
	}
	done()
	sayWait = time.Minute // only a loser that misses the line waits it out, and then says it
	if _, say := ClaimSay(dir); say {
		t.Error("a second rank says the line again")
	}
	if _, say := ClaimSay(filepath.Join(dir, "no such folder")); !say {
		t.Error("a folder that takes no claim: nobody says the line")
	}
	if err := Tidy(dir, Names{}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, SaidName)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Tidy left the claim of the last run's line: %v", err)
	}
}
