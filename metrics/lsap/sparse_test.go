package lsap

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/internal/testsupport/boxgen"
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

// overlap is the area of the overlap of a and b, 0 when they only touch
// or are apart: the matrices metrics gives AssignSparseMax (its
// Intersection, the same value for every pair of boxes).
func overlap(a, b box.Box) float64 {
	w, h := min(a.Xmax, b.Xmax)-max(a.Xmin, b.Xmin), min(a.Ymax, b.Ymax)-max(a.Ymin, b.Ymin)
	return max(w, 0) * max(h, 0)
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
			truth := boxgen.Boxes(rng, nt, grid, 1+rng.IntN(8), nil)
			pred := boxgen.Boxes(rng, np, grid, 1+rng.IntN(8), truth)
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
					c.dense[i*np+j] = overlap(truth[i], pred[j])
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
