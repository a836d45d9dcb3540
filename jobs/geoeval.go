package jobs

import (
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/infer/imagefile"
	"github.com/canopy-hpc/canopy/internal/collective"
	"github.com/canopy-hpc/canopy/internal/confine"
	"github.com/canopy-hpc/canopy/internal/dataset"
	"github.com/canopy-hpc/canopy/internal/georec"
	"github.com/canopy-hpc/canopy/internal/geos"
	"github.com/canopy-hpc/canopy/internal/outdir"
	"github.com/canopy-hpc/canopy/internal/output"
	"github.com/canopy-hpc/canopy/internal/plan"
	"github.com/canopy-hpc/canopy/metrics"
	"github.com/canopy-hpc/canopy/mpi"
)

// eval on points and polygons (replay only): each rank matches its shard
// of the images, the ranks gather the per-image match records, every rank
// reduces them in image order, rank 0 writes the outputs.

// inputKinds detects the geometry of the truth CSV and the predictions
// (cfg.Geometry forces it); a truth folder, a COCO or VOC file are boxes.
// Truth and predictions of different geometry are an input error naming
// both files.
func inputKinds(cfg EvalConfig, in inputs) (box.Kind, error) {
	if in.truthFolder {
		return box.KindBox, nil
	}
	switch strings.ToLower(filepath.Ext(cfg.CSV)) {
	case ".json", ".xml":
		return box.KindBox, nil
	}
	kt, err := dataset.CSVKind(cfg.CSV, in.csv)
	if err != nil {
		return 0, err
	}
	if cfg.Geometry != nil {
		kt = *cfg.Geometry
	}
	if cfg.Predictions == "" {
		if kt != box.KindBox {
			return 0, fmt.Errorf("jobs: %s holds %s: canopy scores points and polygons from --predictions only (no %s detector runs here): %w", cfg.CSV, kt.Plural(), kt, dataset.ErrInput)
		}
		return kt, nil
	}
	kp, err := dataset.CSVKind(cfg.Predictions, in.preds)
	if err != nil {
		return 0, err
	}
	if cfg.Geometry != nil {
		kp = *cfg.Geometry
	}
	if kt != kp {
		return 0, fmt.Errorf("jobs: the truth %s holds %s but the predictions %s hold %s; both must hold one geometry (--geometry forces one): %w", cfg.CSV, kt.Plural(), cfg.Predictions, kp.Plural(), dataset.ErrInput)
	}
	return kt, nil
}

// geoData is what every rank parses from the broadcast bytes.
type geoData struct {
	in      metrics.GeoInput
	ignored int
	preds   []dataset.GeoRow
}

func loadGeo(cfg EvalConfig, in inputs, kind box.Kind) (geoData, error) {
	truthRows, err := dataset.ParseGeoCSV(cfg.CSV, in.csv, kind, false, dataset.Options{})
	if err != nil {
		return geoData{}, err
	}
	predRows, err := dataset.ParseGeoCSV(cfg.Predictions, in.preds, kind, true, dataset.Options{AllowAnyScore: cfg.AllowAnyScore})
	if err != nil {
		return geoData{}, err
	}
	if kind == box.KindPolygon {
		if err := checkPolygons(cfg.CSV, truthRows); err != nil {
			return geoData{}, err
		}
		if err := checkPolygons(cfg.Predictions, predRows); err != nil {
			return geoData{}, err
		}
	}
	var labels box.LabelMap
	index := map[string]bool{}
	for _, r := range truthRows {
		index[r.Path] = true
	}
	if cfg.LabelDict != "" {
		if labels, err = dataset.ParseLabelDict(cfg.LabelDict, in.labels); err != nil {
			return geoData{}, err
		}
	} else {
		var names []string
		for _, r := range truthRows {
			names = append(names, r.Label)
		}
		for _, r := range predRows {
			if index[r.Path] {
				names = append(names, r.Label)
			}
		}
		labels = box.SortedLabelMap(names)
	}
	images, err := dataset.GeoTruth(cfg.CSV, truthRows, labels)
	if err != nil {
		return geoData{}, err
	}
	pos := make(map[string]int, len(images))
	for i, im := range images {
		pos[im.Path] = i
	}
	d := geoData{preds: predRows}
	d.in = metrics.GeoInput{Kind: kind, Images: images, Preds: make([][]box.Geo, len(images)), Labels: labels}
	for _, r := range predRows {
		i, ok := pos[r.Path]
		if !ok {
			d.ignored++
			continue
		}
		g := r.Geo
		if g.Label, ok = labels.ID(r.Label); !ok {
			return geoData{}, fmt.Errorf("jobs: %s:%d: label %q is not in the label map: %w", cfg.Predictions, r.Line, r.Label, dataset.ErrInput)
		}
		d.in.Preds[i] = append(d.in.Preds[i], g)
	}
	d.in.LabelValues = geoLabelValues(truthRows, predRows, labels)
	return d, nil
}

