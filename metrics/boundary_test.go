package metrics

import (
	"fmt"
	"testing"

	"github.com/canopy-hpc/canopy/box"
)

// The boundary rules of each family, on inputs where the rule alone decides
// the value (the peer fixtures in testdata/golden check the rest):
// DeepForest matches on IoU strictly above the threshold; torchmetrics' IoU
// keeps entries at or above it; COCO matches at IoU >= t and reads the
// precision at the first recall >= each recall threshold; equal scores
// keep their order; empty frames count as DeepForest's two definitions say.

func valueMap(vals []Value) map[string]string {
	m := map[string]string{}
	for _, v := range vals {
		if v.Null {
			m[v.Key] = "null"
		} else {
			m[v.Key] = fmt.Sprint(v.V)
		}
	}
	return m
}

func checkValues(t *testing.T, what string, got []Value, want map[string]string) {
	t.Helper()
	g := valueMap(got)
	if len(g) != len(want) {
		t.Errorf("%s: %v, want %v", what, g, want)
		return
	}
	for k, w := range want {
		if g[k] != w {
			t.Errorf("%s: %s = %s, want %s (all: %v)", what, k, g[k], w, g)
		}
	}
}

func deepForest(t *testing.T, in Input, thr float64, sem Semantics) Result {
	t.Helper()
	r, err := DeepForest(in, Options{IoUThreshold: thr, Semantics: sem})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// halfOverlap is one truth box and one detection whose IoU is exactly 0.5
// (intersection 2, union 4) and another pair at exactly 0.25.
func halfOverlap() Input {
	return Input{
		Images: []box.Image{
			{Path: "a", Truth: []box.Truth{{Box: box.Box{Xmin: 0, Ymin: 0, Xmax: 4, Ymax: 1}}}},
			{Path: "b", Truth: []box.Truth{{Box: box.Box{Xmin: 0, Ymin: 0, Xmax: 4, Ymax: 1}}}},
		},
		Dets: [][]box.Detection{
			{{Box: box.Box{Xmin: 0, Ymin: 0, Xmax: 2, Ymax: 1}, Score: 0.9}},
			{{Box: box.Box{Xmin: 3, Ymin: 0, Xmax: 4, Ymax: 1}, Score: 0.8}},
		},
		Labels: oneClass(),
	}
}

// TestDeepForestIoUAtThreshold: a match needs IoU > threshold; IoU equal
// to it is no match, in both semantics, in the match table and the values.
func TestDeepForestIoUAtThreshold(t *testing.T) {
	in := halfOverlap()
	for _, sem := range []Semantics{Validation, EvaluateBoxes} {
		for _, c := range []struct {
			thr     float64
			matches [2]bool
			recall  string
		}{
			{0.5, [2]bool{false, false}, "0"},
			{0.4999999999999999, [2]bool{true, false}, "0.5"},
			{0.25, [2]bool{true, false}, "0.5"},
			{0.2499999999999999, [2]bool{true, true}, "1"},
		} {
			r := deepForest(t, in, c.thr, sem)
			if len(r.Matches) != 2 {
				t.Fatalf("%s thr %v: %d match rows", sem, c.thr, len(r.Matches))
			}
			for i, m := range r.Matches {
				if want := []float64{0.5, 0.25}[i]; m.IoU != want || m.PredID != 0 {
					t.Errorf("%s: image %d IoU %v pred %d, want %v pred 0", sem, i, m.IoU, m.PredID, want)
				}
				if m.Match != c.matches[i] {
					t.Errorf("%s thr %v: image %d (IoU %v) match %v, want %v", sem, c.thr, i, m.IoU, m.Match, c.matches[i])
				}
			}
			want := map[string]string{"box_recall": c.recall, "box_precision": c.recall}
			if sem == EvaluateBoxes && c.matches[0] {
				// compute_class_recall over the matched rows only
				want["Tree_Recall"], want["Tree_Precision"] = "1", "1"
			}
			checkValues(t, fmt.Sprintf("%s thr %v", sem, c.thr), r.Values, want)
		}
	}
}

// TestDeepForestClassesAtThreshold: the per-class values count only rows
// that match, so a pair at exactly the threshold is left out of them.
func TestDeepForestClassesAtThreshold(t *testing.T) {
	in := halfOverlap()
	in.Labels = box.SortedLabelMap([]string{"Dead", "Tree"})
	in.Images[1].Truth[0].Label = 1
	in.Dets[1][0].Label = 1
	r := deepForest(t, in, 0.25, EvaluateBoxes)
	checkValues(t, "two classes at 0.25", r.Values, map[string]string{
		"box_recall": "0.5", "box_precision": "0.5", "Dead_Recall": "1", "Dead_Precision": "1",
	})
	r = deepForest(t, in, 0.2, Validation)
	checkValues(t, "two classes at 0.2", r.Values, map[string]string{
		"box_recall": "1", "box_precision": "1", "Dead_Recall": "1", "Dead_Precision": "1", "Tree_Recall": "1", "Tree_Precision": "1",
	})
}

// TestIoUFamilyAtThreshold: torchmetrics keeps an entry whose float32 IoU
// equals the float32 threshold, and drops it just above.
func TestIoUFamilyAtThreshold(t *testing.T) {
	in := halfOverlap()
	checkValues(t, "iou at 0.5", IntersectionOverUnion(in, 0.5), map[string]string{"iou": "0.5", "iou/cl_0": "0.5"})
	checkValues(t, "iou at 0.25", IntersectionOverUnion(in, 0.25), map[string]string{"iou": "0.375", "iou/cl_0": "0.375"})
	checkValues(t, "iou above 0.5", IntersectionOverUnion(in, 0.50000006), map[string]string{"iou": "0", "iou/cl_0": "0"})
}

// TestCOCOAtThresholds: IoU exactly 0.5 matches at the 0.5 threshold only;
// a recall of exactly 0.5 reaches the recall threshold 0.5 (searchsorted
// left: 51 of the 101 thresholds); equal scores keep their order (a false
// positive listed first costs precision, listed second does not).
func TestCOCOAtThresholds(t *testing.T) {
	coco := func(in Input) map[string]string { return valueMap(COCO(in, false)) }
	in := halfOverlap()
	in.Images, in.Dets = in.Images[:1], in.Dets[:1]
	g := coco(in)
	tenth := fmt.Sprint(float64(float32(0.1))) // torchmetrics returns float32
	if g["map_50"] != "1" || g["map_75"] != "0" || g["map"] != tenth {
		t.Errorf("IoU exactly 0.5: map_50 %s map_75 %s map %s, want 1, 0, %s", g["map_50"], g["map_75"], g["map"], tenth)
	}
	in.Dets[0][0].Box.Xmax = 1.9999999 // IoU just under 0.5
	if g := coco(in); g["map_50"] != "0" {
		t.Errorf("IoU just under 0.5: map_50 %s, want 0", g["map_50"])
	}

	sq := box.Box{Xmin: 0, Ymin: 0, Xmax: 10, Ymax: 10}
	far := box.Box{Xmin: 50, Ymin: 50, Xmax: 60, Ymax: 60}
	two := Input{
		Images: []box.Image{{Path: "a", Truth: []box.Truth{{Box: sq}, {Box: far}}}},
		Dets:   [][]box.Detection{{{Box: sq, Score: 0.9}}},
		Labels: oneClass(),
	}
	if g, w := coco(two), fmt.Sprint(float64(float32(51.0/101))); g["map_50"] != w || g["mar_100"] != "0.5" {
		t.Errorf("recall exactly 0.5: map_50 %s (want 51/101 = %s), mar_100 %s (want 0.5)", g["map_50"], w, g["mar_100"])
	}

	miss := box.Box{Xmin: 20, Ymin: 20, Xmax: 30, Ymax: 30}
	tie := func(dets ...box.Box) Input {
		in := Input{Images: []box.Image{{Path: "a", Truth: []box.Truth{{Box: sq}}}}, Dets: [][]box.Detection{nil}, Labels: oneClass()}
		for _, b := range dets {
			in.Dets[0] = append(in.Dets[0], box.Detection{Box: b, Score: 0.5})
		}
		return in
	}
	if g := coco(tie(miss, sq)); g["map_50"] != "0.5" {
		t.Errorf("tied scores, false positive first: map_50 %s, want 0.5", g["map_50"])
	}
	if g := coco(tie(sq, miss)); g["map_50"] != "1" {
		t.Errorf("tied scores, true positive first: map_50 %s, want 1", g["map_50"])
	}
}

// TestEmptyFrames: DeepForest's two definitions on empty frames. validation
// counts every image: an empty frame with predictions adds a precision-0
// image and lowers empty_frame_accuracy; truth narrower than 1 px is
// dropped, leaving an empty frame. evaluate_boxes counts only images with
// truth and has no empty-frame key.
func TestEmptyFrames(t *testing.T) {
	sq := box.Box{Xmin: 0, Ymin: 0, Xmax: 10, Ymax: 10}
	det := []box.Detection{{Box: sq, Score: 0.9}}
	sliver := []box.Truth{{Box: box.Box{Xmin: 0, Ymin: 0, Xmax: 0.5, Ymax: 10}}}
	for _, c := range []struct {
		name       string
		images     []box.Image
		dets       [][]box.Detection
		validation map[string]string
		evaluate   map[string]string
	}{
		{"truth, correct empty, empty with a prediction",
			[]box.Image{{Path: "a", Truth: []box.Truth{{Box: sq}}}, {Path: "b", Empty: true}, {Path: "c", Empty: true}},
			[][]box.Detection{det, nil, det},
			map[string]string{"box_recall": "1", "box_precision": "0.5", "empty_frame_accuracy": "0.5"},
			map[string]string{"box_recall": "1", "box_precision": "1", "Tree_Recall": "1", "Tree_Precision": "1"}},
		{"only empty frames, no predictions",
			[]box.Image{{Path: "a", Empty: true}, {Path: "b", Empty: true}},
			[][]box.Detection{nil, nil},
			map[string]string{"box_recall": "null", "box_precision": "null", "empty_frame_accuracy": "1"},
			map[string]string{"box_recall": "0", "box_precision": "null"}},
		{"only empty frames, one prediction",
			[]box.Image{{Path: "a", Empty: true}, {Path: "b", Empty: true}},
			[][]box.Detection{nil, det},
			map[string]string{"box_recall": "null", "box_precision": "0", "empty_frame_accuracy": "0.5"},
			map[string]string{"box_recall": "null", "box_precision": "0"}},
		{"truth without predictions",
			[]box.Image{{Path: "a", Truth: []box.Truth{{Box: sq}}}, {Path: "b", Truth: []box.Truth{{Box: sq}}}},
			[][]box.Detection{det, nil},
			map[string]string{"box_recall": "0.5", "box_precision": "1"},
			map[string]string{"box_recall": "0.5", "box_precision": "1", "Tree_Recall": "1", "Tree_Precision": "1"}},
		{"a sliver narrower than 1 px",
			[]box.Image{{Path: "a", Truth: sliver}},
			[][]box.Detection{nil},
			map[string]string{"box_recall": "null", "box_precision": "null", "empty_frame_accuracy": "1"},
			map[string]string{"box_recall": "0", "box_precision": "null"}},
	} {
		in := Input{Images: c.images, Dets: c.dets, Labels: oneClass()}
		checkValues(t, c.name+" (validation)", deepForest(t, in, 0.4, Validation).Values, c.validation)
		checkValues(t, c.name+" (evaluate_boxes)", deepForest(t, in, 0.4, EvaluateBoxes).Values, c.evaluate)
	}
}

// TestCOCOAreaRanges: in an area range, a detection matched to ground
// truth outside the range, and an unmatched detection outside it, are
// ignored (neither true nor false positives); a range without ground truth
// is -1.
func TestCOCOAreaRanges(t *testing.T) {
	small := box.Box{Xmin: 0, Ymin: 0, Xmax: 20, Ymax: 20}        // 400 px²
	large := box.Box{Xmin: 100, Ymin: 100, Xmax: 200, Ymax: 200}  // 10,000 px²
	medium := box.Box{Xmin: 300, Ymin: 300, Xmax: 350, Ymax: 350} // 2,500 px², matches nothing
	in := Input{
		Images: []box.Image{{Path: "a", Truth: []box.Truth{{Box: small}, {Box: large}}}},
		Dets:   [][]box.Detection{{{Box: medium, Score: 0.95}, {Box: large, Score: 0.9}, {Box: small, Score: 0.8}}},
		Labels: oneClass(),
	}
	g := valueMap(COCO(in, false))
	for k, w := range map[string]string{"map_small": "1", "mar_small": "1", "map_large": "1", "mar_large": "1", "map_medium": "-1", "mar_medium": "-1"} {
		if g[k] != w {
			t.Errorf("%s = %s, want %s (all: %v)", k, g[k], w, g)
		}
	}
}

// TestCOCOClassMetrics: with class metrics, map_per_class is each class's
// mean over the ten IoU thresholds and mar_100_per_class its recall at 100
// detections, in class order.
func TestCOCOClassMetrics(t *testing.T) {
	sq := box.Box{Xmin: 0, Ymin: 0, Xmax: 10, Ymax: 10}
	in := Input{
		Images: []box.Image{{Path: "a", Truth: []box.Truth{{Box: sq, Label: 0}, {Box: sq, Label: 1}}}},
		// class 1's detection has IoU 0.64: a match at 0.5, 0.55 and 0.6 only
		Dets:   [][]box.Detection{{{Box: sq, Score: 0.9, Label: 0}, {Box: box.Box{Xmin: 0, Ymin: 0, Xmax: 10, Ymax: 6.4}, Score: 0.9, Label: 1}}},
		Labels: box.SortedLabelMap([]string{"Dead", "Tree"}),
	}
	got := map[string]string{}
	for _, v := range COCO(in, true) {
		got[v.Key] = fmt.Sprint(v.Array, v.Ints)
	}
	p3 := float64(float32(0.3))
	for k, w := range map[string]string{
		"map_per_class": fmt.Sprint([]float64{1, p3}, []int(nil)), "mar_100_per_class": fmt.Sprint([]float64{1, p3}, []int(nil)),
		"classes": fmt.Sprint([]float64(nil), []int{0, 1}),
	} {
		if got[k] != w {
			t.Errorf("%s = %s, want %s", k, got[k], w)
		}
	}
}

// TestParseFamilies: the --metrics values, and an empty selection refused.
func TestParseFamilies(t *testing.T) {
	for s, want := range map[string]Family{"recall": Recall, "coco,iou": COCOmAP | IoUMean, " all ": All, "recall,,iou": Recall | IoUMean} {
		if f, err := ParseFamilies(s); err != nil || f != want {
			t.Errorf("%q: %v %v, want %v", s, f, err, want)
		}
	}
	for _, s := range []string{"", ",", "map"} {
		if f, err := ParseFamilies(s); err == nil {
			t.Errorf("%q accepted as %v", s, f)
		}
	}
}
