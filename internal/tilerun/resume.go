package tilerun

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/canopy-hpc/canopy/internal/cropstage"
	"github.com/canopy-hpc/canopy/internal/errkind"
	"github.com/canopy-hpc/canopy/internal/modelsel"
	"github.com/canopy-hpc/canopy/internal/outdir"
	"github.com/canopy-hpc/canopy/internal/output"
	"github.com/canopy-hpc/canopy/internal/parts"
	"github.com/canopy-hpc/canopy/internal/runkind"
	"github.com/canopy-hpc/canopy/internal/wire"
)

// The resume of a tile run (predict --tile, eval --tile): what the run
// was computed from (tileManifest, OUT/manifest.json), and what rank 0
// finds in OUT at a --resume: the rasters whose outputs are published and
// intact (their done records), and the windows of the others that the part
// files hold.

// rasterIdent is what the manifest keeps of a raster file: its size, its
// modification time, and the sha256 of its first and last 64 KiB (a
// GeoTIFF's header and tile offsets): a raster replaced or edited is
// refused on --resume without reading every raster whole (NEON's 11,000
// tiles are 3 TB). An edit inside a raster that keeps its size and time is
// not seen (issue 42, F3); --resume-hash full adds the sha256 of the whole
// file (SHA256), which sees it.
type rasterIdent struct {
	Path     string `json:"image_path"`
	Size     int64  `json:"size"`
	MtimeNS  int64  `json:"mtime_ns"`
	HeadTail string `json:"head_tail_sha256"`
	SHA256   string `json:"sha256,omitempty"`
}

const identSpan = 64 << 10

// identifyRaster is a raster's identity; full adds the whole file's sha256.
func identifyRaster(path, file string, full bool) (rasterIdent, error) {
	id, err := identifyEnds(path, file)
	if err != nil || !full {
		return id, err
	}
	id.SHA256, err = fileSHA256(file)
	return id, err
}

func identifyEnds(path, file string) (rasterIdent, error) {
	f, err := os.Open(file)
	if err != nil {
		return rasterIdent{}, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return rasterIdent{}, err
	}
	h := sha256.New()
	if _, err := io.Copy(h, io.NewSectionReader(f, 0, min(identSpan, st.Size()))); err != nil {
		return rasterIdent{}, err
	}
	if tail := max(st.Size()-identSpan, identSpan); tail < st.Size() {
		if _, err := io.Copy(h, io.NewSectionReader(f, tail, st.Size()-tail)); err != nil {
			return rasterIdent{}, err
		}
	}
	return rasterIdent{Path: path, Size: st.Size(), MtimeNS: st.ModTime().UnixNano(), HeadTail: hex.EncodeToString(h.Sum(nil))}, nil
}

// tileManifest is a tile run's OUT/manifest.json: a --resume continues
// only when every field is the same now.
type tileManifest struct {
	Canopy           string            `json:"canopy"`
	Command          string            `json:"command"`
	Detector         string            `json:"detector"`
	DetectorSettings map[string]string `json:"detector_settings"`
	LabelDict        string            `json:"label_dict_sha256"`
	Truth            string            `json:"truth_sha256,omitempty"`
	PatchSize        int               `json:"patch_size"`
	PatchOverlap     float64           `json:"patch_overlap"`
	IoU              float64           `json:"tile_iou"`
	SkipEmpty        bool              `json:"skip_empty"`
	// ResumeHash is "full" for --resume-hash full (none for ends).
	ResumeHash string        `json:"resume_hash,omitempty"`
	CropModels []cropIdent   `json:"crop_models"`
	Rasters    []rasterIdent `json:"rasters"`
}

// cropIdent is what a tile manifest keeps of a crop model (issue 42,
// F1): the rasters finished before a stop keep their crop labels, so a
// --resume must classify the others with the same model. Its weights file's
// sha256 (a model replaced at the same path), its labels in class order
// with the --crop-label-dict file's sha256 (a label dict replaced), and its
// transform (a hub folder's config.json edited beside the same weights).
type cropIdent struct {
	Path            string              `json:"path"`
	SHA256          string              `json:"weights_sha256"`
	Labels          []string            `json:"labels"`
	LabelDict       string              `json:"label_dict,omitempty"`
	LabelDictSHA256 string              `json:"label_dict_sha256,omitempty"`
	Transform       cropstage.Transform `json:"transform"`
}

