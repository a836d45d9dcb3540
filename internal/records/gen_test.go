package records

import (
	"math/rand/v2"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/metrics"
)

// genInput makes n images with the cases the records must carry: integer
// boxes with exact duplicates (tied assignments), nested boxes, boxes
// under one pixel (dropped by the dataset filter), crowd regions, empty
// frames, images without detections and detections without truth.
func genInput(n int, seed uint64) metrics.Input {
	rng := rand.New(rand.NewPCG(seed, 3))
	in := metrics.Input{Labels: box.SortedLabelMap([]string{"a", "b", "c", "d"})}
	for i := range n {
		im := box.Image{Path: string(rune('a'+(n-i)%26)) + string(rune('A'+i%26)) + string(rune('0'+i/676))}
		var dets []box.Detection
		switch i % 11 {
		case 3:
			im.Empty = true
		case 5:
			im.Truth = []box.Truth{{Box: box.Box{Xmin: 1, Ymin: 1, Xmax: 1.5, Ymax: 9}, Label: 1}}
		}
		if i%11 != 3 && i%11 != 5 {
			for t := rng.IntN(9); t >= 0; t-- {
				x, y, s := float64(rng.IntN(200)), float64(rng.IntN(200)), float64(4+rng.IntN(120))
				b := box.Box{Xmin: x, Ymin: y, Xmax: x + s, Ymax: y + s}
				im.Truth = append(im.Truth, box.Truth{Box: b, Label: int32(rng.IntN(4)), Crowd: rng.IntN(20) == 0})
				if rng.IntN(6) == 0 { // a duplicate truth
					im.Truth = append(im.Truth, im.Truth[len(im.Truth)-1])
				}
			}
		}
		if i%7 != 2 {
			for _, t := range im.Truth {
				if rng.IntN(5) == 0 {
					continue
				}
				j := float64(rng.IntN(9) - 4)
				d := box.Detection{Box: box.Box{Xmin: t.Box.Xmin + j, Ymin: t.Box.Ymin, Xmax: t.Box.Xmax + j, Ymax: t.Box.Ymax + 2},
					Label: t.Label, Score: float64(rng.IntN(20)) / 20}
				if rng.IntN(8) == 0 {
					d.Label = (d.Label + 1) % 4
				}
				dets = append(dets, d)
				if rng.IntN(5) == 0 { // a nested box and a duplicate detection
					dets = append(dets, box.Detection{Box: box.Box{Xmin: d.Box.Xmin + 1, Ymin: d.Box.Ymin + 1, Xmax: d.Box.Xmax - 1, Ymax: d.Box.Ymax - 1}, Label: d.Label, Score: d.Score}, d)
				}
			}
			for f := rng.IntN(3); f > 0; f-- {
				x, y := float64(rng.IntN(300)), float64(rng.IntN(300))
				dets = append(dets, box.Detection{Box: box.Box{Xmin: x, Ymin: y, Xmax: x + 40, Ymax: y + 30}, Label: int32(rng.IntN(4)), Score: rng.Float64()})
			}
		}
		in.Images = append(in.Images, im)
		in.Dets = append(in.Dets, dets)
	}
	return in
}
