// Package tftol holds the derived tolerances of the point model's
// (TreeFormer's) tests: one engine's density map and scores against
// another's, or against DeepForest's torch (float32 CPU, other summation
// orders and blockings; bit equality is not expected). infer/treeformer's
// tests and the command's tests (package main) both hold canopy to them.
//
// Each side's float32 result differs from the exact one by a random walk
// of roundings: about u·√ΣK relative to the magnitude of the values, ΣK
// the reduction lengths summed along the deepest path to the tensor
// (Higham, Accuracy and Stability, §2.7's statistical estimate; each
// LayerNorm and BatchNorm keeps magnitudes near one, so errors add rather
// than multiply). Two independent sides give √2, four standard deviations
// 4:  tol = 4·√2·u·√ΣK, u = 2⁻²⁴, compared relative to the tensor's
// largest magnitude.
package tftol

import "math"

// Arch is treeformer.Arch field for field (convert with tftol.Arch(a)):
// the shape of the PvT-v2 TreeFormer the bounds depend on. It is a copy,
// not an import, so that treeformer's own tests can use this package.
type Arch struct {
	Name                                 string
	Depths, Widths, Heads, MLPRatios, SR [4]int
}

// u is float32's unit roundoff.
const u = 0x1p-24

// SumK is ΣK: per block the query and key/value GEMMs (C each), the
// spatial reduction (r²·C), the scores (head width d) and the context (M ≤
// 256 keys for a 512 window), the output projection (C), fc1 (C), the
// depthwise conv (9) and fc2 (hidden); per stage the patch embedding
// (in·k²) and the 1×1 projection; then the decoder's chain of 3×3 convs
// from stage 4 to the map (each 9·in, the ChannelAttention convs too).
// GELU's erf formula (Abramowitz–Stegun, absolute error < 1.5e-7, so
// about one ulp of its input) and the float64 exp of the softmax add one
// rounding each: inside the per-GEMM rounding already counted.
// The full b3 model: ΣK ≈ 1.5·10⁵ (151,247), StageTol ≈ 1.3·10⁻⁴; the one-block
// model (treeformer.Tiny) ΣK ≈ 4.9·10⁴ (49,399), StageTol ≈ 7.5·10⁻⁵. (Measured
// against DeepForest: at most 6·10⁻⁶ on either.)
func SumK(a Arch) int {
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

// StageTol is the tolerance of a traced stage or the density map between
// two float32 computations of a's network in different orders, relative to
// the tensor's largest magnitude: 4·√2·u·√ΣK.
func StageTol(a Arch) float64 {
	return 4 * math.Sqrt2 * u * math.Sqrt(float64(SumK(a)))
}

// TF32StageTol is the stage tolerance of the cuDNN TF32 path against a
// float32 side: StageTol's part plus the TF32 operands. Under tf32 every
// convolution (the linears as 1×1 convs) rounds its inputs and weights to
// TF32 (10 mantissa bits, cvt.rna: relative error at most 2⁻¹¹ each), so
// each product is off by up to 2·2⁻¹¹, uniformly distributed, standard
// deviation 2·2⁻¹¹/√3 relative; summed with random signs over K products
// the output's error is that times √(Σ(ab)²), which is about the output's
// own magnitude times the same 2·2⁻¹¹/√3 (the sum of K terms of random
// sign is √K times a term). Each layer adds one such relative error;
// LayerNorm and BatchNorm keep magnitudes near one, so along the deepest
// path of L TF32 layers they add as a random walk, √L of them; four
// standard deviations, relative to the tensor's largest value (as
// StageTol): 4·√L·2⁻¹⁰/√3. L counts per stage the embedding, per block
// the query, spatial-reduction, key/value, output, fc1 and fc2 convs, and
// the projection, then the decoder's 8 convs. (The attention's GEMMs are
// canopy's FP32 kernel: in StageTol's part.) Tiny: L = 40, about 1.4e-2.
func TF32StageTol(a Arch) float64 {
	l := 8
	for i := 0; i < 4; i++ {
		l += 2 + 6*a.Depths[i]
	}
	return StageTol(a) + 4*math.Sqrt(float64(l))*0x1p-10/math.Sqrt(3)
}

// ScoreTol bounds |one side's score − the other's| for a point both find
// at the same cell, when the two density maps are within τ of each other
// relative to the map's maximum (StageTol or TF32StageTol: τ already
// counts both sides' roundings). A score is s = v/M, the cell's density v
// over the map's maximum M (float32 division, one rounding u on each
// side). One side's v' = v + e₁ and M' = M + e₂ with |e₁|, |e₂| ≤ τM (the
// maximum moves by at most the largest change, wherever it lies):
//
//	|v'/M' − v/M| = |M·e₁ − v·e₂| / (M·(M + e₂)) ≤ τ(1 + s)/(1 − τ) ≤ 2τ/(1 − τ),
//
// and with the two divisions' roundings, 2τ/(1 − τ) + 2u (s ≤ 1). For
// the b3 model against DeepForest, τ ≈ 1.3·10⁻⁴ and the bound is ≈
// 2.6·10⁻⁴ (issue 46's bar was 1e-3; measured: 4.8·10⁻⁶).
func ScoreTol(tau float64) float64 { return 2*tau/(1-tau) + 2*u }
