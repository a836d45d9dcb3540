package output

import (
	"io"
	"strconv"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/internal/cropstage"
	"github.com/canopy-hpc/canopy/internal/dataset"
	"github.com/canopy-hpc/canopy/metrics"
	"github.com/canopy-hpc/canopy/report"
)

// The file names of a run's reports in --out.
const (
	ReportJSON     = "report.json"
	PredictionsCSV = "predictions.csv"
	ResultsCSV     = "results.csv"
	ReportHTML     = "report.html"
)

// PredictionsHeader is predictions.csv's first line: the columns, and
// the crop models' after score (cs nil: none).
func PredictionsHeader(cs *cropstage.Set) string {
	head := "image_path,xmin,ymin,xmax,ymax,label,score"
	if cs != nil {
		for _, c := range cs.Columns() {
			head += "," + dataset.CSVField(c)
		}
	}
	return head + "\n"
}

// WritePredictions writes predictions.csv: the header, then each image's
// detections in order, with the crop models' columns after score (crops
// nil: none; a dropped box's cells empty).
func WritePredictions(w io.Writer, images []box.Image, dets [][]box.Detection, labels box.LabelMap, crops *cropstage.Table) error {
	var cs *cropstage.Set
	if crops != nil {
		cs = crops.Set
	}
	if _, err := io.WriteString(w, PredictionsHeader(cs)); err != nil {
		return err
	}
	names := CSVNames(labels)
	var line []byte
	for i, im := range images {
		p := dataset.CSVField(im.Path)
		for j, d := range dets[i] {
			line = append(line[:0], p...)
			for _, v := range [4]float64{d.Box.Xmin, d.Box.Ymin, d.Box.Xmax, d.Box.Ymax} {
				line = report.AppendFloat(append(line, ','), v)
			}
			line = append(append(append(line, ','), names(d.Label)...), ',')
			line = report.AppendFloat(line, d.Score)
			if crops != nil {
				line = crops.AppendCells(line, i, j)
			}
			line = append(line, '\n')
			if _, err := w.Write(line); err != nil {
				return err
			}
		}
	}
	return nil
}

// CSVNames returns the CSV-quoted label names by id.
func CSVNames(labels box.LabelMap) func(int32) string {
	names := labels.Names()
	for i := range names {
		names[i] = dataset.CSVField(names[i])
	}
	return func(id int32) string {
		if id >= 0 && int(id) < len(names) {
			return names[id]
		}
		return dataset.CSVField(labels.Name(id))
	}
}

// WriteResults writes results.csv: DeepForest's results frame, one row
// per match record in order.
func WriteResults(w io.Writer, images []box.Image, labels box.LabelMap, matches []metrics.Match) error {
	if _, err := io.WriteString(w, "image_path,truth_id,prediction_id,IoU,score,match,true_label,predicted_label\n"); err != nil {
		return err
	}
	names := CSVNames(labels)
	var line []byte
	last, p := -1, ""
	for _, m := range matches {
		if m.Image != last {
			last, p = m.Image, dataset.CSVField(images[m.Image].Path)
		}
		line = append(append(line[:0], p...), ',')
		line = append(strconv.AppendInt(line, int64(m.TruthID), 10), ',')
		if m.PredID >= 0 {
			line = strconv.AppendInt(line, int64(m.PredID), 10)
		}
		line = append(report.AppendFloat(append(line, ','), m.IoU), ',')
		if m.PredID >= 0 {
			line = report.AppendFloat(line, m.Score)
		}
		if m.Match {
			line = append(line, ",True,"...)
		} else {
			line = append(line, ",False,"...)
		}
		line = append(line, names(m.TrueLabel)...)
		line = append(line, ',')
		if m.PredID >= 0 {
			line = append(line, names(m.PredLabel)...)
		}
		line = append(line, '\n')
		if _, err := w.Write(line); err != nil {
			return err
		}
	}
	return nil
}
