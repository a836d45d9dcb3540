package treeformer

import (
	"encoding/base64"
	"encoding/binary"
	"math"
	"testing"

	"github.com/canopy-hpc/canopy/internal/testsupport/testfile"
)

// f32s decodes the fixtures' base64 of little-endian float32 bytes.
func f32s(t testing.TB, s string) []float32 {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil || len(b)%4 != 0 {
		t.Fatalf("bad float32 base64 (%d bytes): %v", len(b), err)
	}
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

type peaksFixture struct {
	Cases []struct {
		Name   string
		Shape  [2]int
		Padded [2]int
		B64    string
		XY     []float64
		Scores []float64
	}
	Reduce []struct {
		X, Y, Score []float64
		KeptXJ      []float64 `json:"kept_x"`
		KeptYJ      []float64 `json:"kept_y"`
	}
}

// samePoints compares points bit for bit (float32 coordinates and scores
// against the fixture's exact float64 of them).
func samePoints(t *testing.T, what string, got []Point, xy, scores []float64) {
	t.Helper()
	if len(got) != len(scores) || len(xy) != 2*len(scores) {
		t.Fatalf("%s: %d points, DeepForest %d", what, len(got), len(scores))
	}
	for i, p := range got {
		if p.X != xy[2*i] || p.Y != xy[2*i+1] || float64(p.Score) != scores[i] {
			t.Fatalf("%s: point %d is (%v, %v) %v, DeepForest (%v, %v) %v", what, i, p.X, p.Y, p.Score, xy[2*i], xy[2*i+1], scores[i])
		}
	}
}

// TestPeaksMatchDeepForest: synthetic maps (plateaus, ties, quantised
// values, flat and zero maps, a map smaller than its border, a maximum below
// the 1e-6 clamp) through density_to_points and postprocess_density's
// scale, made by tools/treeformer/reference.py peaks.
func TestPeaksMatchDeepForest(t *testing.T) {
	var fx peaksFixture
	testfile.ReadJSON(t, "testdata/peaks.json", &fx)
	if len(fx.Cases) < 9 {
		t.Fatalf("%d cases", len(fx.Cases))
	}
	total := 0
	for _, c := range fx.Cases {
		m := f32s(t, c.B64)
		h, w := c.Shape[0], c.Shape[1]
		got := ScalePeaks(Peaks(m, h, w, DefaultPeaks), c.Padded[0], c.Padded[1], h, w)
		samePoints(t, c.Name, got, c.XY, c.Scores)
		total += len(got)
	}
	if total < 100 {
		t.Fatalf("only %d peaks over the cases: the fixture tests little", total)
	}
}

func TestReducePointsMatchesDeepForest(t *testing.T) {
	var fx peaksFixture
	testfile.ReadJSON(t, "testdata/peaks.json", &fx)
	for n, c := range fx.Reduce {
		pts := make([]Point, len(c.X))
		for i := range pts {
			pts[i] = Point{X: c.X[i], Y: c.Y[i], Score: float32(c.Score[i])}
		}
		got := ReducePoints(pts, 5)
		if len(got) != len(c.KeptXJ) {
			t.Fatalf("case %d: kept %d of %d, DeepForest %d", n, len(got), len(pts), len(c.KeptXJ))
		}
		for i, p := range got {
			if p.X != c.KeptXJ[i] || p.Y != c.KeptYJ[i] {
				t.Fatalf("case %d: kept %d is (%v, %v), DeepForest (%v, %v)", n, i, p.X, p.Y, c.KeptXJ[i], c.KeptYJ[i])
			}
		}
	}
}

// TestReducePointsTies: equal scores within r keep the later point (the
// documented portable order), and a dropped point drops nothing.
func TestReducePointsTies(t *testing.T) {
	pts := []Point{{X: 0, Y: 0, Score: 1}, {X: 3, Y: 4, Score: 1}, {X: 6, Y: 8, Score: 0.5}}
	got := ReducePoints(pts, 5)
	// point 1 (later, tie) wins over point 0 and drops point 2 (distance 5).
	if len(got) != 1 || got[0].X != 3 {
		t.Fatalf("kept %v, want only (3, 4)", got)
	}
	pts = []Point{{X: 0, Y: 0, Score: 0.9}, {X: 4, Y: 0, Score: 1}, {X: 8, Y: 0, Score: 0.8}}
	got = ReducePoints(pts, 5)
	// (4,0) drops both neighbours
	if len(got) != 1 || got[0].X != 4 {
		t.Fatalf("kept %v", got)
	}
	pts = []Point{{X: 0, Y: 0, Score: 1}, {X: 4, Y: 0, Score: 0.9}, {X: 8, Y: 0, Score: 0.8}}
	got = ReducePoints(pts, 5)
	// (4,0) is dropped by (0,0) and so does not drop (8,0)
	if len(got) != 2 || got[1].X != 8 {
		t.Fatalf("kept %v", got)
	}
}

// TestPointsPossible: a map needs 11 cells (44 pixels) on each side for a
// peak away from its 5-cell border; Peaks agrees on the edge sizes.
func TestPointsPossible(t *testing.T) {
	for _, c := range []struct {
		h, w int
		want bool
	}{{44, 44, true}, {43, 400, false}, {400, 43, false}, {3, 3, false}, {512, 512, true}} {
		if got := PointsPossible(c.h, c.w, DefaultPeaks); got != c.want {
			t.Fatalf("%d×%d: %v", c.h, c.w, got)
		}
	}
	// an 11×11 map with its maximum in the centre has one peak; 10×10 none
	for _, n := range []int{10, 11} {
		m := make([]float32, n*n)
		m[(n/2)*n+n/2] = 1
		if got := len(Peaks(m, n, n, DefaultPeaks)); got != map[int]int{10: 0, 11: 1}[n] {
			t.Fatalf("%d×%d map: %d peaks", n, n, got)
		}
	}
}
