package outdir

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

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
