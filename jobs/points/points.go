// Package points is canopy predict and predict --tile for a point model
// (DeepForest's TreeFormer, infer/treeformer): every rank computes its
// share of the images (or of the rasters' windows), the points are
// gathered, and rank 0 writes OUT/predictions.csv with DeepForest's point
// columns (image_path,x,y,label,score) and OUT/report.json. The rows are
// the same bytes for any rank and thread count: a unit's points depend on
// the unit alone, and the merge runs in canonical order.
package points

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/canopy-hpc/canopy/infer"
	"github.com/canopy-hpc/canopy/infer/imagefile"
	"github.com/canopy-hpc/canopy/infer/nn"
	"github.com/canopy-hpc/canopy/infer/tile"
	"github.com/canopy-hpc/canopy/infer/treeformer"
	"github.com/canopy-hpc/canopy/internal/dataset"
	"github.com/canopy-hpc/canopy/internal/detect"
	"github.com/canopy-hpc/canopy/internal/errkind"
	"github.com/canopy-hpc/canopy/internal/outdir"
	"github.com/canopy-hpc/canopy/internal/parts"
	"github.com/canopy-hpc/canopy/internal/testhook"
	"github.com/canopy-hpc/canopy/mpi"
	"github.com/canopy-hpc/canopy/report"
)

// createParts opens a rank's part file: parts.Create, a seam the tests
// replace (a full disk).
var createParts = parts.Create

// Config is one point run.
type Config struct {
	// Model is the TreeFormer folder or torch file (absolute).
	Model string
	// List gives, on rank 0, the images as the run names them (relative
	// to RootDir unless absolute).
	List    func() ([]string, error)
	RootDir string
	Out     string
	Force   bool
	// Tile cuts each image into Settings' windows and merges their
	// points as predict_tile does.
	Tile     bool
	Settings tile.Settings
	Threads  int
	// LabelDict is the run's --label-dict (nil: none).
	LabelDict map[string]int
	Command   []string
	Stdout    io.Writer
	Version   string
	// Budget is the memory a rank may use (0: unknown) and BudgetFrom
	// where that figure came from: an image (without --tile) or window
	// whose forward pass would need more is refused before any work.
	Budget     int64
	BudgetFrom string
	// Resume continues the run in Out (manifest.json, the part files):
	// the units found there are not computed again.
	Resume bool
	// SkipEmpty (with Tile) gives a window all one colour, or all the
	// raster's nodata, no points without running the model.
	SkipEmpty bool
	// ScoreThresh is the peaks' threshold_rel (0: point.yaml's 0.3).
	ScoreThresh float32
	// Device is where each rank runs the network (device.go).
	Device Device
	// RunConfig is the --config and overrides applied (nil: none), for
	// report.json.
	RunConfig *RunConfig
}

// RunConfig is report.json's "config": the config file, the overrides,
// each setting they resolved with its source, and the keys a point model
// does not use.
type RunConfig struct {
	File      string             `json:"file,omitempty"`
	Overrides []string           `json:"overrides,omitempty"`
	Settings  map[string]Setting `json:"settings"`
	Ignored   []string           `json:"ignored"`
}

// Setting is one resolved setting and where it came from (flag, override,
// config or default).
type Setting struct {
	Value  string `json:"value"`
	Source string `json:"source"`
}

// peaks are the run's peak settings.
func (cfg Config) peaks() treeformer.PeakSettings {
	p := treeformer.DefaultPeaks
	if cfg.ScoreThresh > 0 {
		p.ScoreThresh = cfg.ScoreThresh
	}
	return p
}

// CollectiveError is an error every rank returns alike (rank 0 prints it;
// no rank aborts the others).
type CollectiveError struct{ Err error }

func (e *CollectiveError) Error() string { return e.Err.Error() }
func (e *CollectiveError) Unwrap() error { return e.Err }

func collective(err error) error {
	if err == nil {
		return nil
	}
	return &CollectiveError{err}
}

