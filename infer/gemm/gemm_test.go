package gemm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/canopy-hpc/canopy/internal/testsupport/approx"
)

func fill(r *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = r.Float32()*2 - 1
	}
	return v
}

// The compiled-in backend against the naive loop, on shapes with edges that
// are not multiples of any kernel tile, and on strided sub-matrices (the
// convolution writes column blocks of a wider output).
func TestAgainstNaive(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, s := range [][3]int{{1, 1, 1}, {3, 5, 7}, {64, 100, 147}, {17, 33, 2304}, {256, 513, 64}} {
		m, n, k := s[0], s[1], s[2]
		lda, ldb, ldc := k+3, n+5, n+7
		a, b := fill(r, m*lda), fill(r, k*ldb)
		got, want := make([]float32, m*ldc), make([]float32, m*ldc)
		Mul(m, n, k, a, lda, b, ldb, got, ldc)
		Naive(m, n, k, a, lda, b, ldb, want, ldc)
		for i := 0; i < m; i++ {
			for j := 0; j < n; j++ {
				g, w := got[i*ldc+j], want[i*ldc+j]
				// Both are float32 sums of the k products in some order
				// (blocked, vectorised, FMA or not; the naive loop's in
				// k order), each within γ_k·Σ|a_il·b_lj| of the exact sum
				// (approx.Gamma32), so they differ by at most twice that.
				terms := 0.0
				for l := 0; l < k; l++ {
					terms += math.Abs(float64(a[i*lda+l]) * float64(b[l*ldb+j]))
				}
				if d := approx.Diff(float64(g), float64(w)); approx.Far(d, 2*approx.Gamma32(k)*terms) {
					t.Fatalf("%s %v: C[%d,%d] = %v, naive %v: |Δ| %.3g over 2·γ_%d·Σ|terms| = %.3g", Backend(), s, i, j, g, w, d, k, 2*approx.Gamma32(k)*terms)
				}
			}
			for j := n; j < ldc; j++ {
				if got[i*ldc+j] != 0 {
					t.Fatalf("%s wrote outside the %d columns", Backend(), n)
				}
			}
		}
	}
}

