package tilerun

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/infer/gdal"
	"github.com/canopy-hpc/canopy/infer/gemm"
	"github.com/canopy-hpc/canopy/infer/tile"
	"github.com/canopy-hpc/canopy/internal/collective"
	"github.com/canopy-hpc/canopy/internal/confine"
	"github.com/canopy-hpc/canopy/internal/cropstage"
	"github.com/canopy-hpc/canopy/internal/dataset"
	"github.com/canopy-hpc/canopy/internal/detect"
	"github.com/canopy-hpc/canopy/internal/errkind"
	"github.com/canopy-hpc/canopy/internal/geotruth"
	"github.com/canopy-hpc/canopy/internal/modelsel"
	"github.com/canopy-hpc/canopy/internal/outdir"
	"github.com/canopy-hpc/canopy/internal/output"
	"github.com/canopy-hpc/canopy/internal/parts"
	"github.com/canopy-hpc/canopy/internal/testhook"
	"github.com/canopy-hpc/canopy/mpi"
	"github.com/canopy-hpc/canopy/report"
)

// canopy predict --tile: DeepForest's predict_tile over many rasters on
// many ranks. Rank 0 lists and opens the rasters (size, bands,
// georeferencing), prepares the output folder (or finds what a run to
// resume saved) and broadcasts them; the global window list is arithmetic
// (tileIndex), walked in rounds (rounds.go): each rank detects its
// share of a round, saving it in its part file, the round is gathered, and
// a raster whose windows are all in is merged and published
// (outputs.go) by the rank that owns it. At the end rank 0 builds the
// combined outputs from the per-raster ones. Every output is the same
// bytes for any rank count, round size, --threads or --batch-size.

// tileRaster is one raster of the job, as rank 0 found it.
type tileRaster struct {
	Path         string      `json:"image_path"` // as predictions.csv names it
	File         string      `json:"file"`       // where every rank opens it
	Name         string      `json:"name"`       // its outputs: OUT/rasters/<name>.csv …
	Width        int         `json:"width"`
	Height       int         `json:"height"`
	Bands        int         `json:"bands"`
	Bits         int         `json:"bits"`
	Driver       string      `json:"driver"`
	CRS          string      `json:"crs,omitempty"`
	GeoTransform *[6]float64 `json:"geotransform,omitempty"`
	Layer        string      `json:"layer,omitempty"` // its layer of the GeoPackages (gdal.LayerNames)
	Windows      int         `json:"windows"`
	WindowDets   int         `json:"window_detections"`
	Detections   int         `json:"detections"`
}

// tileSources lists the rasters: (image_path, file) pairs.
func tileSources(cfg Config) (paths, files []string, err error) {
	switch {
	case cfg.Raster != "":
		return []string{filepath.Base(cfg.Raster)}, []string{cfg.Raster}, nil
	case cfg.Images != "":
		if paths, err = dataset.ListImages(cfg.Images); err != nil {
			return nil, nil, err
		}
		for _, p := range paths {
			files = append(files, filepath.Join(cfg.Images, p))
		}
		return paths, files, nil
	}
	var data []byte
	if cfg.vector == nil {
		if data, err = confine.ReadNamedInput(cfg.CSV); err != nil { // a FIFO or device is never waited on
			return nil, nil, fmt.Errorf("jobs: %w", err)
		}
	}
	switch {
	case cfg.vector != nil: // eval --tile, a shapefile or GeoPackage truth
		paths = cfg.vector.Paths()
	case cfg.Eval != nil: // eval --tile: the truth's images are the rasters
		truth, err := dataset.ParseTruthFile(cfg.CSV, data)
		if err != nil {
			return nil, nil, err
		}
		for _, im := range truth.Images {
			paths = append(paths, im.Path)
		}
	default:
		if paths, err = dataset.ImagePaths(cfg.CSV, data); err != nil {
			return nil, nil, err
		}
	}
	root := cfg.RootDir
	if root == "" {
		root = filepath.Dir(cfg.CSV)
	}
	conf := confine.New(root)
	for _, p := range paths {
		if !cfg.AllowOutsideRoot {
			if err := conf.Check(p); err != nil {
				return nil, nil, err
			}
		}
		files = append(files, confine.ImageFile(root, p))
	}
	return paths, files, nil
}

