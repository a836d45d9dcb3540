package approx

import (
	"math"
	"testing"
)

func TestFar(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	for _, c := range []struct {
		d, bound float64
		far      bool
	}{
		{0, 0, false}, {1e-4, 1e-3, false}, {1e-3, 1e-3, false}, {1.0001e-3, 1e-3, true},
		{nan, 1e-3, true}, {nan, inf, true}, {inf, 1e-3, true}, {-inf, 1e-3, false},
	} {
		if got := Far(c.d, c.bound); got != c.far {
			t.Errorf("Far(%v, %v) = %v, want %v", c.d, c.bound, got, c.far)
		}
	}
	if !Far(Diff(inf, inf), 1e300) || !Far(Diff(nan, 1), 1) || !Far(Diff(1, -inf), 1) {
		t.Error("Diff of a non-finite value passes a bound")
	}
	if d := Diff(1, 1.5); d != 0.5 {
		t.Errorf("Diff(1, 1.5) = %v", d)
	}
	if d := Diff(-2, 1); d != 3 {
		t.Errorf("Diff(-2, 1) = %v", d)
	}
}

func TestULPs32(t *testing.T) {
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	one := float32(1)
	next := math.Nextafter32(one, 2)
	for _, c := range []struct {
		a, b float32
		want float64
	}{
		{one, one, 0}, {one, next, 1}, {next, one, 1}, {-one, -next, 1},
		{0, 0, 0}, {3, 3 + 2*(math.Nextafter32(3, 4)-3), 2},
		{nan, one, math.Inf(1)}, {one, nan, math.Inf(1)}, {nan, nan, math.Inf(1)},
		{inf, one, math.Inf(1)}, {inf, inf, math.Inf(1)}, {-inf, one, math.Inf(1)},
	} {
		if got := ULPs32(c.a, c.b); got != c.want {
			t.Errorf("ULPs32(%v, %v) = %v, want %v", c.a, c.b, got, c.want)
		}
		if Far(ULPs32(c.a, c.b), 8) != math.IsInf(c.want, 1) {
			t.Errorf("ULPs32(%v, %v) within 8 ulps: %v", c.a, c.b, !Far(ULPs32(c.a, c.b), 8))
		}
	}
}

func TestGamma(t *testing.T) {
	if g := Gamma32(1); g != U32/(1-U32) {
		t.Errorf("Gamma32(1) = %g", g)
	}
	// γ₁₀₀₀ for float32: 1000·2⁻²⁴/(1−1000·2⁻²⁴) ≈ 5.96e-5.
	if g := Gamma32(1000); Far(Diff(g, 5.9608e-5), 1e-9) {
		t.Errorf("Gamma32(1000) = %g", g)
	}
	if g := Gamma(1<<11, UTF32); !math.IsInf(g, 1) {
		t.Errorf("Gamma(2048, 2⁻¹¹) = %g, want +Inf (no bound)", g)
	}
	if c := Chain(UTF32, UTF32, 0); Far(Diff(c, 2*UTF32+UTF32*UTF32), 1e-18) {
		t.Errorf("Chain = %g", c)
	}
}
