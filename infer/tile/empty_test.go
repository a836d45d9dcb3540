package tile

import (
	"math"
	"math/rand/v2"
	"testing"
)

// planes builds a w×h window of three planes, every pixel (r, g, b).
func planes[S Sample](w, h int, r, g, b S) []S {
	p := make([]S, 3*w*h)
	for i := range w * h {
		p[i], p[w*h+i], p[2*w*h+i] = r, g, b
	}
	return p
}

func alphaOf(n int, v uint8) []uint8 {
	a := make([]uint8, n)
	for i := range a {
		a[i] = v
	}
	return a
}

var zero3 = NoData{Has: [3]bool{true, true, true}}

// emptyRef is the rule written plainly: the distinct pixels, and each
// pixel's data/no-data verdict.
func emptyRef[S Sample](w, h int, pix []S, alpha []uint8, nd NoData) bool {
	n := w * h
	seen := map[[3]S]bool{}
	none := true
	for i := range n {
		px := [3]S{pix[i], pix[n+i], pix[2*n+i]}
		seen[px] = true
		isND := true
		for k := range 3 {
			isND = isND && nd.Has[k] && float64(px[k]) == nd.Value[k]
		}
		if !isND && !(alpha != nil && alpha[i] == 0) {
			none = false
		}
	}
	return len(seen) == 1 || none
}

