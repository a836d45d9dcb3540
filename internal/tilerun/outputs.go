package tilerun

import (
	"bufio"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/infer/gdal"
	"github.com/canopy-hpc/canopy/infer/tile"
	"github.com/canopy-hpc/canopy/internal/collective"
	"github.com/canopy-hpc/canopy/internal/cropstage"
	"github.com/canopy-hpc/canopy/internal/errkind"
	"github.com/canopy-hpc/canopy/internal/geoparquet"
	"github.com/canopy-hpc/canopy/internal/geotruth"
	"github.com/canopy-hpc/canopy/internal/modelsel"
	"github.com/canopy-hpc/canopy/internal/outdir"
	"github.com/canopy-hpc/canopy/internal/output"
	"github.com/canopy-hpc/canopy/internal/shardmetrics"
	"github.com/canopy-hpc/canopy/internal/wire"
	"github.com/canopy-hpc/canopy/metrics"
	"github.com/canopy-hpc/canopy/report"
)

// A raster's merge and its outputs, the step predict --tile and eval
// --tile share: once every window of a raster is detected, the rank that
// owns it merges them (tile.Merge) and publishes OUT/rasters/<name>.csv
// (and .gpkg when the raster has a CRS), then its done record. The
// combined predictions.csv and predictions.gpkg are built from these
// files at the end, one raster at a time, in raster order.

// RastersDir holds the per-raster outputs.
const RastersDir = output.RastersDir

// rasterNames are the rasters' output names: the file name without its
// extension, its characters that a terminal would act on (controls,
// bidirectional overrides, bytes that are not UTF-8) as '_', at most
// maxNameBytes bytes (the staging names add ".…tmp…" to it, under the
// 255 bytes of a file name); a name that is empty or starts with "." is
// prefixed "raster"; a name already taken (compared without case, as a
// case-insensitive filesystem would) by another raster of the list gets
// "-2", "-3", … (box.UniqueNames), so names follow the input order and a
// resumed run finds its files again.
func rasterNames(paths []string) []string {
	return box.UniqueNames(paths, rasterName, "-")
}

// maxNameBytes bounds a raster's output name.
const maxNameBytes = 200

func rasterName(p string) string {
	base := filepath.Base(p)
	base = strings.TrimSuffix(base, filepath.Ext(base))
	base = strings.Map(func(r rune) rune {
		if r == utf8.RuneError || !unicode.IsPrint(r) {
			return '_'
		}
		return r
	}, strings.ToValidUTF8(base, "\uFFFD"))
	for len(base) > maxNameBytes {
		_, n := utf8.DecodeLastRuneInString(base)
		base = base[:len(base)-n]
	}
	if base == "" || strings.HasPrefix(base, ".") {
		base = "raster" + base
	}
	return base
}

// heldRaster is what a raster's owner holds until the raster is merged:
// the windows with detections (the others add no row).
type heldRaster struct {
	wins []wire.Image
}

// mergeHeld is tile.Merge of a raster's held windows, in window order.
func mergeHeld(g tile.Grid, first int, h *heldRaster, iou float64) (merged []box.Detection, windowDets int) {
	sort.Slice(h.wins, func(a, b int) bool { return h.wins[a].Index < h.wins[b].Index })
	wins := make([]tile.Window, len(h.wins))
	dets := make([][]box.Detection, len(h.wins))
	for k, im := range h.wins {
		wins[k], dets[k] = g.At(im.Index-first), im.Dets
		windowDets += len(im.Dets)
	}
	return tile.Merge(wins, dets, iou), windowDets
}