// geoLabelValues: as pandasLabelValues, for point and polygon rows.
func geoLabelValues(truth, preds []dataset.GeoRow, labels box.LabelMap) []float64 {
	for _, rows := range [][]dataset.GeoRow{truth, preds} {
		for _, r := range rows {
			if _, ok := dataset.PandasNumber(r.Label); !ok {
				return nil
			}
		}
	}
	if len(preds) == 0 {
		return nil
	}
	vals := make([]float64, labels.Len())
	for id := range vals {
		vals[id], _ = dataset.PandasNumber(labels.Name(int32(id)))
	}
	return vals
}

// checkPolygons refuses, naming the row, a polygon GEOS finds invalid
// (self-intersecting, a hole outside its shell, ...): canopy does not
// score what shapely would compute on invalid input.
func checkPolygons(name string, rows []dataset.GeoRow) error {
	c, err := geos.NewContext()
	if err != nil {
		return err
	}
	defer c.Close()
	for _, r := range rows {
		if err := c.Check(r.Geo.Shape); err != nil {
			return fmt.Errorf("dataset: %s:%d: %v: %w", name, r.Line, err, dataset.ErrInput)
		}
	}
	return nil
}

func polygonAreas(truth, preds []box.Geo) (metrics.PairAreas, func(), error) {
	return geos.NewPairs(truth, preds)
}

// evalGeometry is eval of a point or polygon replay.
func evalGeometry(c mpi.Comm, cfg EvalConfig, in inputs, out *outdir.Run, kind box.Kind) error {
	stats := collective.RankStats{Rank: c.Rank(), Host: c.Host(), LocalRank: c.LocalRank(), LocalSize: c.LocalSize(), Seconds: map[string]float64{}}
	t0 := time.Now()
	if len(cfg.IoUSweep) > 0 {
		return collectiveErr(ExitUsage, "jobs: --iou-sweep applies to boxes; these inputs are %s", kind)
	}
	switch {
	case cfg.COCOOut:
		return collectiveErr(ExitUsage, "eval: --coco-out writes boxes; %s holds %s", cfg.CSV, kind.Plural())
	case cfg.Families != 0 && cfg.Families&metrics.Recall == 0:
		return collectiveErr(ExitUsage, "eval: %s holds %s, scored by DeepForest's recall and precision only (--metrics recall or all; torchmetrics IoU and COCO mAP are for boxes)", cfg.CSV, kind.Plural())
	}
	d, err := loadGeo(cfg, in, kind)
	if err != nil {
		return &Error{Code: ExitInput, Collective: true, Err: err}
	}
	opt := metrics.GeoOptions{Semantics: cfg.Semantics, IoUThreshold: cfg.IoUThreshold, DistanceThreshold: cfg.DistanceThreshold}
	images := d.in.Images
	costs := make([]int64, len(images))
	for i, im := range images {
		costs[i] = 1 + int64(len(im.Truth))*int64(len(d.in.Preds[i]))
	}
	p, err := plan.Balance(costs, c.Size())
	if err != nil {
		return collectiveErr(ExitInternal, "jobs: %w", err)
	}
	stats.Seconds["load"] = since(t0)

	// Match this rank's images; image sizes are read where the points
	// need them (the validation semantics' filter_points).
	t1 := time.Now()
	var mine []metrics.GeoRecord
	var unsized []string
	var merr error
	conf := confine.New(cfg.RootDir)
	for _, i := range p.Shards[c.Rank()] {
		if kind == box.KindPolygon || cfg.Semantics == metrics.Validation {
			if w, h, ok := imageSize(conf, cfg, images[i].Path); ok {
				d.in.Images[i].Width, d.in.Images[i].Height = w, h
			}
		}
		var areas metrics.AreasFunc
		if kind == box.KindPolygon {
			areas = polygonAreas
		}
		r, err := metrics.MatchGeoImage(d.in, i, opt, areas)
		if err != nil {
			merr = fmt.Errorf("jobs: rank %d: %w", c.Rank(), err)
			break
		}
		mine = append(mine, r)
	}
	stats.Images = len(mine)
	stats.Seconds["match"] = since(t1)
	if err := collective.AgreeErr(c, ExitInternal, merr); err != nil {
		return err
	}

	// Gather the records.
	bufs, err := mpi.AllgatherBytes(c, georec.Encode(nil, mine))
	if err != nil {
		return localErr(ExitMPI, "jobs: gather match records: %w", err)
	}
	recs, err := georec.Merge(bufs, len(images))
	if err != nil {
		return collectiveErr(ExitInternal, "jobs: %w", err)
	}
	unsized = nil
	for _, r := range recs {
		if kind == box.KindPoint && cfg.Semantics == metrics.Validation && r.Width == 0 {
			unsized = append(unsized, images[r.Image].Path)
		}
	}
	t3 := time.Now()
	vals := metrics.ReduceGeo(d.in, recs, opt)
	segmSkipped := ""
	if kind == box.KindPolygon {
		if sv, ok := metrics.SegmCOCO(d.in, recs); ok {
			vals = append(vals, sv...)
		} else {
			for _, r := range recs {
				if r.Width == 0 {
					segmSkipped = fmt.Sprintf("COCO segm mAP skipped: the size of image %q (and maybe others) under --root-dir %s is unknown, and the masks are rasterised at the image's size", images[r.Image].Path, cfg.RootDir)
					break
				}
			}
		}
	}
	metricJSON := output.MetricsJSON(vals)
	stats.Seconds["metrics"] = since(t3)
	if err := collective.Agree(c, metricJSON); err != nil {
		return err
	}
	warnings := geoWarnings(cfg, d, unsized)
	if c.Rank() == 0 && cfg.Warnings != nil && segmSkipped != "" {
		collective.SayLine(cfg.Warnings, "canopy: note: ", segmSkipped)
	}
	if c.Rank() == 0 && cfg.Warnings != nil {
		for _, w := range warnings {
			collective.SayLine(cfg.Warnings, "canopy: warning: ", w)
		}
	}
	if len(warnings) > 0 && cfg.Strict {
		return collectiveErr(ExitInput, "jobs: --strict: %s", strings.Join(warnings, "; "))
	}
	return collective.WriteReport(c, stats, "report", func(allStats []collective.RankStats) error {
		run := buildRun(c, cfg, in, d.in.Labels, allStats, len(images), d.ignored, output.ResumeInfo{Computed: len(images)}, nil)
		run.Warnings = warnings
		run.Geometry = kind.String()
		if kind == box.KindPoint {
			run.DistanceThreshold = cfg.DistanceThreshold
		}
		if kind == box.KindPolygon {
			run.GEOS = geos.Version()
		}
		if err := writeGeoOutputs(cfg, metricJSON, run, d.in, recs, opt); err != nil {
			return err
		}
		if err := out.Commit(); err != nil {
			return err
		}
		if cfg.Stdout != nil {
			output.PrintTable(cfg.Stdout, vals)
			fmt.Fprintf(cfg.Stdout, "report: %s\n", filepath.Join(cfg.Out, "report.json"))
		}
		return nil
	})
}

