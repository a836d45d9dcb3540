package retinanet

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/canopy-hpc/canopy/infer/cuda"
	"github.com/canopy-hpc/canopy/infer/cuda/hostkern"
	"github.com/canopy-hpc/canopy/internal/testsupport/approx"
)

// Winograd F(2×2,3×3) and F(4×4,3×3) against the im2col path on odd and
// even sizes, with bias, residual and ReLU: equal within float32 rounding,
// |Δ| ≤ 5e-6·√in on outputs of O(1) for both (measured: F(4×4,3×3)
// 0.6–1.4e-5 for in = 32–256, F(2×2,3×3) 1.8–2.6e-6).
func TestWinogradMatchesDirect(t *testing.T) {
	defer func(old bool) { wino2Only = old }(wino2Only)
	r := rand.New(rand.NewPCG(7, 8))
	for _, s := range [][4]int{{16, 8, 5, 7}, {64, 32, 13, 13}, {32, 48, 24, 17}, {256, 256, 10, 9}, {64, 64, 8, 8}, {64, 48, 3, 5}} {
		in, out, h, w := s[0], s[1], s[2], s[3]
		c := &conv{name: "t", out: out, in: in, kh: 3, kw: 3, stride: 1, pad: 1,
			w: make([]float32, out*in*9), b: make([]float32, out)}
		for i := range c.w {
			c.w[i] = float32(r.NormFloat64() / math.Sqrt(float64(in*9)))
		}
		for i := range c.b {
			c.b[i] = float32(r.NormFloat64() * 0.1)
		}
		x, res := newFmap(in, h, w), newFmap(out, h, w)
		for i := range x.d {
			x.d[i] = float32(r.NormFloat64())
		}
		for i := range res.d {
			res.d[i] = float32(r.NormFloat64())
		}
		for _, only2 := range []bool{true, false} {
			wino2Only = only2
			tile := winoTile(c)
			if only2 != (tile == 2) {
				t.Fatalf("%v: winoTile %d with wino2Only %v", s, tile, only2)
			}
			for _, relu := range []bool{false, true} {
				dir := &engine{threads: 2, bufs: make([][]float32, 2), wino: make([]winoBufs, 2), direct: true}
				win := newEngine(3)
				a := dir.conv(c, x, relu, &res)
				b := win.conv(c, x, relu, &res)
				worst := 0.0
				for i := range a.d {
					if d := approx.Diff(float64(a.d[i]), float64(b.d[i])); approx.Far(d, worst) {
						worst = d // a NaN stays
					}
				}
				if approx.Far(worst, 5e-6*math.Sqrt(float64(in))) {
					t.Errorf("%v F(%d) relu=%v: worst |Δ| %.3g", s, tile, relu, worst)
				}
				t.Logf("%v F(%d) relu=%v: worst |Δ| %.3g", s, tile, relu, worst)
			}
		}
	}
}

// The separable max-pool equals the direct 3×3/stride-2/pad-1 definition,
// on odd and even sizes, including NaN propagation.
func TestMaxPoolMatchesDefinition(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, s := range [][2]int{{1, 1}, {1, 5}, {4, 1}, {7, 9}, {10, 10}, {13, 8}} {
		x := newFmap(3, s[0], s[1])
		for i := range x.d {
			x.d[i] = float32(r.NormFloat64())
		}
		x.d[len(x.d)/2] = float32(math.NaN())
		got := newEngine(2).maxpool3s2(x)
		for c := 0; c < x.c; c++ {
			for oy := 0; oy < got.h; oy++ {
				for ox := 0; ox < got.w; ox++ {
					want := float32(math.Inf(-1))
					nan := false
					for ky := -1; ky <= 1; ky++ {
						for kx := -1; kx <= 1; kx++ {
							iy, ix := 2*oy+ky, 2*ox+kx
							if iy < 0 || iy >= x.h || ix < 0 || ix >= x.w {
								continue
							}
							v := x.d[c*x.h*x.w+iy*x.w+ix]
							nan = nan || v != v
							want = max(want, v)
						}
					}
					g := got.d[c*got.h*got.w+oy*got.w+ox]
					if (nan && g == g) || (!nan && g != want) {
						t.Fatalf("%v c%d (%d,%d): %v, want %v (nan %v)", s, c, oy, ox, g, want, nan)
					}
				}
			}
		}
	}
}