// publishRaster writes raster i's outputs under OUT/rasters, each staged
// and synced before any is renamed into place (a full disk publishes
// none), the CSV last; then its done record.
func publishRaster(out string, i int, r tileRaster, merged []box.Detection, windowDets int, crops *cropstage.Table, labels box.LabelMap) error {
	dir := filepath.Join(out, RastersDir)
	var set []outdir.Staged
	drop := func() {
		for _, s := range set {
			os.Remove(filepath.Join(dir, s.Tmp))
		}
	}
	rows := rasterRows{dets: merged, crops: crops.CellsOf(0, len(merged))}
	if r.CRS != "" && r.GeoTransform != nil {
		g, _, err := stageGPKG(dir, r.Name+".gpkg", []tileRaster{r}, func(int) (rasterRows, error) { return rows, nil }, labels, crops.Columns())
		if err != nil {
			return err
		}
		set = append(set, *g)
	}
	pq, err := outdir.Stage(dir, r.Name+".parquet", func(w io.Writer) error {
		crs, prows, err := parquetRows(r, rows, labels)
		if err != nil {
			return err
		}
		return geoparquet.WriteCrops(w, crs, prows, crops.Columns())
	})
	if err != nil {
		drop()
		return err
	}
	set = append(set, pq)
	c, err := outdir.Stage(dir, r.Name+".csv", func(w io.Writer) error {
		if err := rasterFault(r.Name + ".csv"); err != nil {
			return err
		}
		return output.WritePredictions(w, []box.Image{{Path: r.Path}}, [][]box.Detection{merged}, labels, crops)
	})
	if err != nil {
		drop()
		return err
	}
	set = append(set, c)
	d := rasterDone{Index: i, Path: r.Path, Name: r.Name, WindowDets: windowDets, Detections: len(merged), Outputs: map[string]string{}}
	for k, s := range set {
		if err := os.Rename(filepath.Join(dir, s.Tmp), filepath.Join(dir, s.Name)); err != nil {
			set = set[k:]
			drop()
			return errkind.IO("jobs: publish %s: %w", s.Name, err)
		}
		d.Outputs[RastersDir+"/"+s.Name] = s.SHA256
	}
	if err := outdir.SyncDir(dir); err != nil {
		return errkind.IO("%w", err)
	}
	b, _ := json.Marshal(d)
	if err := outdir.WriteAtomic(doneDir(out), doneFile(i), func(w io.Writer) error { _, err := w.Write(b); return err }); err != nil {
		return errkind.IO("%w", err)
	}
	return nil
}

// rasterRows are a raster's rows: its detections and, with crop models,
// each one's crop cells (crops[j] nil for a box the crop step left out).
type rasterRows struct {
	dets  []box.Detection
	crops []cropstage.Cells
}

// readRasterRows reads a raster's rows back from its CSV (which canopy
// wrote: the columns of predictions.csv, labels by name).
func readRasterRows(path string, labels box.LabelMap) ([]box.Detection, error) {
	rows, err := readRasterCSV(path, labels, 0)
	return rows.dets, err
}

// readRasterCSV reads a raster's rows back from its CSV with the cells of
// models crop models (empty cells: nil).
func readRasterCSV(path string, labels box.LabelMap, models int) (rasterRows, error) {
	var out rasterRows
	dets, err := readRasterCSVRows(path, labels, func(line int, rec []string) error {
		if models == 0 {
			return nil
		}
		if len(rec) != 7+2*models {
			return errkind.IO("jobs: %s line %d: %d fields, want %d", path, line+1, len(rec), 7+2*models)
		}
		var c cropstage.Cells
		if rec[7] != "" {
			for k := 0; k < models; k++ {
				v, err := strconv.ParseFloat(rec[8+2*k], 64)
				if err != nil {
					return errkind.IO("jobs: %s line %d: %w", path, line+1, err)
				}
				c.Labels, c.Scores = append(c.Labels, rec[7+2*k]), append(c.Scores, v)
			}
		}
		out.crops = append(out.crops, c)
		return nil
	})
	out.dets = dets
	return out, err
}

func readRasterCSVRows(path string, labels box.LabelMap, cells func(line int, rec []string) error) ([]box.Detection, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, errkind.IO("jobs: %w", err)
	}
	defer f.Close()
	ids := map[string]int32{}
	for id, n := range labels.Names() {
		ids[n] = int32(id)
	}
	r := csv.NewReader(bufio.NewReader(f))
	r.FieldsPerRecord = -1 // the crop models' columns follow score
	var out []box.Detection
	for line := 0; ; line++ {
		rec, err := r.Read()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, errkind.IO("jobs: %s: %w", path, err)
		}
		if line == 0 {
			continue
		}
		if len(rec) < 7 {
			return nil, errkind.IO("jobs: %s line %d: %d fields", path, line+1, len(rec))
		}
		var v [5]float64
		for k, s := range []string{rec[1], rec[2], rec[3], rec[4], rec[6]} {
			if v[k], err = strconv.ParseFloat(s, 64); err != nil {
				return nil, errkind.IO("jobs: %s line %d: %w", path, line+1, err)
			}
		}
		id, ok := ids[rec[5]]
		if !ok {
			return nil, errkind.IO("jobs: %s line %d: label %q is not the model's", path, line+1, rec[5])
		}
		out = append(out, box.Detection{Box: box.Box{Xmin: v[0], Ymin: v[1], Xmax: v[2], Ymax: v[3]}, Label: id, Score: v[4]})
		if err := cells(line, rec); err != nil {
			return nil, err
		}
	}
}

// rasterCSV is raster r's published CSV.
func rasterCSV(out string, r tileRaster) string { return filepath.Join(out, RastersDir, r.Name+".csv") }

