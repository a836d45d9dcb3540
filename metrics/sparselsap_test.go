package metrics

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/canopy-hpc/canopy/box"
)

// sparseCase is one generated matrix: dense (for the reference solver) and
// its positive entries in a shuffled order.
type sparseCase struct {
	name    string
	nr, nc  int
	dense   []float64
	entries []Entry
}

func entriesOf(rng *rand.Rand, dense []float64, nr, nc int) []Entry {
	var es []Entry
	for i := 0; i < nr; i++ {
		for j := 0; j < nc; j++ {
			if v := dense[i*nc+j]; v != 0 {
				es = append(es, Entry{Row: i, Col: j, Value: v})
			}
		}
	}
	rng.Shuffle(len(es), func(a, b int) { es[a], es[b] = es[b], es[a] })
	return es
}

// genBoxes makes n boxes on a small integer grid: duplicates, nesting and
// touching edges are common, so many intersection areas tie.
func genBoxes(rng *rand.Rand, n, grid, maxSide int, from []box.Box) []box.Box {
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

func genCases(seed uint64, n int) []sparseCase {
	rng := rand.New(rand.NewPCG(seed, 99))
	cases := make([]sparseCase, 0, n)
	for trial := 0; trial < n; trial++ {
		var c sparseCase
		switch trial % 5 {
		case 0, 1, 2: // images: truth × prediction intersection areas
			nt, np := rng.IntN(12), rng.IntN(12)
			if trial%7 == 0 {
				nt, np = rng.IntN(40), rng.IntN(40)
			}
			grid := 4 + rng.IntN(30)
			truth := genBoxes(rng, nt, grid, 1+rng.IntN(8), nil)
			pred := genBoxes(rng, np, grid, 1+rng.IntN(8), truth)
			if trial%3 == 0 { // real-valued jitter on some boxes
				for k := range pred {
					if rng.IntN(2) == 0 {
						pred[k].Xmax += rng.Float64()
					}
				}
			}
			c = sparseCase{name: "boxes", nr: nt, nc: np, dense: make([]float64, nt*np)}
			for i := range truth {
				for j := range pred {
					c.dense[i*np+j] = Intersection(truth[i], pred[j])
				}
			}
		case 3: // small integers, sparse: ties everywhere
			nr, nc := rng.IntN(9), rng.IntN(9)
			c = sparseCase{name: "ints", nr: nr, nc: nc, dense: make([]float64, nr*nc)}
			p := rng.Float64()
			for k := range c.dense {
				if rng.Float64() < p {
					c.dense[k] = float64(rng.IntN(3))
				}
			}
		default: // real values at varied density, tall and wide
			nr, nc := rng.IntN(25), rng.IntN(25)
			c = sparseCase{name: "reals", nr: nr, nc: nc, dense: make([]float64, nr*nc)}
			p := rng.Float64() * 0.5
			for k := range c.dense {
				if rng.Float64() < p {
					c.dense[k] = rng.Float64() * 10
				}
			}
		}
		c.entries = entriesOf(rng, c.dense, c.nr, c.nc)
		cases = append(cases, c)
	}
	return cases
}

// TestAssignSparseEqualsDense compares the implicit-matrix solver with the
// dense port of scipy pair for pair (the dense one is checked against
// scipy itself in TestAssignScipyGolden) on generated matrices with forced
// ties: integer boxes, duplicates, nesting, empty sides, tall and wide.
func TestAssignSparseEqualsDense(t *testing.T) {
	cases := genCases(1, 6000)
	differ := 0
	for k, c := range cases {
		want, err := Assign(c.dense, c.nr, c.nc, true)
		if err != nil {
			t.Fatal(err)
		}
		got, err := AssignSparseMax(c.nr, c.nc, c.entries)
		if err != nil {
			t.Fatalf("case %d: %v", k, err)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			differ++
			if differ <= 3 {
				t.Errorf("case %d (%s, %d×%d, %d entries): sparse %v, dense %v; dense matrix %v", k, c.name, c.nr, c.nc, len(c.entries), got, want, c.dense)
			}
		}
	}
	if differ > 0 {
		t.Errorf("%d of %d cases differ", differ, len(cases))
	}
}

// TestOverlapIndexFindsEveryPair compares the grid's pairs with the brute
// force over all pairs, boxes of every size (huge ones go to the big list),
// zero-area and touching boxes included.
func TestOverlapIndexFindsEveryPair(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := 0; trial < 500; trial++ {
		n, m := rng.IntN(60), rng.IntN(60)
		grid := 5 + rng.IntN(200)
		a := genBoxes(rng, n, grid, 1+rng.IntN(30), nil)
		b := genBoxes(rng, m, grid, 1+rng.IntN(30), a)
		for k := range b {
			switch rng.IntN(20) {
			case 0: // huge
				b[k].Xmax += float64(grid * 10)
				b[k].Ymax += float64(grid * 10)
			case 1: // zero width
				b[k].Xmax = b[k].Xmin
			}
		}
		ix := newOverlapIndex(b)
		got := map[[2]int]float64{}
		for i := range a {
			ix.each(b, a[i], func(k int, area float64) {
				if _, dup := got[[2]int{i, k}]; dup {
					t.Fatalf("trial %d: pair (%d, %d) reported twice", trial, i, k)
				}
				got[[2]int{i, k}] = area
			})
		}
		want := 0
		for i := range a {
			for k := range b {
				if ar := Intersection(a[i], b[k]); ar > 0 {
					want++
					if g, ok := got[[2]int{i, k}]; !ok || g != ar {
						t.Fatalf("trial %d: pair (%d, %d) area %v: index gave %v (found %v)", trial, i, k, ar, g, ok)
					}
				}
			}
		}
		if len(got) != want {
			t.Fatalf("trial %d: index found %d pairs, brute force %d", trial, len(got), want)
		}
	}
}

// TestMatchImageEqualsDense checks DeepForest's per-image matching (dense
// below denseMax, grid + implicit solver above) and the implicit path on
// every image against the dense matrix and the dense scipy port, row by
// row, on tied integer images.
func TestMatchImageEqualsDense(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for trial := 0; trial < 2000; trial++ {
		nt, np := rng.IntN(15), rng.IntN(15)
		if trial%4 == 0 { // past denseMax: the implicit path
			nt, np = 20+rng.IntN(60), 20+rng.IntN(60)
		}
		grid := 4 + rng.IntN(25)
		tb := genBoxes(rng, nt, grid, 1+rng.IntN(8), nil)
		pb := genBoxes(rng, np, grid, 1+rng.IntN(8), tb)
		truth := make([]box.Truth, nt)
		for k := range truth {
			truth[k] = box.Truth{Box: tb[k], Label: int32(rng.IntN(2))}
		}
		dets := make([]box.Detection, np)
		for k := range dets {
			dets[k] = box.Detection{Box: pb[k], Score: float64(rng.IntN(4)) / 4, Label: int32(rng.IntN(2))}
		}
		rows, err := matchImage(trial, truth, dets)
		if err != nil {
			t.Fatal(err)
		}
		dense := make([]float64, nt*np)
		for i := range truth {
			for j := range dets {
				dense[i*np+j] = Intersection(tb[i], pb[j])
			}
		}
		col := make([]int, nt)
		for i := range col {
			col[i] = -1
		}
		if np > 0 {
			if col, err = Assign(dense, nt, np, true); err != nil {
				t.Fatal(err)
			}
		}
		if np > 0 { // the implicit path on every image, whatever its size
			sp, err := AssignSparseMax(nt, np, overlapEntries(truth, dets))
			if err != nil || fmt.Sprint(sp) != fmt.Sprint(col) {
				t.Fatalf("trial %d: implicit %v (%v), dense %v", trial, sp, err, col)
			}
		}
		if len(rows) != nt {
			t.Fatalf("trial %d: %d rows for %d truth boxes", trial, len(rows), nt)
		}
		for i, r := range rows {
			if r.PredID != col[i] {
				t.Fatalf("trial %d truth %d: matched %d, dense scipy port %d", trial, i, r.PredID, col[i])
			}
			if r.PredID >= 0 && (r.IoU != IoU(tb[i], pb[r.PredID]) || r.Score != dets[r.PredID].Score || r.Match) {
				t.Fatalf("trial %d truth %d: row %+v", trial, i, r)
			}
		}
	}
}

// TestAssignSparseRefuses: NaN, infinite, negative, duplicate and
// out-of-range entries are errors, not answers.
func TestAssignSparseRefuses(t *testing.T) {
	for _, es := range [][]Entry{
		{{0, 0, math.NaN()}}, {{0, 1, math.Inf(1)}}, {{0, 0, -1}},
		{{0, 0, 1}, {0, 0, 2}}, {{2, 0, 1}}, {{0, -1, 1}},
	} {
		if _, err := AssignSparseMax(2, 2, es); err == nil {
			t.Errorf("%v accepted", es)
		}
	}
}
