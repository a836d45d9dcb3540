package metrics

import (
	"testing"

	"github.com/canopy-hpc/canopy/box"
)

func oneClass() box.LabelMap { return box.SortedLabelMap([]string{"Tree"}) }

// Hand-checked cases of COCOeval's rules (the peer-made fixtures in
// testdata/golden/coco cover the rest).
func TestCOCOPerfectAndAbsent(t *testing.T) {
	b := box.Box{Xmin: 0, Ymin: 0, Xmax: 32, Ymax: 32} // area exactly 32²: small and medium
	in := Input{
		Images: []box.Image{{Path: "a", Truth: []box.Truth{{Box: b}}}},
		Dets:   [][]box.Detection{{{Box: b, Score: 0.9}}},
		Labels: oneClass(),
	}
	got := map[string]float64{}
	for _, v := range COCO(in, false) {
		got[v.Key] = v.V
	}
	for _, k := range []string{"map", "map_50", "map_75", "map_small", "map_medium", "mar_1", "mar_100", "mar_small", "mar_medium"} {
		if got[k] != 1 {
			t.Errorf("%s = %v, want 1 (one perfect detection; area 1024 is both small and medium)", k, got[k])
		}
	}
	if got["map_large"] != -1 || got["mar_large"] != -1 {
		t.Errorf("no large truth: map_large %v mar_large %v, want -1", got["map_large"], got["mar_large"])
	}
	empty := Input{Images: []box.Image{{Path: "e", Empty: true}}, Dets: [][]box.Detection{{{Box: b, Score: 1}}}, Labels: oneClass()}
	if v := COCO(empty, false); v != nil {
		t.Errorf("only empty frames: %v, want no COCO keys", v)
	}
	if v := IntersectionOverUnion(empty, 0.4); v != nil {
		t.Errorf("only empty frames: %v, want no IoU keys", v)
	}
}

// torchmetrics IoU: no one-to-one matching, and an image without
// predictions adds one valid 0 per truth box.
func TestIoUSemantics(t *testing.T) {
	g := box.Box{Xmin: 0, Ymin: 0, Xmax: 10, Ymax: 10}
	in := Input{
		Images: []box.Image{{Path: "a", Truth: []box.Truth{{Box: g}}}, {Path: "b", Truth: []box.Truth{{Box: g}, {Box: g}}}},
		Dets:   [][]box.Detection{{{Box: g, Score: 1}, {Box: g, Score: 0.5}}, nil},
		Labels: oneClass(),
	}
	v := IntersectionOverUnion(in, 0.4)
	// entries: 1, 1 (both predictions on the one truth), then 0, 0
	if v[0].Key != "iou" || v[0].V != 0.5 {
		t.Fatalf("%v, want iou 0.5", v)
	}
}
