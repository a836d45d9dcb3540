package outdir

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/canopy-hpc/canopy/internal/errkind"
	"github.com/canopy-hpc/canopy/internal/parts"
	"github.com/canopy-hpc/canopy/mpi"
)

// PrepareRun is the output-folder step of a resumable run (eval, predict
// --tile, eval --tile), under the lock: --resume reads the manifest and
// hands it to check; a new run refuses a folder holding a previous one
// (unless force, which sets it aside until the new run commits, or a
// start that saved nothing) and writes cur as the manifest. Then the
// shared-filesystem probe (returned) and the parts folder.
func PrepareRun(o *Run, dir string, resume, force bool, cur any, check func(old []byte) error) (string, error) {
	if resume {
		b, err := os.ReadFile(filepath.Join(dir, ManifestFile))
		if err != nil {
			return "", errkind.Usage("jobs: --resume: no run to resume in %s: %w", dir, err)
		}
		if err := check(b); err != nil {
			return "", err
		}
	} else {
		present := o.names.Present(dir)
		switch {
		case len(present) == 0:
		case force:
			o.aside = true // finish puts back a move that failed part way
			if err := SetAside(dir, present); err != nil {
				return "", err
			}
		case abortedStart(dir, o.names):
			for _, f := range present {
				if err := os.RemoveAll(filepath.Join(dir, f)); err != nil {
					return "", errkind.IO("jobs: output folder: %w", err)
				}
			}
		default:
			return "", errkind.Usage("jobs: output folder %s holds a previous run (%s); choose another --out, pass --resume to continue it or --force to replace it", dir, present[0])
		}
		b, _ := json.MarshalIndent(cur, "", " ")
		if err := WriteAtomic(dir, ManifestFile, func(w io.Writer) error { _, err := w.Write(b); return err }); err != nil {
			return "", errkind.IO("%w", err)
		}
	}
	o.probe = Nonce() + Nonce()
	if err := os.WriteFile(filepath.Join(dir, probeName(o.probe)), []byte(o.probe), 0o644); err != nil {
		return "", errkind.IO("jobs: output folder: %w", err)
	}
	// The parts folder is this run's: a rank opens its part file only there.
	if err := parts.Prepare(dir, o.probe); err != nil {
		return "", errkind.IO("jobs: output folder: %w", err)
	}
	return o.probe, nil
}

// abortedStart reports a folder left by a run that failed before any
// image was saved (a model or pre-flight error after the manifest was
// written): no report, no part file with a record. Nothing would be lost
// by starting again, so it does not need --force.
func abortedStart(dir string, names Names) bool {
	for _, f := range names.Reports {
		if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
			return false
		}
	}
	if _, err := os.Stat(filepath.Join(dir, ManifestFile)); err != nil {
		return false
	}
	files, err := parts.ReadAll(dir)
	if err != nil {
		return false
	}
	for _, f := range files {
		if len(f.Data) > 0 {
			return false
		}
	}
	return true
}

func probeName(nonce string) string { return ".canopy-probe-" + nonce }

// CheckShared: every rank reads rank 0's probe file, so a --out that is
// not on a filesystem all ranks see fails before any work, naming the
// ranks that cannot see it.
func CheckShared(c mpi.Comm, out, probe string) error {
	b, err := os.ReadFile(filepath.Join(out, probeName(probe)))
	ok := int64(1)
	if err != nil || string(b) != probe {
		ok = 0
	}
	all, gerr := c.AllgatherInt64(ok)
	if gerr != nil {
		return errkind.Local(errkind.ExitMPI, "jobs: shared output check: %w", gerr)
	}
	if c.Rank() == 0 {
		os.Remove(filepath.Join(out, probeName(probe)))
	}
	var blind []string
	for r, v := range all {
		if v == 0 {
			blind = append(blind, strconv.Itoa(r))
		}
	}
	if len(blind) > 0 {
		return errkind.Collective(errkind.ExitMPI, "jobs: --out %s is not on a filesystem every rank sees: rank(s) %s cannot read rank 0's probe file", out, strings.Join(blind, ", "))
	}
	return nil
}
