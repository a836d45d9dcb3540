package eval

import (
	"math"
	"testing"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/internal/output"
)

// The losses are the means over the images in float64, val_loss each
// image's sum first; one image without losses makes all three null.
func TestLossValues(t *testing.T) {
	ls := []*box.Loss{{Classification: 1, BoxRegression: 0.5}, {Classification: 3}}
	v := LossValues(ls)
	if v[0].Key != KeyValClassification || v[0].V != 2 || v[1].Key != KeyValBoxRegression || v[1].V != 0.25 || v[2].Key != KeyValLoss || v[2].V != 2.25 {
		t.Fatalf("%+v", v)
	}
	v = LossValues([]*box.Loss{ls[0], nil})
	if !math.IsNaN(v[2].V) || output.FormatValue(v[2]) != "null" {
		t.Fatalf("a missing loss: %+v", v)
	}
}
