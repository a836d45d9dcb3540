package jobs

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
	"github.com/canopy-hpc/canopy/infer/imagefile"
	"github.com/canopy-hpc/canopy/infer/modelfile"
	"github.com/canopy-hpc/canopy/infer/tile"
	"github.com/canopy-hpc/canopy/internal/dataset"
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

// cropModelInfo is report.json's record of one crop model.
type cropModelInfo struct {
	Path       string         `json:"path"`
	Dir        string         `json:"dir,omitempty"` // the Hugging Face cache's folder of an owner/name path
	SHA256     string         `json:"sha256"`
	Form       crop.Form      `json:"form"`
	Arch       string         `json:"architecture"`
	Labels     []string       `json:"labels"`
	LabelsFrom string         `json:"labels_from"`
	LabelDict  *report.File   `json:"label_dict,omitempty"`
	Columns    [2]string      `json:"columns"`
	Transform  cropTransform  `json:"transform"`
	Config     []string       `json:"config_set,omitempty"`
	DTypes     map[string]int `json:"dtypes"`
	Device     string         `json:"device"`
}

// cropTransform is a crop model's transform as report.json records it.
type cropTransform struct {
	Resize      [2]int     `json:"resize"`
	Normalize   bool       `json:"normalize"`
	Mean        [3]float32 `json:"mean"`
	Std         [3]float32 `json:"std"`
	Expand      int        `json:"expand"`
	Interpolate string     `json:"interpolation"`
	Sum         string     `json:"sum_rule"`
}

// cropStats is report.json's "crops".
type cropStats struct {
	Classified int `json:"classified"`
	// DroppedZeroSize counts the boxes of zero width or height, which
	// DeepForest's _predict_crop_model_ drops (predict leaves their rows
	// out; eval keeps them for its metrics, with empty crop columns).
	DroppedZeroSize int     `json:"dropped_zero_size"`
	Workers         int     `json:"workers"`
	Seconds         float64 `json:"seconds"`
}

// cropSet is the job's loaded crop models.
type cropSet struct {
	dicts   [][]byte // the --crop-label-dict files' bytes
	models  []*crop.Model
	info    []cropModelInfo
	workers int
	stats   cropStats
}

// columns are the predictions' crop columns, in order.
func (cs *cropSet) columns() []string {
	if cs == nil {
		return nil
	}
	var out []string
	for _, in := range cs.info {
		out = append(out, in.Columns[0], in.Columns[1])
	}
	return out
}

// openCropModels loads the crop models on every rank: rank 0 reads the
// --crop-label-dict files and broadcasts them, every rank loads every
// model (a loading error on any rank is one collective error, exit 4), and
// each rank's weights must hash to rank 0's. threads is the rank's
// compute threads (the classifier's workers).
func openCropModels(c mpi.Comm, cc CropConfig, threads int) (*cropSet, error) {
	return openCropModelsFrom(c, cc, threads, nil)
}

// openCropModelsFrom is openCropModels where rank 0 has loaded the models
// already (pre, from loadCrops: a tile run's manifest records them before
// the broadcast); pre is nil on the other ranks.
func openCropModelsFrom(c mpi.Comm, cc CropConfig, threads int, pre *cropSet) (*cropSet, error) {
	if len(cc.Models) == 0 {
		return nil, nil
	}
	var pkt []byte
	if c.Rank() == 0 {
		dicts, err := pre.labelDicts(cc)
		if err != nil {
			pkt = append([]byte{byte(ExitInput)}, err.Error()...)
		} else {
			pkt = packFields([]byte{0}, dicts...)
		}
	}
	dicts, err := bcastFields(c, pkt, len(cc.LabelDicts))
	if err != nil {
		return nil, err
	}
	cs, lerr := pre, error(nil)
	if c.Rank() != 0 || pre == nil {
		cs, lerr = loadCropSet(cc, dicts)
	}
	if err := agreeErr(c, ExitModel, lerr); err != nil {
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
		return nil, localErr(ExitMPI, "jobs: broadcast crop model digests: %w", err)
	}
	var derr error
	if string(d0) != string(digests) {
		derr = fmt.Errorf("jobs: rank %d on %s reads other crop model weights than rank 0 (sha256 differ): every rank must see the same --crop-model files", c.Rank(), c.Host())
	}
	if err := agreeErr(c, ExitModel, derr); err != nil {
		return nil, err
	}
	cs.stats.Workers = cs.workers
	return cs, nil
}

// loadCrops is rank 0 loading the crop models alone (readCropLabelDicts,
// loadCropSet), before the broadcast (a tile run: its manifest records
// each model's identity); nil when there is none.
func loadCrops(cc CropConfig) (*cropSet, error) {
	if len(cc.Models) == 0 {
		return nil, nil
	}
	dicts, err := readCropLabelDicts(cc)
	if err != nil {
		return nil, &Error{Code: ExitInput, Err: err}
	}
	return loadCropSet(cc, dicts)
}

