// Package cropstage is the crop models' stage (--crop-model) and eval-crops'
// classifier: the models loaded and hash-checked on every rank, the job's
// crops dealt, read, classified and gathered, and the crop columns of
// predictions.csv.
package cropstage

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"strconv"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/infer/crop"
	"github.com/canopy-hpc/canopy/infer/gpu"
	"github.com/canopy-hpc/canopy/infer/imagefile"
	"github.com/canopy-hpc/canopy/infer/modelfile"
	"github.com/canopy-hpc/canopy/internal/collective"
	"github.com/canopy-hpc/canopy/internal/confine"
	"github.com/canopy-hpc/canopy/internal/dataset"
	"github.com/canopy-hpc/canopy/internal/errkind"
	"github.com/canopy-hpc/canopy/internal/modelsel"
	"github.com/canopy-hpc/canopy/internal/outdir"
	"github.com/canopy-hpc/canopy/internal/plan"
	"github.com/canopy-hpc/canopy/mpi"
	"github.com/canopy-hpc/canopy/report"
)

// The crop models' stage (--crop-model), shared by predict, predict
// --tile, eval and eval --tile: after the detections are merged (every
// rank holds them all), the crops of the job are dealt to the ranks in
// balanced contiguous shards (plan.Blocks), each rank reads and classifies
// its crops with every crop model, and the results are gathered
// (mpi.AllgatherBytes) in crop order, so every rank holds every crop's
// label and score, the same bytes for any rank count, --threads and
// --batch-size.

// CropConfig is --crop-model (repeatable) and --crop-label-dict, parsed
// once.
type CropConfig struct {
	// Models are the crop models in the order given; their columns are
	// cropmodel_label and cropmodel_score for one model, else
	// cropmodel_label_<i> and cropmodel_score_<i> (i from 0).
	Models []string
	// LabelDicts are --crop-label-dict: none, one (for every model
	// without labels of its own) or one per model, in order.
	LabelDicts []string
}

// labelDictFor is model i's --crop-label-dict ("" for none).
func (cc CropConfig) labelDictFor(i int) string {
	switch len(cc.LabelDicts) {
	case 0:
		return ""
	case 1:
		return cc.LabelDicts[0]
	}
	return cc.LabelDicts[i]
}

// ModelInfo is report.json's record of one crop model.
type ModelInfo struct {
	Path       string         `json:"path"`
	Dir        string         `json:"dir,omitempty"` // the Hugging Face cache's folder of an owner/name path
	SHA256     string         `json:"sha256"`
	Form       crop.Form      `json:"form"`
	Arch       string         `json:"architecture"`
	Labels     []string       `json:"labels"`
	LabelsFrom string         `json:"labels_from"`
	LabelDict  *report.File   `json:"label_dict,omitempty"`
	Columns    [2]string      `json:"columns"`
	Transform  Transform      `json:"transform"`
	Config     []string       `json:"config_set,omitempty"`
	DTypes     map[string]int `json:"dtypes"`
	Device     string         `json:"device"`
}

// Transform is a crop model's transform as report.json records it.
type Transform struct {
	Resize      [2]int     `json:"resize"`
	Normalize   bool       `json:"normalize"`
	Mean        [3]float32 `json:"mean"`
	Std         [3]float32 `json:"std"`
	Expand      int        `json:"expand"`
	Interpolate string     `json:"interpolation"`
	Sum         string     `json:"sum_rule"`
}

// Stats is report.json's "crops".
type Stats struct {
	Classified int `json:"classified"`
	// DroppedZeroSize counts the boxes of zero width or height, which
	// DeepForest's _predict_crop_model_ drops (predict leaves their rows
	// out; eval keeps them for its metrics, with empty crop columns).
	DroppedZeroSize int     `json:"dropped_zero_size"`
	Workers         int     `json:"workers"`
	Seconds         float64 `json:"seconds"`
	// Device is where rank 0 classified: "cpu", or the GPU engine it
	// shares with the detector ("cuda tf32 on NVIDIA H200").
	Device string `json:"device"`
}

