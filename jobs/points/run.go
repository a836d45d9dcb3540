package points

// The output folder of a point run, through internal/outdir (the lock,
// --force's set-aside, the publish journal) and internal/parts (the
// preemption-safe part files), as the box runs use them: OUT/manifest.json
// records the run's inputs (job "predict points"), every rank appends each
// finished unit (an image, or a window with --tile) to its own part file,
// and --resume, at any rank count, takes the units found there instead of
// computing them again. A unit's points are stored as degenerate boxes
// (xmin = xmax = x, ymin = ymax = y; label 0; the float32 score), which the
// wire format holds losslessly.

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/infer/imagefile"
	"github.com/canopy-hpc/canopy/infer/tile"
	"github.com/canopy-hpc/canopy/infer/treeformer"
	"github.com/canopy-hpc/canopy/internal/dataset"
	"github.com/canopy-hpc/canopy/internal/errkind"
	"github.com/canopy-hpc/canopy/internal/outdir"
	"github.com/canopy-hpc/canopy/internal/parts"
	"github.com/canopy-hpc/canopy/internal/runkind"
	"github.com/canopy-hpc/canopy/internal/wire"
)

// Job is manifest.json's "job" for a point model's predict.
const Job = runkind.PointsJob

// Names are the entries of OUT a point run writes (any of them, or a
// manifest, marks a previous run).
var Names = outdir.Names{Reports: []string{"report.json", "predictions.csv", gpkgFile}, Others: []string{parts.Dir}}

// manifest is OUT/manifest.json: what a --resume must find unchanged.
type manifest struct {
	Job       string                  `json:"job"`
	Canopy    string                  `json:"canopy"`
	Model     string                  `json:"model_sha256"`
	Tile      *tile.Settings          `json:"tile"`
	Peaks     treeformer.PeakSettings `json:"peaks"`
	SkipEmpty bool                    `json:"skip_empty"`
	LabelDict map[string]int          `json:"label_dict"`
	RootDir   string                  `json:"root_dir"`
	Images    []imageIdent            `json:"images"`
}

// imageIdent is an image as the run named it, with what identifies its
// file: size, modification time and the sha256 of its bytes.
type imageIdent struct {
	Path    string `json:"path"`
	Size    int64  `json:"size"`
	MtimeNS int64  `json:"mtime_ns"`
	SHA256  string `json:"sha256"`
}

func identify(name, file string) (imageIdent, error) {
	size, mt, sum, err := imagefile.Identify(file)
	if err != nil {
		return imageIdent{}, fmt.Errorf("points: %w: %w", err, dataset.ErrInput)
	}
	return imageIdent{Path: name, Size: size, MtimeNS: mt, SHA256: hex.EncodeToString(sum[:])}, nil
}

// diff names the first differences between the run's manifest (old) and
// this one.
func (m manifest) diff(old manifest) []string {
	var d []string
	add := func(what string, a, b any) { d = append(d, fmt.Sprintf("%s: %v now, %v in the run", what, a, b)) }
	if m.Canopy != old.Canopy {
		add("canopy version", m.Canopy, old.Canopy)
	}
	if m.Model != old.Model {
		add("model sha256", m.Model, old.Model)
	}
	if ts := func(s *tile.Settings) string { b, _ := json.Marshal(s); return string(b) }; ts(m.Tile) != ts(old.Tile) {
		add("tile settings", ts(m.Tile), ts(old.Tile))
	}
	if m.Peaks != old.Peaks {
		add("peak settings", m.Peaks, old.Peaks)
	}
	if m.SkipEmpty != old.SkipEmpty {
		add("--skip-empty", m.SkipEmpty, old.SkipEmpty)
	}
	if a, b := fmt.Sprint(m.LabelDict), fmt.Sprint(old.LabelDict); a != b {
		add("label dict", a, b)
	}
	if m.RootDir != old.RootDir {
		add("root folder", m.RootDir, old.RootDir)
	}
	if len(m.Images) != len(old.Images) {
		add("images", len(m.Images), len(old.Images))
		return d
	}
	for i, im := range m.Images {
		o := old.Images[i]
		switch {
		case im.Path != o.Path:
			add(fmt.Sprintf("image %d", i), im.Path, o.Path)
		case im != o:
			d = append(d, fmt.Sprintf("image %s changed since the run (size %d, sha256 %s now; %d, %s then)", im.Path, im.Size, outdir.ShortSHA(im.SHA256), o.Size, outdir.ShortSHA(o.SHA256)))
		}
		if len(d) >= 3 {
			break
		}
	}
	return d
}