// stageCombinedCSV stages predictions.csv: the header, then each
// raster's CSV without its header, in raster order (never all in memory).
func stageCombinedCSV(out string, rasters []tileRaster, cs *cropstage.Set) (outdir.Staged, error) {
	header := output.PredictionsHeader(cs)
	return outdir.Stage(out, "predictions.csv", func(w io.Writer) error {
		if _, err := io.WriteString(w, header); err != nil {
			return err
		}
		for _, r := range rasters {
			f, err := os.Open(rasterCSV(out, r))
			if err != nil {
				return err
			}
			br := bufio.NewReader(f)
			head, err := br.ReadString('\n')
			if err == nil && head != header {
				err = fmt.Errorf("%s: not canopy's header", rasterCSV(out, r))
			}
			if err == nil {
				_, err = io.Copy(w, br)
			}
			f.Close()
			if err != nil {
				return err
			}
		}
		return nil
	})
}

// rasterLayer is raster r's polygon layer: each box mapped as DeepForest's
// image_to_geo_coordinates maps it (gdal.BoxFeature), named as
// nameLayers named it.
func rasterLayer(r tileRaster, rows rasterRows, names, cropCols []string) gdal.Layer {
	ly := gdal.Layer{Name: r.Layer, CRS: r.CRS, CropColumns: cropCols}
	for j, d := range rows.dets {
		label := ""
		if int(d.Label) < len(names) {
			label = names[d.Label]
		}
		f := gdal.BoxFeature(*r.GeoTransform, d.Box, r.Path, label, d.Score)
		if j < len(rows.crops) {
			f.CropLabels, f.CropScores = rows.crops[j].Labels, rows.crops[j].Scores
		}
		ly.Features = append(ly.Features, f)
	}
	return ly
}

// parquetRows are raster r's rows as GeoParquet rows and its CRS as
// PROJJSON: with a CRS and a geotransform, the polygons of its GeoPackage
// layer (gdal.BoxFeature); without, the boxes as polygons in pixels (the
// same ring order) and no CRS ("crs": null).
func parquetRows(r tileRaster, rr rasterRows, labels box.LabelMap) ([]byte, []geoparquet.Row, error) {
	merged := rr.dets
	names := labels.Names()
	geo := r.CRS != "" && r.GeoTransform != nil
	var crs []byte
	if geo {
		var err error
		if crs, err = gdal.PROJJSON(r.CRS); err != nil {
			return nil, nil, err
		}
	}
	pixel := [6]float64{-0.5, 1, 0, -0.5, 0, 1} // BoxRing's pixel centres back on the pixel grid
	rows := make([]geoparquet.Row, len(merged))
	for i, d := range merged {
		label := ""
		if int(d.Label) < len(names) {
			label = names[d.Label]
		}
		var f gdal.Feature
		if geo {
			f = gdal.BoxFeature(*r.GeoTransform, d.Box, r.Path, label, d.Score)
		} else {
			f = gdal.BoxFeature(pixel, d.Box, r.Path, label, d.Score)
			f.Xmin, f.Ymin, f.Xmax, f.Ymax = d.Box.Xmin, d.Box.Ymin, d.Box.Xmax, d.Box.Ymax
		}
		if i < len(rr.crops) {
			f.CropLabels, f.CropScores = rr.crops[i].Labels, rr.crops[i].Scores
		}
		rows[i] = geoparquet.Row(f)
	}
	return crs, rows, nil
}

// GPKGFile holds the boxes of georeferenced rasters as polygons.
const GPKGFile = output.PredictionsGPKG

