// Package imagesrun is the output-folder transaction of a run over whole
// images, shared by eval and plain predict (internal/pipeline/…, jobs):
// the manifest that says what the part files were computed from, rank 0's
// opening of the folder (a new run, --force, --resume), the saved run it
// broadcasts, the resumed images checked against their recorded identity,
// a rank's part file, and the run's end. It imports only rooms below the
// pipelines; the tile engine has its own (internal/tilerun).
package imagesrun

import (
	"encoding/json"
	"fmt"
	"path/filepath"

	"github.com/canopy-hpc/canopy/internal/collective"
	"github.com/canopy-hpc/canopy/internal/outdir"
	"github.com/canopy-hpc/canopy/internal/output"
	"github.com/canopy-hpc/canopy/internal/runkind"
)

// Manifest is OUT/manifest.json: what the part files were computed from.
// --resume continues only when the current run would compute the same
// detections.
type Manifest struct {
	// Job is "predict" for plain predict's run (eval's leaves it empty).
	Job         string `json:"job,omitempty"`
	Canopy      string `json:"canopy"`
	CSV         string `json:"csv_sha256"`
	Predictions string `json:"predictions_sha256"`
	LabelDict   string `json:"label_dict_sha256"`
	// Images is predict's image list: the sha256 of the paths in order.
	Images   string `json:"images_sha256,omitempty"`
	Detector string `json:"detector"`
	// DetectorSettings are the detector's thresholds (none for replay).
	DetectorSettings map[string]string `json:"detector_settings"`
	// RootDir is --root-dir made absolute: the image paths' folder. Each
	// image's identity is in its part record (checkResumedImages).
	RootDir string `json:"root_dir"`
}

// Detector is the detector a run's detections come from, as its manifest
// records it: a model's weights sha256 and the settings a resume must
// share (modelsel.DetectorSettings); the zero Detector is a replay of
// stored predictions.
type Detector struct {
	WeightsSHA256 string
	Settings      map[string]string
}

func (d Detector) name() string {
	if d.WeightsSHA256 == "" {
		return "replay"
	}
	return "retinanet weights sha256 " + d.WeightsSHA256
}

func (d Detector) settings() map[string]string {
	if d.Settings == nil {
		return map[string]string{}
	}
	return d.Settings
}

// EvalRun is what an eval run's detections are computed from: the bytes
// of its truth CSV, --predictions and --label-dict (nil: none), the root
// folder of the image paths, and the detector.
type EvalRun struct {
	CSV, Predictions, LabelDict []byte
	RootDir                     string
	Detector                    Detector
}

// Manifest is eval's manifest of r.
func (r EvalRun) Manifest() Manifest {
	return Manifest{Canopy: output.Version, CSV: outdir.SHA256Hex(r.CSV), Predictions: outdir.SHA256Hex(r.Predictions),
		LabelDict: labelDictHash(r.LabelDict), Detector: r.Detector.name(), DetectorSettings: r.Detector.settings(), RootDir: absPath(r.RootDir)}
}

// PredictRun is what plain predict's detections are computed from: the
// image list, the --label-dict bytes (nil: none), the root folder and the
// model. The part files hold the detector's rows; the predict_image rows
// (or --raw-rows) are made from them at the end, so that choice is not
// part of the identity.
type PredictRun struct {
	Paths     []string
	LabelDict []byte
	RootDir   string
	Detector  Detector
}

// Manifest is plain predict's manifest of r.
func (r PredictRun) Manifest() Manifest {
	return Manifest{Job: runkind.Predict, Canopy: output.Version, Images: outdir.SHA256Hex(collective.PackFields(nil, StringsBytes(r.Paths)...)),
		LabelDict: labelDictHash(r.LabelDict), Detector: r.Detector.name(), DetectorSettings: r.Detector.settings(), RootDir: absPath(r.RootDir)}
}

func labelDictHash(b []byte) string {
	if b == nil {
		return ""
	}
	return outdir.SHA256Hex(b)
}

// StringsBytes is ss as byte slices (a packet's fields).
func StringsBytes(ss []string) [][]byte {
	out := make([][]byte, len(ss))
	for i, s := range ss {
		out[i] = []byte(s)
	}
	return out
}

// absPath is root made absolute and clean.
func absPath(root string) string {
	if a, err := filepath.Abs(root); err == nil {
		return a
	}
	return filepath.Clean(root)
}

// Kind is the kind of run a manifest is for (internal/runkind).
func (m Manifest) Kind() string {
	if m.Job == runkind.Predict {
		return runkind.Predict
	}
	return runkind.Eval
}

// Diff names every field in which m and o differ.
func (m Manifest) Diff(o Manifest) []string {
	var d []string
	cmp := func(name, a, b string) {
		if a != b {
			d = append(d, fmt.Sprintf("%s: %q in the run to resume, %q now", name, a, b))
		}
	}
	cmp("job", m.Job, o.Job)
	cmp("canopy version", m.Canopy, o.Canopy)
	cmp("csv sha256", m.CSV, o.CSV)
	cmp("predictions sha256", m.Predictions, o.Predictions)
	cmp("label dict sha256", m.LabelDict, o.LabelDict)
	cmp("image list sha256", m.Images, o.Images)
	cmp("detector", m.Detector, o.Detector)
	if m.RootDir == "" && o.RootDir != "" {
		d = append(d, fmt.Sprintf("root folder: not recorded in the run to resume (an older canopy), %q now", o.RootDir))
	} else {
		cmp("root folder", m.RootDir, o.RootDir)
	}
	a, _ := json.Marshal(m.DetectorSettings)
	b, _ := json.Marshal(o.DetectorSettings)
	cmp("detector settings", string(a), string(b))
	return d
}
