package metrics

import (
	"math/rand/v2"
	"reflect"
	"sort"
	"testing"
)

// naiveClassRates is compute_class_recall counted row by row per key, the
// reference classRates' dense counting must equal.
func naiveClassRates(values []float64, matches []Match) []Value {
	type count struct{ truth, pred, correct int }
	counts := map[float64]*count{}
	get := func(k float64) *count {
		if counts[k] == nil {
			counts[k] = &count{}
		}
		return counts[k]
	}
	for _, m := range matches {
		if !m.Match || m.PredID < 0 {
			continue
		}
		t, p := values[m.TrueLabel]+0, values[m.PredLabel]+0
		get(t).truth++
		get(p).pred++
		if t == p {
			get(t).correct++
		}
	}
	var keys []float64
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Float64s(keys)
	var vals []Value
	for _, k := range keys {
		c := counts[k]
		vals = append(vals, classRate(PyFloatRepr(k), c.truth, c.pred, c.correct)...)
	}
	return vals
}

// TestClassRatesDense: numeric labels where several ids share a value
// ("0" and "0.0", "-0" and "0") are one class, a row between two such ids
// is correct, and unmatched or unassigned rows count nowhere: the dense
// counting equals the row-by-row reference on random tables.
func TestClassRatesDense(t *testing.T) {
	values := []float64{0, 0, 1, 2.5, 1, -0.0, 7}
	rng := rand.New(rand.NewPCG(5, 6))
	for trial := range 200 {
		var matches []Match
		for range rng.IntN(60) {
			m := Match{TrueLabel: int32(rng.IntN(len(values))), PredID: rng.IntN(3) - 1, Match: rng.IntN(5) > 0}
			m.PredLabel = int32(rng.IntN(len(values)))
			if m.PredID < 0 {
				m.PredLabel = -1
			}
			matches = append(matches, m)
		}
		got := numericClassValues(values, matches)
		if want := naiveClassRates(values, matches); (len(got) > 0 || len(want) > 0) && !reflect.DeepEqual(got, want) {
			t.Fatalf("trial %d: %v, want %v", trial, got, want)
		}
	}
}