// stageGPKG stages the GeoPackage name in dir with one polygon layer per
// raster that has a CRS and a geotransform, written one raster at a time
// (rows(i) gives raster i's merged rows). note says, once, which rasters
// it leaves out; no raster with a CRS writes nothing.
func stageGPKG(dir, name string, rasters []tileRaster, rows func(i int) (rasterRows, error), labels box.LabelMap, cropCols []string) (*outdir.Staged, string, error) {
	var without []string
	for _, r := range rasters {
		if r.CRS == "" || r.GeoTransform == nil {
			without = append(without, r.Path)
		}
	}
	note := ""
	switch {
	case len(without) == len(rasters):
		return nil, fmt.Sprintf("no raster has a CRS: no %s is written (pixel coordinates are in predictions.csv)", name), nil
	case len(without) > 0:
		note = fmt.Sprintf("%d of %d rasters have no CRS (the first: %s): %s leaves them out", len(without), len(rasters), without[0], name)
	}
	f, err := os.CreateTemp(dir, "."+name+".tmp-gdal*")
	if err != nil {
		return nil, "", fmt.Errorf("jobs: %w", err)
	}
	tmp := f.Name()
	f.Close()
	os.Remove(tmp) // GDAL creates it
	defer os.Remove(tmp)
	w, err := gdal.CreateGPKG(tmp)
	if err != nil {
		return nil, "", fmt.Errorf("jobs: %w", err)
	}
	names := labels.Names()
	for i, r := range rasters {
		if r.CRS == "" || r.GeoTransform == nil {
			continue
		}
		merged, err := rows(i)
		if err == nil {
			err = w.Add(rasterLayer(r, merged, names, cropCols))
		}
		if err != nil {
			w.Close()
			return nil, "", fmt.Errorf("jobs: %w", err)
		}
	}
	if err := w.Close(); err != nil {
		return nil, "", fmt.Errorf("jobs: %w", err)
	}
	src, err := os.Open(tmp)
	if err != nil {
		return nil, "", fmt.Errorf("jobs: %w", err)
	}
	defer src.Close()
	s, err := outdir.Stage(dir, name, func(w io.Writer) error {
		_, err := io.Copy(w, src)
		return err
	})
	if err != nil {
		return nil, "", err
	}
	return &s, note, nil
}

// tileEnd is what finishes a tile run beside the run's own state: the
// run it continued, the model and the detector's name (report.json), the
// label map's bytes (their sha256 is recorded), eval --tile's truth as
// broadcast (the page records its sha256), its record when it was a
// shapefile or GeoPackage (rank 0), and its boxes per raster.
type tileEnd struct {
	res         *tileResume
	model       *modelsel.Model
	detector    string
	labelDict   []byte
	truthCSV    []byte
	truth       *geotruth.Truth
	truthImages []box.Image
}

