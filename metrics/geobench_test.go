package metrics

import (
	"math"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/canopy-hpc/canopy/box"
)

// benchPoints makes n truth points at one per 400 px² of a square image and
// predictions as a point model makes them: 85% of the trees found within a
// few pixels, plus 10% false positives (tools/geometry/bench_points.py
// makes the same kind of image for DeepForest).
func benchPoints(n int) (truth, preds []box.Geo) {
	rng := rand.New(rand.NewPCG(uint64(n), 43))
	side := math.Sqrt(400 * float64(n))
	for i := 0; i < n; i++ {
		p := box.Point{X: rng.Float64() * side, Y: rng.Float64() * side}
		truth = append(truth, box.Geo{Point: p})
		if rng.Float64() < 0.85 {
			preds = append(preds, box.Geo{Point: box.Point{X: p.X + 3*rng.NormFloat64(), Y: p.Y + 3*rng.NormFloat64()}, Score: rng.Float64()})
		}
	}
	for i := 0; i < n/10; i++ {
		preds = append(preds, box.Geo{Point: box.Point{X: rng.Float64() * side, Y: rng.Float64() * side}, Score: rng.Float64()})
	}
	return truth, preds
}

// BenchmarkMatchPoints: the exact point assignment of one image (scipy's
// dense algorithm, distances computed on demand). Run quiet with
//
//	go test ./metrics -run XXX -bench MatchPoints -benchmem -benchtime 1x
func BenchmarkMatchPoints(b *testing.B) {
	for _, n := range []int{1500, 5000, 20000} {
		truth, preds := benchPoints(n)
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if _, err := matchPoints(0, truth, preds, 10); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
