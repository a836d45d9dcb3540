// Package eval is `canopy eval`'s data path below the command layer: its
// sequence of steps on every rank (Run), its configuration (Config), rank
// 0's input packet and the inputs every rank holds (Inputs), the labels
// and the join of the predictions, the input warnings, the validation
// losses, point and polygon evaluation (Geometry), and the report
// (BuildRun, WriteOutputs, StageHTML).
package eval

import (
	"fmt"
	"io"
	"time"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/internal/cropstage"
	"github.com/canopy-hpc/canopy/internal/dataset"
	"github.com/canopy-hpc/canopy/internal/htmlreport"
	"github.com/canopy-hpc/canopy/internal/modelsel"
	"github.com/canopy-hpc/canopy/internal/output"
	"github.com/canopy-hpc/canopy/metrics"
)

// Config is the configuration of one `canopy eval` run. Every rank
// passes the same values.
type Config struct {
	CSV         string
	RootDir     string // default: the CSV's folder
	Predictions string
	LabelDict   string
	// LabelDictData, when set, is the label map's bytes (a --config's
	// label_dict as label,id CSV) read instead of the file LabelDict.
	LabelDictData []byte
	// PredictionsData, when set, is the predictions' bytes (eval --model
	// with a point model: its points); Predictions then names them.
	PredictionsData []byte
	// RunConfig is --config and its overrides (nil: none).
	RunConfig    *output.RunConfig
	Out          string
	Force        bool
	Resume       bool
	IoUThreshold float64
	// IoUSweep are further IoU thresholds (--iou-sweep) the recall and iou
	// families are reduced at, from the same matching.
	IoUSweep     []float64
	Semantics    metrics.Semantics
	Families     metrics.Family // 0 means all
	ClassMetrics bool
	BatchSize    int
	// AllowAnyScore accepts prediction scores outside [0, 1].
	AllowAnyScore bool
	// Strict turns the input warnings (predictions that do not join,
	// duplicate rows) into errors (exit 3).
	Strict bool
	// AllowOutsideRoot lets image paths leave RootDir (absolute, "..",
	// symlinks out).
	AllowOutsideRoot bool
	// Warnings receives rank 0's input warnings (nil: none).
	Warnings io.Writer
	// Model, when Model.Spec is set, runs the native RetinaNet instead of
	// replaying --predictions.
	Model modelsel.ModelConfig
	// Crops are --crop-model and --crop-label-dict (with or without a
	// detector: eval --predictions classifies the stored boxes).
	Crops   cropstage.CropConfig
	Command []string
	Stdout  io.Writer
	// Progress receives rank 0's progress lines (nil: none).
	Progress io.Writer
	// CollectiveTimeout is the watchdog's limit (--collective-timeout), off
	// while ranks wait for the slowest one to finish detecting.
	CollectiveTimeout time.Duration
	// HTML: rank 0 writes OUT/report.html with these options (nil: not).
	HTML *htmlreport.Options
	// COCOOut: rank 0 also writes the truth and the predictions as COCO JSON.
	COCOOut bool
	// Geometry forces the inputs' geometry (nil: detected, as DeepForest's
	// determine_geometry_type; see dataset.CSVKind).
	Geometry *box.Kind
	// DistanceThreshold: a truth point is matched when its distance to the
	// assigned prediction is below this (DeepForest's point.distance_threshold).
	DistanceThreshold float64
}

// Inputs are the input files' bytes every rank holds (rank 0 read and
// broadcast them): the truth (a VOC folder made one CSV when TruthFolder,
// whose labels stay text), the predictions and the label dict (nil: none).
type Inputs struct {
	CSV, Preds, Labels []byte
	TruthFolder        bool
}

