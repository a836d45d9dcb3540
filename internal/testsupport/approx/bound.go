package approx

import "math"

// Rounding-error bounds for tests that compare two implementations of one
// float computation (two engines, two ISAs, two kernel paths, canopy and a
// peer). Each side's result is within its own bound of the exact value, so
// the two differ by at most the sum of the two bounds, whatever order each
// sums in. The bounds are Higham's (Accuracy and Stability of Numerical
// Algorithms, 2nd ed., §3.1): a sum or dot product of n terms evaluated in
// any order, each rounded operation exact to a relative u, satisfies
//
//	|fl(Σ tᵢ) − Σ tᵢ| ≤ γₙ · Σ |tᵢ|,   γₙ = n·u / (1 − n·u),
//
// relative to the sum of the terms' magnitudes, not to the result: where
// the terms cancel, the error relative to the result is unbounded, which is
// why the tests normalise by Σ|terms| and never by the mean |x|.

// Unit roundoffs (half an ulp of 1) of the formats the engines compute in.
const (
	// U32 is float32's: 24-bit significands.
	U32 = 0x1p-24
	// UTF32 is TF32's, the tensor cores' operand format: 11-bit
	// significands (10 stored), rounded to nearest.
	UTF32 = 0x1p-11
	// UBF16 is bfloat16's: 8-bit significands (7 stored).
	UBF16 = 0x1p-8
)

// Gamma is γₙ for unit roundoff u: the relative bound of n rounded
// operations in a row (a sum or dot product of n terms in any order, FMA or
// not). It is +Inf when n·u ≥ 1 (no bound).
func Gamma(n int, u float64) float64 {
	nu := float64(n) * u
	if nu >= 1 {
		return math.Inf(1)
	}
	return nu / (1 - nu)
}

// Gamma32 is Gamma(n, U32).
func Gamma32(n int) float64 { return Gamma(n, U32) }

// Chain is the relative bound of a value that went through steps each
// exact to a relative b: (1+b₁)(1+b₂)… − 1 (rounded operands, then a
// rounded dot product, then a rounded store).
func Chain(bs ...float64) float64 {
	p := 1.0
	for _, b := range bs {
		p *= 1 + b
	}
	return p - 1
}
