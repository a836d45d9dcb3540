package tile

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestGridContaining: the windows Containing names are exactly those of
// the list that hold the rectangle whole (every window tried), over grids
// with and without overlap, a last window off the step, and one window.
func TestGridContaining(t *testing.T) {
	r := rand.New(rand.NewPCG(44, 3))
	for _, c := range []struct {
		w, h int
		s    Settings
	}{
		{1000, 700, Settings{Patch: 300, Overlap: 0.25}},
		{500, 400, Settings{Patch: 300, Overlap: 0.25}},
		{640, 640, Settings{Patch: 400, Overlap: 0}},
		{250, 90, Settings{Patch: 400, Overlap: 0.1}},
	} {
		g, err := NewGrid(c.w, c.h, c.s)
		if err != nil {
			t.Fatal(err)
		}
		found := 0
		for n := 0; n < 2000; n++ {
			w, h := 1+r.IntN(min(c.w, 120)), 1+r.IntN(min(c.h, 120))
			x, y := r.IntN(c.w-w+1), r.IntN(c.h-h+1)
			var want []int
			for k := 0; k < g.Len(); k++ {
				if win := g.At(k); win.X <= x && win.Y <= y && x+w <= win.X+win.W && y+h <= win.Y+win.H {
					want = append(want, k)
				}
			}
			got := g.Containing(x, y, w, h)
			if !slices.Equal(got, want) {
				t.Fatalf("%dx%d %+v: %dx%d at (%d,%d): Containing %v, the list %v", c.w, c.h, c.s, w, h, x, y, got, want)
			}
			found += len(got)
		}
		if found == 0 {
			t.Errorf("%dx%d %+v: no rectangle in any window: the test shows nothing", c.w, c.h, c.s)
		}
	}
}