// readCropLabelDicts reads the --crop-label-dict files (rank 0).
func readCropLabelDicts(cc CropConfig) ([][]byte, error) {
	var out [][]byte
	for _, p := range cc.LabelDicts {
		b, err := readNamedInput(p)
		if err != nil {
			return nil, fmt.Errorf("jobs: --crop-label-dict: %v", err)
		}
		out = append(out, b)
	}
	return out, nil
}

// labelDicts are the --crop-label-dict files' bytes: those cs was loaded
// from, else read now.
func (cs *cropSet) labelDicts(cc CropConfig) ([][]byte, error) {
	if cs != nil {
		return cs.dicts, nil
	}
	return readCropLabelDicts(cc)
}

// loadCropSet loads every crop model with the --crop-label-dict files'
// bytes (dicts); the error is an *Error (exit 3 for a label dict, 4 for a
// model).
func loadCropSet(cc CropConfig, dicts [][]byte) (*cropSet, error) {
	cs := &cropSet{workers: 1, dicts: dicts}
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
				return nil, &Error{Code: ExitInput, Err: err}
			}
			opts.LabelDict, opts.Fallback = labelDictOf(lm), len(cc.LabelDicts) == 1 && len(cc.Models) > 1
			file = &report.File{Path: name, SHA256: sha256Hex(dicts[k])}
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
			return nil, &Error{Code: ExitModel, Err: fmt.Errorf("jobs: --crop-model %s: %w", p, err)}
		}
		cs.models = append(cs.models, m)
		cols := [2]string{"cropmodel_label", "cropmodel_score"}
		if len(cc.Models) > 1 {
			cols = [2]string{"cropmodel_label_" + strconv.Itoa(i), "cropmodel_score_" + strconv.Itoa(i)}
		}
		t := m.Transform
		cs.info = append(cs.info, cropModelInfo{Path: p, Dir: dir, SHA256: m.SHA256, Form: m.Form, Arch: m.Arch(), Labels: m.Labels(),
			LabelsFrom: m.LabelsFrom, LabelDict: file, Columns: cols, Config: m.Set, DTypes: m.DTypes, Device: "cpu",
			Transform: cropTransform{Resize: t.Size, Normalize: t.Normalize, Mean: t.Mean, Std: t.Std, Expand: t.Expand,
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

// cropSource reads the crops of one image: its size, and a window's
// pixels (imagefile's planes, k/255).
type cropSource interface {
	open(img int) (w, h int, err error)
	read(img int, r crop.Rect) (imagefile.Image, error)
	release(img int)
}

// cropResult is one crop's class index and score, per model.
type cropResult struct {
	label int32
	score float32
}

// cropTable is the stage's result: for image i, detection j, model k,
// rows[i][j][k]; rows[i][j] is nil for a dropped (zero-size) box.
type cropTable struct {
	set  *cropSet
	rows [][][]cropResult
}

// cropBatch is how many crops a rank reads and classifies at once (memory
// bound; the results do not depend on it).
const cropBatch = 64

// classifyCrops is the crop stage on every rank (a collective: every rank
// calls it with the same merged detections).
func classifyCrops(ctx context.Context, c mpi.Comm, cs *cropSet, src cropSource, dets [][]box.Detection) (*cropTable, error) {
	t := &cropTable{set: cs, rows: make([][][]cropResult, len(dets))}
	var items []cropItem
	for i, ds := range dets {
		t.rows[i] = make([][]cropResult, len(ds))
		for j, d := range ds {
			if crop.ZeroSize(d.Box.Xmin, d.Box.Ymin, d.Box.Xmax, d.Box.Ymax) {
				cs.stats.DroppedZeroSize++
				continue
			}
			items = append(items, cropItem{i, j})
		}
	}
	cs.stats.Classified = len(items)
	p, err := plan.Blocks(len(items), c.Size())
	if err != nil {
		return nil, collective(ExitInternal, "jobs: %w", err)
	}
	shard := p.Shards[c.Rank()]
	nm := len(cs.models)
	mine := make([]byte, 0, 8*nm*len(shard))
	lerr := func() error {
		runners := make([]*crop.Runner, nm)
		for k, m := range cs.models {
			runners[k] = crop.NewRunner(m.Net(), cs.workers)
		}
		for lo := 0; lo < len(shard); lo += cropBatch {
			hi := min(lo+cropBatch, len(shard))
			res := make([][]crop.Output, nm)
			for k, m := range cs.models {
				crops := make([]imagefile.Image, 0, hi-lo)
				for _, g := range shard[lo:hi] {
					it := items[g]
					w, h, err := src.open(it.img)
					if err != nil {
						return err
					}
					b := dets[it.img][it.det].Box
					r, err := crop.Window(b.Xmin, b.Ymin, b.Xmax, b.Ymax, m.Transform.Expand, w, h)
					if err != nil {
						return &Error{Code: ExitInput, Err: fmt.Errorf("jobs: crop of detection %d of image %d: %w", it.det, it.img, err)}
					}
					im, err := src.read(it.img, r)
					if err != nil {
						return err
					}
					crops = append(crops, im)
				}
				if res[k], err = runners[k].Classify(ctx, m.Transform, crops); err != nil {
					return cropModelErr(cs.info[k].Path, err, items, shard[lo:hi])
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
						src.release(items[g].img)
					}
				}
			}
		}
		return nil
	}()
	if lerr != nil && !errors.As(lerr, new(*Error)) {
		lerr = &Error{Code: ExitInput, Err: lerr}
	}
	if err := agreeErr(c, ExitInput, lerr); err != nil {
		return nil, err
	}
	all, err := mpi.AllgatherBytes(c, mine)
	if err != nil {
		return nil, localErr(ExitMPI, "jobs: gather crop results: %w", err)
	}
	var flat []byte
	for _, b := range all {
		flat = append(flat, b...)
	}
	if len(flat) != 8*nm*len(items) {
		return nil, collective(ExitInternal, "jobs: gathered %d bytes of crop results, want %d", len(flat), 8*nm*len(items))
	}
	for g, it := range items {
		r := make([]cropResult, nm)
		for k := range r {
			o := 8 * (g*nm + k)
			r[k] = cropResult{label: int32(binary.LittleEndian.Uint32(flat[o:])), score: math.Float32frombits(binary.LittleEndian.Uint32(flat[o+4:]))}
			if r[k].label < 0 || int(r[k].label) >= len(cs.models[k].Labels()) {
				return nil, collective(ExitInternal, "jobs: crop result %d: class %d of %d", g, r[k].label, len(cs.models[k].Labels()))
			}
		}
		t.rows[it.img][it.det] = r
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
	return &Error{Code: ExitModel, Err: fmt.Errorf("jobs: --crop-model %s, detection %d of image %d: %w", model, it.det, it.img, err)}
}

// defaultCropWorkers is the classifier's workers when no detector says
// (eval --predictions): --threads, else the rank's share of the cores, as
// the detector's default.
func defaultCropWorkers(threads, localRanks int) int {
	if threads > 0 {
		return threads
	}
	return defaultThreads(startProcs, runtime.NumCPU(), localRanks)
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
	conf    confiner
	open_   map[int]imagefile.Image
}

func newImageCrops(root string, paths []string, outside bool) *imageCrops {
	return &imageCrops{root: root, paths: paths, outside: outside, conf: newConfiner(root), open_: map[int]imagefile.Image{}}
}

func (s *imageCrops) open(i int) (int, int, error) {
	if im, ok := s.open_[i]; ok {
		return im.W, im.H, nil
	}
	if !s.outside {
		if err := s.conf.check(s.paths[i]); err != nil {
			return 0, 0, &Error{Code: ExitInput, Err: err}
		}
	}
	im, err := imagefile.Read(imageFile(s.root, s.paths[i]))
	if err != nil {
		return 0, 0, &Error{Code: ExitInput, Err: fmt.Errorf("jobs: crops: %w", err)}
	}
	s.open_[i] = im
	return im.W, im.H, nil
}

func (s *imageCrops) read(i int, r crop.Rect) (imagefile.Image, error) {
	return crop.Cut(s.open_[i], r), nil
}

func (s *imageCrops) release(i int) { delete(s.open_, i) }

// rasterCrops reads crops from rasters by GDAL windowed reads (predict
// --tile, eval --tile), as DeepForest's rasterio windows.
type rasterCrops struct {
	rs      *rasterSet
	rasters []tileRaster
}

func (s *rasterCrops) open(i int) (int, int, error) {
	return s.rasters[i].Width, s.rasters[i].Height, nil
}

func (s *rasterCrops) read(i int, r crop.Rect) (imagefile.Image, error) {
	im, err := s.rs.read(i, tile.Window{X: r.X, Y: r.Y, W: r.W, H: r.H})
	if err != nil {
		return im, &Error{Code: ExitInput, Err: fmt.Errorf("jobs: crops: %w", err)}
	}
	return im, nil
}

func (s *rasterCrops) release(int) {}

// dropZero leaves out the boxes the stage dropped (zero width or
// height), from dets and from the table, as DeepForest's predictions do
// (predict and predict --tile; eval keeps them for its metrics, with empty
// crop cells).
func (t *cropTable) dropZero(dets [][]box.Detection) [][]box.Detection {
	out := make([][]box.Detection, len(dets))
	for i, ds := range dets {
		var rows [][]cropResult
		for j, d := range ds {
			if t.rows[i][j] != nil {
				out[i] = append(out[i], d)
				rows = append(rows, t.rows[i][j])
			}
		}
		t.rows[i] = rows
	}
	return out
}

// appendCells appends ",label,score" per model for row j of image i
// (empty cells for a dropped box).
func (t *cropTable) appendCells(line []byte, i, j int) []byte {
	r := t.rows[i][j]
	for k, m := range t.set.models {
		if r == nil {
			line = append(line, ',', ',')
			continue
		}
		line = append(append(line, ','), csvField(m.Labels()[r[k].label])...)
		line = report.AppendFloat(append(line, ','), float64(r[k].score))
	}
	return line
}