// Set is the job's loaded crop models.
type Set struct {
	dicts   [][]byte // the --crop-label-dict files' bytes
	models  []*crop.Model
	Info    []ModelInfo
	workers int
	Stats   Stats
	// engine, when not nil, is the detector's GPU engine, where the
	// crops run (OnDetector).
	engine *gpu.Engine
}

// OnDetector makes the crop models run on det's GPU engine when det is a
// GPU detector (its device, precision, cuDNN handle, plans and
// workspace), as --device cuda asks; on a CPU detector they stay on the
// CPU engine.
func (cs *Set) OnDetector(det any) {
	d, ok := det.(interface{ CropEngine() *gpu.Engine })
	if cs == nil || !ok {
		return
	}
	cs.engine = d.CropEngine()
	cs.Stats.Device = fmt.Sprintf("cuda %s on %s", cs.engine.Prec, cs.engine.Dev.Info().Name)
	for i := range cs.Info {
		cs.Info[i].Device = cs.Stats.Device
	}
}

// runner is a crop model's classifier: the CPU engine's or the GPU's.
type runner interface {
	ClassifyWindows(ctx context.Context, tr crop.Transform, imgs []imagefile.Image, ps []crop.Piece) ([]crop.Output, error)
}

// runners are the models' classifiers, and what closes them.
func (cs *Set) runners() ([]runner, func()) {
	out := make([]runner, len(cs.models))
	var gs []*crop.GPURunner
	for k, m := range cs.models {
		if cs.engine != nil {
			g := crop.NewGPURunner(m.Net(), cs.engine)
			gs = append(gs, g)
			out[k] = g
		} else {
			out[k] = crop.NewRunner(m.Net(), cs.workers)
		}
	}
	return out, func() {
		for _, g := range gs {
			// nothing of their own can fail: their engine is the
			// detector's, whose error its Close returns (detect.Closer)
			g.Close()
		}
	}
}

// Columns are the predictions' crop columns, in order.
func (cs *Set) Columns() []string {
	if cs == nil {
		return nil
	}
	var out []string
	for _, in := range cs.Info {
		out = append(out, in.Columns[0], in.Columns[1])
	}
	return out
}

// Open loads the crop models on every rank: rank 0 reads the
// --crop-label-dict files and broadcasts them, every rank loads every
// model (a loading error on any rank is one collective error, exit 4), and
// each rank's weights must hash to rank 0's. threads is the rank's
// compute threads (the classifier's workers).
func Open(c mpi.Comm, cc CropConfig, threads int) (*Set, error) {
	return OpenFrom(c, cc, threads, nil)
}

// OpenFrom is Open where rank 0 has loaded the models
// already (pre, from Load: a tile run's manifest records them before
// the broadcast); pre is nil on the other ranks.
func OpenFrom(c mpi.Comm, cc CropConfig, threads int, pre *Set) (*Set, error) {
	if len(cc.Models) == 0 {
		return nil, nil
	}
	var pkt []byte
	if c.Rank() == 0 {
		dicts, err := pre.labelDicts(cc)
		if err != nil {
			pkt = append([]byte{byte(errkind.ExitInput)}, err.Error()...)
		} else {
			pkt = collective.PackFields([]byte{0}, dicts...)
		}
	}
	dicts, err := collective.BcastFields(c, pkt, len(cc.LabelDicts))
	if err != nil {
		return nil, err
	}
	cs, lerr := pre, error(nil)
	if c.Rank() != 0 || pre == nil {
		cs, lerr = loadCropSet(cc, dicts)
	}
	if err := collective.AgreeErr(c, errkind.ExitModel, lerr); err != nil {
		return nil, err
	}
	cs.workers = max(threads, 1)
	// Every rank must have read the same weights as rank 0.
	var digests []byte
	for _, m := range cs.models {
		digests = append(digests, m.SHA256...)
	}
	d0, err := c.Bcast(digests, 0)
	if err != nil {
		return nil, errkind.Local(errkind.ExitMPI, "jobs: broadcast crop model digests: %w", err)
	}
	var derr error
	if string(d0) != string(digests) {
		derr = fmt.Errorf("jobs: rank %d on %s reads other crop model weights than rank 0 (sha256 differ): every rank must see the same --crop-model files", c.Rank(), c.Host())
	}
	if err := collective.AgreeErr(c, errkind.ExitModel, derr); err != nil {
		return nil, err
	}
	cs.Stats.Workers, cs.Stats.Device = cs.workers, "cpu"
	return cs, nil
}

