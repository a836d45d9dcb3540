package cpu

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/canopy-hpc/canopy/infer/nn"
	"github.com/canopy-hpc/canopy/internal/testsupport/bound"
)

// TestWinogradBoundCatchesPlantedBugs: TestWinogradMatchesDirect's derived
// bound is tight enough to fail on wrong transformed filters (U): two
// entries swapped (|Δ|/bound 105 measured), one filter's 36 components
// ×(1+2⁻¹⁰) (1.6) or ×(1+2⁻⁶) (26). (One component ×1.01 reaches 0.28 of
// the bound and is not caught: the worst case of F(4×4,3×3)'s transforms
// is that wide.) Unchanged, |Δ|/bound is 0.0014.
func TestWinogradBoundCatchesPlantedBugs(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	in, out, h, w := 64, 32, 13, 13
	x := NewFmap(in, h, w)
	for i := range x.D {
		x.D[i] = float32(r.NormFloat64())
	}
	scale := func(f float32) func(u []float32, n int) {
		return func(u []float32, n int) {
			for xi := 0; xi < 36; xi++ {
				for i := 0; i < in; i++ {
					u[xi*n+i] *= f
				}
			}
		}
	}
	for _, p := range []struct {
		name   string
		plant  func(u []float32, n int)
		caught bool
	}{
		{"none", func([]float32, int) {}, false},
		{"two entries swapped", func(u []float32, n int) { u[5*n], u[5*n+1] = u[5*n+1], u[5*n] }, true},
		{"a filter ×(1+2⁻¹⁰)", scale(1 + 0x1p-10), true},
		{"a filter ×(1+2⁻⁶)", scale(1 + 0x1p-6), true},
	} {
		c := &nn.Conv{Name: "t", Out: out, In: in, KH: 3, KW: 3, Stride: 1, Pad: 1, W: make([]float32, out*in*9), B: make([]float32, out)}
		rw := rand.New(rand.NewPCG(1, 1))
		for i := range c.W {
			c.W[i] = float32(rw.NormFloat64() / math.Sqrt(float64(in*9)))
		}
		if !UseWinograd(c) || WinoTile(c) != 4 {
			t.Fatal("the layer does not run as F(4×4,3×3)")
		}
		p.plant(c.WinogradU4(), out*in)
		dir := &Engine{threads: 2, bufs: make([][]float32, 2), wino: make([]winoBufs, 2), Direct: true}
		a, b := dir.Conv(c, x, false, nil), NewEngine(2).Conv(c, x, false, nil)
		wino := bound.Side{Name: "winograd", Tile: func(*nn.Conv) int { return 4 }}
		worst, bad := bound.Within(b.D, a.D, bound.Conv(c, h, w, wino, bound.Side{Name: "im2col"}, x.D, x.D, nil, nil, a.D))
		if (len(bad) > 0) != p.caught {
			t.Errorf("%s: %d elements outside the bound (|Δ|/bound up to %.3g), want caught %v", p.name, len(bad), worst, p.caught)
		}
		t.Logf("%s: %d elements outside, |Δ|/bound up to %.3g", p.name, len(bad), worst)
	}
}