// cropIdents are the identities of a run's crop models (none without).
func cropIdents(cs *cropstage.Set) []cropIdent {
	if cs == nil {
		return []cropIdent{}
	}
	out := make([]cropIdent, len(cs.Info))
	for i, in := range cs.Info {
		out[i] = cropIdent{Path: in.Path, SHA256: in.SHA256, Labels: in.Labels, Transform: in.Transform}
		if in.LabelDict != nil {
			out[i].LabelDict, out[i].LabelDictSHA256 = in.LabelDict.Path, in.LabelDict.SHA256
		}
	}
	return out
}

// diff names every difference between the run to resume (m) and now (o);
// a raster that changed is named with what changed, a crop model with
// which one and what changed.
func (m tileManifest) diff(o tileManifest) []string {
	var d []string
	a, _ := json.Marshal(m)
	b, _ := json.Marshal(o)
	d = diffJSON("", a, b, map[string]bool{"rasters": true, "crop_models": true})
	if len(m.CropModels) != len(o.CropModels) {
		d = append(d, fmt.Sprintf("crop models: %d in the run to resume, %d now", len(m.CropModels), len(o.CropModels)))
	} else {
		for i := range m.CropModels {
			x, _ := json.Marshal(m.CropModels[i])
			y, _ := json.Marshal(o.CropModels[i])
			d = append(d, diffJSON(fmt.Sprintf("crop model %d (%s) ", i+1, m.CropModels[i].Path), x, y, nil)...)
		}
	}
	if len(m.Rasters) != len(o.Rasters) {
		return append(d, fmt.Sprintf("rasters: %d in the run to resume, %d now", len(m.Rasters), len(o.Rasters)))
	}
	for i, r := range m.Rasters {
		n := o.Rasters[i]
		var what []string
		if r.Path != n.Path {
			what = append(what, fmt.Sprintf("image_path %q then, %q now", r.Path, n.Path))
		}
		if r.Size != n.Size {
			what = append(what, fmt.Sprintf("size %d bytes then, %d now", r.Size, n.Size))
		}
		if r.MtimeNS != n.MtimeNS {
			what = append(what, fmt.Sprintf("modified %s then, %s now", time.Unix(0, r.MtimeNS).UTC().Format(time.RFC3339Nano), time.Unix(0, n.MtimeNS).UTC().Format(time.RFC3339Nano)))
		}
		if r.HeadTail != n.HeadTail {
			what = append(what, "its first or last 64 KiB differ")
		}
		if r.SHA256 != n.SHA256 && r.SHA256 != "" && n.SHA256 != "" {
			what = append(what, "its content differs (sha256 of the whole file)")
		}
		if len(what) > 0 {
			d = append(d, fmt.Sprintf("raster %d %q changed since the run: %s", i+1, r.Path, strings.Join(what, ", ")))
		}
	}
	return d
}

