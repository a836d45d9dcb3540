package cpu

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/canopy-hpc/canopy/infer/gemm"
	"github.com/canopy-hpc/canopy/infer/nn"
	"github.com/canopy-hpc/canopy/internal/testsupport/bound"
)

// Winograd F(2×2,3×3) and F(4×4,3×3) against the im2col path on odd and
// even sizes, with bias, residual and ReLU: every element within the bound
// derived from the two paths' arithmetic (internal/testsupport/bound:
// γ_{in+15} (F(4×4)) or γ_{in+9} (F(2×2)) of the absolute-value Winograd
// product, plus γ_{9·in+2} of Σ|w||x| + |b| + |res| for im2col + SGEMM in
// any blocking, OpenBLAS's kernels of any ISA or gonum's). It replaces a
// fixed |Δ| ≤ 5e-6·√in tuned on one machine (measured there: F(4×4,3×3)
// 0.6–1.4e-5 for in = 32–256, F(2×2,3×3) 1.8–2.6e-6).
func TestWinogradMatchesDirect(t *testing.T) {
	defer func(old bool) { Wino2Only = old }(Wino2Only)
	r := rand.New(rand.NewPCG(7, 8))
	for _, s := range [][4]int{{16, 8, 5, 7}, {64, 32, 13, 13}, {32, 48, 24, 17}, {256, 256, 10, 9}, {64, 64, 8, 8}, {64, 48, 3, 5}} {
		in, out, h, w := s[0], s[1], s[2], s[3]
		c := &nn.Conv{Name: "t", Out: out, In: in, KH: 3, KW: 3, Stride: 1, Pad: 1,
			W: make([]float32, out*in*9), B: make([]float32, out)}
		for i := range c.W {
			c.W[i] = float32(r.NormFloat64() / math.Sqrt(float64(in*9)))
		}
		for i := range c.B {
			c.B[i] = float32(r.NormFloat64() * 0.1)
		}
		x, res := NewFmap(in, h, w), NewFmap(out, h, w)
		for i := range x.D {
			x.D[i] = float32(r.NormFloat64())
		}
		for i := range res.D {
			res.D[i] = float32(r.NormFloat64())
		}
		for _, only2 := range []bool{true, false} {
			Wino2Only = only2
			tile := WinoTile(c)
			if only2 != (tile == 2) {
				t.Fatalf("%v: winoTile %d with wino2Only %v", s, tile, only2)
			}
			for _, relu := range []bool{false, true} {
				dir := &Engine{threads: 2, bufs: make([][]float32, 2), wino: make([]winoBufs, 2), Direct: true}
				win := NewEngine(3)
				a := dir.Conv(c, x, relu, &res)
				b := win.Conv(c, x, relu, &res)
				wino := bound.Side{Name: "winograd", Tile: func(*nn.Conv) int { return tile }}
				lim := bound.Conv(c, h, w, wino, bound.Side{Name: "im2col"}, x.D, x.D, res.D, res.D, a.D)
				worst, bad := bound.Within(a.D, b.D, lim)
				if len(bad) > 0 {
					t.Errorf("%v F(%d) relu=%v: %d elements outside the derived bound, |Δ|/bound up to %.3g", s, tile, relu, len(bad), worst)
				}
				t.Logf("%v F(%d) relu=%v: |Δ|/bound up to %.3g", s, tile, relu, worst)
			}
		}
	}
}

// The separable max-pool equals the direct 3×3/stride-2/pad-1 definition,
// on odd and even sizes, including NaN propagation.
func TestMaxPoolMatchesDefinition(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, s := range [][2]int{{1, 1}, {1, 5}, {4, 1}, {7, 9}, {10, 10}, {13, 8}} {
		x := NewFmap(3, s[0], s[1])
		for i := range x.D {
			x.D[i] = float32(r.NormFloat64())
		}
		x.D[len(x.D)/2] = float32(math.NaN())
		got := NewEngine(2).MaxPool3s2(x)
		for c := 0; c < x.C; c++ {
			for oy := 0; oy < got.H; oy++ {
				for ox := 0; ox < got.W; ox++ {
					want := float32(math.Inf(-1))
					nan := false
					for ky := -1; ky <= 1; ky++ {
						for kx := -1; kx <= 1; kx++ {
							iy, ix := 2*oy+ky, 2*ox+kx
							if iy < 0 || iy >= x.H || ix < 0 || ix >= x.W {
								continue
							}
							v := x.D[c*x.H*x.W+iy*x.W+ix]
							nan = nan || v != v
							want = max(want, v)
						}
					}
					g := got.D[c*got.H*got.W+oy*got.W+ox]
					if (nan && g == g) || (!nan && g != want) {
						t.Fatalf("%v c%d (%d,%d): %v, want %v (nan %v)", s, c, oy, ox, g, want, nan)
					}
				}
			}
		}
	}
}