// openRasters opens every raster once on rank 0 (gdal.Open reads its
// first and last pixels, and the dataset is closed at once), counts its
// windows, names its outputs and records its identity.
func openRasters(cfg Config) ([]tileRaster, []rasterIdent, error) {
	paths, files, err := tileSources(cfg)
	if err != nil {
		return nil, nil, err
	}
	total := 0
	out := make([]tileRaster, len(paths))
	idents := make([]rasterIdent, len(paths))
	names := rasterNames(paths)
	for i := range paths {
		r, err := gdal.Open(files[i])
		if err != nil {
			return nil, nil, fmt.Errorf("jobs: %w", err)
		}
		in := r.Info()
		r.Close()
		t := tileRaster{Path: paths[i], File: files[i], Name: names[i], Width: in.Width, Height: in.Height, Bands: in.Bands, Bits: in.Bits,
			Driver: in.Driver, CRS: in.CRS}
		if in.HasTransform {
			gt := in.GeoTransform
			t.GeoTransform = &gt
		}
		if t.Windows, err = tile.Count(in.Width, in.Height, cfg.Settings); err != nil {
			return nil, nil, fmt.Errorf("jobs: %s: %w", files[i], err)
		}
		if total += t.Windows; total > tile.MaxWindows {
			return nil, nil, fmt.Errorf("jobs: the rasters give more than %d windows: %w", tile.MaxWindows, tile.ErrSettings)
		}
		if idents[i], err = identifyRaster(paths[i], files[i], cfg.FullHash); err != nil {
			return nil, nil, fmt.Errorf("jobs: %w", err)
		}
		out[i] = t
	}
	nameLayers(out)
	return out, idents, nil
}

// nameLayers gives each raster that has a CRS and a geotransform (those
// the GeoPackages hold) its layer name, valid and unique whatever the
// image paths (./x.tif, names differing only in case, gpkg_ or sqlite_
// prefixes), before any work; report.json records the mapping.
func nameLayers(rasters []tileRaster) {
	var paths []string
	var geo []int
	for i, r := range rasters {
		if r.CRS != "" && r.GeoTransform != nil {
			paths, geo = append(paths, r.Path), append(geo, i)
		}
	}
	for k, n := range gdal.LayerNames(paths) {
		rasters[geo[k]].Layer = n
	}
}

// packTile is rank 0's packet: the model, the rasters, eval --tile's truth
// (as CSV; vt records a shapefile or GeoPackage truth), the label map, and
// what the run continues (a tileResume and the saved windows).
func packTile(cfg Config) (pkt []byte, out *outdir.Run, vt *geotruth.Truth, crops *cropstage.Set) {
	fail := func(code int, err error) ([]byte, *outdir.Run, *geotruth.Truth, *cropstage.Set) {
		return append([]byte{byte(code)}, err.Error()...), nil, nil, nil
	}
	var err error
	if cfg.Eval != nil && geotruth.IsVector(cfg.CSV) {
		override := "" // eval --tile --raster: read_file's image_path argument
		if cfg.Raster != "" {
			override = filepath.Base(cfg.Raster)
		}
		if vt, err = geotruth.Read(cfg.CSV, override); err != nil {
			if errors.Is(err, gdal.ErrUnavailable) {
				return fail(errkind.ExitUsage, err)
			}
			return fail(errkind.ExitInput, err)
		}
		cfg.vector = vt
	}
	rasters, idents, err := openRasters(cfg)
	if err != nil {
		if errors.Is(err, gdal.ErrUnavailable) {
			return fail(errkind.ExitUsage, err)
		}
		return fail(errkind.ExitInput, err)
	}
	dir, digest, config, err := modelsel.Resolve(cfg.Model.Spec)
	if err != nil {
		return fail(errkind.ExitModel, err)
	}
	var truth []byte
	if vt != nil {
		if truth, err = vt.CSV(truthRasters(rasters)); err != nil {
			return fail(errkind.ExitInput, err)
		}
	}
	if cfg.Eval != nil && vt == nil {
		if truth, err = confine.ReadNamedInput(cfg.CSV); err != nil {
			return fail(errkind.ExitInput, fmt.Errorf("jobs: %w", err))
		}
	}
	labels := cfg.LabelDictData
	if labels == nil && cfg.LabelDict != "" {
		if labels, err = confine.ReadNamedInput(cfg.LabelDict); err != nil {
			return fail(errkind.ExitInput, fmt.Errorf("jobs: %w", err))
		}
	}
	ix, err := newTileIndex(rasters, cfg.Settings)
	if err != nil {
		return fail(errkind.ExitInput, fmt.Errorf("jobs: %w", err))
	}
	// The crop models, loaded here on rank 0 (cropstage.OpenFrom takes
	// them): the manifest records their identity.
	if crops, err = cropstage.Load(cfg.Crops); err != nil {
		return fail(errkind.Code(err), err)
	}
	out, res, saved, err := prepareTileOut(cfg, tileManifestOf(cfg, digest, config, labels, truth, idents, crops), ix.offset)
	if err != nil {
		return fail(errkind.Code(err), err)
	}
	res.Aside = out.Aside()
	rb, err := json.Marshal(rasters)
	rj, _ := json.Marshal(res)
	if err != nil {
		out.Finish(err)
		return fail(errkind.ExitInternal, err)
	}
	if cfg.Progress != nil {
		if vt != nil {
			for _, w := range vt.Warnings {
				collective.SayLine(cfg.Progress, "canopy: warning: ", w)
			}
		}
		for _, n := range res.Notes {
			collective.SayLine(cfg.Progress, "canopy: note: ", n)
		}
	}
	return collective.PackFields([]byte{0}, []byte(dir), []byte(digest), []byte(config), rb, truth, labels, rj, saved), out, vt, crops
}

