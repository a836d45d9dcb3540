package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/infer"
	"github.com/canopy-hpc/canopy/infer/gdal"
	"github.com/canopy-hpc/canopy/infer/gemm"
	"github.com/canopy-hpc/canopy/infer/imagefile"
	"github.com/canopy-hpc/canopy/infer/tile"
	"github.com/canopy-hpc/canopy/internal/dataset"
	"github.com/canopy-hpc/canopy/internal/parts"
	"github.com/canopy-hpc/canopy/internal/plan"
	"github.com/canopy-hpc/canopy/internal/wire"
	"github.com/canopy-hpc/canopy/metrics"
	"github.com/canopy-hpc/canopy/mpi"
	"github.com/canopy-hpc/canopy/report"
)

// canopy predict --tile: DeepForest's predict_tile over many rasters on
// many ranks. Rank 0 lists and opens the rasters (size, bands,
// georeferencing) and broadcasts them; every rank cuts the same global
// window list (raster by raster, each in DeepForest's order), takes its
// contiguous block of it (plan.Blocks), reads only those windows through
// GDAL and detects them; the detections are gathered in window order and
// every rank merges each raster's windows (tile.Merge), so the merged rows
// do not depend on the rank count, --threads or --batch-size.

// tileRaster is one raster of the job, as rank 0 found it.
type tileRaster struct {
	Path         string        `json:"image_path"` // as predictions.csv names it
	File         string        `json:"file"`       // where every rank opens it
	Width        int           `json:"width"`
	Height       int           `json:"height"`
	Bands        int           `json:"bands"`
	Bits         int           `json:"bits"`
	Driver       string        `json:"driver"`
	CRS          string        `json:"crs,omitempty"`
	GeoTransform *[6]float64   `json:"geotransform,omitempty"`
	Layer        string        `json:"layer,omitempty"` // its layer of predictions.gpkg (gdal.LayerNames)
	Windows      int           `json:"windows"`
	Detections   int           `json:"detections"`
	wins         []tile.Window // not reported
}