// Load is rank 0 loading the crop models alone (readCropLabelDicts,
// loadCropSet), before the broadcast (a tile run: its manifest records
// each model's identity); nil when there is none.
func Load(cc CropConfig) (*Set, error) {
	if len(cc.Models) == 0 {
		return nil, nil
	}
	dicts, err := readCropLabelDicts(cc)
	if err != nil {
		return nil, &errkind.Error{Code: errkind.ExitInput, Err: err}
	}
	return loadCropSet(cc, dicts)
}

// readCropLabelDicts reads the --crop-label-dict files (rank 0).
func readCropLabelDicts(cc CropConfig) ([][]byte, error) {
	var out [][]byte
	for _, p := range cc.LabelDicts {
		b, err := confine.ReadNamedInput(p)
		if err != nil {
			return nil, fmt.Errorf("jobs: --crop-label-dict: %v", err)
		}
		out = append(out, b)
	}
	return out, nil
}

// labelDicts are the --crop-label-dict files' bytes: those cs was loaded
// from, else read now.
func (cs *Set) labelDicts(cc CropConfig) ([][]byte, error) {
	if cs != nil {
		return cs.dicts, nil
	}
	return readCropLabelDicts(cc)
}

// loadCropSet loads every crop model with the --crop-label-dict files'
// bytes (dicts); the error is an *Error (exit 3 for a label dict, 4 for a
// model).
func loadCropSet(cc CropConfig, dicts [][]byte) (*Set, error) {
	cs := &Set{workers: 1, dicts: dicts}
	for i, p := range cc.Models {
		var opts crop.Options
		var file *report.File
		if name := cc.labelDictFor(i); name != "" {
			k := 0
			if len(cc.LabelDicts) > 1 {
				k = i
			}
			lm, err := dataset.ParseLabelDict(name, dicts[k])
			if err != nil {
				return nil, &errkind.Error{Code: errkind.ExitInput, Err: err}
			}
			opts.LabelDict, opts.Fallback = modelsel.LabelDictOf(lm), len(cc.LabelDicts) == 1 && len(cc.Models) > 1
			file = &report.File{Path: name, SHA256: outdir.SHA256Hex(dicts[k])}
		}
		dir := ""
		if _, err := os.Stat(p); err != nil {
			// owner/name[@revision] in the local Hugging Face cache, as
			// --model resolves it (a hub folder: config.json and
			// model.safetensors).
			if d, rerr := modelfile.Resolve(p); rerr == nil {
				dir = d
			}
		}
		m, err := crop.Load(cmp.Or(dir, p), opts)
		if err != nil {
			return nil, &errkind.Error{Code: errkind.ExitModel, Err: fmt.Errorf("jobs: --crop-model %s: %w", p, err)}
		}
		cs.models = append(cs.models, m)
		cols := [2]string{"cropmodel_label", "cropmodel_score"}
		if len(cc.Models) > 1 {
			cols = [2]string{"cropmodel_label_" + strconv.Itoa(i), "cropmodel_score_" + strconv.Itoa(i)}
		}
		t := m.Transform
		cs.Info = append(cs.Info, ModelInfo{Path: p, Dir: dir, SHA256: m.SHA256, Form: m.Form, Arch: m.Arch(), Labels: m.Labels(),
			LabelsFrom: m.LabelsFrom, LabelDict: file, Columns: cols, Config: m.Set, DTypes: m.DTypes, Device: "cpu",
			Transform: Transform{Resize: t.Size, Normalize: t.Normalize, Mean: t.Mean, Std: t.Std, Expand: t.Expand,
				Interpolate: "bilinear, antialiased (torch _upsample_bilinear2d_aa)", Sum: sumRule(t)}})
	}
	return cs, nil
}

func sumRule(t crop.Transform) string {
	if t.FMA {
		return "torch AVX2/AVX-512 kernels: in-order sums, 4 taps vectorized then fused multiply-adds"
	}
	return "ATEN_CPU_CAPABILITY=default: every product rounded"
}