type tileReport struct {
	// Metrics: eval --tile's, as eval's report.json "metrics".
	Metrics json.RawMessage `json:"metrics,omitempty"`
	// MetricsByIoU: --iou-sweep's further thresholds (SweepJSON).
	MetricsByIoU json.RawMessage `json:"metrics_by_iou_threshold,omitempty"`
	// Inputs: the label map given (--label-dict or the config's
	// label_dict), as eval's report.json "inputs" records it.
	Inputs map[string]report.File `json:"inputs,omitempty"`
	// Eval: eval --tile's matching rules (tile.iou_threshold is the
	// merge's), as eval's report.json records them at its top level.
	Eval *tileEval `json:"eval,omitempty"`
	output.PredictReport
	Tile struct {
		PatchSize    int             `json:"patch_size"`
		PatchOverlap float64         `json:"patch_overlap"`
		IoU          float64         `json:"iou_threshold"`
		Windows      int             `json:"windows"`
		WindowDets   int             `json:"window_detections"`
		Order        string          `json:"window_order"`
		Rasters      []tileRaster    `json:"rasters"`
		GPKG         string          `json:"gpkg,omitempty"`
		Truth        *geotruth.Truth `json:"truth,omitempty"` // a shapefile or GeoPackage truth
		// SkipEmpty is --skip-empty; Skipped the windows it gave no
		// detections in this run (an attempt's own: a resumed run counts
		// what it read, not what its earlier attempts skipped).
		SkipEmpty bool `json:"skip_empty"`
		Skipped   int  `json:"skipped_windows"`
		// Resume: what this run took from the run it continued.
		Resume *tileResumeInfo `json:"resume,omitempty"`
	} `json:"tile"`
}

// tileResumeInfo is report.json's tile.resume.
type tileResumeInfo struct {
	Attempt         int `json:"attempt"`
	RastersFinished int `json:"rasters_finished_before"`
	WindowsSaved    int `json:"windows_from_parts"`
	RecordsDropped  int `json:"torn_records_dropped"`
}

// tileEval is eval --tile's matching: the IoU above which a detection
// matches a truth box, and the metrics' semantics.
type tileEval struct {
	IoUThreshold float64 `json:"iou_threshold"`
	Semantics    string  `json:"semantics"`
}

// CreateParts opens a rank's part file: parts.Create, a seam the tests
// replace (a full disk).
var CreateParts = parts.Create

// partClose closes a rank's part file: its error local, exit 1.
func partClose(pw *parts.Writer) error {
	if err := pw.Close(); err != nil {
		return errkind.Local(errkind.ExitInternal, "jobs: %w", err)
	}
	return nil
}

