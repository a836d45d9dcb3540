package metrics

import (
	"testing"

	"github.com/canopy-hpc/canopy/box"
)

// The point assignment is global: a far pair changes which near pairs win
// (a nearest-neighbour matcher would pair truth 0 with prediction 0).
func TestMatchPointsGlobal(t *testing.T) {
	truth := []box.Geo{{Point: box.Point{X: 0, Y: 0}}, {Point: box.Point{X: 9, Y: 0}}}
	preds := []box.Geo{{Point: box.Point{X: 5, Y: 0}}, {Point: box.Point{X: 100, Y: 0}}}
	rows, err := matchPoints(0, truth, preds, 10)
	if err != nil {
		t.Fatal(err)
	}
	// total 5+91 = 96 beats 4+100 = 104
	if rows[0].PredID != 0 || rows[1].PredID != 1 || rows[0].Distance != 5 || rows[1].Distance != 91 {
		t.Fatalf("rows %+v", rows)
	}
	if !rows[0].Match.Match || rows[1].Match.Match {
		t.Fatalf("match flags %+v", rows)
	}
}

// PointDistance rounds each product: 3-4-5 exactly, and the float32
// rounding of validation coordinates happens before it.
func TestPointDistance(t *testing.T) {
	if d := PointDistance(box.Point{X: 3, Y: 0}, box.Point{X: 0, Y: 4}); d != 5 {
		t.Fatalf("3-4-5: %v", d)
	}
	im := box.GeoImage{Truth: []box.Geo{{Point: box.Point{X: 0.1, Y: 0.2}}, {Point: box.Point{X: 30, Y: 5}}}, Width: 20, Height: 20}
	got := validationPoints(im)
	if len(got) != 1 || got[0].Point.X != float64(float32(0.1)) {
		t.Fatalf("validationPoints %+v", got)
	}
}