// saved is what rank 0 finds in the output folder for the ranks: the run's
// token (the parts folder's owner), the next attempt number, and with
// --resume the units already done.
type saved struct {
	Probe   string `json:"probe"`
	Attempt int    `json:"attempt"`
	Done    []int  `json:"done"`
}

// openRun is rank 0's output-folder step: the lock; a new run refuses a
// folder holding a previous run (unless --force) and writes cur; --resume
// checks the folder's manifest against cur and reads the part files
// (units: their number). The returned Run is released by finishRun.
func openRun(dir string, resume, force bool, cur manifest, units int) (*outdir.Run, saved, map[int][]treeformer.Point, error) {
	var sv saved
	o, err := outdir.Open(dir, Names)
	if err != nil {
		return nil, sv, nil, err
	}
	check := func(b []byte) error {
		var old manifest
		if err := json.Unmarshal(b, &old); err != nil || old.Job != Job {
			return errkind.Usage("points: --resume refused: %s in %s is not a point model's predict run (continue it with the command that made it, or give another --out; --force replaces it)", outdir.ManifestFile, dir)
		}
		if d := cur.diff(old); len(d) > 0 {
			return errkind.Usage("points: --resume refused, the inputs differ from the run in %s: %s", dir, strings.Join(d, "; "))
		}
		return nil
	}
	var done map[int][]treeformer.Point
	sv.Probe, err = outdir.PrepareRun(o, dir, resume, force, cur, check)
	if err == nil && resume {
		var got map[int]parts.Done
		var files []parts.File
		got, _, files, err = parts.Scan(dir, units, nil)
		if err != nil {
			err = errkind.IO("points: --resume: %w", err)
		}
		sv.Attempt = parts.NextAttempt(files)
		done = make(map[int][]treeformer.Point, len(got))
		for u, d := range got {
			done[u] = fromDets(d.Dets)
			sv.Done = append(sv.Done, u)
		}
	}
	if err != nil {
		o.Finish(err)
		return nil, sv, nil, err
	}
	return o, sv, done, nil
}

// toDets and fromDets store a unit's points in a part record.
func toDets(pts []treeformer.Point) []box.Detection {
	d := make([]box.Detection, len(pts))
	for i, p := range pts {
		d[i] = box.Detection{Box: box.Box{Xmin: p.X, Ymin: p.Y, Xmax: p.X, Ymax: p.Y}, Score: float64(p.Score)}
	}
	return d
}

func fromDets(d []box.Detection) []treeformer.Point {
	pts := make([]treeformer.Point, len(d))
	for i, x := range d {
		pts[i] = treeformer.Point{X: x.Box.Xmin, Y: x.Box.Ymin, Score: float32(x.Score)}
	}
	return pts
}

// recorder is a rank's part file (none for Infer); rank 0's first record commits a --force
// run (the previous run goes).
type recorder struct {
	pw  *parts.Writer
	out *outdir.Run // rank 0's, nil elsewhere
}

func (r *recorder) record(u int, pts []treeformer.Point) error {
	if r.pw == nil {
		return nil // Infer: no output folder
	}
	if err := r.pw.Append([]wire.Image{{Index: u, Dets: toDets(pts)}}, nil); err != nil {
		return errkind.Local(errkind.ExitInternal, "points: %w", err)
	}
	if err := r.out.Commit(); err != nil {
		return errkind.Local(errkind.ExitInternal, "points: %w", err)
	}
	return nil
}

// close syncs and closes the part file.
func (r *recorder) close() error {
	if r.pw == nil {
		return nil
	}
	if err := r.pw.Close(); err != nil {
		return errkind.Local(errkind.ExitInternal, "points: %w", err)
	}
	return nil
}

// publish writes the staged files (predictions.gpkg), predictions.csv and
// report.json as one set (report.json last) through outdir's journal, then
// commits the run.
func publish(dir string, out *outdir.Run, staged []outdir.Staged, files []namedBytes) error {
	set := staged
	for _, f := range files {
		s, err := outdir.Stage(dir, f.name, func(w io.Writer) error { _, err := w.Write(f.b); return err })
		if err != nil {
			for _, x := range set {
				os.Remove(filepath.Join(dir, x.Tmp))
			}
			return errkind.IO("points: %w", err)
		}
		set = append(set, s)
	}
	if err := outdir.Publish(dir, set); err != nil {
		return errkind.IO("points: %w", err)
	}
	if err := out.Commit(); err != nil {
		return errkind.IO("points: %w", err)
	}
	return nil
}

type namedBytes struct {
	name string
	b    []byte
}
