package outdir

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/internal/errkind"
)

// A fault marker, OUT/.canopy-fault-<rank>, holds "<exit code> <message>":
// a rank that fails writes it before the job is aborted (WriteFault), so
// that the ranks the launcher then stops stay silent (HasFault), and
// canopy doctor --out reads why the run failed (FaultOf, Failed).

// WriteFault leaves rank's fault marker in dir: the exit code and the
// error. It is best effort: a folder that cannot take it leaves none.
func WriteFault(dir string, rank, code int, err error) {
	os.WriteFile(filepath.Join(dir, fmt.Sprintf("%s-%d", FaultPrefix, rank)), fmt.Appendf(nil, "%d %v", code, err), 0o644)
}

// HasFault tells whether a rank left a fault marker in dir.
func HasFault(dir string) bool {
	m, _ := filepath.Glob(filepath.Join(dir, FaultPrefix+"-*"))
	return len(m) > 0
}

// FaultOf reads the fault markers a failed run's ranks left (the lowest
// rank's): its message and exit code; ok is false when there is none or
// its code is not recorded.
func FaultOf(dir string) (msg string, code int, ok bool) {
	m, _ := filepath.Glob(filepath.Join(dir, FaultPrefix+"-*"))
	sort.Strings(m)
	for _, f := range m {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		c, rest, found := strings.Cut(string(b), " ")
		if n, err := strconv.Atoi(c); found && err == nil {
			return box.Printable(rest), n, true
		}
	}
	return "", 0, false
}

// Failed tells whether the fault a run left is a failure that a --resume
// with the same inputs meets again (a usage, input or model error), not
// an interruption: its message and code.
func Failed(dir string) (msg string, code int, ok bool) {
	msg, code, ok = FaultOf(dir)
	return msg, code, ok && (code == errkind.ExitUsage || code == errkind.ExitInput || code == errkind.ExitModel)
}

// SaidName is the claim of the one rank that says a job was interrupted,
// OUT/.canopy-said: every rank of a job signalled as a whole meets the
// same interruption, and whichever creates this file first says it.
const SaidName = ".canopy-said"

// sayWait bounds how long a rank that lost the claim waits for the
// winner's line. The winner claims, then writes one line to stderr, so
// the wait only guards a winner stopped between the two (killed, or its
// stderr blocked); after it the loser says the line itself, twice rather
// than never. 10 s is far above one write and well under the launcher's
// and the tests' bounds on the job (60 s and more).
var sayWait = 10 * time.Second

// ClaimSay makes the rank that says the job's interruption the only one:
// the first rank to claim it in dir gets say true and must call done once
// its line is written; a later rank gets say false once that is done
// (after at most sayWait), so its own exit or abort, on which the launcher
// stops every rank, cannot cut the winner off before its line is out. A
// folder that takes no claim gives say true: a line twice rather than none.
func ClaimSay(dir string) (done func(), say bool) {
	p := filepath.Join(dir, SaidName)
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err == nil {
		return func() { f.WriteString("said\n"); f.Close() }, true
	}
	if !errors.Is(err, fs.ErrExist) {
		return func() {}, true
	}
	for deadline := time.Now().Add(sayWait); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		// read, not stat: an open revalidates a network filesystem's
		// cached size (close-to-open), a stat may see it stale
		if b, err := os.ReadFile(p); err == nil && len(b) > 0 {
			return func() {}, false
		}
	}
	return func() {}, true
}