// cropItem is one box to classify: image (or raster) img, detection det.
type cropItem struct{ img, det int }

// Source reads the crops of one image: its size, and a window's
// pixels (imagefile's planes, k/255).
type Source interface {
	Open(img int) (w, h int, err error)
	Read(img int, r crop.Rect) (imagefile.Image, error)
	Release(img int)
}

// Whole is a Source that holds each open image whole: its crops are cut
// from it by the classifier (on a GPU, from the image uploaded once per
// batch), not read one by one.
type Whole interface {
	Whole(img int) imagefile.Image
}

// Windowed is a Source whose images were cut into windows a GPU detector
// held on the device after detecting them (a tile run's: GPUDetector's
// HoldWindows): Windows are the windows of image img that hold crop r
// whole, each its key (the detector input's Index) and origin in img. On
// the GPU engine a crop in a window still held is cut from it there, its
// pixels neither read nor uploaded again.
type Windowed interface {
	Windows(img int, r crop.Rect) []Window
}

// Window is a detector window that may be held on the device: its key and
// its origin in its image.
type Window struct{ Key, X, Y int }

// HoldWindows makes a GPU detector the crops run on (OnDetector) keep
// its windows on the device, within budget bytes, for the crops of a
// Windowed source (nothing on the CPU, or with no crop model).
func (cs *Set) HoldWindows(det any, budget int64) {
	d, ok := det.(interface{ HoldWindows(int64) })
	if cs == nil || cs.engine == nil || !ok {
		return
	}
	d.HoldWindows(budget)
}

// DropWindows frees the held windows whose keys drop names (their
// images' crops are done).
func (cs *Set) DropWindows(drop func(key int) bool) {
	if cs != nil && cs.engine != nil {
		cs.engine.DropHeld(drop)
	}
}

// held is the held window of src that holds crop r of image img, and r
// within it.
func (cs *Set) held(src Windowed, img int, r crop.Rect) (crop.Piece, bool) {
	if cs.engine == nil || src == nil || !cs.engine.Holds() {
		return crop.Piece{}, false
	}
	for _, w := range src.Windows(img, r) {
		if s, ok := cs.engine.HeldSource(w.Key); ok {
			return crop.Piece{Held: &s, R: crop.Rect{X: r.X - w.X, Y: r.Y - w.Y, W: r.W, H: r.H}}, true
		}
	}
	return crop.Piece{}, false
}

// Result is one crop's class index and score, per model.
type Result struct {
	Label int32
	Score float32
}

// Table is the stage's result: for image i, detection j, model k,
// rows[i][j][k]; rows[i][j] is nil for a dropped (zero-size) box.
type Table struct {
	Set  *Set
	Rows [][][]Result
}

// cropBatch is how many crops a rank reads and classifies at once (memory
// bound; the results do not depend on it).
const cropBatch = 64