// tileSources lists the rasters: (image_path, file) pairs.
func tileSources(cfg TileConfig) (paths, files []string, err error) {
	switch {
	case cfg.Raster != "":
		return []string{filepath.Base(cfg.Raster)}, []string{cfg.Raster}, nil
	case cfg.Images != "":
		if paths, err = listImages(cfg.Images); err != nil {
			return nil, nil, err
		}
		for _, p := range paths {
			files = append(files, filepath.Join(cfg.Images, p))
		}
		return paths, files, nil
	}
	var data []byte
	if cfg.vector == nil {
		if data, err = readNamedInput(cfg.CSV); err != nil { // a FIFO or device is never waited on
			return nil, nil, fmt.Errorf("jobs: %w", err)
		}
	}
	switch {
	case cfg.vector != nil: // eval --tile, a shapefile or GeoPackage truth
		paths = cfg.vector.paths
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
	conf := newConfiner(root)
	for _, p := range paths {
		if !cfg.AllowOutsideRoot {
			if err := conf.check(p); err != nil {
				return nil, nil, err
			}
		}
		files = append(files, imageFile(root, p))
	}
	return paths, files, nil
}

// openRasters opens every raster once on rank 0 (gdal.Open reads its
// first and last pixels) and counts its windows.
func openRasters(cfg TileConfig) ([]tileRaster, error) {
	paths, files, err := tileSources(cfg)
	if err != nil {
		return nil, err
	}
	total := 0
	out := make([]tileRaster, len(paths))
	for i := range paths {
		r, err := gdal.Open(files[i])
		if err != nil {
			return nil, fmt.Errorf("jobs: %w", err)
		}
		in := r.Info()
		r.Close()
		t := tileRaster{Path: paths[i], File: files[i], Width: in.Width, Height: in.Height, Bands: in.Bands, Bits: in.Bits,
			Driver: in.Driver, CRS: in.CRS}
		if in.HasTransform {
			gt := in.GeoTransform
			t.GeoTransform = &gt
		}
		if t.Windows, err = tile.Count(in.Width, in.Height, cfg.Settings); err != nil {
			return nil, fmt.Errorf("jobs: %s: %w", files[i], err)
		}
		if total += t.Windows; total > tile.MaxWindows {
			return nil, fmt.Errorf("jobs: the rasters give more than %d windows: %w", tile.MaxWindows, tile.ErrSettings)
		}
		out[i] = t
	}
	nameLayers(out)
	return out, nil
}

// nameLayers gives each raster that has a CRS and a geotransform (those
// predictions.gpkg holds) its layer name, valid and unique whatever the
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

// packTile is rank 0's packet: the model and the rasters (and eval
// --tile's truth, as CSV; vt records a shapefile or GeoPackage truth).
func packTile(cfg TileConfig) (pkt []byte, out *outRun, vt *tileTruth) {
	fail := func(code int, err error) ([]byte, *outRun, *tileTruth) {
		return append([]byte{byte(code)}, err.Error()...), nil, nil
	}
	var err error
	if cfg.Eval != nil && isVectorTruth(cfg.CSV) {
		override := "" // eval --tile --raster: read_file's image_path argument
		if cfg.Raster != "" {
			override = filepath.Base(cfg.Raster)
		}
		if vt, err = readVectorTruth(cfg.CSV, override); err != nil {
			if errors.Is(err, gdal.ErrUnavailable) {
				return fail(ExitUsage, err)
			}
			return fail(ExitInput, err)
		}
		cfg.vector = vt
	}
	rasters, err := openRasters(cfg)
	if err != nil {
		if errors.Is(err, gdal.ErrUnavailable) {
			return fail(ExitUsage, err)
		}
		return fail(ExitInput, err)
	}
	dir, digest, config, err := resolveModel(cfg.Model.Spec)
	if err != nil {
		return fail(ExitModel, err)
	}
	var truth []byte
	if vt != nil {
		if truth, err = vt.csv(rasters); err != nil {
			return fail(ExitInput, err)
		}
	}
	out, err = prepareRunOut(cfg.Out, cfg.Force)
	if err != nil {
		return fail(Code(err), err)
	}
	rb, err := json.Marshal(rasters)
	if err != nil {
		out.finish(err)
		return fail(ExitInternal, err)
	}
	if cfg.Eval != nil && vt == nil {
		if truth, err = readNamedInput(cfg.CSV); err != nil {
			out.finish(err)
			return fail(ExitInput, fmt.Errorf("jobs: %w", err))
		}
	}
	labels := cfg.LabelDictData
	if labels == nil && cfg.LabelDict != "" {
		if labels, err = readNamedInput(cfg.LabelDict); err != nil {
			out.finish(err)
			return fail(ExitInput, fmt.Errorf("jobs: %w", err))
		}
	}
	if vt != nil && cfg.Progress != nil {
		for _, w := range vt.Warnings {
			sayLine(cfg.Progress, "canopy: warning: ", w)
		}
	}
	return packFields([]byte{0}, []byte(dir), []byte(digest), []byte(config), rb, truth, labels), out, vt
}

type tileReport struct {
	// Metrics: eval --tile's, as eval's report.json "metrics".
	Metrics json.RawMessage `json:"metrics,omitempty"`
	// Inputs: the label map given (--label-dict or the config's
	// label_dict), as eval's report.json "inputs" records it.
	Inputs map[string]report.File `json:"inputs,omitempty"`
	// Eval: eval --tile's matching rules (tile.iou_threshold is the
	// merge's), as eval's report.json records them at its top level.
	Eval *tileEval `json:"eval,omitempty"`
	predictReport
	Tile struct {
		PatchSize    int          `json:"patch_size"`
		PatchOverlap float64      `json:"patch_overlap"`
		IoU          float64      `json:"iou_threshold"`
		Windows      int          `json:"windows"`
		WindowDets   int          `json:"window_detections"`
		Order        string       `json:"window_order"`
		Rasters      []tileRaster `json:"rasters"`
		GPKG         string       `json:"gpkg,omitempty"`
		Truth        *tileTruth   `json:"truth,omitempty"` // a shapefile or GeoPackage truth
	} `json:"tile"`
}

// tileEval is eval --tile's matching: the IoU above which a detection
// matches a truth box, and the metrics' semantics.
type tileEval struct {
	IoUThreshold float64 `json:"iou_threshold"`
	Semantics    string  `json:"semantics"`
}

// rasterSet opens this rank's rasters when first needed and reads windows.
type rasterSet struct {
	mu    sync.Mutex
	files []string
	open  map[int]*gdal.Raster
}

func (s *rasterSet) read(r int, w tile.Window) (imagefile.Image, error) {
	px, err := s.pixels(r, w)
	if err != nil {
		return imagefile.Image{}, err
	}
	return imagefile.FromPlanes(px.W, px.H, px.Pix)
}

// pixels reads window w of raster r as 8-bit R, G and B planes.
func (s *rasterSet) pixels(r int, w tile.Window) (gdal.RGB8, error) {
	s.mu.Lock()
	ras, ok := s.open[r]
	if !ok {
		var err error
		if ras, err = gdal.Open(s.files[r]); err != nil {
			s.mu.Unlock()
			return gdal.RGB8{}, err
		}
		s.open[r] = ras
	}
	s.mu.Unlock()
	return ras.Read(w.X, w.Y, w.W, w.H)
}

func (s *rasterSet) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.open {
		r.Close()
	}
}

