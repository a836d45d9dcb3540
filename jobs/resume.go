package jobs

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/canopy-hpc/canopy/box"
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
	m := manifest{Canopy: Version, CSV: sha256Hex(in.csv), Predictions: sha256Hex(in.preds), Detector: "replay",
		DetectorSettings: map[string]string{}, RootDir: absRoot(cfg)}
	if cfg.Model.Spec != "" {
		m.Detector = "retinanet weights sha256 " + in.modelDigest
		m.DetectorSettings = detectorSettings(cfg.Model, in.modelConfig)
	}
	if in.labels != nil {
		m.LabelDict = sha256Hex(in.labels)
	}
	return m
}

// detectorSettings are the settings of a model run a resume must share:
// the model's config.json and the threshold, resize and blend flags.
func detectorSettings(mc ModelConfig, configDigest string) map[string]string {
	return map[string]string{
		"config_json_sha256": configDigest,
		"score_thresh_flag":  strconv.FormatFloat(mc.ScoreThresh, 'g', -1, 64),
		"nms_thresh_flag":    strconv.FormatFloat(mc.NMSThresh, 'g', -1, 64),
		"resize":             mc.Resize.String(),
		"blend":              mc.Blend.String(),
	}
}

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
	return agreeErr(c, ExitUsage, err)
}