// Classify is the crop stage on every rank (a collective: every rank
// calls it with the same merged detections).
func Classify(ctx context.Context, c mpi.Comm, cs *Set, src Source, dets [][]box.Detection) (*Table, error) {
	t := &Table{Set: cs, Rows: make([][][]Result, len(dets))}
	var items []cropItem
	for i, ds := range dets {
		t.Rows[i] = make([][]Result, len(ds))
		for j, d := range ds {
			if crop.ZeroSize(d.Box.Xmin, d.Box.Ymin, d.Box.Xmax, d.Box.Ymax) {
				cs.Stats.DroppedZeroSize++
				continue
			}
			items = append(items, cropItem{i, j})
		}
	}
	cs.Stats.Classified = len(items)
	p, err := plan.Blocks(len(items), c.Size())
	if err != nil {
		return nil, errkind.Collective(errkind.ExitInternal, "jobs: %w", err)
	}
	shard := p.Shards[c.Rank()]
	nm := len(cs.models)
	mine := make([]byte, 0, 8*nm*len(shard))
	lerr := func() error {
		runners, done := cs.runners()
		defer done()
		whole, _ := src.(Whole)
		windowed, _ := src.(Windowed)
		for lo := 0; lo < len(shard); lo += cropBatch {
			hi := min(lo+cropBatch, len(shard))
			res := make([][]crop.Output, nm)
			for k, m := range cs.models {
				var imgs []imagefile.Image
				pieces := make([]crop.Piece, 0, hi-lo)
				at := map[int]int{} // a whole image's index in imgs
				for _, g := range shard[lo:hi] {
					it := items[g]
					w, h, err := src.Open(it.img)
					if err != nil {
						return err
					}
					b := dets[it.img][it.det].Box
					r, err := crop.Window(b.Xmin, b.Ymin, b.Xmax, b.Ymax, m.Transform.Expand, w, h)
					if err != nil {
						return &errkind.Error{Code: errkind.ExitInput, Err: fmt.Errorf("jobs: crop of detection %d of image %d: %w", it.det, it.img, err)}
					}
					if p, ok := cs.held(windowed, it.img, r); ok {
						pieces = append(pieces, p)
						continue
					}
					if whole != nil {
						j, ok := at[it.img]
						if !ok {
							j = len(imgs)
							at[it.img] = j
							imgs = append(imgs, whole.Whole(it.img))
						}
						pieces = append(pieces, crop.Piece{Img: j, R: r})
						continue
					}
					im, err := src.Read(it.img, r)
					if err != nil {
						return err
					}
					imgs = append(imgs, im)
					pieces = append(pieces, crop.Piece{Img: len(imgs) - 1, R: crop.Rect{W: im.W, H: im.H}})
				}
				if res[k], err = runners[k].ClassifyWindows(ctx, m.Transform, imgs, pieces); err != nil {
					return cropModelErr(cs.Info[k].Path, err, items, shard[lo:hi])
				}
			}
			for i := range shard[lo:hi] {
				for k := 0; k < nm; k++ {
					label, score := res[k][i].Best()
					mine = binary.LittleEndian.AppendUint32(mine, uint32(label))
					mine = binary.LittleEndian.AppendUint32(mine, math.Float32bits(score))
				}
			}
			// An image's crops are contiguous: free the ones done.
			if hi < len(shard) {
				for _, g := range shard[lo:hi] {
					if items[g].img != items[shard[hi]].img {
						src.Release(items[g].img)
					}
				}
			}
		}
		return nil
	}()
	if lerr != nil && !errors.As(lerr, new(*errkind.Error)) {
		lerr = &errkind.Error{Code: errkind.ExitInput, Err: lerr}
	}
	if err := collective.AgreeErr(c, errkind.ExitInput, lerr); err != nil {
		return nil, err
	}
	all, err := mpi.AllgatherBytes(c, mine)
	if err != nil {
		return nil, errkind.Local(errkind.ExitMPI, "jobs: gather crop results: %w", err)
	}
	var flat []byte
	for _, b := range all {
		flat = append(flat, b...)
	}
	if len(flat) != 8*nm*len(items) {
		return nil, errkind.Collective(errkind.ExitInternal, "jobs: gathered %d bytes of crop results, want %d", len(flat), 8*nm*len(items))
	}
	for g, it := range items {
		r := make([]Result, nm)
		for k := range r {
			o := 8 * (g*nm + k)
			r[k] = Result{Label: int32(binary.LittleEndian.Uint32(flat[o:])), Score: math.Float32frombits(binary.LittleEndian.Uint32(flat[o+4:]))}
			if r[k].Label < 0 || int(r[k].Label) >= len(cs.models[k].Labels()) {
				return nil, errkind.Collective(errkind.ExitInternal, "jobs: crop result %d: class %d of %d", g, r[k].Label, len(cs.models[k].Labels()))
			}
		}
		t.Rows[it.img][it.det] = r
	}
	return t, nil
}

// cropModelErr is a crop model's error at run time: non-finite logits or
// probabilities (crop.NonFiniteError) are a model error (exit 4), as the
// detector's, naming the model and the detection; any other error is
// returned as it is.
func cropModelErr(model string, err error, items []cropItem, batch []int) error {
	var ne *crop.NonFiniteError
	if !errors.As(err, &ne) || ne.Crop < 0 || ne.Crop >= len(batch) {
		return err
	}
	it := items[batch[ne.Crop]]
	return &errkind.Error{Code: errkind.ExitModel, Err: fmt.Errorf("jobs: --crop-model %s, detection %d of image %d: %w", model, it.det, it.img, err)}
}

