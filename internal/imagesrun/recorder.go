package imagesrun

import (
	"time"

	"github.com/canopy-hpc/canopy/internal/errkind"
	"github.com/canopy-hpc/canopy/internal/outdir"
	"github.com/canopy-hpc/canopy/internal/parts"
	"github.com/canopy-hpc/canopy/internal/wire"
)

// CreateParts opens a rank's part file: parts.Create, a seam the tests
// replace (a full disk).
var CreateParts = parts.Create

// Recorder is a rank's part file of a run over whole images: Record
// appends a finished batch; rank 0's first saved record commits a --force
// run (the previous run is removed).
type Recorder struct {
	pw  *parts.Writer
	out *outdir.Run
}

// OpenRecorder opens the part file of rank in dir, for the run saved
// describes (its probe and attempt); out is rank 0's hold on the folder
// (nil elsewhere).
func OpenRecorder(out *outdir.Run, dir string, saved Saved, rank int) (*Recorder, error) {
	pw, err := CreateParts(dir, saved.Probe, saved.Attempt, rank, time.Second)
	if err != nil {
		return nil, errkind.Local(errkind.ExitInternal, "jobs: %w", err)
	}
	return &Recorder{pw: pw, out: out}, nil
}

// Record appends a finished batch (detect.Shard's record). A part file
// that cannot be written is an I/O error of canopy's own files (exit 1),
// whatever the detector.
func (r *Recorder) Record(ims []wire.Image, ids []parts.Identity) error {
	if err := r.pw.Append(ims, ids); err != nil {
		return &errkind.Error{Code: errkind.ExitInternal, Err: err}
	}
	if err := r.out.Commit(); err != nil {
		return &errkind.Error{Code: errkind.ExitInternal, Err: err}
	}
	return nil
}

// Close syncs the part file and, after a detection that ended well
// (derr nil), commits a --force run whose rank 0 saved nothing (an empty
// shard); it returns derr or the first error of its own. The part file's
// close error is never dropped: after derr it is joined to it (derr keeps
// its code), since the file is what a --resume reads.
func (r *Recorder) Close(derr error) error {
	if err := r.pw.Close(); err != nil {
		derr = errkind.Join(derr, &errkind.Error{Code: errkind.ExitInternal, Err: err})
	}
	if derr == nil {
		if err := r.out.Commit(); err != nil {
			derr = &errkind.Error{Code: errkind.ExitInternal, Err: err}
		}
	}
	return derr
}
