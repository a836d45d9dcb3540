package jobs

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/internal/collective"
	"github.com/canopy-hpc/canopy/internal/confine"
	"github.com/canopy-hpc/canopy/internal/detect"
	"github.com/canopy-hpc/canopy/internal/errkind"
	"github.com/canopy-hpc/canopy/internal/modelsel"
	"github.com/canopy-hpc/canopy/internal/outdir"
	"github.com/canopy-hpc/canopy/internal/output"
	"github.com/canopy-hpc/canopy/internal/parts"
	"github.com/canopy-hpc/canopy/internal/wire"
	"github.com/canopy-hpc/canopy/mpi"
)

// manifest is OUT/manifest.json: what the part files were computed from.
// --resume continues only when the current run would compute the same
// detections.
type manifest struct {
	// Job is "predict" for plain predict's run (eval's leaves it empty).
	Job         string `json:"job,omitempty"`
	Canopy      string `json:"canopy"`
	CSV         string `json:"csv_sha256"`
	Predictions string `json:"predictions_sha256"`
	LabelDict   string `json:"label_dict_sha256"`
	// Images is predict's image list: the sha256 of the paths in order.
	Images   string `json:"images_sha256,omitempty"`
	Detector string `json:"detector"`
	// DetectorSettings are the detector's thresholds (none for replay).
	DetectorSettings map[string]string `json:"detector_settings"`
	// RootDir is --root-dir made absolute: the image paths' folder. Each
	// image's identity is in its part record (checkResumedImages).
	RootDir string `json:"root_dir"`
}

func newManifest(cfg EvalConfig, in inputs) manifest {
	m := manifest{Canopy: output.Version, CSV: outdir.SHA256Hex(in.csv), Predictions: outdir.SHA256Hex(in.preds), Detector: "replay",
		DetectorSettings: map[string]string{}, RootDir: absRoot(cfg)}
	if cfg.Model.Spec != "" {
		m.Detector = "retinanet weights sha256 " + in.modelDigest
		m.DetectorSettings = detectorSettings(cfg.Model, in.modelConfig)
	}
	if in.labels != nil {
		m.LabelDict = outdir.SHA256Hex(in.labels)
	}
	return m
}

// detectorSettings are a model run's settings a resume must share (internal/modelsel).
var detectorSettings = modelsel.DetectorSettings

// diff names every field in which m and o differ.
func (m manifest) diff(o manifest) []string {
	var d []string
	cmp := func(name, a, b string) {
		if a != b {
			d = append(d, fmt.Sprintf("%s: %q in the run to resume, %q now", name, a, b))
		}
	}
	cmp("job", m.Job, o.Job)
	cmp("canopy version", m.Canopy, o.Canopy)
	cmp("csv sha256", m.CSV, o.CSV)
	cmp("predictions sha256", m.Predictions, o.Predictions)
	cmp("label dict sha256", m.LabelDict, o.LabelDict)
	cmp("image list sha256", m.Images, o.Images)
	cmp("detector", m.Detector, o.Detector)
	if m.RootDir == "" && o.RootDir != "" {
		d = append(d, fmt.Sprintf("root folder: not recorded in the run to resume (an older canopy), %q now", o.RootDir))
	} else {
		cmp("root folder", m.RootDir, o.RootDir)
	}
	a, _ := json.Marshal(m.DetectorSettings)
	b, _ := json.Marshal(o.DetectorSettings)
	cmp("detector settings", string(a), string(b))
	return d
}

// absRoot is the run's root folder (--root-dir, default the CSV's folder),
// absolute and clean, as the manifest records it.
func absRoot(cfg EvalConfig) string {
	root := cfg.RootDir
	if root == "" {
		root = filepath.Dir(cfg.CSV)
	}
	return absPath(root)
}

// absPath is root made absolute and clean.
func absPath(root string) string {
	if a, err := filepath.Abs(root); err == nil {
		return a
	}
	return filepath.Clean(root)
}

