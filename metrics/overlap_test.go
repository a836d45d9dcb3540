package metrics

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/internal/testsupport/boxgen"
	"github.com/canopy-hpc/canopy/metrics/lsap"
)

// TestOverlapIndexFindsEveryPair compares the grid's pairs with the brute
// force over all pairs, boxes of every size (huge ones go to the big list),
// zero-area and touching boxes included.
func TestOverlapIndexFindsEveryPair(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := 0; trial < 500; trial++ {
		n, m := rng.IntN(60), rng.IntN(60)
		grid := 5 + rng.IntN(200)
		a := boxgen.Boxes(rng, n, grid, 1+rng.IntN(30), nil)
		b := boxgen.Boxes(rng, m, grid, 1+rng.IntN(30), a)
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
		tb := boxgen.Boxes(rng, nt, grid, 1+rng.IntN(8), nil)
		pb := boxgen.Boxes(rng, np, grid, 1+rng.IntN(8), tb)
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
			if col, err = lsap.Assign(dense, nt, np, true); err != nil {
				t.Fatal(err)
			}
		}
		if np > 0 { // the implicit path on every image, whatever its size
			sp, err := lsap.AssignSparseMax(nt, np, overlapEntries(truth, dets))
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