// unit is one forward pass: an image's window (the whole image without
// --tile).
type unit struct {
	image int
	win   tile.Window
}

type listPacket struct {
	Err   string
	Code  int
	Paths []string
	Saved saved
}

// Report is OUT/report.json.
type Report struct {
	Canopy  string   `json:"canopy"`
	Command []string `json:"command"`
	Ranks   int      `json:"ranks"`
	Images  int      `json:"images"`
	Windows int      `json:"windows"`
	// Resumed are the units (images, or windows with --tile) taken from
	// the part files of an interrupted run; Skipped the windows
	// --skip-empty gave no points in this attempt.
	Resumed   int                `json:"resumed_units"`
	SkipEmpty bool               `json:"skip_empty"`
	Skipped   int                `json:"skipped_windows"`
	Points    int                `json:"points"`
	Model     ModelInfo          `json:"model"`
	Tile      *tile.Settings     `json:"tile,omitempty"`
	Peaks     map[string]string  `json:"postprocess"`
	Seconds   map[string]float64 `json:"seconds_rank0"`
	CPU       float64            `json:"cpu_seconds_rank0"`
	Outputs   map[string]string  `json:"outputs"`
	Device    *DeviceInfo        `json:"device"`
	Config    *RunConfig         `json:"config,omitempty"`
	Notes     []string           `json:"notes,omitempty"`
}

// ModelInfo describes the loaded point model.
type ModelInfo struct {
	Path       string         `json:"path"`
	SHA256     string         `json:"sha256"`
	Arch       string         `json:"arch"`
	Format     string         `json:"format"`
	Backbone   string         `json:"backbone"`
	LabelDict  map[string]int `json:"label_dict"`
	LabelsFrom string         `json:"labels_from"`
	Ignored    []string       `json:"ignored,omitempty"`
	Threads    int            `json:"threads"`
}

// Predict runs the point job on this rank.
func Predict(ctx context.Context, c mpi.Comm, cfg Config) error {
	_, err := run(ctx, c, cfg, true)
	return err
}

// Infer computes the points of cfg's images as Predict does, without an
// output folder (no manifest, part files or report; Out, Force and Resume
// are not used): rank 0 gets predictions.csv's bytes, the other ranks
// nil. eval --model with a point model scores them.
func Infer(ctx context.Context, c mpi.Comm, cfg Config) ([]byte, error) {
	cfg.Resume = false
	return run(ctx, c, cfg, false)
}