// checkResumedImages is a collective: for a model run, every image taken
// from the part files is compared with the identity its record keeps
// (size, modification time, sha256), the checks spread over the ranks. An
// image that changed, or a record that keeps no identity (a part file of a
// canopy before identities), refuses the resume: exit 2, naming the image
// and what changed. A replay never reads the images: nothing to check.
func checkResumedImages(c mpi.Comm, rootDir string, images []box.Image, done map[int]parts.Done, model bool) error {
	var err error
	if model {
		idx := make([]int, 0, len(done))
		for i := range done {
			idx = append(idx, i)
		}
		sort.Ints(idx)
		for k := c.Rank(); k < len(idx) && err == nil; k += c.Size() {
			i := idx[k]
			err = checkResumedImage(rootDir, images[i].Path, done[i].Ident)
		}
	}
	if err != nil {
		err = usageErr("jobs: --resume refused, %w; the finished images would not be the ones this run reads: start again with --force (or another --out)", err)
	}
	return collective.AgreeErr(c, ExitUsage, err)
}

func checkResumedImage(rootDir, p string, rec *parts.Identity) error {
	if rec == nil {
		return fmt.Errorf("the part files keep no identity for image %q (written by an older canopy), so it cannot be checked", p)
	}
	cur, err := detect.Identify(confine.ImageFile(rootDir, p))
	if err != nil {
		return fmt.Errorf("image %q of the run to resume: %w", p, err)
	}
	var what []string
	if cur.Size != rec.Size {
		what = append(what, fmt.Sprintf("size %d bytes then, %d now", rec.Size, cur.Size))
	}
	if cur.MtimeNS != rec.MtimeNS {
		what = append(what, fmt.Sprintf("modified %s then, %s now", time.Unix(0, rec.MtimeNS).UTC().Format(time.RFC3339Nano), time.Unix(0, cur.MtimeNS).UTC().Format(time.RFC3339Nano)))
	}
	if cur.SHA256 != rec.SHA256 {
		what = append(what, fmt.Sprintf("sha256 %x then, %x now", rec.SHA256[:8], cur.SHA256[:8]))
	}
	if len(what) > 0 {
		return fmt.Errorf("image %q changed since it was detected: %s", p, strings.Join(what, ", "))
	}
	return nil
}

// prepareOut is rank 0's output-folder step of eval, before anything is
// computed (openImagesRun with eval's manifest).
func prepareOut(cfg EvalConfig, in *inputs) (*outdir.Run, error) {
	o, saved, err := openImagesRun(cfg.Out, cfg.Resume, cfg.Force, newManifest(cfg, *in))
	if err != nil {
		return nil, err
	}
	in.probe, in.parts, in.attempt = saved.probe, saved.parts, saved.attempt
	return o, nil
}

// savedRun is what openImagesRun finds for the ranks: the shared-filesystem
// probe, and for --resume the part files and the next attempt number.
type savedRun struct {
	probe   string
	attempt int
	parts   []parts.File
}

// openImagesRun is rank 0's output-folder step of a run over whole images
// (eval, plain predict), before anything is computed: it locks the folder
// (openOut) for the whole run; for a new run it refuses a folder holding a
// previous one (unless force, which sets it aside until the new run
// commits) and writes cur as the manifest; for --resume it checks the
// manifest against cur and reads the part files. It also writes the
// shared-filesystem probe that every rank reads back.
func openImagesRun(dir string, resume, force bool, cur manifest) (*outdir.Run, savedRun, error) {
	var saved savedRun
	o, err := outdir.Open(dir, outNames)
	if err != nil {
		return nil, saved, err
	}
	check := func(b []byte) error {
		if err := checkRunKind(dir, b, cur.kind()); err != nil {
			return err
		}
		var old manifest
		if err := json.Unmarshal(b, &old); err != nil {
			return usageErr("jobs: --resume: %s: %w", outdir.ManifestFile, err)
		}
		if d := old.diff(cur); len(d) > 0 {
			return usageErr("jobs: --resume refused, the inputs differ from the run in %s: %s", dir, strings.Join(d, "; "))
		}
		return nil
	}
	if saved.probe, err = outdir.PrepareRun(o, dir, resume, force, cur, check); err == nil && resume {
		if saved.parts, err = parts.ReadAll(dir); err != nil {
			err = ioErr("jobs: --resume: %w", err)
		}
		saved.attempt = parts.NextAttempt(saved.parts)
	}
	if err != nil {
		o.Finish(err)
		return nil, saved, err
	}
	return o, saved, nil
}

