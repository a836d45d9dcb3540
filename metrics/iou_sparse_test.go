package metrics

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/internal/testsupport/boxgen"
)

// intersectionOverUnionDense is the former IntersectionOverUnion, which
// lists every valid entry of every image's full prediction × truth matrix:
// the reference the sparse one must equal bit for bit.
func intersectionOverUnionDense(in Input, thr float64) []Value {
	images := validationTruth(in.Images)
	t32 := float32(thr)
	var all []float32             // every valid entry, image by image (torch.cat order)
	clsSum := map[int32]float32{} // per class: float32 sum of per-image sums
	clsN := map[int32]int64{}
	seen := map[int32]bool{}
	passed := 0
	var col []float32
	for i, im := range images {
		if im.Empty || len(im.Truth) == 0 {
			continue
		}
		passed++
		dets := in.Dets[i]
		for _, t := range im.Truth {
			seen[t.Label] = true
		}
		for _, d := range dets {
			seen[d.Label] = true
		}
		if len(dets) == 0 {
			// zeros(M, M) with eye(M) as the label mask: M valid zeros
			for _, t := range im.Truth {
				all = append(all, 0)
				clsN[t.Label]++
			}
			continue
		}
		// The matrix is preds × gt, row-major: valid entries in that order.
		for _, d := range dets {
			for _, t := range im.Truth {
				if d.Label != t.Label {
					continue
				}
				if v := boxIoU32(d.Box, t.Box); !(v < t32) {
					all = append(all, v)
				}
			}
		}
		// Per class c: mat[:, gt == c], the valid entries summed per image.
		done := map[int32]bool{}
		for _, t := range im.Truth {
			c := t.Label
			if done[c] {
				continue
			}
			done[c] = true
			col = col[:0]
			for _, d := range dets {
				for _, g := range im.Truth {
					if g.Label != c || d.Label != c {
						continue
					}
					if v := boxIoU32(d.Box, g.Box); !(v < t32) {
						col = append(col, v)
					}
				}
			}
			clsSum[c] = float32(clsSum[c] + torchSum32(col))
			clsN[c] += int64(len(col))
		}
	}
	if passed == 0 {
		return nil
	}
	// the means and keys are the implementation's (only the sums and
	// counts are under test)
	return iouValues(torchSum32(all), int64(len(all)), clsSum, clsN, seen)
}

// genInput makes images of tied integer boxes in two or three labels, some
// without predictions, some empty, with the truth under one pixel that
// DeepForest's dataset drops.
func genInput(rng *rand.Rand, nImages, maxBoxes int) Input {
	var in Input
	for i := 0; i < nImages; i++ {
		nt, np := rng.IntN(maxBoxes), rng.IntN(maxBoxes)
		if rng.IntN(6) == 0 {
			np = 0
		}
		grid := 4 + rng.IntN(40)
		tb := boxgen.Boxes(rng, nt, grid, 1+rng.IntN(10), nil)
		pb := boxgen.Boxes(rng, np, grid, 1+rng.IntN(10), tb)
		im := box.Image{Path: fmt.Sprintf("img%03d.png", i), Empty: nt == 0}
		for _, b := range tb {
			if rng.IntN(15) == 0 {
				b.Xmax = b.Xmin + 0.5 // dropped by the dataset filter
			}
			im.Truth = append(im.Truth, box.Truth{Box: b, Label: int32(rng.IntN(3))})
		}
		var dets []box.Detection
		for _, b := range pb {
			if rng.IntN(3) == 0 {
				b.Ymax += rng.Float64()
			}
			dets = append(dets, box.Detection{Box: b, Score: float64(rng.IntN(5)) / 5, Label: int32(rng.IntN(3))})
		}
		in.Images = append(in.Images, im)
		in.Dets = append(in.Dets, dets)
	}
	return in
}

// TestIoUSparseEqualsDense: the torchmetrics IoU family from the
// overlapping pairs alone (zeros counted, not stored) equals the dense
// listing bit for bit, at thresholds where zeros count (≤ 0) and above.
func TestIoUSparseEqualsDense(t *testing.T) {
	rng := rand.New(rand.NewPCG(10, 11))
	for trial := 0; trial < 400; trial++ {
		in := genInput(rng, 1+rng.IntN(6), 3+rng.IntN(40))
		if trial%50 == 0 { // one big image: the sums cross cascade flushes
			in = genInput(rng, 1, 400)
		}
		for _, thr := range []float64{0, -1, 1e-60, 0.25, 0.4, 0.5} {
			want, got := intersectionOverUnionDense(in, thr), IntersectionOverUnion(in, thr)
			if len(got) != len(want) {
				t.Fatalf("trial %d thr %v: %v, dense %v", trial, thr, got, want)
			}
			for k := range want {
				if got[k].Key != want[k].Key || math.Float64bits(got[k].V) != math.Float64bits(want[k].V) {
					t.Fatalf("trial %d thr %v: %v, dense %v", trial, thr, got, want)
				}
			}
		}
	}
}

// TestCOCOMatchableEqualsDense: the candidates COCO's evaluateImg scans,
// found through the overlap index, are exactly the entries >= 0.5 of the
// full IoU matrix, in annotation order, crowd regions included.
func TestCOCOMatchableEqualsDense(t *testing.T) {
	rng := rand.New(rand.NewPCG(12, 13))
	for trial := 0; trial < 1000; trial++ {
		in := genInput(rng, 1, 3+rng.IntN(40))
		var gts, dts []cocoBox
		for _, g := range in.Images[0].Truth {
			b := toCOCO(g.Box, g.Label, 0)
			b.crowd = rng.IntN(5) == 0
			gts = append(gts, b)
		}
		for _, d := range in.Dets[0] {
			dts = append(dts, toCOCO(d.Box, d.Label, d.Score))
		}
		got := matchable(dts, gts)
		for d := range dts {
			var want []gtIoU
			for g := range gts {
				if v := bbIoU(dts[d], gts[g]); v >= cocoIoUThresholds[0] {
					want = append(want, gtIoU{int32(g), v})
				}
			}
			if fmt.Sprint(got[d]) != fmt.Sprint(want) {
				t.Fatalf("trial %d detection %d: %v, dense %v", trial, d, got[d], want)
			}
		}
	}
}