// run is Predict (toOut: through the output folder) or Infer.
func run(ctx context.Context, c mpi.Comm, cfg Config, toOut bool) (_ []byte, err error) {
	t0 := time.Now()
	cpu0 := cpuSeconds()
	m, mcfg, digest, err := treeformer.Load(cfg.Model, cfg.LabelDict)
	if err != nil {
		return nil, err // this rank's: the others may have loaded it
	}
	if err := sameDigest(c, digest); err != nil {
		return nil, err
	}
	peaks := cfg.peaks()
	var out *outdir.Run
	var done map[int][]treeformer.Point
	defer func() {
		if out != nil {
			out.Finish(err)
		}
	}()
	var pkt []byte
	if c.Rank() == 0 {
		var lp listPacket
		lp, out, done = openInputs(cfg, digest, peaks, toOut)
		pkt, _ = json.Marshal(lp)
	}
	pkt, err = c.Bcast(pkt, 0)
	if err != nil {
		return nil, err
	}
	var lp listPacket
	if err := json.Unmarshal(pkt, &lp); err != nil {
		return nil, collective(fmt.Errorf("points: malformed broadcast: %w", err))
	}
	if lp.Err != "" {
		return nil, &errkind.Error{Code: lp.Code, Collective: true, Err: errors.New(lp.Err)}
	}
	if toOut {
		if err := outdir.CheckShared(c, cfg.Out, lp.Saved.Probe); err != nil {
			return nil, err
		}
	}
	paths := lp.Paths
	full := fullPaths(paths, cfg.RootDir)
	units, wins, err := plan(full, cfg)
	if err != nil {
		return nil, collective(err)
	}
	if err := checkMemory(units, full, cfg); err != nil {
		return nil, err // this rank's budget: another node's may differ
	}
	rec := &recorder{out: out}
	if toOut {
		if rec.pw, err = createParts(cfg.Out, lp.Saved.Probe, lp.Saved.Attempt, c.Rank(), time.Second); err != nil {
			return nil, errkind.Local(errkind.ExitInternal, "points: %w", err)
		}
	}
	eng, err := openEngine(c, cfg, m)
	if err != nil {
		return nil, errkind.Join(err, rec.close()) // this rank's device
	}
	closer := detect.NewCloser(eng, "the model's GPU engine")
	defer closer.Join(&err)
	load := since(t0)
	t1 := time.Now()
	mine, skipped, derr := detectUnits(ctx, c, cfg, eng, peaks, full, units, todo(len(units), lp.Saved.Done), rec)
	// the part file is what --resume reads: its close error is never dropped
	if derr = errkind.Join(derr, rec.close()); derr != nil {
		return nil, derr
	}
	// the device's report before the close, which drops the cuDNN path's
	device := eng.report()
	if err := closer.Close(); err != nil { // a late GPU fault: nothing published
		return nil, err
	}
	detectSec := since(t1)
	all, err := gather(c, mine)
	if err != nil {
		return nil, err
	}
	skips, err := c.AllgatherInt64(int64(skipped))
	if err != nil {
		return nil, err
	}
	if c.Rank() != 0 {
		return nil, nil
	}
	byUnit, err := decodeUnits(all, len(units), done)
	if err != nil {
		return nil, err
	}
	label := ""
	for name, id := range mcfg.LabelDict {
		if id == 0 {
			label = name
		}
	}
	rows := make([][]treeformer.Point, len(paths))
	k := 0
	for i := range paths {
		n := len(wins[i])
		if cfg.Tile {
			rows[i] = treeformer.Mosaic(wins[i], byUnit[k:k+n], treeformer.NMSDistance)
		} else {
			rows[i] = byUnit[k]
		}
		k += n
	}
	names := make([]string, len(paths))
	for i, p := range paths {
		names[i] = p
		if cfg.Tile {
			names[i] = filepath.Base(p) // predict_tile's image_path
		}
	}
	csv := WriteCSV(names, rows, label)
	if !toOut {
		return csv, nil
	}
	rep := Report{Canopy: cfg.Version, Command: cfg.Command, Ranks: c.Size(), Images: len(paths), Windows: len(units),
		Resumed: len(done), SkipEmpty: cfg.SkipEmpty,
		Model: ModelInfo{Path: cfg.Model, SHA256: digest, Arch: "treeformer " + m.Arch.Name, Format: mcfg.Format, Backbone: mcfg.Backbone,
			LabelDict: mcfg.LabelDict, LabelsFrom: mcfg.LabelsFrom, Ignored: mcfg.Ignored, Threads: max(cfg.Threads, 1)},
		Peaks:   map[string]string{"score_thresh": strconv.FormatFloat(float64(peaks.ScoreThresh), 'g', -1, 32), "min_distance": fmt.Sprint(peaks.MinDistance), "nms_distance_thresh": "5"},
		Seconds: map[string]float64{"load": load, "predict": detectSec}, CPU: cpuSeconds() - cpu0,
		Outputs: map[string]string{"predictions.csv": sha256Hex(csv)}, Config: cfg.RunConfig, Device: device}
	for _, s := range skips {
		rep.Skipped += int(s)
	}
	if cfg.Tile {
		s := cfg.Settings
		rep.Tile = &s
	}
	for _, p := range rows {
		rep.Points += len(p)
	}
	var staged []outdir.Staged
	gp, note, err := stageGPKG(cfg.Out, full, names, rows, label)
	if err != nil {
		return nil, errkind.IO("%w", err)
	}
	if gp != nil {
		staged = append(staged, *gp)
		rep.Outputs[gpkgFile] = gp.SHA256
	} else {
		rep.Notes = append(rep.Notes, note)
	}
	rj, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := publish(cfg.Out, out, staged, []namedBytes{{"predictions.csv", csv}, {"report.json", append(rj, '\n')}}); err != nil {
		return nil, err
	}
	if cfg.Stdout != nil {
		fmt.Fprintf(cfg.Stdout, "%d points on %d images: %s\n", rep.Points, len(paths), filepath.Join(cfg.Out, "predictions.csv"))
	}
	return csv, nil
}

