package lsap

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// AssignFunc reads entries on demand but must assign exactly as Assign
// (scipy's conventions) does, ties included: small integer costs make
// many ties, and tall, wide and square shapes take both transposes.
func TestAssignFuncEqualsAssign(t *testing.T) {
	rng := rand.New(rand.NewPCG(43, 1))
	for trial := 0; trial < 3000; trial++ {
		nr, nc := 1+rng.IntN(9), 1+rng.IntN(9)
		cost := make([]float64, nr*nc)
		for i := range cost {
			cost[i] = float64(rng.IntN(4))
		}
		maximize := trial%2 == 1
		want, err := Assign(cost, nr, nc, maximize)
		if err != nil {
			t.Fatal(err)
		}
		reads := 0
		got, err := AssignFunc(nr, nc, func(i, j int) float64 { reads++; return cost[i*nc+j] }, maximize)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("%dx%d max=%v %v: AssignFunc %v, Assign %v", nr, nc, maximize, cost, got, want)
		}
		if reads == 0 {
			t.Fatal("cost never read")
		}
	}
	if _, err := AssignFunc(2, 2, func(i, j int) float64 { return math.NaN() }, false); err != ErrInfeasible {
		t.Fatalf("NaN costs: %v, want ErrInfeasible", err)
	}
}
