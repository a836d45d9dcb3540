package retinanet

import (
	"math"
	"testing"

	"github.com/canopy-hpc/canopy/infer/nn"
	"github.com/canopy-hpc/canopy/infer/safetensors"
	"github.com/canopy-hpc/canopy/internal/testsupport/approx"
)

// Checkpoints stored in F16 or BF16 hold rounded weights, so their
// detections move. The bound: on the r18 fixture's images, every detection
// of the rounded model has a counterpart in the float32 model's (same label,
// IoU > 0.9) with a score within tolScore, and at least minFound of the
// float32 detections are found. Measured on this fixture: F16 moves scores
// by at most 2e-4 and finds 56/58 and 42/42; BF16 (8 mantissa bits) moves
// them by 2.4e-3 and finds 58/58 and 34/42 (DeepForest's NMS at 0.05 turns
// small box moves into other suppression choices). The bounds leave room
// for other CPUs' SGEMM rounding.
func TestRoundedWeightsDetectionsBound(t *testing.T) {
	g, ref := goldenModel(t, "r18.json")
	imgs, _ := goldenImages(t)
	w := goldenWeights(t, g)
	for _, c := range []struct {
		dtype    string
		round    func(float32) float32
		tolScore float64
		minFound float64
	}{
		{"F16", func(v float32) float32 { return safetensors.F16ToF32(safetensors.F32ToF16(v)) }, 1e-3, 0.9},
		{"BF16", func(v float32) float32 { return safetensors.BF16ToF32(safetensors.F32ToBF16(v)) }, 1e-2, 0.6},
	} {
		t.Run(c.dtype, func(t *testing.T) {
			rw := nn.Weights{}
			for k, v := range w {
				d := make([]float32, len(v.Data))
				for i, x := range v.Data {
					d[i] = c.round(x)
				}
				rw[k] = nn.Tensor{Shape: v.Shape, Data: d}
			}
			m, err := New(rw, goldenOptions(t, g))
			if err != nil {
				t.Fatal(err)
			}
			r, rr := NewRunner(ref, 2), NewRunner(m, 2)
			for i, img := range imgs[:2] {
				a, b := r.Detect(img), rr.Detect(img)
				found, worst := 0, 0.0
				for _, x := range b {
					best, bi := 0.0, -1
					for j, y := range a {
						if y.Label == x.Label {
							if iou := boxIoU(x.Box, y.Box); iou > best {
								best, bi = iou, j
							}
						}
					}
					if best <= 0.9 {
						continue
					}
					found++
					worst = max(worst, math.Abs(float64(x.Score-a[bi].Score)))
				}
				t.Logf("image %d: %d of %d float32 detections found, %d rounded; worst |Δscore| %.2g", i, found, len(a), len(b), worst)
				if approx.Far(worst, c.tolScore) {
					t.Errorf("image %d: score moved by %.3g > %g", i, worst, c.tolScore)
				}
				if float64(found) < c.minFound*float64(len(a)) {
					t.Errorf("image %d: only %d of %d detections found", i, found, len(a))
				}
			}
		})
	}
}

func boxIoU(a, b [4]float32) float64 {
	w := math.Max(0, math.Min(float64(a[2]), float64(b[2]))-math.Max(float64(a[0]), float64(b[0])))
	h := math.Max(0, math.Min(float64(a[3]), float64(b[3]))-math.Max(float64(a[1]), float64(b[1])))
	in := w * h
	u := float64((a[2]-a[0])*(a[3]-a[1])+(b[2]-b[0])*(b[3]-b[1])) - in
	if u <= 0 {
		return 0
	}
	return in / u
}