// Run runs predict --tile (and eval --tile) on this rank.
func Run(ctx context.Context, c mpi.Comm, cfg Config) (err error) {
	cfg.BatchSize = detect.BatchOrOne(cfg.BatchSize)
	stats := collective.RankStats{Rank: c.Rank(), Host: c.Host(), LocalRank: c.LocalRank(), LocalSize: c.LocalSize(), Seconds: map[string]float64{}, SGEMM: gemm.Backend() + " " + gemm.Core()}
	t0 := time.Now()
	gdal.SetCacheMax(int64(cfg.CacheMiB) << 20)
	var pkt []byte
	var out *outdir.Run
	var vt *geotruth.Truth      // rank 0: a shapefile or GeoPackage truth
	var preCrops *cropstage.Set // rank 0: the crop models packTile loaded
	if c.Rank() == 0 {
		pkt, out, vt, preCrops = packTile(cfg)
	}
	defer func() { out.Finish(err) }()
	p, rasters, res, err := receiveTile(c, pkt)
	if err != nil {
		return err
	}
	// --label-dict: every rank parses rank 0's bytes; a bare .pt takes its
	// labels from it, a model folder's or .ckpt's own must equal it.
	mc := cfg.Model
	var given *box.LabelMap
	if cfg.LabelDict != "" {
		lm, err := dataset.ParseLabelDict(cfg.LabelDict, p.labels)
		if err != nil {
			return &errkind.Error{Code: errkind.ExitInput, Collective: true, Err: err}
		}
		mc.LabelDict, given = modelsel.LabelDictOf(lm), &lm
	}
	model, err := modelsel.Load(c, mc, p.dir, p.digest, p.config)
	if err != nil {
		return err
	}
	labels := model.Labels()
	crops, err := cropstage.OpenFrom(c, cfg.Crops, model.CropWorkers(), preCrops)
	if err != nil {
		return err
	}
	if given != nil && cfg.Eval == nil {
		if err := modelsel.CheckLabels(labels, given, cfg.LabelDict, nil, ""); err != nil {
			return &errkind.Error{Code: errkind.ExitModel, Collective: true, Err: err}
		}
	}
	var truthImages []box.Image // eval --tile: each raster's truth
	if cfg.Eval != nil {
		if truthImages, err = tileTruthImages(cfg, p.truth, labels, given, len(rasters)); err != nil {
			return err
		}
	}
	ix, err := newTileIndex(rasters, cfg.Settings)
	if err != nil {
		return errkind.Collective(errkind.ExitInput, "jobs: %w", err)
	}
	if err := outdir.CheckShared(c, cfg.Out, res.Probe); err != nil {
		return err
	}
	run := &tileRun{c: c, cfg: cfg, ix: ix, rasters: rasters, labels: labels, crops: crops, model: model, global: model.GlobalBatching(), out: out, stats: &stats,
		left: make([]int, len(rasters)), finished: make([]bool, len(rasters)), held: map[int]*heldRaster{}, resumed: map[int]bool{}, slow: testhook.SlowWindow()}
	run.aside = res.Aside
	if err := run.resume(res, p.saved); err != nil {
		return err
	}
	if err := tileMemory(c, cfg, model, run); err != nil {
		return err
	}
	stats.Seconds["load"] = time.Since(t0).Seconds()

	det, err := model.OpenDetector(c, labels, cfg.Progress)
	if err != nil {
		return err
	}
	closer := detect.NewCloser(det, "the detector")
	defer closer.Join(&err)
	crops.OnDetector(det) // --device cuda: the crops on the detector's GPU engine
	// and cut there from the windows the detector holds (HeldWindowBytes)
	crops.HoldWindows(det, HeldWindowBytes)
	files := make([]string, len(rasters))
	for i := range rasters {
		files[i] = rasters[i].File
	}
	run.det, run.rs = det, &rasterSet{files: files, open: map[int]*gdal.Raster{}}
	defer run.rs.close()
	if run.pw, err = CreateParts(cfg.Out, res.Probe, res.Attempt, c.Rank(), time.Second); err != nil {
		return errkind.Local(errkind.ExitInternal, "jobs: %w", err)
	}
	defer func() { // a run that failed: its part file is what --resume reads
		if run.pw != nil {
			err = errkind.Join(err, partClose(run.pw))
		}
	}()
	if err := run.run(ctx); err != nil {
		return err
	}
	pw := run.pw
	run.pw = nil
	if err := partClose(pw); err != nil {
		return err
	}
	stats.Seconds["detect"], stats.Seconds["gather"], stats.Seconds["merge"] = run.detect.Seconds(), run.gather.Seconds(), run.merge.Seconds()
	if crops != nil {
		crops.Stats.Seconds = run.crop.Seconds()
		stats.Seconds["crops"] = crops.Stats.Seconds
	}
	modelsel.PrintLayerTimes(cfg.Progress, det)
	model.NoteCUDNN(det) // before the close: the report's cuDNN record
	// Every window is detected and every raster published (each from rows
	// the device returned, so they stand): a close error (on a GPU, a late
	// fault) fails the run before its report; --resume then finishes it.
	if err := closer.Close(); err != nil {
		return err
	}
	return run.finish(tileEnd{res: &res, model: model, detector: det.Name(), labelDict: p.labels, truthCSV: p.truth, truth: vt, truthImages: truthImages})
}