// openInputs is rank 0's start: the output folder (openRun) and the
// image list, each image identified for the manifest. Its packet carries
// an error's text and exit code to every rank.
func openInputs(cfg Config, digest string, peaks treeformer.PeakSettings, toOut bool) (listPacket, *outdir.Run, map[int][]treeformer.Point) {
	fail := func(err error) (listPacket, *outdir.Run, map[int][]treeformer.Point) {
		code := errkind.Code(err)
		if errors.Is(err, dataset.ErrInput) {
			code = errkind.ExitInput
		}
		return listPacket{Err: err.Error(), Code: code}, nil, nil
	}
	paths, err := cfg.List()
	switch {
	case err != nil:
		return fail(fmt.Errorf("%w: %w", err, dataset.ErrInput))
	case len(paths) == 0:
		return fail(fmt.Errorf("points: no images: %w", dataset.ErrInput))
	}
	full := fullPaths(paths, cfg.RootDir)
	if !toOut {
		return listPacket{Paths: paths}, nil, nil
	}
	cur := manifest{Job: Job, Canopy: cfg.Version, Model: digest, Peaks: peaks, SkipEmpty: cfg.SkipEmpty, LabelDict: cfg.LabelDict, RootDir: cfg.RootDir}
	if cfg.Tile {
		s := cfg.Settings
		cur.Tile = &s
	}
	for i, p := range paths {
		id, err := identify(p, full[i])
		if err != nil {
			return fail(err)
		}
		cur.Images = append(cur.Images, id)
	}
	units, _, err := plan(full, cfg)
	if err != nil {
		return fail(err)
	}
	out, sv, done, err := openRun(cfg.Out, cfg.Resume, cfg.Force, cur, len(units))
	if err != nil {
		return fail(err)
	}
	return listPacket{Paths: paths, Saved: sv}, out, done
}

func fullPaths(paths []string, root string) []string {
	full := make([]string, len(paths))
	for i, p := range paths {
		full[i] = p
		if !filepath.IsAbs(p) {
			full[i] = filepath.Join(root, p)
		}
	}
	return full
}

// todo are the units not in done, in order.
func todo(n int, done []int) []int {
	skip := make([]bool, n)
	for _, u := range done {
		skip[u] = true
	}
	var t []int
	for u := range n {
		if !skip[u] {
			t = append(t, u)
		}
	}
	return t
}

