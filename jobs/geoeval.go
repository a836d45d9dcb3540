package jobs

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/infer/imagefile"
	"github.com/canopy-hpc/canopy/internal/dataset"
	"github.com/canopy-hpc/canopy/internal/georec"
	"github.com/canopy-hpc/canopy/internal/geos"
	"github.com/canopy-hpc/canopy/internal/htmlreport"
	"github.com/canopy-hpc/canopy/internal/plan"
	"github.com/canopy-hpc/canopy/metrics"
	"github.com/canopy-hpc/canopy/mpi"
	"github.com/canopy-hpc/canopy/report"
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
func evalGeometry(c mpi.Comm, cfg EvalConfig, in inputs, out *outRun, kind box.Kind) error {
	stats := rankStats{Rank: c.Rank(), Host: c.Host(), LocalRank: c.LocalRank(), LocalSize: c.LocalSize(), Seconds: map[string]float64{}}
	t0 := time.Now()
	if len(cfg.IoUSweep) > 0 {
		return collective(ExitUsage, "jobs: --iou-sweep applies to boxes; these inputs are %s", kind)
	}
	switch {
	case cfg.COCOOut:
		return collective(ExitUsage, "eval: --coco-out writes boxes; %s holds %s", cfg.CSV, kind.Plural())
	case cfg.Families != 0 && cfg.Families&metrics.Recall == 0:
		return collective(ExitUsage, "eval: %s holds %s, scored by DeepForest's recall and precision only (--metrics recall or all; torchmetrics IoU and COCO mAP are for boxes)", cfg.CSV, kind.Plural())
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
		return collective(ExitInternal, "jobs: %w", err)
	}
	stats.Seconds["load"] = since(t0)

	// Match this rank's images; image sizes are read where the points
	// need them (the validation semantics' filter_points).
	t1 := time.Now()
	var mine []metrics.GeoRecord
	var unsized []string
	var merr error
	conf := newConfiner(cfg.RootDir)
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
	if err := agreeErr(c, ExitInternal, merr); err != nil {
		return err
	}

	// Gather the records.
	bufs, err := mpi.AllgatherBytes(c, georec.Encode(nil, mine))
	if err != nil {
		return localErr(ExitMPI, "jobs: gather match records: %w", err)
	}
	recs, err := georec.Merge(bufs, len(images))
	if err != nil {
		return collective(ExitInternal, "jobs: %w", err)
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
	metricJSON := MetricsJSON(vals)
	stats.Seconds["metrics"] = since(t3)
	if err := agree(c, metricJSON); err != nil {
		return err
	}
	warnings := geoWarnings(cfg, d, unsized)
	if c.Rank() == 0 && cfg.Warnings != nil && segmSkipped != "" {
		sayLine(cfg.Warnings, "canopy: note: ", segmSkipped)
	}
	if c.Rank() == 0 && cfg.Warnings != nil {
		for _, w := range warnings {
			sayLine(cfg.Warnings, "canopy: warning: ", w)
		}
	}
	if len(warnings) > 0 && cfg.Strict {
		return collective(ExitInput, "jobs: --strict: %s", strings.Join(warnings, "; "))
	}
	return writeReport(c, stats, "report", func(allStats []rankStats) error {
		run := buildRun(c, cfg, in, d.in.Labels, allStats, len(images), d.ignored, resumeInfo{Computed: len(images)}, nil)
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
		if err := out.commit(); err != nil {
			return err
		}
		if cfg.Stdout != nil {
			printTable(cfg.Stdout, vals)
			fmt.Fprintf(cfg.Stdout, "report: %s\n", filepath.Join(cfg.Out, "report.json"))
		}
		return nil
	})
}

// imageSize reads an image's width and height from its header (the image
// confined to --root-dir as eval --model opens it); ok false when it
// cannot be read.
func imageSize(conf confiner, cfg EvalConfig, p string) (w, h int, ok bool) {
	if !cfg.AllowOutsideRoot && conf.check(p) != nil {
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
func writeGeoOutputs(cfg EvalConfig, metricJSON []byte, run runInfo, in metrics.GeoInput, recs []metrics.GeoRecord, opt metrics.GeoOptions) error {
	preds, err := stage(cfg.Out, "predictions.csv", func(w io.Writer) error { return writeGeoPredictions(w, in) })
	if err != nil {
		return err
	}
	results, err := stage(cfg.Out, "results.csv", func(w io.Writer) error { return writeGeoResults(w, in, recs) })
	if err != nil {
		return err
	}
	run.Outputs = map[string]string{preds.Name: preds.SHA256, results.Name: results.SHA256}
	rj, err := json.MarshalIndent(run, " ", " ")
	if err != nil {
		return fmt.Errorf("jobs: write report.json: %w", err)
	}
	body := fmt.Appendf(nil, "{\"metrics\": %s,\n \"run\": %s}\n", metricJSON, rj)
	rep, err := stage(cfg.Out, "report.json", func(w io.Writer) error {
		_, err := w.Write(body)
		return err
	})
	if err != nil {
		return err
	}
	set := []staged{preds, results}
	if cfg.HTML != nil {
		page := geoPage(in, recs, opt)
		page.ReportJSON, page.Labels = body, in.Labels
		h, err := stagePage(cfg, *page)
		if err != nil {
			return err
		}
		set = append(set, h...)
	}
	return publish(cfg.Out, append(set, rep))
}

// geoPage is the HTML page's view of a point or polygon eval: each
// geometry's bounds as the page's boxes (its counts), the match rows, and
// the geometries it draws.
func geoPage(in metrics.GeoInput, recs []metrics.GeoRecord, opt metrics.GeoOptions) *htmlreport.Eval {
	e := &htmlreport.Eval{Images: make([]box.Image, len(recs)), Dets: make([][]box.Detection, len(recs)),
		Geo: &htmlreport.Geo{Truth: make([][]box.Geo, len(recs)), Preds: in.Preds}}
	bounds := func(g box.Geo) box.Box {
		if g.Shape != nil {
			return g.Shape.Bounds()
		}
		return box.Box{Xmin: g.Point.X, Ymin: g.Point.Y, Xmax: g.Point.X, Ymax: g.Point.Y}
	}
	for i, r := range recs {
		truth := metrics.MatchedTruth(in, r, opt)
		e.Geo.Truth[i] = truth
		im := box.Image{Path: in.Images[i].Path, Empty: len(truth) == 0}
		for _, g := range truth {
			im.Truth = append(im.Truth, box.Truth{Box: bounds(g), Label: g.Label})
		}
		e.Images[i] = im
		for _, g := range in.Preds[i] {
			e.Dets[i] = append(e.Dets[i], box.Detection{Box: bounds(g), Label: g.Label, Score: g.Score})
		}
		for _, m := range r.Matches {
			e.Matches = append(e.Matches, m.Match)
		}
	}
	return e
}

// writeGeoPredictions writes the joined predictions: image_path,x,y or
// image_path,geometry (WKT), then label and score.
func writeGeoPredictions(w io.Writer, in metrics.GeoInput) error {
	head := "image_path,x,y,label,score\n"
	if in.Kind == box.KindPolygon {
		head = "image_path,geometry,label,score\n"
	}
	if _, err := io.WriteString(w, head); err != nil {
		return err
	}
	names := csvNames(in.Labels)
	var line []byte
	for i, im := range in.Images {
		p := csvField(im.Path)
		for _, g := range in.Preds[i] {
			line = append(line[:0], p...)
			if in.Kind == box.KindPolygon {
				line = append(append(line, ",\""...), WKT(g.Shape)...)
				line = append(line, '"')
			} else {
				line = report.AppendFloat(append(line, ','), g.Point.X)
				line = report.AppendFloat(append(line, ','), g.Point.Y)
			}
			line = append(append(append(line, ','), names(g.Label)...), ',')
			line = append(report.AppendFloat(line, g.Score), '\n')
			if _, err := w.Write(line); err != nil {
				return err
			}
		}
	}
	return nil
}

// WKT writes a shape as WKT with shortest round-trip coordinates.
func WKT(sh *box.Shape) string {
	kind := "POLYGON"
	if sh.Multi {
		kind = "MULTIPOLYGON"
	}
	if sh.Empty() {
		return kind + " EMPTY"
	}
	var b []byte
	poly := func(p box.Polygon) {
		b = append(b, '(')
		for k, r := range p {
			if k > 0 {
				b = append(b, ", "...)
			}
			b = append(b, '(')
			for j, q := range r {
				if j > 0 {
					b = append(b, ", "...)
				}
				b = strconv.AppendFloat(b, q.X, 'g', -1, 64)
				b = append(b, ' ')
				b = strconv.AppendFloat(b, q.Y, 'g', -1, 64)
			}
			b = append(b, ')')
		}
		b = append(b, ')')
	}
	b = append(b, kind+" "...)
	if !sh.Multi {
		poly(sh.Parts[0])
		return string(b)
	}
	b = append(b, '(')
	for k, p := range sh.Parts {
		if k > 0 {
			b = append(b, ", "...)
		}
		poly(p)
	}
	return string(append(b, ')'))
}

// writeGeoResults is DeepForest's results frame: one row per truth of
// each counted image, in image order, with distance (points) or IoU
// (polygons); an unassigned point's distance is inf, and an image without
// predictions leaves it empty (NaN), as pandas writes them.
func writeGeoResults(w io.Writer, in metrics.GeoInput, recs []metrics.GeoRecord) error {
	col := "IoU"
	if in.Kind == box.KindPoint {
		col = "distance"
	}
	if _, err := io.WriteString(w, "image_path,truth_id,prediction_id,"+col+",score,match,true_label,predicted_label\n"); err != nil {
		return err
	}
	names := csvNames(in.Labels)
	var line []byte
	for _, r := range recs {
		p := csvField(in.Images[r.Image].Path)
		for _, m := range r.Matches {
			line = append(append(line[:0], p...), ',')
			line = append(strconv.AppendInt(line, int64(m.TruthID), 10), ',')
			if m.PredID >= 0 {
				line = strconv.AppendInt(line, int64(m.PredID), 10)
			}
			line = append(line, ',')
			v := m.IoU
			if in.Kind == box.KindPoint {
				v = m.Distance
			}
			switch {
			case math.IsNaN(v):
			case math.IsInf(v, 1):
				line = append(line, "inf"...)
			default:
				line = report.AppendFloat(line, v)
			}
			line = append(line, ',')
			if m.PredID >= 0 {
				line = report.AppendFloat(line, m.Score)
			}
			line = append(line, ",False,"...)
			if m.Match.Match {
				line = append(line[:len(line)-6], "True,"...)
			}
			line = append(line, names(m.TrueLabel)...)
			line = append(line, ',')
			if m.PredID >= 0 {
				line = append(line, names(m.PredLabel)...)
			}
			if _, err := w.Write(append(line, '\n')); err != nil {
				return err
			}
		}
	}
	return nil
}