// tileBlock cuts a layer's tiles into at most full-wide blocks, as few
// as the workers allow: the fewest full-wide blocks rounded up to a
// multiple of the workers, the last not much narrower than the others (the
// workers finish together; plain full-wide blocks, 1000 tiles as 5×192 +
// 40, fail).
func TestTileBlock(t *testing.T) {
	for _, threads := range []int{1, 2, 3, 4} {
		e := NewEngine(threads)
		for _, full := range []int{96, 192} {
			for n := 1; n <= 5000; n++ {
				b := e.tileBlock(n, full)
				k := (n + b - 1) / b
				if b > full || b < 1 {
					t.Fatalf("%d threads: tileBlock(%d, %d) = %d", threads, n, full, b)
				}
				if want := (n + full - 1) / full; k < want || k > (want+threads-1)/threads*threads {
					t.Fatalf("%d threads: tileBlock(%d, %d) = %d: %d blocks", threads, n, full, b, k)
				}
				if last := n - (k-1)*b; k > 1 && last < b-k {
					t.Fatalf("%d threads: tileBlock(%d, %d) = %d: last block %d of %d", threads, n, full, b, last, b)
				}
			}
		}
	}
}

// ConvLevels gives each map exactly the bits Conv gives it alone, on 1, 2
// and 3 workers and in every clone of the kernels: maps of 1×1 to 41×37
// (blocks that cross from one map into the next, maps smaller than a
// tile), a Winograd F(4×4,3×3) layer, and a 1×1 and an F(2×2,3×3) one
// (which run map by map).
func TestConvLevelsSameBits(t *testing.T) {
	r := rand.New(rand.NewPCG(41, 42))
	conv := func(out, in, k int) *nn.Conv {
		c := &nn.Conv{Name: "t", Out: out, In: in, KH: k, KW: k, Stride: 1, Pad: k / 2,
			W: make([]float32, out*in*k*k), B: make([]float32, out)}
		for i := range c.W {
			c.W[i] = float32(r.NormFloat64() / math.Sqrt(float64(in*k*k)))
		}
		for i := range c.B {
			c.B[i] = float32(r.NormFloat64() * 0.1)
		}
		return c
	}
	sizes := [][2]int{{41, 37}, {21, 19}, {11, 10}, {6, 5}, {3, 3}, {2, 1}, {1, 1}}
	defer gemm.SetSIMD(gemm.Kernels())
	for _, c := range []*nn.Conv{conv(40, 36, 3), conv(40, 36, 1), conv(272, 256, 3)} {
		xs := make([]Fmap, len(sizes))
		for i, s := range sizes {
			xs[i] = NewFmap(c.In, s[0], s[1])
			for j := range xs[i].D {
				xs[i].D[j] = float32(r.NormFloat64())
			}
		}
		want := make([]Fmap, len(xs))
		for i, x := range xs {
			want[i] = NewEngine(1).Conv(c, x, true, nil)
		}
		for s := gemm.Generic; s <= gemm.BestKernels(); s++ {
			if err := gemm.SetSIMD(s); err != nil {
				t.Fatal(err)
			}
			for _, threads := range []int{1, 2, 3} {
				got := NewEngine(threads).ConvLevels(c, xs, true)
				for i := range xs {
					if got[i].C != c.Out || got[i].H != xs[i].H || got[i].W != xs[i].W {
						t.Fatalf("%dx%d %s: map %d is %d×%d×%d", c.KH, c.KW, s, i, got[i].C, got[i].H, got[i].W)
					}
					for j := range want[i].D {
						if math.Float32bits(got[i].D[j]) != math.Float32bits(want[i].D[j]) {
							t.Fatalf("%dx%d F(%d) %s, %d threads: map %d [%d] %v, alone %v", c.KH, c.KW, WinoTile(c), s, threads, i, j, got[i].D[j], want[i].D[j])
						}
					}
				}
			}
		}
	}
}