// diffJSON names the members in which two JSON objects differ ("a.b: x
// in the run to resume, y now"), descending into objects; skip leaves
// top-level members out.
func diffJSON(prefix string, a, b []byte, skip map[string]bool) []string {
	var ma, mb map[string]json.RawMessage
	if json.Unmarshal(a, &ma) != nil || json.Unmarshal(b, &mb) != nil {
		if string(a) == string(b) {
			return nil
		}
		return []string{fmt.Sprintf("%s: %s in the run to resume, %s now", strings.TrimSuffix(prefix, "."), clip(a), clip(b))}
	}
	keys := make([]string, 0, len(ma))
	for k := range ma {
		keys = append(keys, k)
	}
	for k := range mb {
		if _, ok := ma[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var d []string
	for _, k := range keys {
		if skip[k] || string(ma[k]) == string(mb[k]) {
			continue
		}
		x, y := ma[k], mb[k]
		if x == nil {
			x = json.RawMessage("none")
		}
		if y == nil {
			y = json.RawMessage("none")
		}
		d = append(d, diffJSON(prefix+k+".", x, y, nil)...)
	}
	return d
}

func clip(b []byte) string {
	if len(b) > 120 {
		return string(b[:117]) + "..."
	}
	return string(b)
}

// tileResume is what rank 0 tells every rank about the run it continues
// (empty for a new run).
type tileResume struct {
	Probe   string `json:"probe"`
	Attempt int    `json:"attempt"`
	// Finished are the rasters whose outputs are published and intact.
	Finished []int `json:"finished,omitempty"`
	// Windows from the part files (those of unfinished rasters), and
	// the torn records dropped.
	Windows, Dropped int
	// Notes: what rank 0 found and recomputes (an output removed by hand).
	Notes []string `json:"notes,omitempty"`
	// Aside: a --force run set a previous run aside (it comes back if this
	// run stops before it commits).
	Aside bool `json:"aside,omitempty"`
}

// rasterDone is a raster's done record, OUT/parts/rasters/<index>.json,
// written by the rank that merged it once its outputs are published: the
// sha256 of each output (a path under OUT) and its counts.
type rasterDone struct {
	Index      int               `json:"index"`
	Path       string            `json:"image_path"`
	Name       string            `json:"name"`
	WindowDets int               `json:"window_detections"`
	Detections int               `json:"detections"`
	Skipped    int               `json:"skipped_windows,omitempty"`
	Outputs    map[string]string `json:"outputs"`
}

// doneDir holds the done records.
func doneDir(out string) string { return filepath.Join(out, parts.Dir, "rasters") }

func doneFile(i int) string { return fmt.Sprintf("%08d.json", i) }

// readDone reads raster i's done record (ok false when there is none).
func readDone(out string, i int) (rasterDone, bool, error) {
	b, err := os.ReadFile(filepath.Join(doneDir(out), doneFile(i)))
	if errors.Is(err, fs.ErrNotExist) {
		return rasterDone{}, false, nil
	}
	if err != nil {
		return rasterDone{}, false, errkind.IO("jobs: %w", err)
	}
	var d rasterDone
	if err := json.Unmarshal(b, &d); err != nil || d.Index != i {
		return rasterDone{}, false, nil // a damaged record: the raster is done again
	}
	return d, true, nil
}

// intact says why a done record's outputs are not what it records ("" when
// they are).
func (d rasterDone) intact(out string) string {
	names := make([]string, 0, len(d.Outputs))
	for n := range d.Outputs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		sum, err := fileSHA256(filepath.Join(out, n))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return n + " is missing"
		case err != nil:
			return fmt.Sprintf("%s cannot be read (%v)", n, err)
		case sum != d.Outputs[n]:
			return n + " differs from what the run wrote"
		}
	}
	return ""
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// prepareTileOut is rank 0's output-folder step of a tile run: the
// folder locked, a previous run refused or set aside (outdir.PrepareRun), or for
// --resume the manifest compared, the finished rasters found and the
// windows of the others read from the part files (returned wire-encoded).
func prepareTileOut(cfg Config, cur tileManifest, offsets []int) (*outdir.Run, tileResume, []byte, error) {
	var res tileResume
	o, err := outdir.Open(cfg.Out, cfg.Names)
	if err != nil {
		return nil, res, nil, err
	}
	fail := func(err error) (*outdir.Run, tileResume, []byte, error) {
		o.Finish(err)
		return nil, res, nil, err
	}
	check := func(b []byte) error {
		if err := runkind.Check(cfg.Out, b, cur.Command); err != nil {
			return err
		}
		var old tileManifest
		if err := json.Unmarshal(b, &old); err != nil || old.Command == "" {
			return errkind.Usage("jobs: --resume refused: %s in %s is not a tile run's manifest (%v); start again with --force (or another --out)", outdir.ManifestFile, cfg.Out, err)
		}
		if d := old.diff(cur); len(d) > 0 {
			return errkind.Usage("jobs: --resume refused, the run in %s was computed otherwise: %s; start again with --force (or another --out)", cfg.Out, strings.Join(d, "; "))
		}
		return nil
	}
	if res.Probe, err = outdir.PrepareRun(o, cfg.Out, cfg.Resume, cfg.Force, cur, check); err != nil {
		return fail(err)
	}
	for _, d := range []string{doneDir(cfg.Out), filepath.Join(cfg.Out, RastersDir)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fail(errkind.IO("jobs: output folder: %w", err))
		}
		if err := removeLeftovers(d); err != nil {
			return fail(err)
		}
	}
	if !cfg.Resume {
		return o, res, nil, nil
	}
	n := len(offsets) - 1
	finished := make([]bool, n)
	for i := range n {
		d, ok, err := readDone(cfg.Out, i)
		if err != nil {
			return fail(err)
		}
		if !ok {
			continue
		}
		if why := d.intact(cfg.Out); why != "" {
			res.Notes = append(res.Notes, fmt.Sprintf("raster %q: %s: its outputs are made again from the saved windows", cur.Rasters[i].Path, why))
			if err := os.Remove(filepath.Join(doneDir(cfg.Out), doneFile(i))); err != nil {
				return fail(errkind.IO("jobs: %w", err))
			}
			continue
		}
		finished[i] = true
		res.Finished = append(res.Finished, i)
	}
	rasterOf := func(g int) int { return sort.SearchInts(offsets[1:], g+1) }
	done, st, files, err := parts.Scan(cfg.Out, offsets[n], func(g int) bool { return !finished[rasterOf(g)] })
	if err != nil {
		return fail(errkind.Usage("jobs: --resume: %w", err))
	}
	res.Attempt, res.Windows, res.Dropped = parts.NextAttempt(files), len(done), st.Dropped
	ims := make([]wire.Image, 0, len(done))
	for _, d := range done {
		ims = append(ims, d.Image)
	}
	sort.Slice(ims, func(a, b int) bool { return ims[a].Index < ims[b].Index })
	buf, err := wire.Encode(nil, ims)
	if err != nil {
		return fail(errkind.IO("jobs: --resume: %w", err))
	}
	return o, res, buf, nil
}

