package metrics

import (
	"math"
	"slices"
	"testing"

	"github.com/canopy-hpc/canopy/box"
)

// TestSweepEqualsSeparateRuns: one matching at the lowest threshold,
// reduced at each threshold of a list, gives the values of a separate
// Compute at that threshold, bit for bit, under both semantics; the
// thresholds include 0 (zero-IoU pairs count in the IoU family) and two
// float64 values that round to one float32.
func TestSweepEqualsSeparateRuns(t *testing.T) {
	in := randomInput(80, 11)
	// an empty frame, an image without detections, one under 1 pixel
	in.Images = append(in.Images, box.Image{Path: "empty", Empty: true},
		box.Image{Path: "nodets", Truth: []box.Truth{{Box: box.Box{Xmin: 1, Ymin: 1, Xmax: 30, Ymax: 30}, Label: 2}}},
		box.Image{Path: "thin", Truth: []box.Truth{{Box: box.Box{Xmin: 1, Ymin: 1, Xmax: 1.5, Ymax: 30}, Label: 1}}})
	in.Dets = append(in.Dets, []box.Detection{{Box: box.Box{Xmax: 5, Ymax: 5}, Score: 0.5}}, nil,
		[]box.Detection{{Box: box.Box{Xmin: 1, Ymin: 1, Xmax: 1.5, Ymax: 30}, Label: 1, Score: 0.7}})
	thrs := []float64{0.5, 0, 0.3, 0.5000000001, 0.75, 0.95}
	idx := make([]int, len(in.Images))
	for i := range idx {
		idx[i] = i
	}
	for _, sem := range []Semantics{Validation, EvaluateBoxes} {
		recs, err := MatchImages(in, idx, MatchOptions{Semantics: sem, MinIoU: slices.Min(thrs)}, All)
		if err != nil {
			t.Fatal(err)
		}
		f := Frame{Images: in.Images, Labels: in.Labels}
		sweep, err := ReduceSweep(f, recs, Options{Semantics: sem}, All, thrs)
		if err != nil {
			t.Fatal(err)
		}
		distinct := map[float64]bool{}
		for k, thr := range thrs {
			want, err := Compute(in, Options{IoUThreshold: thr, Semantics: sem}, Recall|IoUMean, false)
			if err != nil {
				t.Fatal(err)
			}
			got := sweep[k]
			if len(got) != len(want.Values) {
				t.Fatalf("%v at %v: %d values, want %d", sem, thr, len(got), len(want.Values))
			}
			for j, w := range want.Values {
				if g := got[j]; g.Key != w.Key || g.Null != w.Null || math.Float64bits(g.V) != math.Float64bits(w.V) {
					t.Fatalf("%v at %v: %s = %v, a separate run gives %v", sem, thr, g.Key, g.V, w.V)
				}
				if w.Key == "iou" {
					distinct[w.V] = true
				}
			}
		}
		if len(distinct) < 4 {
			t.Fatalf("the thresholds give only %d distinct iou values: the sweep test does not discriminate", len(distinct))
		}
		// the first threshold's full result (match table, COCO) is Reduce's
		full, err := Reduce(f, recs, Options{IoUThreshold: thrs[0], Semantics: sem}, All, false)
		if err != nil {
			t.Fatal(err)
		}
		want, err := Compute(in, Options{IoUThreshold: thrs[0], Semantics: sem}, All, false)
		if err != nil {
			t.Fatal(err)
		}
		if len(full.Matches) != len(want.Matches) || len(full.Values) != len(want.Values) {
			t.Fatalf("%v: reduce at the first threshold differs from Compute", sem)
		}
		for j := range want.Matches {
			if full.Matches[j] != want.Matches[j] {
				t.Fatalf("%v: row %d is %+v, want %+v", sem, j, full.Matches[j], want.Matches[j])
			}
		}
	}
}
