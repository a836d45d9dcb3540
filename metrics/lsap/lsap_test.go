package lsap

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/canopy-hpc/canopy/internal/testsupport/approx"
)

// bruteForce returns the best total over all assignments of min(nr, nc)
// pairs (rows to distinct columns, or columns to distinct rows).
func bruteForce(cost []float64, nr, nc int, maximize bool) float64 {
	best := math.Inf(1)
	if maximize {
		best = math.Inf(-1)
	}
	used := make([]bool, nc)
	var rec func(r, k int, sum float64)
	need := min(nr, nc)
	rec = func(r, k int, sum float64) {
		if k == need {
			if (maximize && sum > best) || (!maximize && sum < best) {
				best = sum
			}
			return
		}
		if nr-r < need-k {
			return
		}
		// row r unassigned (only possible when rows outnumber columns)
		if nr > nc {
			rec(r+1, k, sum)
		}
		for c := 0; c < nc; c++ {
			if !used[c] {
				used[c] = true
				rec(r+1, k+1, sum+cost[r*nc+c])
				used[c] = false
			}
		}
	}
	rec(0, 0, 0)
	return best
}

func total(cost []float64, nc int, col []int) float64 {
	s := 0.0
	for r, c := range col {
		if c >= 0 {
			s += cost[r*nc+c]
		}
	}
	return s
}

func TestAssignMatchesBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for trial := 0; trial < 3000; trial++ {
		nr, nc := 1+rng.IntN(6), 1+rng.IntN(6)
		cost := make([]float64, nr*nc)
		for i := range cost {
			switch trial % 3 {
			case 0: // small integers: many ties
				cost[i] = float64(rng.IntN(4))
			case 1: // sparse, like intersection areas
				if rng.IntN(3) == 0 {
					cost[i] = rng.Float64() * 100
				}
			default:
				cost[i] = rng.NormFloat64()
			}
		}
		maximize := trial%2 == 0
		col, err := Assign(cost, nr, nc, maximize)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[int]bool{}
		n := 0
		for _, c := range col {
			if c < 0 {
				continue
			}
			if seen[c] {
				t.Fatalf("trial %d: column %d assigned twice: %v", trial, c, col)
			}
			seen[c] = true
			n++
		}
		if n != min(nr, nc) {
			t.Fatalf("trial %d: %d pairs for %dx%d", trial, n, nr, nc)
		}
		got, want := total(cost, nc, col), bruteForce(cost, nr, nc, maximize)
		if approx.Far(math.Abs(got-want), 1e-9*(1+math.Abs(want))) {
			t.Fatalf("trial %d (%dx%d, maximize=%v): total %v, brute force %v; cost %v col %v", trial, nr, nc, maximize, got, want, cost, col)
		}
	}
}

func TestAssignRejectsNaN(t *testing.T) {
	if _, err := Assign([]float64{1, math.NaN()}, 1, 2, false); err == nil {
		t.Fatal("NaN accepted")
	}
	if _, err := Assign([]float64{1, math.Inf(1)}, 1, 2, true); err == nil {
		t.Fatal("+Inf accepted when maximizing (it is -Inf after the sign flip)")
	}
	// a row that can only be assigned at +Inf cost: scipy raises "cost
	// matrix is infeasible"
	inf := math.Inf(1)
	if col, err := Assign([]float64{1, 2, inf, inf}, 2, 2, false); !errors.Is(err, ErrInfeasible) {
		t.Fatalf("an all-+Inf row: %v %v, want ErrInfeasible", col, err)
	}
}

// TestAssignTies pins the tie rule: scipy's linear_sum_assignment gives
// these assignments (checked with scipy 1.13.1; columns scanned from
// the last, unassigned columns preferred among equal costs).
func TestAssignTies(t *testing.T) {
	cases := []struct {
		cost   []float64
		nr, nc int
		want   []int
	}{
		// linear_sum_assignment([[5,5]], maximize=True) -> col_ind [0]
		{[]float64{5, 5}, 1, 2, []int{0}},
		// linear_sum_assignment([[5],[5]], maximize=True) -> rows [0], cols [0]
		{[]float64{5, 5}, 2, 1, []int{0, -1}},
		// linear_sum_assignment([[1,1],[1,1]], maximize=True) -> [0, 1]
		{[]float64{1, 1, 1, 1}, 2, 2, []int{0, 1}},
		// all zero 2x3 -> [0, 1]
		{[]float64{0, 0, 0, 0, 0, 0}, 2, 3, []int{0, 1}},
	}
	for i, c := range cases {
		got, err := Assign(c.cost, c.nr, c.nc, true)
		if err != nil {
			t.Fatal(err)
		}
		for k := range got {
			if got[k] != c.want[k] {
				t.Errorf("case %d: got %v, want %v", i, got, c.want)
				break
			}
		}
	}
}
