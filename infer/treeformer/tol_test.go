package treeformer

import (
	"math"
	"strconv"
	"testing"

	"github.com/canopy-hpc/canopy/internal/testsupport/approx"
	"github.com/canopy-hpc/canopy/internal/testsupport/pointmatch"
)

// Tolerances against DeepForest's torch (float32 CPU, other summation
// orders and blockings; bit equality is not expected).
//
// Each side's float32 result differs from the exact one by a random walk
// of roundings: about u·√ΣK relative to the magnitude of the values, ΣK
// the reduction lengths summed along the deepest path to the tensor
// (Higham, Accuracy and Stability, §2.7's statistical estimate; each
// LayerNorm and BatchNorm keeps magnitudes near one, so errors add rather
// than multiply). Two independent sides give √2, four standard deviations
// 4:  tol = 4·√2·u·√ΣK, u = 2⁻²⁴, compared relative to the tensor's
// largest magnitude.
//
// ΣK (sumK) counts per block the query and key/value GEMMs (C each), the
// spatial reduction (r²·C), the scores (head width d) and the context (M ≤
// 256 keys for a 512 window), the output projection (C), fc1 (C), the
// depthwise conv (9) and fc2 (hidden); per stage the patch embedding
// (in·k²) and the 1×1 projection; then the decoder's chain of 3×3 convs
// from stage 4 to the map (each 9·in, the ChannelAttention convs too).
// GELU's erf formula (Abramowitz–Stegun, absolute error < 1.5e-7, so
// about one ulp of its input) and the float64 exp of the softmax add one
// rounding each: inside the per-GEMM rounding already counted.
// The full b3 model: ΣK ≈ 1.4·10⁵, tol ≈ 1.3·10⁻⁴; the one-block fixture
// ΣK ≈ 3.4·10⁴, tol ≈ 6.2·10⁻⁵. (Measured: at most 6·10⁻⁶ on either.)
func sumK(a Arch) int {
	k := 0
	in := 3
	for i := 0; i < 4; i++ {
		c, r := a.Widths[i], a.SR[i]
		ek := 9
		if i == 0 {
			ek = 49
		}
		k += in*ek + a.Widths[i] // embedding and projection
		d := c / a.Heads[i]
		per := c + c + d + 256 + c + c + 9 + c*a.MLPRatios[i]
		if r > 1 {
			per += r * r * c
		}
		k += a.Depths[i] * per
		in = c
	}
	for _, c := range []int{1024, 512, 256, 512, 256, 128, 128, 64} {
		k += 9 * c
	}
	return k
}

func stageTol(a Arch) float64 {
	return 4 * math.Sqrt2 * 0x1p-24 * math.Sqrt(float64(sumK(a)))
}

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
// the same cell. A score is s = v/M, the cell's density v over the map's
// maximum M (float32 division, one rounding u on each side). canopy's map
// is within τ·M of DeepForest's (τ = stageTol, relative to the largest
// magnitude, both sides' roundings counted), so canopy's v' = v + e₁ and
// M' = M + e₂ with |e₁|, |e₂| ≤ τM (the maximum moves by at most the
// largest change, wherever it lies):
//
//	|v'/M' − v/M| = |M·e₁ − v·e₂| / (M·(M + e₂)) ≤ τ(1 + s)/(1 − τ) ≤ 2τ/(1 − τ),
//
// and with the two divisions' roundings, 2τ/(1 − τ) + 2u (s ≤ 1). For
// the b3 model, τ ≈ 1.3·10⁻⁴ and the bound is ≈ 2.6·10⁻⁴ (the issue's
// bar was 1e-3; measured: 4.8·10⁻⁶).
func scoreTol(a Arch) float64 {
	tau := stageTol(a)
	return 2*tau/(1-tau) + 2*0x1p-24
}

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
