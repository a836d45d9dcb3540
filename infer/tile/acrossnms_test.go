package tile

import (
	"encoding/json"
	"math"
	"os"
	"testing"

	"github.com/canopy-hpc/canopy/box"
)

// acrossFixture is testdata/across_nms.json (tools/deepforest/across_nms.py).
type acrossFixture struct {
	Peer  map[string]any
	Cases []struct {
		Image        string
		IoUThreshold float64 `json:"iou_threshold"`
		Raw          [][6]uint64
		Rows         [][6]any
	}
}

var acrossLabels = map[string]int32{"Alive": 0, "Dead": 1}

// LoadAcrossFixture reads the fixture: per image, the detections
// DeepForest's predict_image handed across_class_nms (exact float32 bits)
// and the rows predict_image returned.
func loadAcrossFixture(t *testing.T) acrossFixture {
	t.Helper()
	b, err := os.ReadFile("testdata/across_nms.json")
	if err != nil {
		t.Fatal(err)
	}
	var fx acrossFixture
	if err := json.Unmarshal(b, &fx); err != nil {
		t.Fatal(err)
	}
	if len(fx.Cases) < 2 {
		t.Fatalf("across_nms.json holds %d cases, want 2", len(fx.Cases))
	}
	return fx
}

func f32(bits uint64) float64 { return float64(math.Float32frombits(uint32(bits))) }

// TestAcrossClassNMSDeepForest: DeepForest 2.1.0's own detections of a
// two-label R50 on two NEON images, through AcrossClassNMS at
// predict_image's nms_thresh, give predict_image's rows exactly: the same
// rows in the same order, integer coordinates, labels, scores to the bit.
func TestAcrossClassNMSDeepForest(t *testing.T) {
	fx := loadAcrossFixture(t)
	suppressed := 0
	for _, c := range fx.Cases {
		dets := make([]box.Detection, len(c.Raw))
		for i, r := range c.Raw {
			dets[i] = box.Detection{Box: box.Box{Xmin: f32(r[0]), Ymin: f32(r[1]), Xmax: f32(r[2]), Ymax: f32(r[3])},
				Label: int32(r[4]), Score: f32(r[5])}
		}
		got := AcrossClassNMS(dets, c.IoUThreshold)
		suppressed += len(dets) - len(got)
		if len(got) != len(c.Rows) {
			t.Errorf("%s: %d rows, predict_image %d (from %d detections)", c.Image, len(got), len(c.Rows), len(dets))
			continue
		}
		bad := 0
		for i, w := range c.Rows {
			want := box.Detection{Box: box.Box{Xmin: w[0].(float64), Ymin: w[1].(float64), Xmax: w[2].(float64), Ymax: w[3].(float64)},
				Label: acrossLabels[w[4].(string)], Score: w[5].(float64)}
			if _, ok := acrossLabels[w[4].(string)]; !ok {
				t.Fatalf("%s row %d: label %q", c.Image, i, w[4])
			}
			if got[i] != want {
				if bad++; bad <= 5 {
					t.Errorf("%s row %d: got %+v, predict_image %+v", c.Image, i, got[i], want)
				}
			}
		}
		if bad > 0 {
			t.Errorf("%s: %d of %d rows differ", c.Image, bad, len(got))
		}
		t.Logf("%s: %d detections, %d rows (predict_image %d)", c.Image, len(dets), len(got), len(c.Rows))
	}
	if suppressed == 0 {
		t.Errorf("no case suppresses a row: the fixture tests only the cast")
	}
}

// TestAcrossClassNMSOneLabel: one label (or fewer than two rows) leaves the
// detections as the detector gave them, float boxes included; two labels
// cast every kept box, even with nothing suppressed, and keep a row of
// either label whichever scores higher.
func TestAcrossClassNMSOneLabel(t *testing.T) {
	d := func(x, s float64, l int32) box.Detection {
		return box.Detection{Box: box.Box{Xmin: x, Ymin: 1.75, Xmax: x + 10.5, Ymax: 12.25}, Label: l, Score: s}
	}
	one := []box.Detection{d(0.5, 0.9, 1), d(1.5, 0.8, 1), d(100.5, 0.7, 1)}
	if got := AcrossClassNMS(one, 0.05); len(got) != 3 || got[1] != one[1] {
		t.Errorf("one label: %+v, want the input", got)
	}
	if got := AcrossClassNMS(nil, 0.05); len(got) != 0 {
		t.Errorf("no rows: %+v", got)
	}
	two := []box.Detection{d(0.5, 0.7, 0), d(1.5, 0.8, 1), d(100.5, 0.9, 0)}
	got := AcrossClassNMS(two, 0.05)
	want := []box.Detection{
		{Box: box.Box{Xmin: 100, Ymin: 1, Xmax: 111, Ymax: 12}, Label: 0, Score: float64(float32(0.9))},
		{Box: box.Box{Xmin: 1, Ymin: 1, Xmax: 12, Ymax: 12}, Label: 1, Score: float64(float32(0.8))},
	}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("two labels: got %+v, want %+v", got, want)
	}
}
