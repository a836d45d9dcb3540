// Package boxgen makes the seeded, tie-heavy boxes that the assignment
// solver's and the matching's tests share: boxes on a small integer grid,
// with duplicates, nesting and touching edges, so that many intersection
// areas are equal. Tests only.
package boxgen

import (
	"math/rand/v2"

	"github.com/canopy-hpc/canopy/box"
)

// Boxes makes n boxes on a grid×grid integer grid, sides 1..maxSide: a third
// of them (when from is not empty) duplicate a box of from, others
// duplicate or nest inside an earlier box of their own, the rest are
// placed at random. The same rng state gives the same boxes.
func Boxes(rng *rand.Rand, n, grid, maxSide int, from []box.Box) []box.Box {
	out := make([]box.Box, n)
	for k := range out {
		switch {
		case len(from) > 0 && rng.IntN(3) == 0: // a duplicate of the other side
			out[k] = from[rng.IntN(len(from))]
		case k > 0 && rng.IntN(5) == 0: // a duplicate on this side
			out[k] = out[rng.IntN(k)]
		case k > 0 && rng.IntN(4) == 0: // nested inside an earlier box
			o := out[rng.IntN(k)]
			w, h := int(o.Xmax-o.Xmin), int(o.Ymax-o.Ymin)
			if w >= 2 && h >= 2 {
				x0, y0 := int(o.Xmin)+rng.IntN(w/2), int(o.Ymin)+rng.IntN(h/2)
				out[k] = box.Box{Xmin: float64(x0), Ymin: float64(y0), Xmax: float64(x0 + 1 + rng.IntN(w/2)), Ymax: float64(y0 + 1 + rng.IntN(h/2))}
				continue
			}
			fallthrough
		default:
			x, y := rng.IntN(grid), rng.IntN(grid)
			out[k] = box.Box{Xmin: float64(x), Ymin: float64(y), Xmax: float64(x + 1 + rng.IntN(maxSide)), Ymax: float64(y + 1 + rng.IntN(maxSide))}
		}
	}
	return out
}
