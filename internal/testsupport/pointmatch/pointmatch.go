// Package pointmatch pairs two sets of points by issue 46's rule, which
// the point model's tests hold canopy to (against DeepForest, and one
// engine against another): each wanted point is matched by one got point
// of the same key (image and label) within a distance and a score
// tolerance, each got point used once, in the wanted points' order.
package pointmatch

import (
	"math"

	"github.com/canopy-hpc/canopy/internal/testsupport/approx"
)

// P is a point: Key is what must be equal (image, label).
type P struct {
	Key   string
	X, Y  float64
	Score float64
}

// Match returns how many of want are matched by got within dist and
// tolScore, got's extras, and the largest score difference of a matched
// pair. A NaN anywhere matches nothing.
func Match(got, want []P, dist, tolScore float64) (matched, extra int, worst float64) {
	used := make([]bool, len(got))
	for _, w := range want {
		for j, g := range got {
			ds := math.Abs(g.Score - w.Score)
			if used[j] || g.Key != w.Key || approx.Far(math.Hypot(g.X-w.X, g.Y-w.Y), dist) || approx.Far(ds, tolScore) {
				continue
			}
			used[j] = true
			matched++
			worst = max(worst, ds)
			break
		}
	}
	return matched, len(got) - matched, worst
}
