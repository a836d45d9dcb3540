// Package approx holds the tests' numeric comparisons. Each one fails on a
// NaN or an infinity: `d > bound` is false when d is NaN, so a test written
// that way passes on the very values a wrong program gives (0/0, ∞−∞).
// Tests compare through Far and ULPs32, never with a bare `> bound`.
package approx

import "math"

// Far reports whether the difference d is not within bound: d > bound, or
// d is NaN. (An infinite d is far from any finite bound.)
func Far(d, bound float64) bool { return !(d <= bound) }

// Diff is |a − b|, NaN when either is NaN and +Inf when either is infinite
// (even two equal infinities: a value that overflowed is never "close").
func Diff(a, b float64) float64 {
	if math.IsInf(a, 0) || math.IsInf(b, 0) {
		return math.Inf(1)
	}
	return math.Abs(a - b)
}

// ULPs32 is |a − b| in float32 units in the last place of the larger of
// |a| and |b|; +Inf when either is NaN or infinite, 0 only when a == b.
func ULPs32(a, b float32) float64 {
	fa, fb := float64(a), float64(b)
	if math.IsNaN(fa) || math.IsNaN(fb) || math.IsInf(fa, 0) || math.IsInf(fb, 0) {
		return math.Inf(1)
	}
	if a == b {
		return 0
	}
	m := max(abs32(a), abs32(b))
	u := float64(math.Nextafter32(m, float32(math.Inf(1))) - m)
	return math.Abs(fa-fb) / u
}

func abs32(x float32) float32 { return math.Float32frombits(math.Float32bits(x) &^ (1 << 31)) }
