package tile

import (
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/infer/retinanet"
)

type windowsFixture struct {
	Peer  map[string]string `json:"peer"`
	Cases []struct {
		Width, Height, Patch int
		Overlap              float64
		Windows              [][4]int
	} `json:"cases"`
}

// readWindowsFixture reads tools/tile/windows.py's cases.
func readWindowsFixture(t *testing.T) windowsFixture {
	t.Helper()
	b, err := os.ReadFile("testdata/windows.json")
	if err != nil {
		t.Fatal(err)
	}
	var fx windowsFixture
	if err := json.Unmarshal(b, &fx); err != nil {
		t.Fatal(err)
	}
	return fx
}

// TestWindowsDeepForest: the window lists equal what DeepForest's
// compute_windows cut (tools/tile/windows.py), element by element, in order.
func TestWindowsDeepForest(t *testing.T) {
	fx := readWindowsFixture(t)
	if len(fx.Cases) < 100 {
		t.Fatalf("fixture has %d cases", len(fx.Cases))
	}
	for _, c := range fx.Cases {
		s := Settings{Patch: c.Patch, Overlap: c.Overlap}
		got, err := Windows(c.Width, c.Height, s)
		if err != nil {
			t.Fatalf("%+v: %v", s, err)
		}
		n, _ := Count(c.Width, c.Height, s)
		if len(got) != len(c.Windows) || n != len(got) {
			t.Fatalf("%dx%d %+v: %d windows (count %d), DeepForest %d", c.Width, c.Height, s, len(got), n, len(c.Windows))
		}
		for k, w := range c.Windows {
			if g := got[k]; g != (Window{w[0], w[1], w[2], w[3]}) {
				t.Fatalf("%dx%d %+v: window %d is %+v, DeepForest %v", c.Width, c.Height, s, k, g, w)
			}
		}
	}
}

func TestSettingsRefused(t *testing.T) {
	for _, s := range []Settings{{0, 0.05}, {-1, 0}, {400, 1}, {400, -0.01}, {400, math.NaN()}, {400, math.Inf(1)}} {
		if _, err := Windows(100, 100, s); !errors.Is(err, ErrSettings) {
			t.Errorf("%+v: %v, want ErrSettings", s, err)
		}
	}
	if _, err := Windows(0, 10, Settings{400, 0.05}); !errors.Is(err, ErrSettings) {
		t.Errorf("empty raster: %v", err)
	}
	// An overlap near 1 on a big raster: a window per pixel, refused by count.
	if _, err := Windows(100000, 100000, Settings{400, 0.999}); !errors.Is(err, ErrSettings) {
		t.Errorf("too many windows: %v", err)
	}
	// A patch larger than the raster is one window, as in DeepForest.
	w, err := Windows(300, 200, Settings{400, 0.05})
	if err != nil || len(w) != 1 || w[0] != (Window{0, 0, 300, 200}) {
		t.Errorf("patch > raster: %v %v", w, err)
	}
}

type mergeFixture struct {
	Peer  map[string]any `json:"peer"`
	Cases []struct {
		Raster  string
		IoU     float64 `json:"iou"`
		Width   int
		Height  int
		Patch   int
		Overlap float64
		Windows []struct {
			Window [4]int
			Dets   [][6]float64
		}
		PredictTile [][6]any `json:"predict_tile"`
	}
}

// TestMergeDeepForest feeds DeepForest's own per-window detections to Merge
// (tools/tile/merge.py): the rows must equal predict_tile's (mosaic's)
// exactly, in order, ties included; merge.json's 900×700 raster and tie
// cases, and e2e2000.json's 2000×2000 raster at predict_tile's defaults
// (36 windows of 400, overlap 0.05, iou 0.15).
func TestMergeDeepForest(t *testing.T) {
	for _, file := range []string{"testdata/merge.json", "testdata/e2e2000.json"} {
		t.Run(filepath.Base(file), func(t *testing.T) { checkMergeFixture(t, file) })
	}
}

func checkMergeFixture(t *testing.T, file string) {
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var fx mergeFixture
	if err := json.Unmarshal(b, &fx); err != nil {
		t.Fatal(err)
	}
	if len(fx.Cases) == 0 {
		t.Fatal("no cases")
	}
	for _, c := range fx.Cases {
		var wins []Window
		var dets [][]box.Detection
		rows := 0
		for _, w := range c.Windows {
			wins = append(wins, Window{w.Window[0], w.Window[1], w.Window[2], w.Window[3]})
			var ds []box.Detection
			for _, d := range w.Dets {
				ds = append(ds, box.Detection{Box: box.Box{Xmin: d[0], Ymin: d[1], Xmax: d[2], Ymax: d[3]}, Label: int32(d[4]), Score: d[5]})
			}
			rows += len(ds)
			dets = append(dets, ds)
		}
		if c.Width > 0 {
			want, err := Windows(c.Width, c.Height, Settings{c.Patch, c.Overlap})
			if err != nil || len(want) != len(wins) {
				t.Fatalf("%s: windows %d, DeepForest cut %d (%v)", c.Raster, len(want), len(wins), err)
			}
			for k := range want {
				if want[k] != wins[k] {
					t.Fatalf("%s: window %d: %+v, DeepForest %+v", c.Raster, k, want[k], wins[k])
				}
			}
		}
		got := Merge(wins, dets, c.IoU)
		if len(got) != len(c.PredictTile) {
			t.Fatalf("%s: %d rows from %d, DeepForest %d", c.Raster, len(got), rows, len(c.PredictTile))
		}
		if len(got) == rows || len(got) < 10 {
			t.Fatalf("%s: the case suppresses nothing (%d of %d rows kept): it tests no merge", c.Raster, len(got), rows)
		}
		for i, r := range c.PredictTile {
			g := got[i]
			ok := g.Box.Xmin == r[0].(float64) && g.Box.Ymin == r[1].(float64) && g.Box.Xmax == r[2].(float64) &&
				g.Box.Ymax == r[3].(float64) && g.Score == r[5].(float64) && labelName(g.Label) == r[4].(string)
			if !ok {
				t.Fatalf("%s: row %d: %+v, DeepForest %v", c.Raster, i, g, r)
			}
		}
		t.Logf("%s: %d windows, %d rows merged to %d", c.Raster, len(wins), rows, len(got))
	}
}