// detectUnits computes this rank's share of the units left (every
// size-th, from its rank), appending each to the part file as it
// finishes; it returns the encoded units and how many windows
// --skip-empty gave no points without the model.
func detectUnits(ctx context.Context, c mpi.Comm, cfg Config, eng *engine, peaks treeformer.PeakSettings, full []string, units []unit, left []int, rec *recorder) ([]byte, int, error) {
	r := eng.fwd
	var mine []byte
	cur, im := -1, treeformer.Image{}
	var nd tile.NoData
	skipped, n, stop := 0, 0, testhook.InterruptAfter(c.Rank())
	for k := c.Rank(); k < len(left); k += c.Size() {
		if ctx.Err() != nil {
			return mine, skipped, errkind.Local(errkind.ExitResumable, "points: %w", errkind.ErrInterrupted)
		}
		u := left[k]
		un := units[u]
		if un.image != cur {
			fi, err := imagefile.Read(full[un.image])
			if err != nil {
				return mine, skipped, fmt.Errorf("points: %w: %w", err, dataset.ErrInput)
			}
			cur, im = un.image, treeformer.Image{W: fi.W, H: fi.H, Pix: fi.Pix}
			if cfg.SkipEmpty {
				nd = noData(full[un.image])
			}
		}
		win := un.win
		if !cfg.Tile {
			win = tile.Window{W: im.W, H: im.H}
		}
		var pts []treeformer.Point
		switch {
		case cfg.SkipEmpty && emptyWindow(im, win, nd):
			skipped++
		case !treeformer.PointsPossible(win.H, win.W, peaks):
			// too small for a peak away from the border
		default:
			d, err := r.Forward(im, win)
			if err != nil {
				return mine, skipped, fmt.Errorf("points: %s: %w: %w", full[un.image], err, infer.ErrModel)
			}
			pts = treeformer.WindowPoints(d, peaks)
			if !cfg.Tile {
				pts = treeformer.ReducePoints(pts, treeformer.NMSDistance)
			}
		}
		mine = appendUnit(mine, u, pts)
		if err := rec.record(u, pts); err != nil {
			return mine, skipped, err
		}
		if n++; n == stop {
			testhook.InterruptSelf(c.Rank())
		}
	}
	return mine, skipped, nil
}

// plan lists the units in canonical order (image, then window): one per
// image, or the image's predict_tile windows (its header read for its
// size).
func plan(full []string, cfg Config) ([]unit, [][]tile.Window, error) {
	var units []unit
	wins := make([][]tile.Window, len(full))
	for i, p := range full {
		w, h, err := imagefile.Check(p)
		if err != nil {
			return nil, nil, fmt.Errorf("points: %w: %w", err, dataset.ErrInput)
		}
		if !cfg.Tile {
			wins[i] = []tile.Window{{W: w, H: h}}
			units = append(units, unit{image: i, win: wins[i][0]})
			continue
		}
		ws, err := tile.Windows(w, h, cfg.Settings)
		if err != nil {
			return nil, nil, fmt.Errorf("points: %s: %w", p, err)
		}
		wins[i] = ws
		for _, win := range ws {
			units = append(units, unit{image: i, win: win})
		}
	}
	return units, wins, nil
}

// checkMemory refuses a unit whose forward pass would not fit the rank's
// budget (treeformer.WindowBytes, over what the process holds already).
func checkMemory(units []unit, full []string, cfg Config) error {
	if cfg.Budget <= 0 {
		return nil
	}
	have := residentBytes()
	for _, u := range units {
		need := treeformer.WindowBytes(u.win.H, u.win.W)
		if have+need > cfg.Budget {
			hint := "cut it into windows with --tile --patch-size 512 --patch-overlap 0.1"
			if cfg.Tile {
				hint = "give a smaller --patch-size"
			}
			return fmt.Errorf("points: %s: a %d×%d forward pass needs about %.1f GiB beside the %.1f GiB this rank holds, over its %.1f GiB (%s): %s, run fewer ranks per node, or set --rank-memory: %w",
				full[u.image], u.win.W, u.win.H, float64(need)/(1<<30), float64(have)/(1<<30), float64(cfg.Budget)/(1<<30), cfg.BudgetFrom, hint, dataset.ErrInput)
		}
	}
	return nil
}

// residentBytes is the process's resident memory (VmRSS), 0 when unknown.
func residentBytes() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			var kb int64
			fmt.Sscan(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), &kb)
			return kb << 10
		}
	}
	return 0
}

// sameDigest refuses ranks that read different model files.
func sameDigest(c mpi.Comm, digest string) error {
	var v int64
	for i := 0; i < 8 && 2*i+1 < len(digest); i++ {
		v = v<<8 | int64(hexVal(digest[2*i])<<4|hexVal(digest[2*i+1]))
	}
	all, err := c.AllgatherInt64(v)
	if err != nil {
		return err
	}
	for r, x := range all {
		if x != all[0] {
			return collective(fmt.Errorf("points: rank %d reads a different model file than rank 0 (sha256 prefix %016x, not %016x): %w", r, uint64(x), uint64(all[0]), infer.ErrModel))
		}
	}
	return nil
}