// PredictTile runs predict --tile on this rank.
func PredictTile(ctx context.Context, c mpi.Comm, cfg TileConfig) (err error) {
	cfg.BatchSize = batchOrOne(cfg.BatchSize)
	stats := rankStats{Rank: c.Rank(), Host: c.Host(), LocalRank: c.LocalRank(), LocalSize: c.LocalSize(), Seconds: map[string]float64{}, SGEMM: gemm.Backend() + " " + gemm.Core()}
	t0 := time.Now()
	gdal.SetCacheMax(int64(cfg.CacheMiB) << 20)
	var pkt []byte
	var out *outRun
	var vt *tileTruth // rank 0: a shapefile or GeoPackage truth
	if c.Rank() == 0 {
		pkt, out, vt = packTile(cfg)
	}
	defer func() { out.finish(err) }()
	f, err := bcastFields(c, pkt, 6)
	if err != nil {
		return err
	}
	if len(f) != 6 {
		return collective(ExitInternal, "jobs: malformed input broadcast")
	}
	var rasters []tileRaster
	if err := json.Unmarshal(f[3], &rasters); err != nil {
		return collective(ExitInternal, "jobs: malformed raster list: %v", err)
	}
	// --label-dict: every rank parses rank 0's bytes; a bare .pt takes its
	// labels from it, a model folder's or .ckpt's own must equal it.
	mc := cfg.Model
	var given *box.LabelMap
	if cfg.LabelDict != "" {
		lm, err := dataset.ParseLabelDict(cfg.LabelDict, f[5])
		if err != nil {
			return &Error{Code: ExitInput, Collective: true, Err: err}
		}
		mc.LabelDict, given = labelDictOf(lm), &lm
	}
	model, err := loadModel(c, mc, string(f[0]), string(f[1]), string(f[2]))
	if err != nil {
		return err
	}
	labels := model.labels()
	crops, err := openCropModels(c, cfg.Model.Crops, model.cropWorkers())
	if err != nil {
		return err
	}
	if given != nil && cfg.Eval == nil {
		if err := checkModelLabels(labels, given, cfg.LabelDict, nil, ""); err != nil {
			return &Error{Code: ExitModel, Collective: true, Err: err}
		}
	}
	var truthImages []box.Image // eval --tile: each raster's truth
	if cfg.Eval != nil {
		parse := dataset.ParseTruthFile
		if isVectorTruth(cfg.CSV) { // rank 0 sent it as the CSV it equals
			parse = dataset.ParseTruth
		}
		truth, err := parse(cfg.CSV, f[4])
		if err != nil {
			return &Error{Code: ExitInput, Collective: true, Err: err}
		}
		var names []string
		for _, im := range truth.Images {
			names = append(names, im.Labels...)
		}
		if err := checkModelLabels(labels, given, cfg.LabelDict, names, cfg.CSV); err != nil {
			return &Error{Code: ExitModel, Collective: true, Err: err}
		}
		if truthImages, err = truth.Resolve(cfg.CSV, labels); err != nil || len(truthImages) != len(rasters) {
			return collective(ExitInput, "jobs: %s: truth for %d rasters of %d: %v", cfg.CSV, len(truthImages), len(rasters), err)
		}
	}

	// The global window list: raster by raster, each in DeepForest's order.
	type globalWin struct {
		r int
		w tile.Window
	}
	var all []globalWin
	offset := make([]int, len(rasters)+1)
	largest, lw, lh, lfile := 0, 0, 0, ""
	for i := range rasters {
		ws, err := tile.Windows(rasters[i].Width, rasters[i].Height, cfg.Settings)
		if err != nil {
			return collective(ExitInput, "jobs: %s: %w", rasters[i].File, err)
		}
		rasters[i].wins = ws
		for _, w := range ws {
			all = append(all, globalWin{i, w})
		}
		offset[i+1] = len(all)
		if px := ws[0].W * ws[0].H; px > largest {
			largest, lw, lh, lfile = px, ws[0].W, ws[0].H, rasters[i].File
		}
	}
	// Contiguous blocks of windows (GDAL's block cache serves the overlap);
	// on the cuDNN path whole global batches instead, as eval and predict
	// take them, so each window keeps its batch and slot whatever the
	// rank count (model.plan records the batching in the report).
	var p plan.Plan
	if model.globalBatching() {
		todo := make([]int, len(all))
		for i := range todo {
			todo[i] = i
		}
		p, err = model.plan(todo, nil, cfg.BatchSize, c.Size())
	} else {
		p, err = plan.Blocks(len(all), c.Size())
	}
	if err != nil {
		return collective(ExitInternal, "jobs: %w", err)
	}
	shard := p.Shards[c.Rank()]
	stats.Images = len(shard)
	var merr error
	if lfile != "" {
		merr = checkMemory(lfile, lw, lh, model, cfg.Model, cfg.BatchSize, c.LocalSize())
	}
	if err := agreeErr(c, ExitInput, merr); err != nil {
		return err
	}
	stats.Seconds["load"] = since(t0)

	t1 := time.Now()
	det, err := model.openDetector(c, labels, cfg.Progress)
	if err != nil {
		return err
	}
	defer det.Close()
	files := make([]string, len(rasters))
	for i := range rasters {
		files[i] = rasters[i].File
	}
	rs := &rasterSet{files: files, open: map[int]*gdal.Raster{}}
	defer rs.close()
	names := make([]box.Image, len(all)) // detectShard's item names (unused with input)
	input := func(i int) infer.Input {
		g := all[i]
		name := fmt.Sprintf("%s window %d (%d,%d %dx%d)", rasters[g.r].Path, i-offset[g.r], g.w.X, g.w.Y, g.w.W, g.w.H)
		return infer.Input{Index: i, Path: name, File: name, Pixels: func() (imagefile.Image, error) { return rs.read(g.r, g.w) }}
	}
	mine, derr := detectShard(ctx, det, shardOptions{batchSize: cfg.BatchSize, progress: cfg.Progress, input: input, unit: "windows", global: model.globalBatching()},
		names, shard, c.Rank(), func([]wire.Image, []parts.Identity) error { return nil })
	if errors.Is(derr, gdal.ErrRaster) {
		derr = &Error{Code: ExitInput, Err: derr}
	}
	if err := detectErr(derr, "predict keeps no part files, run it again: "); err != nil {
		return err
	}
	for _, im := range mine {
		stats.Detections += len(im.Dets)
	}
	stats.Seconds["detect"] = since(t1)
	printLayerTimes(cfg.Progress, det)

	dets, _, err := gatherMerge(c, cfg.CollectiveTimeout, time.Since(t1), mine, nil, len(all), &stats)
	if err != nil {
		return err
	}
	t2 := time.Now()
	images := make([]box.Image, len(rasters))
	merged := make([][]box.Detection, len(rasters))
	windowDets := 0
	for i := range rasters {
		images[i] = box.Image{Path: rasters[i].Path}
		for _, d := range dets[offset[i]:offset[i+1]] {
			windowDets += len(d)
		}
		merged[i] = tile.Merge(rasters[i].wins, dets[offset[i]:offset[i+1]], cfg.IoU)
		rasters[i].Detections = len(merged[i])
	}
	stats.Seconds["merge"] = since(t2)
	var table *cropTable
	if crops != nil {
		t3 := time.Now()
		if table, err = classifyCrops(ctx, c, crops, &rasterCrops{rs: rs, rasters: rasters}, merged); err != nil {
			return err
		}
		if cfg.Eval == nil {
			merged = table.dropZero(merged)
			for i := range rasters {
				rasters[i].Detections = len(merged[i])
			}
		}
		crops.stats.Seconds = since(t3)
		stats.Seconds["crops"] = crops.stats.Seconds
	}
	var res metrics.Result
	var metricJSON []byte
	if cfg.Eval != nil {
		for i := range images {
			images[i] = truthImages[i]
		}
		fam := cfg.Eval.Families
		if fam == 0 {
			fam = metrics.All
		}
		if res, err = metrics.Compute(metrics.Input{Images: images, Dets: merged, Labels: labels},
			metrics.Options{IoUThreshold: cfg.Eval.IoUThreshold, Semantics: cfg.Eval.Semantics}, fam, cfg.Eval.ClassMetrics); err != nil {
			return collective(ExitInternal, "jobs: %w", err)
		}
		metricJSON = MetricsJSON(res.Values)
		if err := agree(c, metricJSON); err != nil {
			return err
		}
	}
	return writeReport(c, stats, "predictions", func(allStats []rankStats) error {
		tw := time.Now()
		var rep tileReport
		rep.predictReport = predictReport{Canopy: Version, Git: gitRevision(), MPI: c.Implementation(), Command: cfg.Command,
			Ranks: c.Size(), Images: len(rasters), Model: &model.info, Detector: det.Name(), AllowOutsideRoot: cfg.AllowOutsideRoot,
			PerRank: allStats}
		for _, d := range merged {
			rep.Boxes += len(d)
		}
		rep.setCrops(crops)
		rep.Tile.PatchSize, rep.Tile.PatchOverlap, rep.Tile.IoU = cfg.Settings.Patch, cfg.Settings.Overlap, cfg.IoU
		if cfg.Eval != nil {
			rep.Eval = &tileEval{IoUThreshold: cfg.Eval.IoUThreshold, Semantics: cfg.Eval.Semantics.String()}
		}
		if rc := cfg.RunConfig; rc != nil {
			rep.Config, rep.ConfigIgnored = rc.File, rc.C.Ignored
			rep.Settings = rc.finishSettings(rep.Model)
		}
		if cfg.LabelDict != "" {
			rep.Inputs = map[string]report.File{"label_dict": {Path: cfg.LabelDict, SHA256: sha256Hex(f[5])}}
		}
		rep.Tile.Windows, rep.Tile.WindowDets, rep.Tile.Rasters, rep.Tile.Truth = len(all), windowDets, rasters, vt
		rep.Tile.Order = "rasters in input order; each raster's windows x outer, y inner (DeepForest's compute_windows)"
		var extra []staged
		gpkg, note, err := stageGPKG(cfg.Out, rasters, merged, labels)
		if err != nil {
			return err
		}
		if gpkg != nil {
			extra = append(extra, *gpkg)
			rep.Tile.GPKG = gpkgFile
		}
		if cfg.Eval != nil {
			rep.Metrics = json.RawMessage(metricJSON)
			results, err := stage(cfg.Out, "results.csv", func(w io.Writer) error {
				return writeResults(w, images, merged, labels, res.Matches)
			})
			if err != nil {
				return err
			}
			extra = append(extra, results)
			h, err := stageTileHTML(cfg, &rep, f[4], rasters, rs, images, merged, labels, res, metricJSON, since(tw))
			if err != nil {
				for _, s := range extra {
					os.Remove(filepath.Join(cfg.Out, s.Tmp))
				}
				return err
			}
			extra = append(extra, h...)
		}
		if note != "" && cfg.Progress != nil {
			sayLine(cfg.Progress, "canopy: note: ", note)
		}
		err = publishPredictions(cfg.Out, images, merged, labels, table, extra, func(outputs map[string]string) any {
			rep.Outputs = outputs
			return rep
		})
		if err != nil {
			return err
		}
		if err := out.commit(); err != nil {
			return err
		}
		if cfg.Stdout != nil && cfg.Eval != nil {
			printTable(cfg.Stdout, res.Values)
			if cfg.Eval.HTML != nil {
				fmt.Fprintf(cfg.Stdout, "html: %s\n", filepath.Join(cfg.Out, "report.html"))
			}
		}
		if cfg.Stdout != nil {
			fmt.Fprintf(cfg.Stdout, "%d detections on %d rasters (%d windows, %d window detections): %s\n",
				rep.Boxes, len(rasters), len(all), windowDets, filepath.Join(cfg.Out, "predictions.csv"))
		}
		return nil
	})
}

