package metrics

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/metrics/lsap"
)

// Semantics selects which of DeepForest's two box-metric definitions to
// reproduce.
type Semantics int

const (
	// Validation is the RecallPrecision metric of trainer.validate: every
	// image counts, an empty frame with predictions is a precision-0 image,
	// sums are float32 torch states in dataset order.
	Validation Semantics = iota
	// EvaluateBoxes is deepforest.evaluate.evaluate_boxes: only images with
	// ground truth count, in sorted image_path order, means by np.mean.
	EvaluateBoxes
)

// ParseSemantics maps the --semantics flag value.
func ParseSemantics(s string) (Semantics, error) {
	switch s {
	case "validation":
		return Validation, nil
	case "evaluate_boxes":
		return EvaluateBoxes, nil
	}
	return 0, fmt.Errorf("metrics: unknown semantics %q (want validation or evaluate_boxes)", s)
}

func (s Semantics) String() string {
	if s == EvaluateBoxes {
		return "evaluate_boxes"
	}
	return "validation"
}

// Input is what the metrics see: the images in global order and, aligned
// with them, each image's detections in detector order.
type Input struct {
	Images []box.Image
	Dets   [][]box.Detection
	Labels box.LabelMap
	// LabelValues, when not nil, holds each label id's number as pandas
	// typed the label columns of the CSVs DeepForest read (both truth and
	// predictions all numbers): evaluate_boxes then names and orders its
	// classes by value, as float reprs ("0.0_Recall"), and labels of equal
	// value are one class. nil: labels are text (the validation path always
	// names classes by the label_dict's names).
	LabelValues []float64
}

// Options are the metric settings.
type Options struct {
	IoUThreshold float64
	Semantics    Semantics
}

// Value is one named metric; Null stands for DeepForest's NaN or None,
// and a non-nil Array makes it a list (per-class values).
type Value struct {
	Key   string
	V     float64
	Null  bool
	Array []float64
	Ints  []int // a list of integers (class ids)
}

// Match is one ground-truth box's row of the match table.
type Match struct {
	Image     int     // global image index
	TruthID   int     // index among the image's truth boxes
	PredID    int     // index among the image's detections, -1 if unassigned
	IoU       float64 // 0 when unassigned
	Score     float64 // valid when PredID >= 0
	Match     bool    // IoU > threshold
	TrueLabel int32
	PredLabel int32 // -1 when unassigned
}

// Result holds the metric values in DeepForest's key order and the match
// table.
type Result struct {
	Values  []Value
	Matches []Match
	// PR holds the COCO family's per-class precision–recall curves at IoU
	// 0.5 and 0.75 (for the HTML report; not metrics).
	PR []PRCurve
}

// DeepForest computes box_recall, box_precision, empty_frame_accuracy and
// the per-class <label>_Recall / <label>_Precision of the chosen semantics.
func DeepForest(in Input, opt Options) (Result, error) {
	return Compute(in, opt, Recall, false)
}

type imageScore struct{ tp, nTruth, nPred int }

func f32Value(key string, v float32) Value { return Value{Key: key, V: float64(v)} }

func validation(f Frame, per []imageScore, matches []Match) []Value {
	// torch.tensor(0.0) states are float32; `state += python_float` rounds
	// the float64 quotient to float32 and adds in float32.
	var recall, precision float32
	var withPred, withGT, empty, correctEmpty int
	for _, s := range per {
		nPred := s.nPred
		if s.nTruth == 0 {
			empty++
			if nPred == 0 {
				correctEmpty++
			} else {
				withPred++
			}
			continue
		}
		withGT++
		if nPred == 0 {
			continue
		}
		withPred++
		recall = float32(recall + float32(float64(s.tp)/float64(s.nTruth)))
		precision = float32(precision + float32(float64(s.tp)/float64(s.nPred)))
	}
	var vals []Value
	if withPred > 0 {
		vals = append(vals, f32Value("box_precision", float32(precision/float32(withPred))))
	} else {
		vals = append(vals, Value{Key: "box_precision", Null: true})
	}
	if withGT > 0 {
		vals = append(vals, f32Value("box_recall", float32(recall/float32(withGT))))
	} else {
		vals = append(vals, Value{Key: "box_recall", Null: true})
	}
	if f.Labels.Len() > 1 {
		vals = append(vals, classValues(f.Labels, matches)...)
	}
	if empty > 0 {
		vals = append(vals, f32Value("empty_frame_accuracy", float32(float32(correctEmpty)/float32(empty))))
	}
	return vals
}

