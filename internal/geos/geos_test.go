//go:build !nogeos && !nogdal

package geos

import (
	"encoding/json"
	"math"
	"os"
	"testing"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/internal/dataset"
)

// The areas equal shapely's (tools/geometry/areas.py; shapely 2.2 on GEOS
// 3.14, canopy on the system's GEOS) within 1e-9 relative, and the
// intersects predicate picks the same pairs. The tolerance: both sides run
// GEOS's overlay on the same coordinates; versions may differ in the last
// bits of a noded vertex, and an area of a few hundred products of
// coordinates below 1e2 moves then by some 1e-13 relative: 1e-9 is far
// above that and far below any real difference (a vertex off by 1e-6).
func TestAreasAsShapely(t *testing.T) {
	b, err := os.ReadFile("testdata/areas.json")
	if err != nil {
		t.Fatal(err)
	}
	var fx struct {
		Meta  map[string]string
		WKT   []string
		Pairs []struct {
			A, B                int
			Intersection, Union float64
		}
	}
	if err := json.Unmarshal(b, &fx); err != nil {
		t.Fatal(err)
	}
	var shapes []box.Geo
	for _, w := range fx.WKT {
		_, _, sh, err := dataset.ParseWKT(w)
		if err != nil {
			t.Fatal(err)
		}
		shapes = append(shapes, box.Geo{Shape: sh})
	}
	p, done, err := NewPairs(shapes, shapes)
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	want := map[[2]int]int{}
	for k, q := range fx.Pairs {
		want[[2]int{q.A, q.B}] = k
	}
	worst := 0.0
	for i := range shapes {
		for j := i + 1; j < len(shapes); j++ {
			in, un, ok, err := p.Overlap(i, j)
			if err != nil {
				t.Fatal(err)
			}
			k, wantOK := want[[2]int{i, j}]
			if ok != wantOK {
				t.Fatalf("pair %d,%d: intersects %v, shapely %v", i, j, ok, wantOK)
			}
			if !ok {
				continue
			}
			q := fx.Pairs[k]
			for _, d := range [2][2]float64{{in, q.Intersection}, {un, q.Union}} {
				rel := math.Abs(d[0]-d[1]) / math.Max(math.Abs(d[1]), math.SmallestNonzeroFloat64)
				if d[0] != d[1] && !(rel <= 1e-9) {
					t.Fatalf("pair %d,%d: %v, shapely %v (GEOS %s vs %s)", i, j, d[0], d[1], Version(), fx.Meta["geos"])
				}
				worst = math.Max(worst, rel)
			}
		}
	}
	t.Logf("GEOS %s vs shapely's %s: %d pairs, worst relative difference %g", Version(), fx.Meta["geos"], len(fx.Pairs), worst)
}

// An invalid polygon (a bow tie) is refused with GEOS's reason.
func TestCheckInvalid(t *testing.T) {
	c, err := NewContext()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, _, bow, _ := dataset.ParseWKT("POLYGON ((0 0, 10 10, 10 0, 0 10, 0 0))")
	if err := c.Check(bow); err == nil {
		t.Fatal("a self-intersecting polygon passed")
	}
	_, _, ok, _ := dataset.ParseWKT("POLYGON ((0 0, 10 0, 10 10, 0 0))")
	if err := c.Check(ok); err != nil {
		t.Fatal(err)
	}
}
