package metrics

import (
	"math/rand/v2"
	"testing"

	"github.com/canopy-hpc/canopy/box"
)

// randomInput: n images of up to 8 truth boxes of three classes, with
// jittered, relabelled and spurious detections.
func randomInput(n int, seed uint64) Input {
	rng := rand.New(rand.NewPCG(seed, 1))
	in := Input{Labels: box.SortedLabelMap([]string{"a", "b", "c"})}
	for i := 0; i < n; i++ {
		im := box.Image{Path: string(rune('A'+i%26)) + string(rune('a'+i/26))}
		var dets []box.Detection
		for t := rng.IntN(8); t >= 0; t-- {
			x, y, s := rng.Float64()*300, rng.Float64()*300, 10+rng.Float64()*120
			b := box.Box{Xmin: x, Ymin: y, Xmax: x + s, Ymax: y + s}
			l := int32(rng.IntN(3))
			im.Truth = append(im.Truth, box.Truth{Box: b, Label: l})
			if rng.Float64() < 0.8 {
				j := s * 0.3 * (rng.Float64() - 0.5)
				d := box.Box{Xmin: b.Xmin + j, Ymin: b.Ymin - j, Xmax: b.Xmax + j, Ymax: b.Ymax}
				if rng.Float64() < 0.1 {
					l = (l + 1) % 3
				}
				dets = append(dets, box.Detection{Box: d, Label: l, Score: rng.Float64()})
			}
		}
		for f := rng.IntN(3); f > 0; f-- {
			x, y := rng.Float64()*300, rng.Float64()*300
			dets = append(dets, box.Detection{Box: box.Box{Xmin: x, Ymin: y, Xmax: x + 40, Ymax: y + 30}, Label: int32(rng.IntN(3)), Score: rng.Float64() * 0.6})
		}
		in.Images = append(in.Images, im)
		in.Dets = append(in.Dets, dets)
	}
	return in
}

// TestPRCurvesAreTheMAPArrays: the curves Compute returns are COCOeval's
// precision array, entry for entry, and averaging them as summarize does
// gives map_50 and map_75 bit for bit.
func TestPRCurvesAreTheMAPArrays(t *testing.T) {
	in := randomInput(60, 7)
	res, err := Compute(in, Options{IoUThreshold: 0.4}, All, false)
	if err != nil {
		t.Fatal(err)
	}
	idx := make([]int, len(in.Images))
	for i := range idx {
		idx[i] = i
	}
	recs, err := MatchImages(in, idx, MatchOptions{}, COCOmAP)
	if err != nil {
		t.Fatal(err)
	}
	ev := newCOCOEval(recs)
	if len(res.PR) != 2*len(ev.cats) {
		t.Fatalf("%d curves, want %d (3 classes at 2 IoUs)", len(res.PR), 2*len(ev.cats))
	}
	byIoU := map[float64][]PRCurve{}
	for _, c := range res.PR {
		ti := map[float64]int{0.5: 0, 0.75: 5}[c.IoU]
		k := int(c.Label) // labels are ids 0..2, every one present
		if len(c.Precision) != len(RecallThresholds()) {
			t.Fatalf("curve has %d points", len(c.Precision))
		}
		for r, p := range c.Precision {
			if want := ev.precisionAt(ti, r, k, 0); p != want {
				t.Fatalf("label %d IoU %v point %d: %v, precision array %v", c.Label, c.IoU, r, p, want)
			}
		}
		byIoU[c.IoU] = append(byIoU[c.IoU], c)
	}
	got := map[string]float64{}
	for _, v := range res.Values {
		got[v.Key] = v.V
	}
	for key, iou := range map[string]float64{"map_50": 0.5, "map_75": 0.75} {
		var s []float64 // summarize's order: recall threshold, then class
		for r := range cocoRecallThresholds {
			for _, c := range byIoU[iou] {
				s = append(s, c.Precision[r])
			}
		}
		if m := f32(meanOrMinus1(s)); m != got[key] || m <= 0 {
			t.Errorf("%s from the curves %v, reported %v", key, m, got[key])
		}
	}
	if vals := COCO(in, false); !metricsEqual(vals, res.Values[len(res.Values)-len(vals):]) {
		t.Error("COCO and Compute's COCO values differ")
	}
}

// metricsEqual compares values key by key and bit for bit.
func metricsEqual(a, b []Value) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Key != b[i].Key || a[i].V != b[i].V || a[i].Null != b[i].Null {
			return false
		}
	}
	return true
}