// DefaultWorkers is the classifier's workers when no detector says
// (eval --predictions): --threads, else the rank's share of the cores, as
// the detector's default.
func DefaultWorkers(threads, localRanks int) int {
	if threads > 0 {
		return threads
	}
	return modelsel.DefaultThreads(modelsel.StartProcs, runtime.NumCPU(), localRanks)
}

// imageCrops reads crops from image files under root (predict, eval),
// each image decoded once while its crops are read (imagefile: PIL's
// convert("RGB") values; DeepForest reads them with rasterio, whose PNG
// and TIFF pixels are the same and whose JPEG decoder may differ by the
// IDCT's rounding).
type imageCrops struct {
	root    string
	paths   []string
	outside bool
	conf    confine.Confiner
	open_   map[int]imagefile.Image
}

func NewImageCrops(root string, paths []string, outside bool) *imageCrops {
	return &imageCrops{root: root, paths: paths, outside: outside, conf: confine.New(root), open_: map[int]imagefile.Image{}}
}

func (s *imageCrops) Open(i int) (int, int, error) {
	if im, ok := s.open_[i]; ok {
		return im.W, im.H, nil
	}
	if !s.outside {
		if err := s.conf.Check(s.paths[i]); err != nil {
			return 0, 0, &errkind.Error{Code: errkind.ExitInput, Err: err}
		}
	}
	im, err := imagefile.Read(confine.ImageFile(s.root, s.paths[i]))
	if err != nil {
		return 0, 0, &errkind.Error{Code: errkind.ExitInput, Err: fmt.Errorf("jobs: crops: %w", err)}
	}
	s.open_[i] = im
	return im.W, im.H, nil
}

func (s *imageCrops) Read(i int, r crop.Rect) (imagefile.Image, error) {
	return crop.Cut(s.open_[i], r), nil
}

func (s *imageCrops) Release(i int) { delete(s.open_, i) }

// Whole is the open image i (Whole).
func (s *imageCrops) Whole(i int) imagefile.Image { return s.open_[i] }

// DropZero leaves out the boxes the stage dropped (zero width or
// height), from dets and from the table, as DeepForest's predictions do
// (predict and predict --tile; eval keeps them for its metrics, with empty
// crop cells).
func (t *Table) DropZero(dets [][]box.Detection) [][]box.Detection {
	out := make([][]box.Detection, len(dets))
	for i, ds := range dets {
		var rows [][]Result
		for j, d := range ds {
			if t.Rows[i][j] != nil {
				out[i] = append(out[i], d)
				rows = append(rows, t.Rows[i][j])
			}
		}
		t.Rows[i] = rows
	}
	return out
}

// AppendCells appends ",label,score" per model for row j of image i
// (empty cells for a dropped box).
func (t *Table) AppendCells(line []byte, i, j int) []byte {
	r := t.Rows[i][j]
	for k, m := range t.Set.models {
		if r == nil {
			line = append(line, ',', ',')
			continue
		}
		line = append(append(line, ','), dataset.CSVField(m.Labels()[r[k].Label])...)
		line = report.AppendFloat(append(line, ','), float64(r[k].Score))
	}
	return line
}

// Cells are one row's crop cells, a label and a score per model.
type Cells struct {
	Labels []string
	Scores []float64
}

// CellsOf are image i's crop cells from the table (n rows; nil without
// crop models).
func (t *Table) CellsOf(i, n int) []Cells {
	if t == nil {
		return nil
	}
	out := make([]Cells, n)
	for j, r := range t.Rows[i] {
		if r == nil {
			continue
		}
		for k, m := range t.Set.models {
			out[j].Labels = append(out[j].Labels, m.Labels()[r[k].Label])
			out[j].Scores = append(out[j].Scores, float64(r[k].Score))
		}
	}
	return out
}

// Columns are the table's crop columns (none without crop models).
func (t *Table) Columns() []string {
	if t == nil {
		return nil
	}
	return t.Set.Columns()
}