// PandasLabelValues is each label's number when DeepForest, reading the
// files itself (read_file: pandas' type inference), would get numeric label
// columns in both the truth CSV and the predictions CSV; nil otherwise (a
// VOC folder, COCO or VOC truth, a model's text labels, or any label that
// is not a number). Parsed once here and handed to metrics as a typed fact.
func PandasLabelValues(in Inputs, truth *dataset.Truth, preds []dataset.Row, labels box.LabelMap) []float64 {
	if in.TruthFolder || !truth.NumericLabels || preds == nil || !dataset.NumericLabels(preds) {
		return nil
	}
	vals := make([]float64, labels.Len())
	for id := range vals {
		v, ok := dataset.PandasNumber(labels.Name(int32(id)))
		if !ok {
			return nil
		}
		vals[id] = v
	}
	return vals
}

// ChooseLabels: --label-dict when given, else the sorted unique labels of
// the truth rows and the predictions that join the truth.
func ChooseLabels(cfg Config, in Inputs, truth *dataset.Truth, preds []dataset.Row) (box.LabelMap, error) {
	if cfg.LabelDict != "" {
		return dataset.ParseLabelDict(cfg.LabelDict, in.Labels)
	}
	var names []string
	for _, im := range truth.Images {
		names = append(names, im.Labels...)
	}
	for _, r := range preds {
		if _, ok := truth.Index(r.Path); ok {
			names = append(names, r.Label)
		}
	}
	return box.SortedLabelMap(names), nil
}

// JoinPredictions groups the prediction rows by image path, the rows of
// images the truth does not hold counted as ignored.
func JoinPredictions(name string, truth *dataset.Truth, rows []dataset.Row, labels box.LabelMap) (map[string][]box.Detection, int, error) {
	byPath := make(map[string][]box.Detection)
	ignored := 0
	for _, r := range rows {
		if _, ok := truth.Index(r.Path); !ok {
			ignored++
			continue
		}
		id, ok := labels.ID(r.Label)
		if !ok {
			return nil, 0, fmt.Errorf("jobs: %s:%d: label %q is not in the label map: %w", name, r.Line, r.Label, dataset.ErrInput)
		}
		byPath[r.Path] = append(byPath[r.Path], box.Detection{Box: r.Box, Label: id, Score: r.Score})
	}
	return byPath, ignored, nil
}

// ignoredShare is the share of ignored predictions above which a replay
// warns (--strict: fails).
const ignoredShare = 0.10

// InputWarnings are the signs of a silently wrong score: predictions that
// do not join the truth (paths spelled differently), and exact duplicate
// rows (a file appended to itself). Every rank computes the same list.
func InputWarnings(cfg Config, truth *dataset.Truth, preds []dataset.Row, ignored int) []string {
	var w []string
	if truth.Duplicates > 0 {
		w = append(w, fmt.Sprintf("%s: %d rows repeat an earlier row exactly (a file appended to itself?); they count twice", cfg.CSV, truth.Duplicates))
	}
	if cfg.Predictions == "" {
		return w
	}
	if d := dataset.Duplicates(preds); d > 0 {
		w = append(w, fmt.Sprintf("%s: %d rows repeat an earlier row exactly (a file appended to itself?); they count twice", cfg.Predictions, d))
	}
	unmatched := func() string {
		for _, r := range preds {
			if _, ok := truth.Index(r.Path); !ok {
				return fmt.Sprintf("; the first is line %d, image_path %q", r.Line, r.Path)
			}
		}
		return ""
	}
	switch n := len(preds); {
	case n == 0:
		w = append(w, fmt.Sprintf("%s holds no predictions: every detection metric will be 0", cfg.Predictions))
	case ignored == n:
		w = append(w, fmt.Sprintf("none of the %d predictions of %s names an image of %s, so every detection metric will be 0%s", n, cfg.Predictions, cfg.CSV, unmatched()))
	case float64(ignored) > ignoredShare*float64(n):
		w = append(w, fmt.Sprintf("%d of the %d predictions of %s (%.1f%%) name no image of %s and are ignored%s", ignored, n, cfg.Predictions, 100*float64(ignored)/float64(n), cfg.CSV, unmatched()))
	}
	return w
}
