package metrics

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/canopy-hpc/canopy/box"
)

// benchInput makes n images of k truth boxes each with k jittered
// predictions plus a few spurious ones, seeded.
func benchInput(n, k int) Input {
	rng := rand.New(rand.NewPCG(uint64(n), uint64(k)))
	labels := box.SortedLabelMap([]string{"Alive", "Dead"})
	in := Input{Images: make([]box.Image, n), Dets: make([][]box.Detection, n), Labels: labels}
	for i := range in.Images {
		im := box.Image{Path: fmt.Sprintf("img_%05d.png", i)}
		for j := 0; j < k; j++ {
			x, y := rng.Float64()*360, rng.Float64()*360
			b := box.Box{Xmin: x, Ymin: y, Xmax: x + 10 + rng.Float64()*30, Ymax: y + 10 + rng.Float64()*30}
			l := int32(rng.IntN(2))
			im.Truth = append(im.Truth, box.Truth{Box: b, Label: l})
			j := func(v float64) float64 { return v + rng.NormFloat64()*3 }
			p := box.Box{Xmin: j(b.Xmin), Ymin: j(b.Ymin)}
			p.Xmax, p.Ymax = max(p.Xmin, j(b.Xmax)), max(p.Ymin, j(b.Ymax))
			in.Dets[i] = append(in.Dets[i], box.Detection{Box: p, Label: l, Score: rng.Float64()})
		}
		in.Images[i] = im
	}
	return in
}

func benchDeepForest(b *testing.B, n, k int, sem Semantics) {
	in := benchInput(n, k)
	opt := Options{IoUThreshold: 0.4, Semantics: sem}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := DeepForest(in, opt); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/image")
}

// BenchmarkDeepForest is the size (2,000 images × 30 boxes) and two
// neighbours, for both semantics.
func BenchmarkDeepForest(b *testing.B) {
	for _, sz := range []struct{ n, k int }{{2000, 10}, {2000, 30}, {2000, 100}} {
		for _, sem := range []Semantics{Validation, EvaluateBoxes} {
			b.Run(fmt.Sprintf("%s/images=%d/boxes=%d", sem, sz.n, sz.k), func(b *testing.B) { benchDeepForest(b, sz.n, sz.k, sem) })
		}
	}
}
