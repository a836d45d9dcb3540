package gemm

import "math"

// FMA32 is a·b+c rounded once to float32 (to nearest, ties to even), as the
// FMA instruction computes it. float32(math.FMA(...)) would round twice
// (to float64, then to float32), which is wrong when the float64 result
// falls exactly halfway between two float32s; here the float64 sum's exact
// error (a·b is exact in float64; TwoSum gives the rest) decides that case.
func FMA32(a, b, c float32) float32 {
	p := float64(a) * float64(b)
	s := p + float64(c)
	// Fast path: rounding the float64 sum to float32 rounds the exact value
	// the same way unless the sum fell exactly on a float32 midpoint (its
	// 29 low mantissa bits 1000…0; float64 has 29 more bits than float32),
	// for sums in float32's normal range (biased exponent 897 and up; Inf
	// and NaN round to themselves).
	if bits := math.Float64bits(s); bits&(1<<29-1) != 1<<28 && (bits>>52)&0x7ff >= 897 {
		return float32(s)
	}
	r := float32(s)
	if math.IsInf(s, 0) || math.IsNaN(s) || float64(r) == s {
		return r // exact in float32, or not finite: one rounding is right
	}
	bv := s - p
	e := (p - (s - bv)) + (float64(c) - bv)
	if e == 0 {
		return r
	}
	other := math.Nextafter32(r, float32(math.Inf(1)))
	if float64(r) > s {
		other = math.Nextafter32(r, float32(math.Inf(-1)))
	}
	if (float64(r)+float64(other))/2 != s {
		return r // s is not a tie: rounding it rounds the exact value
	}
	if (e > 0) == (other > r) {
		return other
	}
	return r
}