// tilePacket is rank 0's packet as every rank receives it: the model
// (resolved folder, weights digest, config), eval --tile's truth (as CSV),
// the label map's bytes and the part files' saved windows (wire-encoded);
// the raster list and the resume record come decoded beside it.
type tilePacket struct {
	dir, digest, config string
	truth, labels       []byte
	saved               []byte
}

// receiveTile is the broadcast of packTile's packet, named.
func receiveTile(c mpi.Comm, pkt []byte) (p tilePacket, rasters []tileRaster, res tileResume, err error) {
	f, err := collective.BcastFields(c, pkt, 8)
	if err != nil {
		return p, nil, res, err
	}
	if len(f) != 8 {
		return p, nil, res, errkind.Collective(errkind.ExitInternal, "jobs: malformed input broadcast")
	}
	if err := json.Unmarshal(f[3], &rasters); err != nil {
		return p, nil, res, errkind.Collective(errkind.ExitInternal, "jobs: malformed raster list: %v", err)
	}
	if err := json.Unmarshal(f[6], &res); err != nil {
		return p, nil, res, errkind.Collective(errkind.ExitInternal, "jobs: malformed resume record: %v", err)
	}
	return tilePacket{dir: string(f[0]), digest: string(f[1]), config: string(f[2]), truth: f[4], labels: f[5], saved: f[7]}, rasters, res, nil
}

// tileTruthImages parses eval --tile's truth (rank 0's bytes) on every
// rank and checks its labels against the model's.
func tileTruthImages(cfg Config, data []byte, labels box.LabelMap, given *box.LabelMap, rasters int) ([]box.Image, error) {
	parse := dataset.ParseTruthFile
	if geotruth.IsVector(cfg.CSV) { // rank 0 sent it as the CSV it equals
		parse = dataset.ParseTruth
	}
	truth, err := parse(cfg.CSV, data)
	if err != nil {
		return nil, &errkind.Error{Code: errkind.ExitInput, Collective: true, Err: err}
	}
	var names []string
	for _, im := range truth.Images {
		names = append(names, im.Labels...)
	}
	if err := modelsel.CheckLabels(labels, given, cfg.LabelDict, names, cfg.CSV); err != nil {
		return nil, &errkind.Error{Code: errkind.ExitModel, Collective: true, Err: err}
	}
	images, err := truth.Resolve(cfg.CSV, labels)
	if err != nil || len(images) != rasters {
		return nil, errkind.Collective(errkind.ExitInput, "jobs: %s: truth for %d rasters of %d: %v", cfg.CSV, len(images), rasters, err)
	}
	return images, nil
}

// truthRasters are the rasters as a shapefile or GeoPackage truth's
// conversion to pixels takes them.
func truthRasters(rasters []tileRaster) []geotruth.Raster {
	out := make([]geotruth.Raster, len(rasters))
	for i, r := range rasters {
		out[i] = geotruth.Raster{Path: r.Path, File: r.File, Width: r.Width, Height: r.Height, CRS: r.CRS, GeoTransform: r.GeoTransform}
	}
	return out
}
