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
	"strings"
	"time"

	"github.com/canopy-hpc/canopy/infer"
	"github.com/canopy-hpc/canopy/infer/imagefile"
	"github.com/canopy-hpc/canopy/infer/nn"
	"github.com/canopy-hpc/canopy/infer/tile"
	"github.com/canopy-hpc/canopy/infer/treeformer"
	"github.com/canopy-hpc/canopy/internal/dataset"
	"github.com/canopy-hpc/canopy/mpi"
	"github.com/canopy-hpc/canopy/report"
)

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
	Input bool
	Paths []string
}

// Report is OUT/report.json.
type Report struct {
	Canopy  string             `json:"canopy"`
	Command []string           `json:"command"`
	Ranks   int                `json:"ranks"`
	Images  int                `json:"images"`
	Windows int                `json:"windows"`
	Points  int                `json:"points"`
	Model   ModelInfo          `json:"model"`
	Tile    *tile.Settings     `json:"tile,omitempty"`
	Peaks   map[string]string  `json:"postprocess"`
	Seconds map[string]float64 `json:"seconds_rank0"`
	CPU     float64            `json:"cpu_seconds_rank0"`
	Outputs map[string]string  `json:"outputs"`
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
	t0 := time.Now()
	cpu0 := cpuSeconds()
	var pkt []byte
	if c.Rank() == 0 {
		lp := listPacket{}
		if err := prepareOut(cfg.Out, cfg.Force); err != nil {
			lp.Err = err.Error()
		} else if paths, err := cfg.List(); err != nil {
			lp.Err, lp.Input = err.Error(), true
		} else if len(paths) == 0 {
			lp.Err, lp.Input = "points: no images", true
		} else {
			lp.Paths = paths
		}
		pkt, _ = json.Marshal(lp)
	}
	pkt, err := c.Bcast(pkt, 0)
	if err != nil {
		return err
	}
	var lp listPacket
	if err := json.Unmarshal(pkt, &lp); err != nil {
		return collective(fmt.Errorf("points: malformed broadcast: %w", err))
	}
	if lp.Err != "" {
		if lp.Input {
			return collective(fmt.Errorf("%s: %w", lp.Err, dataset.ErrInput))
		}
		return collective(errors.New(lp.Err))
	}
	paths := lp.Paths
	m, mcfg, digest, err := treeformer.Load(cfg.Model, cfg.LabelDict)
	if err != nil {
		return err // this rank's: the others may have loaded it
	}
	if err := sameDigest(c, digest); err != nil {
		return err
	}
	full := make([]string, len(paths))
	for i, p := range paths {
		full[i] = p
		if !filepath.IsAbs(p) {
			full[i] = filepath.Join(cfg.RootDir, p)
		}
	}
	units, wins, err := plan(full, cfg)
	if err != nil {
		return collective(err)
	}
	if err := checkMemory(units, full, cfg); err != nil {
		return err // this rank's budget: another node's may differ
	}
	load := since(t0)
	t1 := time.Now()
	r := treeformer.NewRunner(m, max(cfg.Threads, 1))
	var mine []byte
	cur, im := -1, treeformer.Image{}
	for u := c.Rank(); u < len(units); u += c.Size() {
		if err := ctx.Err(); err != nil {
			return err
		}
		un := units[u]
		if un.image != cur {
			fi, err := imagefile.Read(full[un.image])
			if err != nil {
				return fmt.Errorf("points: %w: %w", err, dataset.ErrInput)
			}
			cur, im = un.image, treeformer.Image{W: fi.W, H: fi.H, Pix: fi.Pix}
		}
		win := un.win
		if !cfg.Tile {
			win = tile.Window{W: im.W, H: im.H}
		}
		if !treeformer.PointsPossible(win.H, win.W, treeformer.DefaultPeaks) {
			mine = appendUnit(mine, u, nil) // too small for a peak away from the border
			continue
		}
		d, err := r.Forward(im, win)
		if err != nil {
			return fmt.Errorf("points: %s: %w: %w", full[un.image], err, infer.ErrModel)
		}
		pts := treeformer.WindowPoints(d, treeformer.DefaultPeaks)
		if !cfg.Tile {
			pts = treeformer.ReducePoints(pts, treeformer.NMSDistance)
		}
		mine = appendUnit(mine, u, pts)
	}
	detect := since(t1)
	all, err := gather(c, mine)
	if err != nil {
		return err
	}
	byUnit, err := decodeUnits(all, len(units))
	if err != nil {
		return collective(err)
	}
	if c.Rank() != 0 {
		return nil
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
	sum := sha256Hex(csv)
	rep := Report{Canopy: cfg.Version, Command: cfg.Command, Ranks: c.Size(), Images: len(paths), Windows: len(units),
		Model: ModelInfo{Path: cfg.Model, SHA256: digest, Arch: "treeformer " + m.Arch.Name, Format: mcfg.Format, Backbone: mcfg.Backbone,
			LabelDict: mcfg.LabelDict, LabelsFrom: mcfg.LabelsFrom, Ignored: mcfg.Ignored, Threads: max(cfg.Threads, 1)},
		Peaks:   map[string]string{"score_thresh": "0.3", "min_distance": "5", "nms_distance_thresh": "5"},
		Seconds: map[string]float64{"load": load, "predict": detect}, CPU: cpuSeconds() - cpu0,
		Outputs: map[string]string{"predictions.csv": sum}}
	if cfg.Tile {
		s := cfg.Settings
		rep.Tile = &s
	}
	for _, p := range rows {
		rep.Points += len(p)
	}
	rj, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if err := writeAtomic(filepath.Join(cfg.Out, "predictions.csv"), csv); err != nil {
		return err
	}
	if err := writeAtomic(filepath.Join(cfg.Out, "report.json"), append(rj, '\n')); err != nil {
		return err
	}
	if cfg.Stdout != nil {
		fmt.Fprintf(cfg.Stdout, "%d points on %d images: %s\n", rep.Points, len(paths), filepath.Join(cfg.Out, "predictions.csv"))
	}
	return nil
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

// decodeUnits reads every rank's units, checking each unit comes exactly
// once.
func decodeUnits(b []byte, n int) ([][]treeformer.Point, error) {
	out := make([][]treeformer.Point, n)
	seen := make([]bool, n)
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

// prepareOut makes the output folder; a previous predictions.csv is
// refused unless force.
func prepareOut(dir string, force bool) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("points: %w", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "predictions.csv")); err == nil && !force {
		return fmt.Errorf("points: %s holds a previous run's predictions.csv (give --force to replace it)", dir)
	}
	return nil
}

func writeAtomic(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("points: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("points: %w", err)
	}
	return nil
}

func since(t time.Time) float64 { return time.Since(t).Seconds() }

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func cpuSeconds() float64 { return nn.ProcessCPU().Seconds() }
