package treeformer

import (
	"math"
	"testing"

	"github.com/canopy-hpc/canopy/internal/testsupport/approx"
	"github.com/canopy-hpc/canopy/internal/testsupport/testweights"
)

func seededF32(name string, n int, lo, hi float32) []float32 {
	b := testweights.Bytes(name, 4*n, 7)
	out := make([]float32, n)
	for i := range out {
		u := float32(uint32(b[4*i])|uint32(b[4*i+1])<<8|uint32(b[4*i+2])<<16) / (1 << 24)
		out[i] = lo + (hi-lo)*u
	}
	return out
}

func serial(n int, f func(worker, job int)) {
	for j := 0; j < n; j++ {
		f(0, j)
	}
}

// TestLayerNormRow against the definition in float64, within the
// kernel's three float32 roundings.
func TestLayerNormRow(t *testing.T) {
	c := 320
	x := seededF32("ln-x", c, -3, 5)
	ln := layerNorm{G: seededF32("ln-g", c, 0.5, 1.5), B: seededF32("ln-b", c, -0.2, 0.2)}
	out := make([]float32, c)
	layerNormRow(x, out, ln)
	var m, v float64
	for _, a := range x {
		m += float64(a)
	}
	m /= float64(c)
	for _, a := range x {
		v += (float64(a) - m) * (float64(a) - m)
	}
	v /= float64(c)
	for i, a := range x {
		zg := (float64(a) - m) / math.Sqrt(v+1e-6) * float64(ln.G[i])
		want := zg + float64(ln.B[i])
		// the kernel rounds z to float32, then z·G and + B in float32
		// (u = 2⁻²⁴ each; one rounding fewer where Go fuses them): 2u·|zG|
		// + u·|want|; its float64 statistics differ from these (rstd
		// multiplied, not divided) by a few 2⁻⁵³ of |zG|
		tol := 2*0x1p-24*math.Abs(zg) + 0x1p-24*math.Abs(want) + 8*0x1p-53*math.Abs(zg)
		if d := approx.Diff(float64(out[i]), want); approx.Far(d, tol) {
			t.Fatalf("element %d: %v, want %v", i, out[i], want)
		}
	}
	// a constant row: variance 0, eps keeps it finite, output is the bias
	layerNormRow(make([]float32, c), out, ln)
	for i := range out {
		if out[i] != ln.B[i] {
			t.Fatalf("constant row: %v, want bias %v", out[i], ln.B[i])
		}
	}
}

func TestSoftmaxRow(t *testing.T) {
	x := seededF32("sm", 256, -30, 30)
	want := make([]float64, len(x))
	mx := math.Inf(-1)
	for _, v := range x {
		mx = math.Max(mx, float64(v))
	}
	var s float64
	for i, v := range x {
		want[i] = math.Exp(float64(v) - mx)
		s += want[i]
	}
	softmaxRow(x)
	var sum, sumTol float64
	for i := range x {
		sum += float64(x[i])
		// x − max is rounded to float32 (as torch does): exp's relative
		// error is up to u·|x − max|, plus the two final roundings
		tol := (3 + math.Abs(math.Log(want[i]))) * 0x1p-24 * want[i] / s
		if approx.Far(approx.Diff(float64(x[i]), want[i]/s), tol+1e-45) {
			t.Fatalf("element %d: %v, want %v", i, x[i], want[i]/s)
		}
		sumTol += tol + 1e-45
	}
	// the exact probabilities sum to 1: |Σx − 1| is at most the elements'
	// bounds added up, plus the float64 sum's own rounding (γ_n in float64)
	if approx.Far(math.Abs(sum-1), sumTol+approx.Gamma(len(x), 0x1p-53)*sum) {
		t.Fatalf("sum %v, bound %g", sum, sumTol)
	}
	// large logits do not overflow
	y := []float32{1e30, 1e30, -1e30}
	softmaxRow(y)
	if y[0] != 0.5 || y[1] != 0.5 || y[2] != 0 {
		t.Fatalf("softmax of huge logits %v", y)
	}
}

// TestDWConvGELU against the direct definition (zero padding, taps in
// (ky, kx) order, float32 accumulation from the bias: the same operations).
func TestDWConvGELU(t *testing.T) {
	h, w, c := 5, 7, 12
	x := seededF32("dw-x", h*w*c, -2, 2)
	wt := seededF32("dw-w", 9*c, -0.5, 0.5)
	b := seededF32("dw-b", c, -0.1, 0.1)
	out := make([]float32, h*w*c)
	dwconvGELU(serial, x, h, w, c, wt, b, out)
	for y := 0; y < h; y++ {
		for xx := 0; xx < w; xx++ {
			for ch := 0; ch < c; ch++ {
				acc := b[ch]
				for ky := 0; ky < 3; ky++ {
					for kx := 0; kx < 3; kx++ {
						sy, sx := y+ky-1, xx+kx-1
						if sy >= 0 && sy < h && sx >= 0 && sx < w {
							acc += float32(wt[(ky*3+kx)*c+ch] * x[(sy*w+sx)*c+ch])
						}
					}
				}
				if got := out[(y*w+xx)*c+ch]; got != gelu(acc) { // the same operations: 0 ulp
					t.Fatalf("(%d,%d,%d): %v, want %v", y, xx, ch, got, gelu(acc))
				}
			}
		}
	}
}

// TestUpsample2: align_corners=True maps the corners onto the corners and
// interpolates linearly between (a 2×3 ramp, within float32 rounding).
func TestUpsample2(t *testing.T) {
	x := []float32{0, 1, 2, 3, 4, 5} // 1 channel, 2×3: v = 3·y + x
	out := make([]float32, 4*6)
	upsample2(serial, x, 1, 2, 3, out)
	for y := 0; y < 4; y++ {
		for xx := 0; xx < 6; xx++ {
			want := 3*float64(y)/3 + 2*float64(xx)/5
			// float32, u = 2⁻²⁴: λ = fl(fl(scale)·d) − k is off by at most
			// 1.5u (y: scale 1/3, src ≤ 1) and 3u (x: 2/5, src ≤ 2), times
			// the ramp's steps 3 and 1: 7.5u; each of a, b and the result
			// is a two-product sum of values ≤ 5 with weights summing to 1
			// (γ₂·5 = 10u apiece, a's and b's passed on with weight 1): 30u.
			if approx.Far(approx.Diff(float64(out[y*6+xx]), want), 37.5*0x1p-24) {
				t.Fatalf("(%d,%d): %v, want %v", y, xx, out[y*6+xx], want)
			}
		}
	}
	if out[0] != 0 || out[5] != 2 || out[23] != 5 {
		t.Fatalf("corners %v %v %v", out[0], out[5], out[23])
	}
}

// TestThreadsSameBytes: a block of the small model gives the same bytes on
// 1 and 3 workers.
func TestThreadsSameBytes(t *testing.T) {
	m, err := New(seeded(t, small), small)
	if err != nil {
		t.Fatal(err)
	}
	h, w := 96, 64
	im := imageOf(testweights.Bytes("threads", h*w*3, 1), h, w)
	var maps [2][]float32
	for i, th := range []int{1, 3} {
		d, err := NewRunner(m, th).Forward(im, whole(im))
		if err != nil {
			t.Fatal(err)
		}
		maps[i] = d.Map
	}
	for i := range maps[0] {
		if math.Float32bits(maps[0][i]) != math.Float32bits(maps[1][i]) {
			t.Fatalf("element %d: %v on 1 worker, %v on 3", i, maps[0][i], maps[1][i])
		}
	}
}
