package output

import (
	"encoding/json"
	"io"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/internal/collective"
	"github.com/canopy-hpc/canopy/internal/cropstage"
	"github.com/canopy-hpc/canopy/internal/modelsel"
	"github.com/canopy-hpc/canopy/internal/outdir"
)

// Row modes of predictions.csv, as report.json's "rows" records them.
const (
	RowsAcrossClassNMS = "across_class_nms" // predict_image's rows (the default)
	RowsRaw            = "raw"              // --raw-rows
)

// PredictReport is predict's report.json (predict --tile's holds it).
type PredictReport struct {
	Canopy   string                 `json:"canopy"`
	Git      string                 `json:"git"`
	MPI      string                 `json:"mpi"`
	Command  []string               `json:"command"`
	Ranks    int                    `json:"ranks"`
	Images   int                    `json:"images"`
	Boxes    int                    `json:"detections"`
	Model    *modelsel.Info         `json:"model"`
	PerRank  []collective.RankStats `json:"per_rank"`
	Detector string                 `json:"detector"`
	// Rows says how predictions.csv's rows were made: RowsAcrossClassNMS
	// (DeepForest predict_image's class-agnostic NMS at the model's
	// nms_thresh, integer boxes, on every image whose detections carry
	// more than one label) or RowsRaw (--raw-rows: the detector's rows).
	// RawDetections counts the detector's rows before it, RowsIoU is its
	// threshold.
	Rows          string   `json:"rows"`
	RowsIoU       *float64 `json:"across_class_nms_iou,omitempty"`
	RawDetections int      `json:"raw_detections"`
	// Resumed: a --resume run's attempt and where its images came from.
	Resumed *ResumeInfo `json:"resumed,omitempty"`
	// Outputs: the sha256 of the predictions.csv published with this report.
	Outputs map[string]string `json:"outputs,omitempty"`
	// AllowOutsideRoot records --allow-outside-root.
	AllowOutsideRoot bool `json:"allow_outside_root,omitempty"`
	// The config's settings and the crop models: as eval's run.
	SettingsRecord
}

// PublishPredictions stages predictions.csv in dir, then report.json as
// report makes it from the sha256 of every output (predictions.csv and
// the already staged extra files), and publishes them as one set.
func PublishPredictions(dir string, images []box.Image, dets [][]box.Detection, labels box.LabelMap, crops *cropstage.Table,
	extra []outdir.Staged, report func(outputs map[string]string) any) error {
	preds, err := outdir.Stage(dir, PredictionsCSV, func(w io.Writer) error {
		return WritePredictions(w, images, dets, labels, crops)
	})
	if err != nil {
		return err
	}
	set := append([]outdir.Staged{preds}, extra...)
	outputs := map[string]string{}
	for _, s := range set {
		outputs[s.Name] = s.SHA256
	}
	return PublishSet(dir, set, report(outputs))
}

// PublishSet stages report.json (rep, indented by two spaces) and
// publishes it with the staged files as one set; on an error the staged
// files are removed.
func PublishSet(dir string, set []outdir.Staged, rep any) error {
	rj, err := outdir.Stage(dir, ReportJSON, func(w io.Writer) error {
		e := json.NewEncoder(w)
		e.SetIndent("", "  ")
		return e.Encode(rep)
	})
	if err != nil {
		outdir.Unstage(dir, set)
		return err
	}
	return outdir.Publish(dir, append(set, rj))
}
