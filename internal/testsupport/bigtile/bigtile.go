// Package bigtile generates one large tile's truth crowns and predictions
// for the big-tile metric tests and benchmarks: integer boxes (so areas
// tie), predictions that jitter a crown, exact duplicates of a prediction
// or of a crown (tied duplicates), false positives and missed crowns,
// scores on a 0.01 grid. The same crowns and seed give the same bytes.
package bigtile

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
)

// Box is one integer box.
type Box struct{ Xmin, Ymin, Xmax, Ymax int }

// Pred is one prediction: a box and a score in hundredths.
type Pred struct {
	Box
	Score int
}

// Tile is the generated tile.
type Tile struct {
	Side  int
	Truth []Box
	Preds []Pred
}

// Path is the tile's image_path in both CSVs.
const Path = "tile.tif"

// Generate makes a tile of n crowns, at the density of 20,000 crowns on a
// 10,000² tile (about a NEON 1 km² tile at 10 cm).
func Generate(n int, seed uint64) Tile {
	rng := rand.New(rand.NewPCG(seed, 0x7117))
	side := int(math.Round(10000 * math.Sqrt(float64(n)/20000)))
	t := Tile{Side: side}
	clamp := func(v int) int { return min(max(v, 0), side) }
	crown := func() Box {
		w, h := 20+rng.IntN(61), 20+rng.IntN(61)
		x, y := rng.IntN(side-w), rng.IntN(side-h)
		return Box{x, y, x + w, y + h}
	}
	score := func() int { return 10 + rng.IntN(90) }
	for range n {
		t.Truth = append(t.Truth, crown())
	}
	for _, c := range t.Truth {
		u := rng.Float64()
		switch {
		case u < 0.75: // detected, a few pixels off
			j := func() int { return rng.IntN(13) - 6 }
			b := Box{clamp(c.Xmin + j()), clamp(c.Ymin + j()), clamp(c.Xmax + j()), clamp(c.Ymax + j())}
			if b.Xmax <= b.Xmin || b.Ymax <= b.Ymin {
				b = c
			}
			p := Pred{b, score()}
			t.Preds = append(t.Preds, p)
			if rng.Float64() < 0.08 { // the same box twice (NMS let it through)
				t.Preds = append(t.Preds, p)
			}
		case u < 0.79: // exactly the crown
			t.Preds = append(t.Preds, Pred{c, score()})
		}
		// else missed
		if rng.Float64() < 0.05 { // a false positive somewhere
			t.Preds = append(t.Preds, Pred{crown(), score()})
		}
	}
	return t
}

// WriteTruth writes DeepForest's annotation CSV.
func (t Tile) WriteTruth(w io.Writer) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintln(bw, "image_path,xmin,ymin,xmax,ymax,label")
	for _, b := range t.Truth {
		fmt.Fprintf(bw, "%s,%d,%d,%d,%d,Tree\n", Path, b.Xmin, b.Ymin, b.Xmax, b.Ymax)
	}
	return bw.Flush()
}

// WritePreds writes DeepForest's prediction CSV.
func (t Tile) WritePreds(w io.Writer) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintln(bw, "image_path,xmin,ymin,xmax,ymax,label,score")
	for _, p := range t.Preds {
		fmt.Fprintf(bw, "%s,%d,%d,%d,%d,Tree,%d.%02d\n", Path, p.Xmin, p.Ymin, p.Xmax, p.Ymax, p.Score/100, p.Score%100)
	}
	return bw.Flush()
}