// Concurrent calls on separate outputs give the same bytes as serial calls:
// the backend is safe and its result does not depend on what else runs.
func TestConcurrentDeterministic(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	m, n, k := 64, 300, 576
	a, b := fill(r, m*k), fill(r, k*n)
	ref := make([]float32, m*n)
	Mul(m, n, k, a, k, b, n, ref, n)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := make([]float32, m*n)
			for it := 0; it < 20; it++ {
				Mul(m, n, k, a, k, b, n, c, n)
				for i := range c {
					if c[i] != ref[i] {
						errs <- fmt.Errorf("element %d differs under concurrency", i)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func BenchmarkSgemm(b *testing.B) {
	for _, s := range [][3]int{{256, 2304, 10000}, {1024, 1024, 1024}, {256, 256, 48}, {256, 256, 160}, {128, 128, 160}, {64, 64, 160}, {64, 256, 256}, {256, 64, 256}, {1024, 256, 256}, {256, 1024, 256}, {512, 2048, 160}} {
		m, k, n := s[0], s[1], s[2]
		b.Run(fmt.Sprintf("%s/%dx%dx%d", Backend(), m, k, n), func(b *testing.B) {
			r := rand.New(rand.NewPCG(5, 6))
			x, y, c := fill(r, m*k), fill(r, k*n), make([]float32, m*n)
			b.SetBytes(0)
			for b.Loop() {
				Mul(m, n, k, x, k, y, n, c, n)
			}
			b.ReportMetric(2*float64(m)*float64(n)*float64(k)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

// On a CPU with AVX2 the kernels in use must use it (canopy re-executes
// itself with OPENBLAS_CORETYPE when OpenBLAS's detection falls back to
// SSE kernels, as Debian's 0.3.21 does on Sapphire Rapids).
func TestCoreUsesTheCPU(t *testing.T) {
	if Backend() != "openblas" {
		t.Skip("gonum backend")
	}
	if os.Getenv("OPENBLAS_CORETYPE") != "" && os.Getenv(reexecEnv) == "" {
		t.Skip("OPENBLAS_CORETYPE set by the user")
	}
	b, _ := os.ReadFile("/proc/cpuinfo")
	if !strings.Contains(string(b), " avx2") {
		t.Skip("this CPU has no AVX2")
	}
	switch strings.ToLower(Core()) {
	case "prescott", "core2", "penryn", "dunnington", "nehalem", "atom", "sandybridge":
		if os.Getenv(reexecEnv) != "" {
			t.Skipf("this OpenBLAS ignores OPENBLAS_CORETYPE (built without DYNAMIC_ARCH): %s kernels", Core())
		}
		t.Fatalf("OpenBLAS runs %s kernels on an AVX2 CPU", Core())
	}
	t.Logf("OpenBLAS kernels: %s", Core())
}

// forEachClone runs f under every clone of the C kernels this CPU runs
// (generic, AVX2, AVX-512), each chosen by SetSIMD, and restores the
// detected one. The noblas build has only its Go kernels.
func forEachClone(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	defer SetSIMD(Kernels())
	ran := 0
	for s := Generic; s <= AVX512; s++ {
		if err := SetSIMD(s); err != nil {
			t.Logf("%s: %v", s, err)
			continue
		}
		if Kernels() != s {
			t.Fatalf("SetSIMD(%s) left %s", s, Kernels())
		}
		ran++
		t.Run(s.String(), f)
	}
	if ran == 0 {
		t.Fatal("no clone ran")
	}
}

// Every clone of the Winograd transforms, F(2×2,3×3) and F(4×4,3×3) (that
// one also with the strides of a batch: planes and matrix rows further
// apart than one image's), gives the same bits as the Go ones (the noblas
// build's), on shapes with odd edges, a residual and ReLU: the bound is 0
// ulp.
func TestWinoMatchesGo(t *testing.T) {
	forEachClone(t, func(t *testing.T) {
		for _, tile := range []int{2, 4, 5} { // 5: F(4×4,3×3) strided
			comps := 16
			in, out, in_, out_ := WinoIn, WinoOut, winoInGo, winoOutGo
			if tile >= 4 {
				comps = 36
				in, out = WinoIn4, WinoOut4
				in_ = func(x []float32, c, h, w, tw, t0, nb int, v []float32, vs int) {
					wino4InGo(x, c, h*w, h, w, tw, t0, nb, v, vs, nb)
				}
				out_ = func(m []float32, ms, nb, o, tw, t0, h, w int, bias, res []float32, relu bool, y []float32) {
					wino4OutGo(m, ms, nb, nb, o, tw, t0, h, w, h*w, bias, res, relu, y)
				}
			}
			if tile == 5 {
				// Planes 3 floats apart more than an image's, rows 2 more than nb.
				tile = 4
				in = func(x []float32, c, h, w, tw, t0, nb int, v []float32, vs int) {
					wino4In(x, c, h*w+3, h, w, tw, t0, nb, v, vs, nb+2)
				}
				in_ = func(x []float32, c, h, w, tw, t0, nb int, v []float32, vs int) {
					wino4InGo(x, c, h*w+3, h, w, tw, t0, nb, v, vs, nb+2)
				}
				out = func(m []float32, ms, nb, o, tw, t0, h, w int, bias, res []float32, relu bool, y []float32) {
					wino4Out(m, ms, nb+2, nb, o, tw, t0, h, w, h*w+3, bias, res, relu, y)
				}
				out_ = func(m []float32, ms, nb, o, tw, t0, h, w int, bias, res []float32, relu bool, y []float32) {
					wino4OutGo(m, ms, nb+2, nb, o, tw, t0, h, w, h*w+3, bias, res, relu, y)
				}
			}
			r := rand.New(rand.NewPCG(9, 10))
			for _, s := range [][4]int{{3, 5, 7, 4}, {16, 13, 13, 30}, {8, 20, 9, 17}, {5, 8, 12, 3}} {
				c, h, w, nb := s[0], s[1], s[2], s[3]
				tw, th := (w+tile-1)/tile, (h+tile-1)/tile
				x := fill(r, c*(h*w+3))
				for t0 := 0; t0 < tw*th; t0 += nb {
					n := min(nb, tw*th-t0)
					vs := c*(n+2) + 5
					a, b := make([]float32, comps*vs), make([]float32, comps*vs)
					in(x, c, h, w, tw, t0, n, a, vs)
					in_(x, c, h, w, tw, t0, n, b, vs)
					for i := range a {
						if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
							t.Fatalf("F(%d) %v: WinoIn[%d] = %v, Go %v", tile, s, i, a[i], b[i])
						}
					}
					ms := c*(n+2) + 3
					m := fill(r, comps*ms)
					bias, res := fill(r, c), fill(r, c*(h*w+3))
					for _, relu := range []bool{false, true} {
						y1, y2 := make([]float32, c*(h*w+3)), make([]float32, c*(h*w+3))
						out(m, ms, n, c, tw, t0, h, w, bias, res, relu, y1)
						out_(m, ms, n, c, tw, t0, h, w, bias, res, relu, y2)
						for i := range y1 {
							if math.Float32bits(y1[i]) != math.Float32bits(y2[i]) {
								t.Fatalf("F(%d) %v relu=%v: WinoOut[%d] = %v, Go %v", tile, s, relu, i, y1[i], y2[i])
							}
						}
					}
				}
			}
		}
	})
}

func TestEpilogueMatchesGo(t *testing.T) { forEachClone(t, testEpilogueMatchesGo) }

func testEpilogueMatchesGo(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	rows, cols, ld := 7, 19, 23
	bias := fill(r, rows)
	for _, withRes := range []bool{false, true} {
		for _, relu := range []bool{false, true} {
			y := fill(r, rows*ld)
			var res []float32
			if withRes {
				res = fill(r, rows*ld)
			}
			a, b := append([]float32(nil), y...), append([]float32(nil), y...)
			Epilogue(a, ld, rows, cols, bias, res, ld, relu)
			epilogueGo(b, ld, rows, cols, bias, res, ld, relu)
			for i := range a {
				if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
					t.Fatalf("res=%v relu=%v: [%d] %v, Go %v", withRes, relu, i, a[i], b[i])
				}
			}
		}
	}
}

// The compiled-in im2col copies what the Go one copies, for 1×1, 3×3 and
// 7×7 kernels, strides 1 and 2, blocks that start and end mid-row.
func TestIm2colMatchesGo(t *testing.T) { forEachClone(t, testIm2colMatchesGo) }

func testIm2colMatchesGo(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	for _, s := range [][6]int{{3, 11, 9, 7, 2, 3}, {4, 8, 8, 3, 1, 1}, {5, 9, 13, 3, 2, 1}, {2, 6, 5, 1, 1, 0}} {
		cin, h, w, k, stride, pad := s[0], s[1], s[2], s[3], s[4], s[5]
		x := fill(r, cin*h*w)
		oh, ow := (h+2*pad-k)/stride+1, (w+2*pad-k)/stride+1
		n := oh * ow
		for _, blk := range []int{7, 16, n} {
			for j0 := 0; j0 < n; j0 += blk {
				nb := min(blk, n-j0)
				a, b := make([]float32, cin*k*k*nb), make([]float32, cin*k*k*nb)
				for i := range a {
					a[i], b[i] = 1, 2 // every element must be written
				}
				Im2col(x, cin, h, w, k, k, stride, pad, ow, j0, nb, a)
				im2colGo(x, cin, h*w, h, w, k, k, stride, pad, ow, j0, nb, b, nb)
				sameBits(t, a, b, fmt.Sprintf("%v block %d+%d", s, j0, nb))
				// The strides of a batch: x's planes of two images
				// interleaved (the second image's), rows nb+3 apart.
				x2 := fill(r, 2*cin*h*w)
				a, b = make([]float32, cin*k*k*(nb+3)), make([]float32, cin*k*k*(nb+3))
				im2col(x2[h*w:], cin, 2*h*w, h, w, k, k, stride, pad, ow, j0, nb, a, nb+3)
				im2colGo(x2[h*w:], cin, 2*h*w, h, w, k, k, stride, pad, ow, j0, nb, b, nb+3)
				sameBits(t, a, b, fmt.Sprintf("%v strided block %d+%d", s, j0, nb))
			}
		}
	}
}

func sameBits(t *testing.T, a, b []float32, what string) {
	t.Helper()
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			t.Fatalf("%s: [%d] %v, Go %v", what, i, a[i], b[i])
		}
	}
}

// The clone chosen at start-up is the widest the CPU runs, and one it
// cannot run is refused.
func TestSIMDChoice(t *testing.T) {
	b, _ := os.ReadFile("/proc/cpuinfo")
	flags := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "flags" {
			for _, f := range strings.Fields(v) {
				flags[f] = true
			}
			break
		}
	}
	want := Generic
	switch {
	case Backend() == "gonum":
	case flags["avx512f"] && flags["avx512bw"] && flags["avx512dq"] && flags["avx512vl"]:
		want = AVX512
	case flags["avx2"] && flags["fma"]:
		want = AVX2
	}
	if BestKernels() != want {
		t.Fatalf("best clone %s, want %s for this CPU (%s build)", BestKernels(), want, Backend())
	}
	if os.Getenv(SIMDEnv) == "" && Kernels() != want {
		t.Fatalf("clone in use %s, want %s", Kernels(), want)
	}
	if want < AVX512 {
		if err := SetSIMD(want + 1); err == nil {
			t.Fatalf("SetSIMD(%s) accepted on a CPU that runs up to %s", want+1, want)
		}
	}
	if _, err := ParseSIMD("avx1024"); err == nil {
		t.Fatal("ParseSIMD accepted avx1024")
	}
	t.Logf("clone %s (best %s)", Kernels(), BestKernels())
}

// Every clone of the max-pool gives the Go version's bits, on odd and even
// sizes down to 1×1, with NaNs (one of them in a window's first place).
func TestMaxPoolMatchesGo(t *testing.T) { forEachClone(t, testMaxPoolMatchesGo) }

func testMaxPoolMatchesGo(t *testing.T) {
	r := rand.New(rand.NewPCG(15, 16))
	for _, s := range [][2]int{{1, 1}, {1, 6}, {5, 1}, {2, 2}, {7, 9}, {10, 10}, {13, 40}, {40, 35}} {
		h, w := s[0], s[1]
		oh, ow := (h+1)/2, (w+1)/2
		x := fill(r, h*w)
		if h*w > 4 {
			x[h*w/2] = float32(math.NaN())
			x[min(w+1, h*w-1)] = float32(math.Inf(-1))
		}
		if h*w > 20 {
			x[2*w+3] = float32(math.NaN()) // the first of a row window
		}
		a, b := make([]float32, oh*ow), make([]float32, oh*ow)
		MaxPool3s2(x, h, w, make([]float32, h*ow), a)
		maxpoolGo(x, h, w, make([]float32, h*ow), b)
		for i := range a {
			if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
				t.Fatalf("%v: [%d] %v, Go %v", s, i, a[i], b[i])
			}
		}
	}
}

// ResizeRowFMA gives the same bits on every clone (libm's fmaf on the
// generic one, the FMA instruction on the others), on random rows and taps
// with ties of the products, and refuses taps outside the row.
func TestResizeRowFMAClones(t *testing.T) {
	if Backend() != "openblas" {
		t.Skip("no C kernels in the noblas build (ResizeRowFMA reports false)")
	}
	r := rand.New(rand.NewPCG(21, 22))
	const srcW, n = 97, 300
	i0, i1 := make([]int32, n), make([]int32, n)
	l0, l1 := make([]float32, n), make([]float32, n)
	for x := range i0 {
		i0[x] = int32(r.IntN(srcW))
		i1[x] = min(i0[x]+1, srcW-1)
		l1[x] = float32(r.IntN(1<<12)) / (1 << 12)
		l0[x] = 1 - l1[x]
	}
	taps, err := NewResizeTaps(i0, i1, l0, l1, srcW)
	if err != nil {
		t.Fatal(err)
	}
	r0, r1 := fill(r, srcW), fill(r, srcW)
	var want []float32
	forEachClone(t, func(t *testing.T) {
		out := make([]float32, n)
		if !ResizeRowFMA(taps, r0, r1, 0.375, 0.625, out) {
			t.Fatal("ResizeRowFMA reported no C kernel")
		}
		if want == nil {
			want = out
			return
		}
		for x := range out {
			if math.Float32bits(out[x]) != math.Float32bits(want[x]) {
				t.Fatalf("x=%d: %g, the first clone %g", x, out[x], want[x])
			}
		}
	})
	if _, err := NewResizeTaps([]int32{0, srcW}, []int32{1, 1}, []float32{1, 1}, []float32{0, 0}, srcW); err == nil {
		t.Fatal("a tap at the row's width was accepted")
	}
}

// TestForcedKernels: a forced path is the one that runs (make test-isa
// forces each path the CPU runs; OpenBLAS ignores a kernel set it does not
// know, or one this CPU cannot run, and would silently test the default).
func TestForcedKernels(t *testing.T) {
	if v := os.Getenv(SIMDEnv); v != "" && Kernels().String() != v {
		t.Fatalf("%s=%s, but the %s clone runs", SIMDEnv, v, Kernels())
	}
	if v := os.Getenv("OPENBLAS_CORETYPE"); v != "" && os.Getenv(reexecEnv) == "" && Backend() == "openblas" && !strings.EqualFold(Core(), v) {
		t.Fatalf("OPENBLAS_CORETYPE=%s, but OpenBLAS runs its %s kernels", v, Core())
	}
	t.Logf("%s SGEMM, %s kernels; C clone %s", Backend(), Core(), Kernels())
}