// removeLeftovers removes the temporary files a killed run left in dir
// (stage's ".NAME.tmp…").
func removeLeftovers(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return errkind.IO("jobs: output folder: %w", err)
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".") && strings.Contains(e.Name(), ".tmp") {
			if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
				return errkind.IO("jobs: removing a leftover: %w", err)
			}
		}
	}
	return nil
}

// tileManifestOf is the manifest of a tile run now.
func tileManifestOf(cfg Config, digest, config string, labels, truth []byte, idents []rasterIdent, crops *cropstage.Set) tileManifest {
	m := tileManifest{Canopy: output.Version, Command: runkind.PredictTile, Detector: "retinanet weights sha256 " + digest,
		DetectorSettings: modelsel.DetectorSettings(cfg.Model, config), PatchSize: cfg.Settings.Patch, PatchOverlap: cfg.Settings.Overlap,
		IoU: cfg.IoU, SkipEmpty: cfg.SkipEmpty, CropModels: cropIdents(crops), Rasters: idents}
	if cfg.FullHash {
		m.ResumeHash = ResumeHashFull
	}
	if cfg.Eval != nil {
		m.Command = runkind.EvalTile
		m.Truth = outdir.SHA256Hex(truth)
	}
	if labels != nil {
		m.LabelDict = outdir.SHA256Hex(labels)
	}
	return m
}

// resume sets the run's state from rank 0's resume record and the saved
// windows (wire-encoded) it broadcast.
func (t *tileRun) resume(res tileResume, saved []byte) error {
	for r := range t.rasters {
		t.left[r] = t.ix.grids[r].Len()
	}
	for _, r := range res.Finished {
		if r < 0 || r >= len(t.rasters) {
			return errkind.Collective(errkind.ExitInternal, "jobs: resume record names raster %d of %d", r, len(t.rasters))
		}
		t.finished[r], t.left[r] = true, 0
		t.nDone++
	}
	var ims []wire.Image
	var err error
	if len(saved) > 0 {
		ims, err = wire.Decode(saved)
	}
	if err != nil {
		return errkind.Collective(errkind.ExitInternal, "jobs: saved windows: %w", err)
	}
	if err := t.place(ims, map[int]bool{}); err != nil {
		return err
	}
	for _, im := range ims {
		t.resumed[im.Index] = true
	}
	for r := range t.rasters {
		t.todo += t.left[r]
	}
	return nil
}

// Published is what a tile run's folder holds of its rasters (canopy
// doctor's reading): the run's command and raster count from its
// manifest, the rasters whose outputs are published and intact, and those
// whose done record names outputs changed or removed since. ok is false
// when dir holds no tile run's manifest.
type Published struct {
	Command                    string
	Rasters, Finished, Damaged int
}

// ReadPublished reads dir's tile run (ok false: no tile run's manifest).
func ReadPublished(dir string) (p Published, ok bool) {
	b, err := os.ReadFile(filepath.Join(dir, outdir.ManifestFile))
	var m tileManifest
	if err != nil || json.Unmarshal(b, &m) != nil || m.Command == "" {
		return p, false
	}
	p.Command, p.Rasters = m.Command, len(m.Rasters)
	for i := range m.Rasters {
		d, ok, err := readDone(dir, i)
		switch {
		case err != nil || !ok:
		case d.intact(dir) == "":
			p.Finished++
		default:
			p.Damaged++
		}
	}
	return p, true
}