// labelName is the fixture's label: predict_tile maps the model's label 0
// to "Tree"; mosaic alone keeps the numbers.
func labelName(l int32) string {
	return map[int32]string{0: "0", 1: "1"}[l]
}

// TestNMSSparseEqualsNMS: the merge's NMS (only overlapping candidates
// visited) keeps exactly what torchvision's all-pairs kernel keeps, in the
// same order, on random integer boxes full of score ties, degenerate and
// equal boxes, at thresholds 0 to 1 (and falls back for a negative one).
func TestNMSSparseEqualsNMS(t *testing.T) {
	r := rand.New(rand.NewPCG(27, 1))
	for trial := range 300 {
		n := 1 + r.IntN(400)
		boxes := make([][4]float32, n)
		scores := make([]float32, n)
		side := float32(20 + r.IntN(500))
		for i := range boxes {
			x, y := float32(r.IntN(int(side))), float32(r.IntN(int(side)))
			w, h := float32(r.IntN(60)), float32(r.IntN(60))
			if r.IntN(10) == 0 && i > 0 {
				boxes[i] = boxes[r.IntN(i)] // an equal box
			} else {
				boxes[i] = [4]float32{x, y, x + w, y + h}
			}
			scores[i] = float32(r.IntN(8)) / 8
		}
		for _, thr := range []float64{0, 0.05, 0.15, 0.5, 0.999, 1, -0.1} {
			want := retinanet.NMS(boxes, scores, thr)
			got := retinanet.NMSSparse(boxes, scores, thr)
			if !slices.Equal(got, want) {
				t.Fatalf("trial %d, %d boxes, thr %v: %d kept, NMS %d", trial, n, thr, len(got), len(want))
			}
		}
	}
}

// BenchmarkMerge: one raster's merge at the 20000² bench's density
// (124,136 window boxes over 2,809 windows of 400).
func BenchmarkMerge(b *testing.B) {
	wins, _ := Windows(20000, 20000, Settings{400, 0.05})
	r := rand.New(rand.NewPCG(1, 2))
	dets := make([][]box.Detection, len(wins))
	for k := range wins {
		for range 44 {
			x, y := float64(r.IntN(370)), float64(r.IntN(370))
			dets[k] = append(dets[k], box.Detection{Box: box.Box{Xmin: x, Ymin: y, Xmax: x + 20 + float64(r.IntN(30)), Ymax: y + 20 + float64(r.IntN(30))},
				Score: float64(float32(r.Float64()))})
		}
	}
	b.ResetTimer()
	for range b.N {
		Merge(wins, dets, DefaultIoU)
	}
}

// TestGridEqualsWindows: the arithmetic grid gives DeepForest's list,
// window by window, on every fixture case and on random sizes.
func TestGridEqualsWindows(t *testing.T) {
	fx := readWindowsFixture(t)
	type tc struct {
		w, h int
		s    Settings
	}
	var cases []tc
	for _, c := range fx.Cases {
		cases = append(cases, tc{c.Width, c.Height, Settings{c.Patch, c.Overlap}})
	}
	r := rand.New(rand.NewPCG(3, 4))
	for range 500 {
		cases = append(cases, tc{1 + r.IntN(3000), 1 + r.IntN(3000), Settings{1 + r.IntN(900), float64(r.IntN(99)) / 100}})
	}
	for _, c := range cases {
		want, err := Windows(c.w, c.h, c.s)
		if err != nil {
			continue
		}
		g, err := NewGrid(c.w, c.h, c.s)
		if err != nil || g.Len() != len(want) {
			t.Fatalf("%dx%d %+v: grid of %d (%v), list of %d", c.w, c.h, c.s, g.Len(), err, len(want))
		}
		for k, w := range want {
			if g.At(k) != w {
				t.Fatalf("%dx%d %+v: window %d is %+v, list %+v", c.w, c.h, c.s, k, g.At(k), w)
			}
		}
	}
}

// TestGridAtScale: issue 35.3's raster, 7400×7400 at patch 400 and
// overlap 0.999 (49,014,001 windows, 1.5 GB as a list), costs no
// allocation as a grid, and its windows are the rule's.
func TestGridAtScale(t *testing.T) {
	s := Settings{Patch: 400, Overlap: 0.999}
	var g Grid
	allocs := testing.AllocsPerRun(3, func() { g, _ = NewGrid(7400, 7400, s) })
	if allocs != 0 || g.Len() != 7001*7001 {
		t.Fatalf("grid of %d windows, %v allocations", g.Len(), allocs)
	}
	for _, c := range []struct {
		k    int
		want Window
	}{{0, Window{0, 0, 400, 400}}, {1, Window{0, 1, 400, 400}}, {7001, Window{1, 0, 400, 400}}, {g.Len() - 1, Window{7000, 7000, 400, 400}}} {
		if got := g.At(c.k); got != c.want {
			t.Fatalf("window %d: %+v, want %+v", c.k, got, c.want)
		}
	}
}