// gpkgFile holds the boxes of georeferenced rasters as polygons.
const gpkgFile = "predictions.gpkg"

// stageGPKG writes predictions.gpkg when a raster has a CRS and a
// geotransform: one polygon layer per such raster (named as nameLayers
// named it), each box mapped as DeepForest's image_to_geo_coordinates
// maps it (gdal.BoxRing). note says, once, which rasters it leaves out.
func stageGPKG(dir string, rasters []tileRaster, merged [][]box.Detection, labels box.LabelMap) (*staged, string, error) {
	var layers []gdal.Layer
	var without []string
	names := labels.Names()
	for i, r := range rasters {
		if r.CRS == "" || r.GeoTransform == nil {
			without = append(without, r.Path)
			continue
		}
		ly := gdal.Layer{Name: r.Layer, CRS: r.CRS}
		for _, d := range merged[i] {
			label := ""
			if int(d.Label) < len(names) {
				label = names[d.Label]
			}
			ly.Features = append(ly.Features, gdal.BoxFeature(*r.GeoTransform, d.Box, r.Path, label, d.Score))
		}
		layers = append(layers, ly)
	}
	note := ""
	switch {
	case len(layers) == 0:
		return nil, fmt.Sprintf("no raster has a CRS: no %s is written (pixel coordinates are in predictions.csv)", gpkgFile), nil
	case len(without) > 0:
		note = fmt.Sprintf("%d of %d rasters have no CRS (the first: %s): %s leaves them out", len(without), len(rasters), without[0], gpkgFile)
	}
	f, err := os.CreateTemp(dir, "."+gpkgFile+".tmp-gdal*")
	if err != nil {
		return nil, "", fmt.Errorf("jobs: %w", err)
	}
	tmp := f.Name()
	f.Close()
	os.Remove(tmp) // GDAL creates it
	defer os.Remove(tmp)
	if err := gdal.WriteGPKG(tmp, layers); err != nil {
		return nil, "", fmt.Errorf("jobs: %w", err)
	}
	src, err := os.Open(tmp)
	if err != nil {
		return nil, "", fmt.Errorf("jobs: %w", err)
	}
	defer src.Close()
	s, err := stage(dir, gpkgFile, func(w io.Writer) error {
		_, err := io.Copy(w, src)
		return err
	})
	if err != nil {
		return nil, "", err
	}
	return &s, note, nil
}
