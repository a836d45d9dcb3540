package output

import (
	"io"
	"math"
	"strconv"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/internal/dataset"
	"github.com/canopy-hpc/canopy/internal/htmlreport"
	"github.com/canopy-hpc/canopy/metrics"
	"github.com/canopy-hpc/canopy/report"
)

// GeoPage is the HTML page's view of a point or polygon eval: each
// geometry's bounds as the page's boxes (its counts), the match rows, and
// the geometries it draws.
func GeoPage(in metrics.GeoInput, recs []metrics.GeoRecord, opt metrics.GeoOptions) *htmlreport.Eval {
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

// WriteGeoPredictions writes the joined predictions: image_path,x,y or
// image_path,geometry (WKT), then label and score.
func WriteGeoPredictions(w io.Writer, in metrics.GeoInput) error {
	head := "image_path,x,y,label,score\n"
	if in.Kind == box.KindPolygon {
		head = "image_path,geometry,label,score\n"
	}
	if _, err := io.WriteString(w, head); err != nil {
		return err
	}
	names := CSVNames(in.Labels)
	var line []byte
	for i, im := range in.Images {
		p := dataset.CSVField(im.Path)
		for _, g := range in.Preds[i] {
			line = append(line[:0], p...)
			if in.Kind == box.KindPolygon {
				line = append(append(line, ",\""...), dataset.WKT(g.Shape)...)
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

// WriteGeoResults is DeepForest's results frame: one row per truth of
// each counted image, in image order, with distance (points) or IoU
// (polygons); an unassigned point's distance is inf, and an image without
// predictions leaves it empty (NaN), as pandas writes them.
func WriteGeoResults(w io.Writer, in metrics.GeoInput, recs []metrics.GeoRecord) error {
	col := "IoU"
	if in.Kind == box.KindPoint {
		col = "distance"
	}
	if _, err := io.WriteString(w, "image_path,truth_id,prediction_id,"+col+",score,match,true_label,predicted_label\n"); err != nil {
		return err
	}
	names := CSVNames(in.Labels)
	var line []byte
	for _, r := range recs {
		p := dataset.CSVField(in.Images[r.Image].Path)
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
