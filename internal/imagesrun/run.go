package imagesrun

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/canopy-hpc/canopy/internal/errkind"
	"github.com/canopy-hpc/canopy/internal/outdir"
	"github.com/canopy-hpc/canopy/internal/output"
	"github.com/canopy-hpc/canopy/internal/parts"
	"github.com/canopy-hpc/canopy/internal/runkind"
)

// Folder is the output folder of a run and how it starts there: a new run
// (Force sets a previous run aside until the new one commits) or a
// --resume of the run it holds.
type Folder struct {
	Dir           string
	Resume, Force bool
}

// Saved is what Open finds for the ranks: the shared-filesystem probe,
// and for --resume the part files and the next attempt number.
type Saved struct {
	Probe   string
	Attempt int
	Parts   []parts.File
}

// Open is rank 0's output-folder step of a run over whole images (eval,
// plain predict), before anything is computed: it locks the folder
// (outdir.Open) for the whole run; for a new run it refuses a folder
// holding a previous one (unless Force, which sets it aside until the new
// run commits) and writes cur as the manifest; for --resume it checks the
// manifest against cur and reads the part files. It also writes the
// shared-filesystem probe that every rank reads back.
func Open(f Folder, cur Manifest) (*outdir.Run, Saved, error) {
	var saved Saved
	o, err := outdir.Open(f.Dir, output.Names)
	if err != nil {
		return nil, saved, err
	}
	check := func(b []byte) error {
		if err := runkind.Check(f.Dir, b, cur.Kind()); err != nil {
			return err
		}
		var old Manifest
		if err := json.Unmarshal(b, &old); err != nil {
			return errkind.Usage("jobs: --resume: %s: %w", outdir.ManifestFile, err)
		}
		if d := old.Diff(cur); len(d) > 0 {
			return errkind.Usage("jobs: --resume refused, the inputs differ from the run in %s: %s", f.Dir, strings.Join(d, "; "))
		}
		return nil
	}
	if saved.Probe, err = outdir.PrepareRun(o, f.Dir, f.Resume, f.Force, cur, check); err == nil && f.Resume {
		if saved.Parts, err = parts.ReadAll(f.Dir); err != nil {
			err = errkind.IO("jobs: --resume: %w", err)
		}
		saved.Attempt = parts.NextAttempt(saved.Parts)
	}
	if err != nil {
		o.Finish(err)
		return nil, saved, err
	}
	return o, saved, nil
}

// PackSaved and UnpackSaved carry a Saved in rank 0's broadcast: the
// probe, the attempt and then every part file (the packet's last fields).
func PackSaved(fields [][]byte, saved Saved) [][]byte {
	fields = append(fields, []byte(saved.Probe), binary.LittleEndian.AppendUint64(nil, uint64(saved.Attempt)))
	for _, f := range saved.Parts {
		fields = append(fields, f.Data)
	}
	return fields
}

// UnpackSaved reads the fields PackSaved appended (a collective error,
// exit 1, when they are malformed).
func UnpackSaved(f [][]byte) (Saved, error) {
	if len(f) < 2 || len(f[1]) != 8 {
		return Saved{}, errkind.Collective(errkind.ExitInternal, "jobs: malformed input broadcast")
	}
	saved := Saved{Probe: string(f[0]), Attempt: int(binary.LittleEndian.Uint64(f[1]))}
	for k, d := range f[2:] {
		saved.Parts = append(saved.Parts, parts.File{Name: fmt.Sprintf("part %d", k), Data: d})
	}
	return saved, nil
}

// Finish is rank 0's end of a run over whole images (deferred; out is nil
// on the other ranks): the folder is released, and a --force run
// interrupted before it saved anything says the previous run is back.
func Finish(out *outdir.Run, dir string, err *error) {
	if out.Finish(*err) && errors.Is(*err, errkind.ErrInterrupted) {
		*err = &errkind.Error{Code: errkind.Code(*err), Err: fmt.Errorf("%w (the new --force run had saved nothing yet: the previous run in %s is back; run again with --force)", *err, dir)}
	}
}