func evaluateBoxes(f Frame, per []imageScore, matches []Match) []Value {
	anyPred, anyGT := false, false
	var order []int
	for i, s := range per {
		if s.nPred > 0 {
			anyPred = true
		}
		if s.nTruth > 0 {
			anyGT = true
			order = append(order, i)
		}
	}
	switch {
	case !anyPred:
		return []Value{{Key: "box_precision", Null: true}, {Key: "box_recall", V: 0}}
	case !anyGT:
		return []Value{{Key: "box_precision", V: 0}, {Key: "box_recall", Null: true}}
	}
	// ground_df.groupby("image_path") visits images in sorted path order.
	sort.SliceStable(order, func(a, b int) bool { return f.Images[order[a]].Path < f.Images[order[b]].Path })
	var recalls, precisions []float64
	for _, i := range order {
		s := per[i]
		if s.nPred == 0 {
			recalls = append(recalls, 0)
			continue
		}
		recalls = append(recalls, float64(s.tp)/float64(s.nTruth))
		precisions = append(precisions, float64(s.tp)/float64(s.nPred))
	}
	vals := []Value{npMean("box_precision", precisions), npMean("box_recall", recalls)}
	if f.LabelValues != nil {
		return append(vals, numericClassValues(f.LabelValues, matches)...)
	}
	return append(vals, classValues(f.Labels, matches)...)
}

func npMean(key string, a []float64) Value {
	if len(a) == 0 {
		return Value{Key: key, Null: true}
	}
	return Value{Key: key, V: pairwiseSum(a) / float64(len(a))}
}

// classValues is DeepForest's compute_class_recall over the matched rows:
// for every label seen among them, recall = matched rows of true label L
// predicted as L / matched rows of true label L, and precision likewise by
// predicted label; a missing side is 0. Labels in sorted string order.
func classValues(labels box.LabelMap, matches []Match) []Value {
	return classRates(matches, func(l int32) int32 { return l },
		func(a, b int32) bool { return labels.Name(a) < labels.Name(b) }, labels.Name)
}

// classRates counts, per class key, the matched rows' truths, predictions
// and correct ones (truth and prediction of one key), and gives each
// class's recall and precision in the order of less, named by name.
func classRates[K comparable](matches []Match, key func(int32) K, less func(a, b K) bool, name func(K) string) []Value {
	type count struct{ truth, pred, correct int }
	// Count by label id in a dense table first (ids are small and dense),
	// then fold the ids into their classes: one key call per id, not per
	// row. A row whose two ids differ but share a key (numeric labels of
	// one value) is correct too; those are counted per key as they come.
	lo, hi := int32(0), int32(-1)
	for _, m := range matches {
		if m.Match && m.PredID >= 0 {
			lo, hi = min(lo, m.TrueLabel, m.PredLabel), max(hi, m.TrueLabel, m.PredLabel)
		}
	}
	byID := make([]count, hi-lo+1)
	sameKey := map[K]int{}
	for _, m := range matches {
		if !m.Match || m.PredID < 0 {
			continue
		}
		byID[m.TrueLabel-lo].truth++
		byID[m.PredLabel-lo].pred++
		if m.TrueLabel == m.PredLabel {
			byID[m.TrueLabel-lo].correct++
		} else if t := key(m.TrueLabel); t == key(m.PredLabel) {
			sameKey[t]++
		}
	}
	counts := map[K]*count{}
	for j, c := range byID {
		if c == (count{}) {
			continue
		}
		k := key(int32(j) + lo)
		a := counts[k]
		if a == nil {
			a = &count{}
			counts[k] = a
		}
		a.truth, a.pred, a.correct = a.truth+c.truth, a.pred+c.pred, a.correct+c.correct
	}
	for k, n := range sameKey {
		counts[k].correct += n
	}
	keys := make([]K, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return less(keys[i], keys[j]) })
	vals := make([]Value, 0, 2*len(keys))
	for _, k := range keys {
		c := counts[k]
		vals = append(vals, classRate(name(k), c.truth, c.pred, c.correct)...)
	}
	return vals
}

// classRate is one class's <name>_Recall and <name>_Precision: correct
// over truths and over predictions, 0 where there are none.
func classRate(name string, truth, pred, correct int) []Value {
	r, p := 0.0, 0.0
	if truth > 0 {
		r = float64(correct) / float64(truth)
	}
	if pred > 0 {
		p = float64(correct) / float64(pred)
	}
	return []Value{{Key: name + "_Recall", V: r}, {Key: name + "_Precision", V: p}}
}

// numericClassValues is compute_class_recall on numeric label columns, as
// scripts/evaluate.py names its rows: labels compared by value (0 and 0.0
// are one class), rows in ascending value (sort_values on a numeric
// column), each named f"{row['label']}" of an iterrows() row, where the
// label is upcast to float64 beside the float recall: Python's float repr.
func numericClassValues(values []float64, matches []Match) []Value {
	return classRates(matches, func(l int32) float64 { return values[l] + 0 }, // -0 and 0 are one class
		func(a, b float64) bool { return a < b }, PyFloatRepr)
}