func checkResumedImage(rootDir, p string, rec *parts.Identity) error {
	if rec == nil {
		return fmt.Errorf("the part files keep no identity for image %q (written by an older canopy), so it cannot be checked", p)
	}
	cur, err := identify(imageFile(rootDir, p))
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
func prepareOut(cfg EvalConfig, in *inputs) (*outRun, error) {
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
func openImagesRun(dir string, resume, force bool, cur manifest) (*outRun, savedRun, error) {
	var saved savedRun
	o, err := openOut(dir)
	if err != nil {
		return nil, saved, err
	}
	check := func(b []byte) error {
		if err := checkRunKind(dir, b, cur.kind()); err != nil {
			return err
		}
		var old manifest
		if err := json.Unmarshal(b, &old); err != nil {
			return usageErr("jobs: --resume: %s: %w", manifestFile, err)
		}
		if d := old.diff(cur); len(d) > 0 {
			return usageErr("jobs: --resume refused, the inputs differ from the run in %s: %s", dir, strings.Join(d, "; "))
		}
		return nil
	}
	if saved.probe, err = prepareRun(o, dir, resume, force, cur, check); err == nil && resume {
		if saved.parts, err = parts.ReadAll(dir); err != nil {
			err = ioErr("jobs: --resume: %w", err)
		}
		saved.attempt = parts.NextAttempt(saved.parts)
	}
	if err != nil {
		o.finish(err)
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
		return savedRun{}, collective(ExitInternal, "jobs: malformed input broadcast")
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
	if err := checkSharedOut(c, out, saved.probe); err != nil {
		return nil, parts.Stats{}, err
	}
	done, pst, err := parts.Decode(saved.parts, len(images))
	if err != nil {
		return nil, pst, collective(ExitInput, "jobs: --resume: %w", err)
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
	out *outRun
}

func openRecorder(out *outRun, dir string, saved savedRun, rank int) (*partsRecorder, error) {
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
	if err := r.out.commit(); err != nil {
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
		if err := r.out.commit(); err != nil {
			derr = &Error{Code: ExitInternal, Err: err}
		}
	}
	return derr
}

// finishImagesRun is rank 0's end of a run over whole images (deferred):
// the folder is released, and a --force run interrupted before it saved
// anything says the previous run is back.
func finishImagesRun(out *outRun, dir string, err *error) {
	if out.finish(*err) && errors.Is(*err, errInterrupted) {
		*err = &Error{Code: Code(*err), Err: fmt.Errorf("%w (the new --force run had saved nothing yet: the previous run in %s is back; run again with --force)", *err, dir)}
	}
}

// prepareRun is the output-folder step of a resumable run (eval, predict
// --tile, eval --tile), under the lock: --resume reads the manifest and
// hands it to check; a new run refuses a folder holding a previous one
// (unless force, which sets it aside until the new run commits, or a
// start that saved nothing) and writes cur as the manifest. Then the
// shared-filesystem probe (returned) and the parts folder.
func prepareRun(o *outRun, dir string, resume, force bool, cur any, check func(old []byte) error) (string, error) {
	if resume {
		b, err := os.ReadFile(filepath.Join(dir, manifestFile))
		if err != nil {
			return "", usageErr("jobs: --resume: no run to resume in %s: %w", dir, err)
		}
		if err := check(b); err != nil {
			return "", err
		}
	} else {
		present := presentRunFiles(dir)
		switch {
		case len(present) == 0:
		case force:
			o.aside = true // finish puts back a move that failed part way
			if err := setAside(dir, present); err != nil {
				return "", err
			}
		case abortedStart(dir):
			for _, f := range present {
				if err := os.RemoveAll(filepath.Join(dir, f)); err != nil {
					return "", ioErr("jobs: output folder: %w", err)
				}
			}
		default:
			return "", usageErr("jobs: output folder %s holds a previous run (%s); choose another --out, pass --resume to continue it or --force to replace it", dir, present[0])
		}
		b, _ := json.MarshalIndent(cur, "", " ")
		if err := writeAtomic(dir, manifestFile, func(w io.Writer) error { _, err := w.Write(b); return err }); err != nil {
			return "", ioErr("%w", err)
		}
	}
	o.probe = nonce() + nonce()
	if err := os.WriteFile(filepath.Join(dir, probeName(o.probe)), []byte(o.probe), 0o644); err != nil {
		return "", ioErr("jobs: output folder: %w", err)
	}
	// The parts folder is this run's: a rank opens its part file only there.
	if err := parts.Prepare(dir, o.probe); err != nil {
		return "", ioErr("jobs: output folder: %w", err)
	}
	return o.probe, nil
}

// abortedStart reports a folder left by a run that failed before any
// image was saved (a model or pre-flight error after the manifest was
// written): no report, no part file with a record. Nothing would be lost
// by starting again, so it does not need --force.
func abortedStart(dir string) bool {
	for _, f := range reportFiles {
		if _, err := os.Stat(filepath.Join(dir, f)); err == nil {
			return false
		}
	}
	if _, err := os.Stat(filepath.Join(dir, manifestFile)); err != nil {
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

// checkSharedOut: every rank reads rank 0's probe file, so a --out that is
// not on a filesystem all ranks see fails before any work, naming the
// ranks that cannot see it.
func checkSharedOut(c mpi.Comm, out, probe string) error {
	b, err := os.ReadFile(filepath.Join(out, probeName(probe)))
	ok := int64(1)
	if err != nil || string(b) != probe {
		ok = 0
	}
	all, gerr := c.AllgatherInt64(ok)
	if gerr != nil {
		return localErr(ExitMPI, "jobs: shared output check: %w", gerr)
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
		return collective(ExitMPI, "jobs: --out %s is not on a filesystem every rank sees: rank(s) %s cannot read rank 0's probe file", out, strings.Join(blind, ", "))
	}
	return nil
}

// packFields appends length-prefixed fields.
func packFields(pkt []byte, fields ...[]byte) []byte {
	for _, f := range fields {
		pkt = binary.LittleEndian.AppendUint64(pkt, uint64(len(f)))
		pkt = append(pkt, f...)
	}
	return pkt
}

func unpackFields(pkt []byte) ([][]byte, error) {
	var out [][]byte
	for len(pkt) > 0 {
		if len(pkt) < 8 {
			return nil, errors.New("jobs: truncated input broadcast")
		}
		n := binary.LittleEndian.Uint64(pkt)
		pkt = pkt[8:]
		if uint64(len(pkt)) < n {
			return nil, errors.New("jobs: truncated input broadcast")
		}
		out, pkt = append(out, pkt[:n:n]), pkt[n:]
	}
	return out, nil
}

// errInterrupted is returned by detectShard when a signal asked the job to
// stop; the rank has synced its part file.
var errInterrupted = errors.New("interrupted by a signal; finished images are saved, continue with --resume")