// packSaved and unpackSaved carry a savedRun in rank 0's broadcast: the
// probe, the attempt and then every part file (the packet's last fields).
func packSaved(fields [][]byte, saved savedRun) [][]byte {
	fields = append(fields, []byte(saved.probe), binary.LittleEndian.AppendUint64(nil, uint64(saved.attempt)))
	for _, f := range saved.parts {
		fields = append(fields, f.Data)
	}
	return fields
}

func unpackSaved(f [][]byte) (savedRun, error) {
	if len(f) < 2 || len(f[1]) != 8 {
		return savedRun{}, collectiveErr(ExitInternal, "jobs: malformed input broadcast")
	}
	saved := savedRun{probe: string(f[0]), attempt: int(binary.LittleEndian.Uint64(f[1]))}
	for k, d := range f[2:] {
		saved.parts = append(saved.parts, parts.File{Name: fmt.Sprintf("part %d", k), Data: d})
	}
	return saved, nil
}

// resumedImages is a collective of a run over whole images, once every
// rank knows the images: the probe is read back (checkSharedOut), the part
// files decoded, and the images they hold checked against their recorded
// identity (checkResumedImages; model says the images were read).
func resumedImages(c mpi.Comm, out, rootDir string, saved savedRun, images []box.Image, model bool) (map[int]parts.Done, parts.Stats, error) {
	if err := outdir.CheckShared(c, out, saved.probe); err != nil {
		return nil, parts.Stats{}, err
	}
	done, pst, err := parts.Decode(saved.parts, len(images))
	if err != nil {
		return nil, pst, collectiveErr(ExitInput, "jobs: --resume: %w", err)
	}
	return done, pst, checkResumedImages(c, rootDir, images, done, model)
}

// savedImages are the images done holds, in image order.
func savedImages(done map[int]parts.Done, n int) []wire.Image {
	prev := make([]wire.Image, 0, len(done))
	for i := 0; i < n; i++ {
		if d, ok := done[i]; ok {
			prev = append(prev, d.Image)
		}
	}
	return prev
}

// partsRecorder is a rank's part file of a run over whole images: record
// appends a finished batch; rank 0's first saved record commits a --force
// run (the previous run is removed).
type partsRecorder struct {
	pw  *parts.Writer
	out *outdir.Run
}

func openRecorder(out *outdir.Run, dir string, saved savedRun, rank int) (*partsRecorder, error) {
	pw, err := createParts(dir, saved.probe, saved.attempt, rank, time.Second)
	if err != nil {
		return nil, localErr(ExitInternal, "jobs: %w", err)
	}
	return &partsRecorder{pw: pw, out: out}, nil
}

// record: a part file that cannot be written is an I/O error of canopy's
// own files (exit 1), whatever the detector.
func (r *partsRecorder) record(ims []wire.Image, ids []parts.Identity) error {
	if err := r.pw.Append(ims, ids); err != nil {
		return &Error{Code: ExitInternal, Err: err}
	}
	if err := r.out.Commit(); err != nil {
		return &Error{Code: ExitInternal, Err: err}
	}
	return nil
}

// close syncs the part file and, after a detection that ended well
// (derr nil), commits a --force run whose rank 0 saved nothing (an empty
// shard); it returns derr or the first error of its own.
func (r *partsRecorder) close(derr error) error {
	if err := r.pw.Close(); err != nil && derr == nil {
		derr = &Error{Code: ExitInternal, Err: err}
	}
	if derr == nil {
		if err := r.out.Commit(); err != nil {
			derr = &Error{Code: ExitInternal, Err: err}
		}
	}
	return derr
}

// finishImagesRun is rank 0's end of a run over whole images (deferred):
// the folder is released, and a --force run interrupted before it saved
// anything says the previous run is back.
func finishImagesRun(out *outdir.Run, dir string, err *error) {
	if out.Finish(*err) && errors.Is(*err, errkind.ErrInterrupted) {
		*err = &Error{Code: Code(*err), Err: fmt.Errorf("%w (the new --force run had saved nothing yet: the previous run in %s is back; run again with --force)", *err, dir)}
	}
}
