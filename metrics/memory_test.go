package metrics

import (
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/metrics/lsap"
)

// tileInput is one big tile: nTruth crowns of 20–80 px scattered over a
// side×side image, nPred predictions that jitter a crown by up to 5 px or
// repeat one exactly (tied duplicates), one label.
func tileInput(seed uint64, nTruth, nPred int, side float64) Input {
	rng := rand.New(rand.NewPCG(seed, 5))
	im := box.Image{Path: "tile.tif"}
	for k := 0; k < nTruth; k++ {
		x, y := float64(rng.IntN(int(side))), float64(rng.IntN(int(side)))
		w, h := float64(20+rng.IntN(60)), float64(20+rng.IntN(60))
		im.Truth = append(im.Truth, box.Truth{Box: box.Box{Xmin: x, Ymin: y, Xmax: x + w, Ymax: y + h}})
	}
	dets := make([]box.Detection, nPred)
	for k := range dets {
		t := im.Truth[rng.IntN(nTruth)].Box
		if rng.IntN(10) != 0 {
			dx, dy := float64(rng.IntN(11)-5), float64(rng.IntN(11)-5)
			t = box.Box{Xmin: t.Xmin + dx, Ymin: t.Ymin + dy, Xmax: t.Xmax + dx, Ymax: t.Ymax + dy}
		}
		dets[k] = box.Detection{Box: t, Score: float64(rng.IntN(100)) / 100}
	}
	return Input{Images: []box.Image{im}, Dets: [][]box.Detection{dets}, Labels: box.SortedLabelMap([]string{"Tree"})}
}

// The recall and IoU families allocate no more than MatchMemory
// estimates, on one tile of 20,000 crowns (where the dense matrices took
// 5.4 GB), at threshold 0.4 and at 0 (where every pair is valid: counted,
// not stored). Checked by the bytes allocated in all
// (runtime.MemStats.TotalAlloc), an upper bound of the peak.
func TestMatchMemoryBoundedByEstimate(t *testing.T) {
	in := tileInput(1, 20000, 17000, 10000)
	est := MatchMemory(in, 0)
	if est.Boxes != 37000 || est.Images != 1 || est.Partial || est.Pairs < 17000 {
		t.Fatalf("estimate counted %+v", est)
	}
	for _, thr := range []float64{0.4, 0} {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		res, err := Compute(in, Options{IoUThreshold: thr, Semantics: EvaluateBoxes}, Recall|IoUMean, false)
		runtime.ReadMemStats(&after)
		if err != nil {
			t.Fatal(err)
		}
		used := int64(after.TotalAlloc - before.TotalAlloc)
		if used > est.Bytes {
			t.Errorf("threshold %v: the matching allocated %d bytes, over its estimate of %d", thr, used, est.Bytes)
		}
		if len(res.Matches) != 20000 || len(res.Values) == 0 {
			t.Fatalf("threshold %v: %d matches, values %+v", thr, len(res.Matches), res.Values)
		}
		t.Logf("threshold %v: allocated %.1f MiB, estimated %.1f MiB (%d pairs)", thr, float64(used)/(1<<20), float64(est.Bytes)/(1<<20), est.Pairs)
	}
	// a limit stops the count early
	if c := MatchMemory(in, 1<<20); !c.Partial || c.Bytes <= 1<<20 {
		t.Fatalf("limit 1 MiB: %+v", c)
	}
}

// TestEnumerateInQueryOrder: the pair lists of a big image, enumerated on
// several goroutines, are the sequential lists in query order (4
// threads forced, so the ranges split even on a small machine).
func TestEnumerateInQueryOrder(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4))
	in := tileInput(2, 6000, 5500, 5477)
	truth, dets := in.Images[0].Truth, in.Dets[0]
	if len(queryRanges(len(truth))) < 2 {
		t.Fatal("the test must split the queries")
	}
	db := make([]box.Box, len(dets))
	for k, d := range dets {
		db[k] = d.Box
	}
	ix := newOverlapIndex(db)
	var want []lsap.Entry
	for q := range truth {
		ix.each(db, truth[q].Box, func(k int, a float64) { want = append(want, lsap.Entry{Row: q, Col: k, Value: a}) })
	}
	got := overlapEntries(truth, dets)
	if len(got) != len(want) || len(got) < len(truth) {
		t.Fatalf("%d entries, sequentially %d", len(got), len(want))
	}
	for k := range want {
		if got[k] != want[k] {
			t.Fatalf("entry %d: %+v, sequentially %+v", k, got[k], want[k])
		}
	}
	ps := iouPairs(truth, dets)
	for k := 1; k < len(ps); k++ {
		a, b := ps[k-1], ps[k]
		if a.d > b.d || (a.d == b.d && a.t >= b.t) {
			t.Fatalf("pairs %d, %d out of row-major order: %+v %+v", k-1, k, a, b)
		}
	}
	n := 0
	for d := range dets {
		for _, tr := range truth {
			if Intersection(dets[d].Box, tr.Box) > 0 {
				n++
			}
		}
	}
	if len(ps) != n {
		t.Fatalf("%d IoU pairs, brute force %d", len(ps), n)
	}
}