func TestEmptyWindowCases(t *testing.T) {
	const w, h = 5, 4
	n := w * h
	last := n - 1        // the last row's last pixel
	lastCol := 2*w - 1   // row 1, last column
	lastRow := n - w + 2 // last row, column 2
	type tc struct {
		name  string
		pix   []uint8
		alpha []uint8
		nd    NoData
		want  bool
	}
	set := func(p []uint8, band, i int, v uint8) []uint8 { p[band*n+i] = v; return p }
	nd := NoData{Has: [3]bool{true, true, true}, Value: [3]float64{10, 20, 30}}
	// mixedPix: the first half nodata, the second half imagery; mixedAlpha:
	// the second half transparent (all of it, or all but the last pixel).
	mixedPix := func() []uint8 {
		p := planes[uint8](w, h, 10, 20, 30)
		for i := n / 2; i < n; i++ {
			p[i], p[n+i], p[2*n+i] = uint8(i), 1, 2
		}
		return p
	}
	mixedAlpha := func(lastOpaque bool) []uint8 {
		a := alphaOf(n, 255)
		for i := n / 2; i < n; i++ {
			a[i] = 0
		}
		if lastOpaque {
			a[n-1] = 255
		}
		return a
	}
	cases := []tc{
		{"constant black", planes[uint8](w, h, 0, 0, 0), nil, NoData{}, true},
		{"constant colour", planes[uint8](w, h, 7, 200, 31), nil, NoData{}, true},
		{"one differing R in the last pixel", set(planes[uint8](w, h, 7, 7, 7), 0, last, 8), nil, NoData{}, false},
		{"one differing G in the last column", set(planes[uint8](w, h, 7, 7, 7), 1, lastCol, 6), nil, NoData{}, false},
		{"one differing B in the last row", set(planes[uint8](w, h, 7, 7, 7), 2, lastRow, 0), nil, NoData{}, false},
		{"one differing B in the first pixel", set(planes[uint8](w, h, 7, 7, 7), 2, 0, 0), nil, NoData{}, false},
		{"all nodata (10,20,30)", planes[uint8](w, h, 10, 20, 30), nil, nd, true},
		{"nodata but the last pixel's R", set(planes[uint8](w, h, 10, 20, 30), 0, last, 11), nil, nd, false},
		// Nodata on one band only: R all equal to it, G and B vary.
		{"nodata on R only", set(planes[uint8](w, h, 10, 20, 30), 1, last, 21),
			nil, NoData{Has: [3]bool{true, false, false}, Value: [3]float64{10}}, false},
		// Every band has nodata; the pixels match it on two bands only.
		{"nodata matched on two bands", set(set(planes[uint8](w, h, 10, 20, 99), 2, 0, 98), 2, last, 97), nil, nd, false},
		{"alpha 255 everywhere, imagery", set(planes[uint8](w, h, 1, 2, 3), 0, last, 4), alphaOf(n, 255), NoData{}, false},
		{"alpha 255 everywhere, constant", planes[uint8](w, h, 1, 2, 3), alphaOf(n, 255), NoData{}, true},
		{"alpha 0 everywhere, imagery", set(planes[uint8](w, h, 1, 2, 3), 0, last, 4), alphaOf(n, 0), NoData{}, true},
		{"alpha 0 but the last pixel", set(planes[uint8](w, h, 1, 2, 3), 0, last, 4), set(alphaOf(n, 0), 0, last, 1), NoData{}, false},
		{"alpha 0 but the first pixel", set(planes[uint8](w, h, 1, 2, 3), 0, last, 4), set(alphaOf(n, 0), 0, 0, 255), NoData{}, false},
		// Nodata pixels and transparent pixels together: no data anywhere,
		// then one transparent pixel made opaque.
		{"nodata and alpha 0 mixed", mixedPix(), mixedAlpha(false), nd, true},
		{"nodata and alpha 0 mixed, one pixel with data", mixedPix(), mixedAlpha(true), nd, false},
		{"nodata value out of range", set(planes[uint8](w, h, 255, 255, 255), 0, last, 0),
			nil, NoData{Has: [3]bool{true, true, true}, Value: [3]float64{256, 255, 255}}, false},
		{"nodata value not an integer", set(planes[uint8](w, h, 0, 0, 0), 0, last, 1),
			nil, NoData{Has: [3]bool{true, true, true}, Value: [3]float64{0.5, 0, 0}}, false},
		{"nodata value NaN", set(planes[uint8](w, h, 0, 0, 0), 0, last, 1),
			nil, NoData{Has: [3]bool{true, true, true}, Value: [3]float64{math.NaN(), 0, 0}}, false},
		{"nodata value -1", set(planes[uint8](w, h, 0, 0, 0), 0, last, 1),
			nil, NoData{Has: [3]bool{true, true, true}, Value: [3]float64{-1, 0, 0}}, false},
	}
	for _, c := range cases {
		if got := EmptyWindow(w, h, c.pix, c.alpha, c.nd); got != c.want {
			t.Errorf("%s: EmptyWindow = %v, want %v", c.name, got, c.want)
		}
		if ref := emptyRef(w, h, c.pix, c.alpha, c.nd); ref != c.want {
			t.Errorf("%s: the reference says %v, the case %v", c.name, ref, c.want)
		}
	}
}

// TestEmptyWindowOnePixel: a 1×1 window is one value.
func TestEmptyWindowOnePixel(t *testing.T) {
	if !EmptyWindow(1, 1, []uint8{1, 2, 3}, nil, NoData{}) {
		t.Error("a 1×1 window is not empty")
	}
}

// TestEmptyWindow16: 16-bit samples are compared as stored: two values
// with the same high byte (the model's input) differ; nodata 65535 is a
// sample.
func TestEmptyWindow16(t *testing.T) {
	p := planes[uint16](3, 3, 0x1200, 0x1200, 0x1200)
	p[8] = 0x12ff
	if EmptyWindow(3, 3, p, nil, NoData{}) {
		t.Error("samples differing in the low byte: empty")
	}
	p[8] = 0x1200
	if !EmptyWindow(3, 3, p, nil, NoData{}) {
		t.Error("constant 16-bit window: not empty")
	}
	q := planes[uint16](2, 2, 65535, 65535, 65535)
	q[3] = 0 // one R sample differs: not constant; 65535 is nodata on all bands
	nd := NoData{Has: [3]bool{true, true, true}, Value: [3]float64{65535, 65535, 65535}}
	if EmptyWindow(2, 2, q, nil, nd) {
		t.Error("a pixel off nodata: empty")
	}
	if !EmptyWindow(2, 2, q, []uint8{255, 255, 255, 0}, nd) {
		t.Error("nodata and one transparent pixel: not empty")
	}
	if EmptyWindow(2, 2, q, nil, NoData{Has: [3]bool{true, true, true}, Value: [3]float64{65536, 65535, 65535}}) {
		t.Error("nodata 65536 matched a 16-bit sample")
	}
}