// PyFloatRepr is Python's repr of a finite float: the shortest digits that
// read back, in fixed notation with ".0" when the decimal exponent is in
// [-4, 16), else in exponent notation ("1e+16", "1.5e-05").
func PyFloatRepr(v float64) string {
	e := strconv.FormatFloat(v, 'e', -1, 64)
	i := strings.IndexByte(e, 'e')
	exp, _ := strconv.Atoi(e[i+1:])
	if exp < -4 || exp >= 16 {
		return e
	}
	f := strconv.FormatFloat(v, 'f', -1, 64)
	if !strings.Contains(f, ".") {
		f += ".0"
	}
	return f
}

// matchImage is DeepForest's match_polygons for one image: the assignment
// that maximises total intersection area, one row per truth box (Match
// left false: the threshold applies in the reduction). DeepForest
// solves it with scipy on the dense truth × prediction matrix; canopy gives
// scipy's answer, ties and zero-overlap pairs included, from the
// overlapping pairs alone (lsap.AssignSparseMax), so memory grows with the boxes
// and the overlaps, not their product.
func matchImage(img int, truth []box.Truth, dets []box.Detection) ([]Match, error) {
	rows := make([]Match, len(truth))
	for t := range truth {
		rows[t] = Match{Image: img, TruthID: t, PredID: -1, TrueLabel: truth[t].Label, PredLabel: -1}
	}
	if len(dets) == 0 {
		return rows, nil
	}
	var col []int
	var err error
	if nt, np := len(truth), len(dets); nt*np <= denseMax {
		// a small image: the dense matrix is cheaper than the implicit one
		// and gives the same pairs (both are scipy's)
		inter := make([]float64, nt*np)
		for t := range truth {
			for p := range dets {
				inter[t*np+p] = Intersection(truth[t].Box, dets[p].Box)
			}
		}
		col, err = lsap.Assign(inter, nt, np, true)
	} else {
		col, err = lsap.AssignSparseMax(nt, np, overlapEntries(truth, dets))
	}
	if err != nil {
		return nil, err
	}
	for t, p := range col {
		if p < 0 {
			continue
		}
		r := &rows[t]
		r.PredID = p
		r.Score = dets[p].Score
		r.PredLabel = dets[p].Label
		r.IoU = IoU(truth[t].Box, dets[p].Box)
	}
	return rows, nil
}

// denseMax is the largest truth × detection matrix an image is matched on
// densely (8 KiB of float64).
const denseMax = 1024

// overlapEntries lists the truth × detection pairs of positive
// intersection area (row: truth index, column: detection index).
func overlapEntries(truth []box.Truth, dets []box.Detection) []lsap.Entry {
	db := make([]box.Box, len(dets))
	for k, d := range dets {
		db[k] = d.Box
	}
	ix := newOverlapIndex(db)
	return enumerate(len(truth), func(t int, yield func(lsap.Entry)) {
		ix.each(db, truth[t].Box, func(k int, area float64) { yield(lsap.Entry{Row: t, Col: k, Value: area}) })
	})
}

// Intersection is the area of the overlap of a and b (0 when they only
// touch or are apart).
func Intersection(a, b box.Box) float64 {
	w := math.Min(a.Xmax, b.Xmax) - math.Max(a.Xmin, b.Xmin)
	h := math.Min(a.Ymax, b.Ymax) - math.Max(a.Ymin, b.Ymin)
	if w <= 0 || h <= 0 {
		return 0
	}
	return float64(w * h)
}

// IoU is intersection over union, 0 when the union is empty.
func IoU(a, b box.Box) float64 { return iouFrom(Intersection(a, b), a, b) }

func iouFrom(inter float64, a, b box.Box) float64 {
	if inter == 0 {
		return 0 // DeepForest: pairs that do not overlap get IoU 0
	}
	union := float64(a.Area()) + float64(b.Area()) - inter
	if union <= 0 {
		return 0
	}
	return inter / union
}

// validationTruth applies what DeepForest's BoxDataset does to the ground
// truth before RecallPrecision sees it: boxes narrower or lower than one
// pixel (width or height computed in float32, as the dataset holds float32
// coordinates) are dropped, and an image left without boxes is an empty
// frame. (The dataset also clamps boxes to the image; replayed images are
// never opened, so canopy cannot, and out-of-image truth is left as is.)
func validationTruth(images []box.Image) []box.Image {
	out := images
	copied := false
	for i, im := range images {
		kept := make([]box.Truth, 0, len(im.Truth))
		drop := false
		for _, t := range im.Truth {
			w := float32(float32(t.Box.Xmax) - float32(t.Box.Xmin))
			h := float32(float32(t.Box.Ymax) - float32(t.Box.Ymin))
			if w >= 1 && h >= 1 {
				kept = append(kept, t)
			} else {
				drop = true
			}
		}
		if !drop {
			continue
		}
		if !copied {
			out = append([]box.Image(nil), images...)
			copied = true
		}
		out[i] = box.Image{Path: im.Path, Truth: kept, Empty: len(kept) == 0}
	}
	return out
}