// imageSize reads an image's width and height from its header (the image
// confined to --root-dir as eval --model opens it); ok false when it
// cannot be read.
func imageSize(conf confine.Confiner, cfg EvalConfig, p string) (w, h int, ok bool) {
	if !cfg.AllowOutsideRoot && conf.Check(p) != nil {
		return 0, 0, false
	}
	w, h, err := imagefile.Check(filepath.Join(cfg.RootDir, p))
	return w, h, err == nil
}

func geoWarnings(cfg EvalConfig, d geoData, unsized []string) []string {
	var w []string
	if n := len(unsized); n > 0 {
		w = append(w, fmt.Sprintf("%d image(s) could not be read for their size (the first: %q under --root-dir %s): their truth points were not filtered to the image as DeepForest's dataset filters them", n, unsized[0], cfg.RootDir))
	}
	if n := len(d.preds); n == 0 {
		w = append(w, fmt.Sprintf("%s holds no predictions: every detection metric will be 0", cfg.Predictions))
	} else if d.ignored == n {
		w = append(w, fmt.Sprintf("none of the %d predictions of %s names an image of %s, so every detection metric will be 0", n, cfg.Predictions, cfg.CSV))
	} else if float64(d.ignored) > ignoredShare*float64(n) {
		w = append(w, fmt.Sprintf("%d of the %d predictions of %s (%.1f%%) name no image of %s and are ignored", d.ignored, n, cfg.Predictions, 100*float64(d.ignored)/float64(n), cfg.CSV))
	}
	return w
}

// writeGeoOutputs stages predictions.csv, results.csv and report.json and
// publishes them as one set.
func writeGeoOutputs(cfg EvalConfig, metricJSON []byte, run output.RunInfo, in metrics.GeoInput, recs []metrics.GeoRecord, opt metrics.GeoOptions) error {
	preds, err := outdir.Stage(cfg.Out, "predictions.csv", func(w io.Writer) error { return output.WriteGeoPredictions(w, in) })
	if err != nil {
		return err
	}
	results, err := outdir.Stage(cfg.Out, "results.csv", func(w io.Writer) error { return output.WriteGeoResults(w, in, recs) })
	if err != nil {
		return err
	}
	run.Outputs = map[string]string{preds.Name: preds.SHA256, results.Name: results.SHA256}
	rj, err := json.MarshalIndent(run, " ", " ")
	if err != nil {
		return fmt.Errorf("jobs: write report.json: %w", err)
	}
	body := fmt.Appendf(nil, "{\"metrics\": %s,\n \"run\": %s}\n", metricJSON, rj)
	rep, err := outdir.Stage(cfg.Out, "report.json", func(w io.Writer) error {
		_, err := w.Write(body)
		return err
	})
	if err != nil {
		return err
	}
	set := []outdir.Staged{preds, results}
	if cfg.HTML != nil {
		page := output.GeoPage(in, recs, opt)
		page.ReportJSON, page.Labels = body, in.Labels
		h, err := output.StagePage(evalPage(cfg), *page)
		if err != nil {
			return err
		}
		set = append(set, h...)
	}
	return outdir.Publish(cfg.Out, append(set, rep))
}