// TestEmptyWindowShapes: planes or alpha of the wrong length are not
// empty (the model runs).
func TestEmptyWindowShapes(t *testing.T) {
	p := planes[uint8](2, 2, 0, 0, 0)
	for _, c := range []struct {
		w, h  int
		pix   []uint8
		alpha []uint8
	}{{2, 3, p, nil}, {2, 2, p[:11], nil}, {2, 2, p, []uint8{0, 0, 0}}, {0, 2, nil, nil}, {-1, -4, p[:3], nil}, {2, 2, nil, nil}} {
		if EmptyWindow(c.w, c.h, c.pix, c.alpha, zero3) {
			t.Errorf("%dx%d with %d samples, alpha %d: empty", c.w, c.h, len(c.pix), len(c.alpha))
		}
	}
}

// TestEmptyWindowRandom compares EmptyWindow with the plain rule on small
// windows over a small alphabet, where every case occurs often: constant
// windows, nodata on some bands, alpha mixes.
func TestEmptyWindowRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(34, 5))
	counts := map[[2]bool]int{}
	for range 200_000 {
		w, h := 1+rng.IntN(4), 1+rng.IntN(3)
		n := w * h
		pix := make([]uint8, 3*n)
		k := 1 + rng.IntN(3) // alphabet size: 1 makes constant windows
		for i := range pix {
			pix[i] = uint8(rng.IntN(k))
		}
		var alpha []uint8
		if rng.IntN(2) == 0 {
			alpha = make([]uint8, n)
			p0 := rng.IntN(3)
			for i := range alpha {
				if rng.IntN(3) >= p0 {
					alpha[i] = []uint8{1, 128, 255}[rng.IntN(3)]
				}
			}
		}
		var nd NoData
		for b := range 3 {
			nd.Has[b] = rng.IntN(5) > 0
			nd.Value[b] = []float64{0, 1, 2, -1, 0.5, 300}[rng.IntN(6)]
		}
		got, want := EmptyWindow(w, h, pix, alpha, nd), emptyRef(w, h, pix, alpha, nd)
		if got != want {
			t.Fatalf("%dx%d pix %v alpha %v nodata %+v: EmptyWindow %v, reference %v", w, h, pix, alpha, nd, got, want)
		}
		counts[[2]bool{got, w*h > 1}]++
	}
	// Both verdicts occur on windows of more than one pixel.
	if counts[[2]bool{true, true}] < 1000 || counts[[2]bool{false, true}] < 1000 {
		t.Errorf("verdicts %v: a case is too rare to test", counts)
	}
}

func BenchmarkEmptyWindow(b *testing.B) {
	const side = 400
	n := side * side
	rng := rand.New(rand.NewPCG(1, 2))
	img := make([]uint8, 3*n)
	for i := range img {
		img[i] = uint8(rng.IntN(256))
	}
	cases := []struct {
		name  string
		pix   []uint8
		alpha []uint8
	}{
		{"imagery", img, nil},
		{"imagery-alpha", img, alphaOf(n, 255)},
		{"nodata", planes[uint8](side, side, 0, 0, 0), nil},
		{"alpha0", img, alphaOf(n, 0)},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(c.pix)))
			for b.Loop() {
				EmptyWindow(side, side, c.pix, c.alpha, zero3)
			}
		})
	}
}
