package gemm

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/canopy-hpc/canopy/internal/testsupport/approx"
)

// Every clone of the point model's element-wise kernels gives the Go
// twins' bits (0 ulp), on rows of odd lengths and values from the tails.
func TestElementwiseMatchesGo(t *testing.T) { forEachClone(t, testElementwiseMatchesGo) }

func testElementwiseMatchesGo(t *testing.T) {
	r := rand.New(rand.NewPCG(46, 1))
	same := func(what string, a, b []float32) {
		t.Helper()
		for i := range a {
			if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
				t.Fatalf("%s: [%d] %v, Go %v", what, i, a[i], b[i])
			}
		}
	}
	for _, n := range []int{1, 7, 64, 257} {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(r.NormFloat64() * 4)
		}
		x[0] = -40
		a, b := append([]float32(nil), x...), append([]float32(nil), x...)
		GELURow(a)
		geluRowGo(b)
		same("gelu", a, b)
		a, b = append([]float32(nil), x...), append([]float32(nil), x...)
		for i := range a {
			a[i] *= 10
			b[i] *= 10
		}
		SoftmaxRow(a)
		softmaxRowGo(b)
		same("softmax", a, b)
	}
	h, w, c := 5, 6, 19
	x := make([]float32, h*w*c)
	for i := range x {
		x[i] = float32(r.NormFloat64())
	}
	wt, bias := make([]float32, 9*c), make([]float32, c)
	for i := range wt {
		wt[i] = float32(r.NormFloat64() * 0.3)
	}
	for i := range bias {
		bias[i] = float32(r.NormFloat64() * 0.1)
	}
	a, b := make([]float32, h*w*c), make([]float32, h*w*c)
	for y := 0; y < h; y++ {
		DWConvGELURow(x, h, w, c, wt, bias, y, a)
		dwconvGELURowGo(x, h, w, c, wt, bias, y, b)
	}
	same("dwconv", a, b)
}

// TestExpFast: e^x within its derived relative bound over [−300, 300], 0
// far below, ∞ far above.
func TestExpFast(t *testing.T) {
	// Relative to e^x, for |r| ≤ ln2/2 (+ 1e-12: the reduction's rounding):
	// the degree-8 Taylor remainder is below |r|⁹/9!·e^{2|r|} (2.9e-10·2);
	// r = x − n·ln2 is off by |n|·(ulp of the ln2 constant + one rounding of
	// n·ln2 ≤ 709) ≤ 1023·0.7·2⁻⁵³ + 709·2⁻⁵³ < 2e-13; Horner's 16 float64
	// roundings on a sum of condition e^{2|r|} ≤ 2 add 2·γ₁₆ < 4e-15; the
	// 2ⁿ scaling is exact; math.Exp itself is within 1 ulp (2⁻⁵²).
	hr := math.Ln2/2 + 1e-12
	tol := math.Pow(hr, 9)/362880*math.Exp(2*hr) + 2e-13 + 2*approx.Gamma(16, 0x1p-53) + 0x1p-52
	for i := -150000; i <= 150000; i++ {
		x := float64(i) * 2e-3
		want := math.Exp(x)
		if approx.Far(approx.Diff(ExpFast(x), want), tol*want) {
			t.Fatalf("ExpFast(%v) = %v, want %v", x, ExpFast(x), want)
		}
	}
	if ExpFast(-1e30) != 0 || ExpFast(0) != 1 || !math.IsInf(ExpFast(1e4), 1) {
		t.Fatalf("ExpFast(-1e30) %v, ExpFast(0) %v, ExpFast(1e4) %v", ExpFast(-1e30), ExpFast(0), ExpFast(1e4))
	}
}

// TestGELU: erf's GELU (not tanh's approximation, which differs by ~1e-4
// near ±2) within its documented bound, 7.5e-8·|x| plus one float32
// rounding, over [−10, 10].
func TestGELU(t *testing.T) {
	for i := -100000; i <= 100000; i++ {
		x := float32(i) * 1e-4
		want := 0.5 * float64(x) * (1 + math.Erf(float64(x)/math.Sqrt2))
		got := float64(GELU(x))
		if approx.Far(approx.Diff(got, want), 7.5e-8*math.Abs(float64(x))+0x1p-24*math.Abs(want)+1e-45) {
			t.Fatalf("GELU(%v) = %v, want %v", x, got, want)
		}
	}
	if GELU(-0.5) >= 0 || GELU(0) != 0 || GELU(30) != 30 {
		t.Fatalf("GELU(-0.5) %v, GELU(0) %v, GELU(30) %v", GELU(-0.5), GELU(0), GELU(30))
	}
}

// TestGELUSweepMatchesGo: the vectorized clones of GELU and the softmax
// (floor written out as floor_exact, both arms of each select computed
// first, exp's range selects on its scale) give the Go
// twin's bits on a sweep of 2²⁰ float32 values in [−64, 64] (lengths that
// leave vector tails), on the extremes and on NaN and ±∞; and on inputs
// whose reduction x·log₂e + ½ falls on a half-integer, where floor_exact's
// ties-to-even rounding must be corrected.
func TestGELUSweepMatchesGo(t *testing.T) { forEachClone(t, testGELUSweep) }

func testGELUSweep(t *testing.T) {
	const n = 1<<20 + 13
	x := make([]float32, n)
	for i := range x {
		x[i] = -64 + 128*float32(i)/n
	}
	copy(x, []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), 0, float32(math.Copysign(0, -1)),
		math.MaxFloat32, -math.MaxFloat32, math.SmallestNonzeroFloat32, -math.SmallestNonzeroFloat32, 37.5, -37.5})
	// −z² = (k − ½)·ln2 ⇒ the reduction is k exactly, or next to it
	for k := 1; k < 1000; k++ {
		z := math.Sqrt((float64(k) - 0.5) * math.Ln2)
		x[20+k] = float32(z * math.Sqrt2)
	}
	a, b := append([]float32(nil), x...), append([]float32(nil), x...)
	GELURow(a)
	geluRowGo(b)
	for i := range a {
		// a NaN is a NaN (its sign and payload are the hardware's)
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) && !(a[i] != a[i] && b[i] != b[i]) {
			t.Fatalf("gelu(%v): %v, Go %v", x[i], a[i], b[i])
		}
	}
	// the softmax (its exp vectorized too), with differences from the
	// maximum past −708 (×20: down to −2560), where exp_fast gives 0
	for _, scale := range []float32{1, 20} {
		s, g := make([]float32, 4088), make([]float32, 4088)
		for i := range s {
			s[i] = x[11+i*256] * scale
			g[i] = s[i]
		}
		SoftmaxRow(s)
		softmaxRowGo(g)
		for i := range s {
			if math.Float32bits(s[i]) != math.Float32bits(g[i]) {
				t.Fatalf("softmax ×%v [%d]: %v, Go %v", scale, i, s[i], g[i])
			}
		}
	}
}
