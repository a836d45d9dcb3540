package bound

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/canopy-hpc/canopy/infer/nn"
	"github.com/canopy-hpc/canopy/internal/testsupport/approx"
)

// TestWinoCoef: the signed Winograd coefficients reproduce the direct
// convolution (1 where m = i+k, 0 elsewhere), so WinoAbs uses the engine's
// matrices; their absolute values are at least that.
func TestWinoCoef(t *testing.T) {
	for _, tile := range []int{2, 4} {
		T, A := winoCoef(tile, false), winoCoef(tile, true)
		for i := 0; i < tile; i++ {
			for k := 0; k < 3; k++ {
				for m := 0; m < tile+2; m++ {
					want := 0.0
					if m == i+k {
						want = 1
					}
					if approx.Far(approx.Diff(T[i][k][m], want), 1e-12) || A[i][k][m] < want {
						t.Errorf("F(%d): T[%d][%d][%d] = %g (abs %g), want %g", tile, i, k, m, T[i][k][m], A[i][k][m], want)
					}
				}
			}
		}
	}
}

// TestBoundHolds: a float32 convolution summed in two orders (forward and
// backward over K) stays within Conv's bound of the float64 one, and
// WinoAbs is at least the direct Σ|w||x| (its coefficients include the
// direct ones); a perturbed output is outside.
func TestBoundHolds(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	c := &nn.Conv{Name: "t", Out: 8, In: 40, KH: 3, KW: 3, Stride: 1, Pad: 1, W: make([]float32, 8*40*9), B: make([]float32, 8)}
	for i := range c.W {
		c.W[i] = float32(r.NormFloat64() / 19)
	}
	h, w := 9, 7
	x := make([]float32, 40*h*w)
	x64 := make([]float64, len(x))
	for i := range x {
		x[i] = float32(r.NormFloat64())
		x64[i] = math.Abs(float64(x[i]))
	}
	sum32 := func(backward bool) []float32 {
		y := make([]float32, c.Out*h*w)
		for o := 0; o < c.Out; o++ {
			for p := 0; p < h*w; p++ {
				oy, ox := p/w, p%w
				var s float32
				for kk := 0; kk < c.In*9; kk++ {
					k := kk
					if backward {
						k = c.In*9 - 1 - kk
					}
					ci, ky, kx := k/9, k/3%3, k%3
					iy, ix := oy+ky-1, ox+kx-1
					if iy >= 0 && iy < h && ix >= 0 && ix < w {
						s += c.W[o*c.In*9+k] * x[(ci*h+iy)*w+ix]
					}
				}
				y[o*h*w+p] = s + c.B[o]
			}
		}
		return y
	}
	a, b := sum32(false), sum32(true)
	direct := Side{Name: "direct"}
	bd := Conv(c, h, w, direct, direct, x, x, nil, nil, b)
	if worst, bad := Within(b, a, bd); len(bad) > 0 {
		t.Fatalf("two summation orders: %d elements outside the bound (worst %.3g)", len(bad), worst)
	} else {
		t.Logf("two summation orders: |Δ|/bound up to %.3g", worst)
	}
	abs, wa := Conv64(c, x64, h, w, true), WinoAbs(c, x64, h, w, 4)
	for i := range abs {
		if wa[i] < abs[i]*(1-1e-12) {
			t.Fatalf("WinoAbs %g below the direct Σ|w||x| %g at %d", wa[i], abs[i], i)
		}
	}
	b[3] += float32(2 * bd[3])
	if _, bad := Within(b, a, bd); len(bad) != 1 || bad[0] != 3 {
		t.Fatalf("a perturbed element: outside %v, want [3]", bad)
	}
	b[5] = float32(math.NaN())
	if worst, bad := Within(b, a, bd); len(bad) != 2 || !math.IsInf(worst, 1) {
		t.Fatalf("a NaN: outside %v, worst %v", bad, worst)
	}
}