// TestDetectorReleasesWeights: the CPU detector drops the 3×3 weights of
// every Winograd convolution once its filters exist (and keeps the rest),
// detects the same bytes as a Runner that keeps them, makes only the
// filters of the tile each layer uses, and refuses a GPU runner afterwards.
func TestDetectorReleasesWeights(t *testing.T) {
	g := readGolden(t, "r18.json")
	fresh := func() *Model {
		m, err := New(goldenWeights(t, g), goldenOptions(t, g))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	keep, rel := fresh(), fresh()
	d, err := NewDetector(rel, 2, make([]int32, rel.Classes))
	if err != nil {
		t.Fatal(err)
	}
	if !rel.Released() || keep.Released() {
		t.Fatalf("Released: detector's model %v, runner's %v", rel.Released(), keep.Released())
	}
	for _, c := range rel.convs() {
		if useWinograd(c) != (c.w == nil) {
			t.Fatalf("%s: Winograd %v, weights kept %v", c.name, useWinograd(c), c.w != nil)
		}
	}
	if rel.CPUFilterBytes() != 0 {
		t.Fatalf("CPUFilterBytes after the filters = %d", rel.CPUFilterBytes())
	}
	img := forestSet.imageAt(t, 0)
	want := fmt.Sprintf("%#v", NewRunner(keep, 1).Detect(img))
	if got := fmt.Sprintf("%#v", d.r.Detect(img)); got != want || len(want) < 100 {
		t.Fatalf("released model detects other bytes:\n%s\nwant\n%s", got, want)
	}
	// Only the filters of the tile in use exist (F(2×2,3×3)'s as well
	// would cost 16 more floats per 3×3 filter).
	for _, c := range rel.convs() {
		if useWinograd(c) && (len(c.wino.u) > 0) != (winoTile(c) == 2) || (len(c.wino.u4) > 0) != (useWinograd(c) && winoTile(c) == 4) {
			t.Fatalf("%s (tile %d): F(2×2) filters %d, F(4×4) filters %d", c.name, winoTile(c), len(c.wino.u), len(c.wino.u4))
		}
	}
	if _, err := NewGPURunnerWith(rel, hostkern.New(), GPUOptions{Precision: cuda.Exact}); !errors.Is(err, errReleased) {
		t.Fatalf("GPU runner on a released model: %v", err)
	}
}

// TestBalancedBlock: a layer's tiles are cut into at most full-wide
// blocks, no more of them than the fewest full-wide blocks
// rounded up to minBlocks, the last not much narrower than the others (two
// or four workers finish together; plain full-wide blocks, 1000 tiles as
// 5×192 + 40, fail).
func TestBalancedBlock(t *testing.T) {
	for _, full := range []int{96, 192} {
		for n := 1; n <= 5000; n++ {
			b := balancedBlock(n, full)
			k := (n + b - 1) / b
			if b > full || b < 1 {
				t.Fatalf("balancedBlock(%d, %d) = %d", n, full, b)
			}
			if want := (n + full - 1) / full; k < want || k > (want+minBlocks-1)/minBlocks*minBlocks {
				t.Fatalf("balancedBlock(%d, %d) = %d: %d blocks", n, full, b, k)
			}
			if last := n - (k-1)*b; k > 1 && last < b-k {
				t.Fatalf("balancedBlock(%d, %d) = %d: last block %d of %d", n, full, b, last, b)
			}
		}
	}
}