func hexVal(b byte) int64 {
	switch {
	case b >= '0' && b <= '9':
		return int64(b - '0')
	case b >= 'a' && b <= 'f':
		return int64(b-'a') + 10
	}
	return 0
}

// appendUnit encodes one unit's points: unit, count, then x, y (float64)
// and score (float32) each, little-endian.
func appendUnit(b []byte, u int, pts []treeformer.Point) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(u))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(pts)))
	for _, p := range pts {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(p.X))
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(p.Y))
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(p.Score))
	}
	return b
}

// decodeUnits reads every rank's units beside the ones done before (a
// resumed run's), checking each unit comes exactly once.
func decodeUnits(b []byte, n int, done map[int][]treeformer.Point) ([][]treeformer.Point, error) {
	out := make([][]treeformer.Point, n)
	seen := make([]bool, n)
	for u, pts := range done {
		if u < 0 || u >= n {
			return nil, fmt.Errorf("points: saved unit %d of %d", u, n)
		}
		out[u], seen[u] = pts, true
	}
	for len(b) > 0 {
		if len(b) < 8 {
			return nil, errors.New("points: truncated gather")
		}
		u, k := int(binary.LittleEndian.Uint32(b)), int(binary.LittleEndian.Uint32(b[4:]))
		b = b[8:]
		if u >= n || seen[u] || k > len(b)/20 {
			return nil, fmt.Errorf("points: bad gathered unit %d (%d points)", u, k)
		}
		seen[u] = true
		pts := make([]treeformer.Point, k)
		for i := range pts {
			pts[i] = treeformer.Point{X: math.Float64frombits(binary.LittleEndian.Uint64(b)),
				Y: math.Float64frombits(binary.LittleEndian.Uint64(b[8:])), Score: math.Float32frombits(binary.LittleEndian.Uint32(b[16:]))}
			b = b[20:]
		}
		out[u] = pts
	}
	for u, s := range seen {
		if !s {
			return nil, fmt.Errorf("points: unit %d missing from the gather", u)
		}
	}
	return out, nil
}

func gather(c mpi.Comm, mine []byte) ([]byte, error) {
	counts, err := c.AllgatherInt64(int64(len(mine)))
	if err != nil {
		return nil, err
	}
	var total int64
	for _, n := range counts {
		total += n
	}
	all := make([]byte, total)
	if err := c.Allgatherv(mine, counts, all); err != nil {
		return nil, err
	}
	return all, nil
}

// WriteCSV is predictions.csv: image_path,x,y,label,score, the images in
// order, each image's points in DeepForest's order; floats as Python's
// repr writes them (report.AppendFloat), the path CSV-quoted when needed.
func WriteCSV(names []string, rows [][]treeformer.Point, label string) []byte {
	b := []byte("image_path,x,y,label,score\n")
	for i, pts := range rows {
		for _, p := range pts {
			b = append(b, csvField(names[i])...)
			b = report.AppendFloat(append(b, ','), p.X)
			b = report.AppendFloat(append(b, ','), p.Y)
			b = append(append(b, ','), csvField(label)...)
			b = report.AppendFloat(append(b, ','), float64(p.Score))
			b = append(b, '\n')
		}
	}
	return b
}

func csvField(s string) string {
	for _, r := range s {
		if r == ',' || r == '"' || r == '\n' || r == '\r' {
			q := []byte{'"'}
			for _, c := range []byte(s) {
				if c == '"' {
					q = append(q, '"')
				}
				q = append(q, c)
			}
			return string(append(q, '"'))
		}
	}
	return s
}

func since(t time.Time) float64 { return time.Since(t).Seconds() }

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func cpuSeconds() float64 { return nn.ProcessCPU().Seconds() }
