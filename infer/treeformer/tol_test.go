package treeformer

import (
	"math"
	"strconv"
	"testing"

	"github.com/canopy-hpc/canopy/internal/testsupport/approx"
	"github.com/canopy-hpc/canopy/internal/testsupport/pointmatch"
	"github.com/canopy-hpc/canopy/internal/testsupport/tftol"
)

// The tolerances against DeepForest's torch and between canopy's engines
// are derived in internal/testsupport/tftol (the command's tests use them
// too); these are a's.

// sumK is ΣK of a's deepest path (tftol.SumK).
func sumK(a Arch) int { return tftol.SumK(tftol.Arch(a)) }

// stageTol is the stage tolerance of two float32 sides (tftol.StageTol).
func stageTol(a Arch) float64 { return tftol.StageTol(tftol.Arch(a)) }

// relErr is max |got − want| over max |want|; +Inf on a NaN in got.
func relErr(got, want []float32, stride int) float64 {
	var worst, amax float64
	for i, x := range want {
		amax = max(amax, math.Abs(float64(x)))
		d := approx.Diff(float64(got[i*stride]), float64(x))
		if math.IsNaN(d) {
			return math.Inf(1)
		}
		worst = max(worst, d)
	}
	if amax == 0 {
		return worst
	}
	return worst / amax
}

func TestStageTolerances(t *testing.T) {
	if k := sumK(B3); k < 100_000 || k > 200_000 {
		t.Fatalf("ΣK of b3 is %d", k)
	}
	if tol := stageTol(B3); approx.Far(tol, 2e-4) || tol < 5e-5 {
		t.Fatalf("b3's stage tolerance %g", tol)
	}
}

// matchPoints pairs DeepForest's points with canopy's: same label, within
// 0.5 px, scores within tolScore (each of canopy's points used once, in
// DeepForest's order). It returns how many matched, canopy's extras and
// the largest score difference of a matched pair.
func matchPoints(got []Point, want []Point, tolScore float64) (matched, extra int, worst float64) {
	return pointmatch.Match(matchable(got), matchable(want), 0.5, tolScore)
}

func matchable(ps []Point) []pointmatch.P {
	out := make([]pointmatch.P, len(ps))
	for i, p := range ps {
		out[i] = pointmatch.P{Key: strconv.Itoa(p.Label), X: p.X, Y: p.Y, Score: float64(p.Score)}
	}
	return out
}

// scoreTol bounds |canopy's score − DeepForest's| for a point both find at
// the same cell: tftol.ScoreTol of stageTol.
func scoreTol(a Arch) float64 { return tftol.ScoreTol(stageTol(a)) }

// flipMargin is the smallest margin, in units of the map's maximum, by
// which a cell of density map dm (h×w) keeps its side of a decision of
// Peaks: a peak's distance to the threshold, or a cell above the
// threshold's distance below its (2d+1)² window's maximum (edges
// repeated). A point can appear or vanish between canopy and DeepForest
// only where this is below flipBound.
func flipMargin(dm []float32, h, w int, s PeakSettings) float64 {
	img := normalise(dm)
	lo, hi := img[0], img[0]
	for _, v := range img {
		lo, hi = min(lo, v), max(hi, v)
	}
	thr := float64(max(lo, s.ScoreThresh*hi))
	d := s.MinDistance
	at := func(r, c int) float32 { return img[min(max(r, 0), h-1)*w+min(max(c, 0), w-1)] }
	margin := math.Inf(1)
	for r := d; r < h-d; r++ {
		for c := d; c < w-d; c++ {
			v := at(r, c)
			wmax := v
			for dr := -d; dr <= d; dr++ {
				for dc := -d; dc <= d; dc++ {
					wmax = max(wmax, at(r+dr, c+dc))
				}
			}
			switch {
			case v == wmax:
				margin = min(margin, math.Abs(float64(v)-thr))
			case float64(v) > thr:
				margin = min(margin, float64(wmax-v))
			}
		}
	}
	return margin
}

// flipBound is the margin below which a decision of Peaks can differ
// between canopy's map and DeepForest's, within τ·M of each other (τ =
// stageTol): a cell against its window's maximum moves by 2τ (each value
// by τ), against the threshold (ScoreThresh·max, which moves by
// ScoreThresh·τ) by (1 + ScoreThresh)·τ ≤ 2τ; in normalised units, over
// M' ≥ M(1 − τ).
func flipBound(a Arch) float64 {
	tau := stageTol(a)
	return 2 * tau / (1 - tau)
}
