package metrics

import (
	"runtime"
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

// manyClasses: n images, each with per truth boxes and a detection on
// each, labels cycling over k classes (so most classes own one or two
// boxes, as a label column of free text gives).
func manyClasses(n, per, k int) Input {
	var in Input
	row := 0
	for i := 0; i < n; i++ {
		var im box.Image
		var ds []box.Detection
		for j := 0; j < per; j++ {
			x, y := float64(j*7%300), float64(j*13%300)
			im.Truth = append(im.Truth, box.Truth{Box: box.Box{Xmin: x, Ymin: y, Xmax: x + 20, Ymax: y + 30}, Label: int32(row % k)})
			ds = append(ds, box.Detection{Box: box.Box{Xmin: x + 1, Ymin: y, Xmax: x + 21, Ymax: y + 30}, Label: int32(row % k), Score: float64(j%10) / 10})
			row++
		}
		in.Images = append(in.Images, im)
		in.Dets = append(in.Dets, ds)
	}
	return in
}

// The COCO stage allocates no more than COCOMemory estimates, counted
// before the stage, with many classes: the (category, image) pairs exist
// only where a box is, and precision is kept only where it is read and
// defined (a dense [K × images] table and the full precision array took
// 20 GB at 100,000 classes). Checked by the bytes the stage allocates in
// all (runtime.MemStats.TotalAlloc), an upper bound of its peak.
func TestCOCOMemoryBoundedByEstimate(t *testing.T) {
	for _, k := range []int{10, 5000} {
		in := manyClasses(500, 20, k)
		est := COCOMemory(in)
		if est.Classes != k || est.Images != 500 || est.Boxes != 20000 {
			t.Fatalf("%d classes: estimate counted %+v", k, est)
		}
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		vals := COCO(in, true)
		runtime.ReadMemStats(&after)
		used := int64(after.TotalAlloc - before.TotalAlloc)
		if used > est.Bytes {
			t.Errorf("%d classes: the COCO stage allocated %d bytes, over its estimate of %d", k, used, est.Bytes)
		}
		if len(vals) == 0 || vals[0].Key != "map" || !(vals[0].V > 0) {
			t.Fatalf("%d classes: %+v", k, vals[:1])
		}
		t.Logf("%d classes: allocated %.1f MiB, estimated %.1f MiB", k, float64(used)/(1<<20), float64(est.Bytes)/(1<<20))
	}
}