// finish ends a tile run: rank 0 reads the done records, eval --tile
// scores the merged rows (read back from the per-raster files on every
// rank), and rank 0 publishes the combined outputs and report.json.
func (t *tileRun) finish(e tileEnd) error {
	c, cfg := t.c, t.cfg
	rasters, labels := t.rasters, t.labels
	var scores metrics.Result
	var metricJSON, sweepJSON []byte
	images := make([]box.Image, len(rasters))
	for i := range rasters {
		images[i] = box.Image{Path: rasters[i].Path}
	}
	var merged [][]box.Detection // eval --tile only
	if cfg.Eval != nil {
		copy(images, e.truthImages)
		merged = make([][]box.Detection, len(rasters))
		var rerr error
		for i, r := range rasters {
			if merged[i], rerr = readRasterRows(rasterCSV(cfg.Out, r), labels); rerr != nil {
				break
			}
		}
		if err := collective.AgreeErr(c, errkind.ExitInternal, rerr); err != nil {
			return err
		}
		fam := cfg.Eval.Families
		if fam == 0 {
			fam = metrics.All
		}
		tm := time.Now()
		mIn := metrics.Input{Images: images, Dets: merged, Labels: labels}
		costs := make([]int64, len(images))
		for i := range costs {
			costs[i] = shardmetrics.Cost(mIn, i)
		}
		split, err := shardmetrics.Shards(costs, c.Size())
		if err != nil {
			return errkind.Collective(errkind.ExitInternal, "jobs: %w", err)
		}
		scored, err := collective.ScoreShard(c, mIn, split[c.Rank()], shardmetrics.Config{
			Options:  metrics.Options{IoUThreshold: cfg.Eval.IoUThreshold, Semantics: cfg.Eval.Semantics},
			Families: fam, ClassMetrics: cfg.Eval.ClassMetrics, Sweep: cfg.Eval.IoUSweep}, t.stats)
		if err != nil {
			return err
		}
		scores = scored.Result
		sweepJSON = output.SweepJSON(cfg.Eval.IoUSweep, scored.Sweep)
		t.stats.Seconds["metrics"] = time.Since(tm).Seconds()
		metricJSON = output.MetricsJSON(scores.Values)
		if err := collective.Agree(c, append(append([]byte(nil), metricJSON...), sweepJSON...)); err != nil {
			return err
		}
	}
	return collective.WriteReport(c, *t.stats, "predictions", func(allStats []collective.RankStats) error {
		tw := time.Now()
		var rep tileReport
		rep.PredictReport = output.PredictReport{Canopy: output.Version, Git: output.GitRevision(), MPI: c.Implementation(), Command: cfg.Command,
			Ranks: c.Size(), Images: len(rasters), Model: &e.model.Info, Detector: e.detector, AllowOutsideRoot: cfg.AllowOutsideRoot,
			PerRank: allStats}
		rep.SetCrops(t.crops)
		outputs := map[string]string{}
		windowDets := 0
		for i := range rasters {
			d, ok, err := readDone(cfg.Out, i)
			if err != nil || !ok {
				return errkind.IO("jobs: raster %q has no done record (%v)", rasters[i].Path, err)
			}
			rasters[i].WindowDets, rasters[i].Detections = d.WindowDets, d.Detections
			rep.Boxes += d.Detections
			windowDets += d.WindowDets
			for k, v := range d.Outputs {
				outputs[k] = v
			}
		}
		rep.Tile.PatchSize, rep.Tile.PatchOverlap, rep.Tile.IoU = cfg.Settings.Patch, cfg.Settings.Overlap, cfg.IoU
		if cfg.Eval != nil {
			rep.Eval = &tileEval{IoUThreshold: cfg.Eval.IoUThreshold, Semantics: cfg.Eval.Semantics.String()}
		}
		rep.SetConfig(cfg.RunConfig, rep.Model)
		if cfg.LabelDict != "" {
			rep.Inputs = map[string]report.File{"label_dict": {Path: cfg.LabelDict, SHA256: outdir.SHA256Hex(e.labelDict)}}
		}
		rep.Tile.Windows, rep.Tile.WindowDets, rep.Tile.Rasters, rep.Tile.Truth = t.ix.total(), windowDets, rasters, e.truth
		rep.Tile.SkipEmpty = cfg.SkipEmpty
		for _, s := range allStats {
			rep.Tile.Skipped += s.Skipped
		}
		rep.Tile.Order = "rasters in input order; each raster's windows x outer, y inner (DeepForest's compute_windows)"
		if cfg.Resume {
			rep.Tile.Resume = &tileResumeInfo{Attempt: e.res.Attempt, RastersFinished: len(e.res.Finished), WindowsSaved: e.res.Windows, RecordsDropped: e.res.Dropped}
		}
		var set []outdir.Staged
		drop := func() {
			for _, s := range set {
				os.Remove(filepath.Join(cfg.Out, s.Tmp))
			}
		}
		preds, err := stageCombinedCSV(cfg.Out, rasters, t.crops)
		if err != nil {
			return err
		}
		set = append(set, preds)
		cropCols := t.crops.Columns()
		rows := func(i int) (rasterRows, error) {
			if merged != nil && cropCols == nil {
				return rasterRows{dets: merged[i]}, nil
			}
			return readRasterCSV(rasterCSV(cfg.Out, rasters[i]), labels, len(cropCols)/2)
		}
		gpkg, note, err := stageGPKG(cfg.Out, GPKGFile, rasters, rows, labels, cropCols)
		if err != nil {
			drop()
			return err
		}
		if gpkg != nil {
			set = append(set, *gpkg)
			rep.Tile.GPKG = GPKGFile
		}
		if cfg.Eval != nil {
			rep.Metrics = json.RawMessage(metricJSON)
			if sweepJSON != nil {
				rep.MetricsByIoU = json.RawMessage(sweepJSON)
			}
			results, err := outdir.Stage(cfg.Out, "results.csv", func(w io.Writer) error {
				return output.WriteResults(w, images, labels, scores.Matches)
			})
			if err != nil {
				drop()
				return err
			}
			set = append(set, results)
			h, err := stageTileHTML(cfg, &rep, e.truthCSV, rasters, t.ix, t.rs, images, merged, labels, scores, metricJSON, time.Since(tw).Seconds())
			if err != nil {
				drop()
				return err
			}
			set = append(set, h...)
		}
		if note != "" && cfg.Progress != nil {
			collective.SayLine(cfg.Progress, "canopy: note: ", note)
		}
		for _, s := range set {
			outputs[s.Name] = s.SHA256
		}
		rep.Outputs = outputs
		if err := output.PublishSet(cfg.Out, set, rep); err != nil {
			return err
		}
		if err := t.out.Commit(); err != nil {
			return err
		}
		if cfg.Stdout != nil && cfg.Eval != nil {
			output.PrintTable(cfg.Stdout, scores.Values)
			if cfg.Eval.HTML != nil {
				fmt.Fprintf(cfg.Stdout, "html: %s\n", filepath.Join(cfg.Out, "report.html"))
			}
		}
		if cfg.Stdout != nil {
			fmt.Fprintf(cfg.Stdout, "%d detections on %d rasters (%d windows, %d window detections): %s\n",
				rep.Boxes, len(rasters), t.ix.total(), windowDets, filepath.Join(cfg.Out, "predictions.csv"))
		}
		return nil
	})
}
