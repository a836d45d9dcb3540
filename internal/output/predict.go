package output

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"

	"github.com/canopy-hpc/canopy/internal/collective"
	"github.com/canopy-hpc/canopy/internal/cropstage"
	"github.com/canopy-hpc/canopy/internal/modelsel"
	"github.com/canopy-hpc/canopy/internal/outdir"
)

// PredictReport is predict's report.json, and the part of predict --tile's
// that is predict's.
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
	// Rows says how predictions.csv's rows were made: "across_class_nms"
	// (DeepForest predict_image's class-agnostic NMS at the model's
	// nms_thresh, integer boxes, on every image whose detections carry
	// more than one label) or "raw" (--raw-rows: the detector's rows).
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
	// Config, Settings, ConfigIgnored: as eval's run.
	Config        string             `json:"config,omitempty"`
	Settings      map[string]Setting `json:"settings,omitempty"`
	ConfigIgnored []string           `json:"config_ignored,omitempty"`
	// CropModels and Crops: the --crop-model stage, when given.
	CropModels []cropstage.ModelInfo `json:"crop_models,omitempty"`
	Crops      *cropstage.Stats      `json:"crops,omitempty"`
}

// SetCrops records the crop stage.
func (r *PredictReport) SetCrops(cs *cropstage.Set) {
	if cs != nil {
		r.CropModels, r.Crops = cs.Info, &cs.Stats
	}
}

// PublishSet stages report.json (rep) and publishes it with the staged
// files as one set; on an error the staged files are removed.
func PublishSet(dir string, set []outdir.Staged, rep any) error {
	rj, err := outdir.Stage(dir, "report.json", func(w io.Writer) error {
		e := json.NewEncoder(w)
		e.SetIndent("", "  ")
		return e.Encode(rep)
	})
	if err != nil {
		for _, s := range set {
			os.Remove(filepath.Join(dir, s.Tmp))
		}
		return err
	}
	return outdir.Publish(dir, append(set, rj))
}
