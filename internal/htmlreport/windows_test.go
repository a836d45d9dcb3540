package htmlreport

import (
	"bytes"
	"errors"
	"fmt"
	"image"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/metrics"
)

// slidingWindows cuts a w×h raster as DeepForest's compute_windows does
// (x outer, y inner, the last window moved inward), enough for the tests.
func slidingWindows(w, h, patch int, overlap float64) []Window {
	offs := func(dim int) (int, []int) {
		win := min(patch, dim)
		step := win - int(float64(win)*overlap)
		var o []int
		for x := 0; x <= dim-win; x += step {
			o = append(o, x)
		}
		if o[len(o)-1] != dim-win {
			o = append(o, dim-win)
		}
		return win, o
	}
	ww, xs := offs(w)
	wh, ys := offs(h)
	var out []Window
	for _, x := range xs {
		for _, y := range ys {
			out = append(out, Window{x, y, ww, wh})
		}
	}
	return out
}

// TestWinGridMatchesBruteForce: the windows each finds for points (on
// window edges too) and boxes are those a scan of every window finds.
func TestWinGridMatchesBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, c := range []struct {
		w, h, patch int
		overlap     float64
	}{{1000, 700, 300, 0.2}, {640, 560, 300, 0.15}, {400, 400, 400, 0.05}, {3000, 200, 128, 0.5}, {50, 900, 400, 0}} {
		wins := slidingWindows(c.w, c.h, c.patch, c.overlap)
		g := newWinGrid(wins)
		for q := 0; q < 3000; q++ {
			var x0, y0, x1, y1 float64
			point := q%2 == 0
			if q%6 == 0 { // on a window's corner
				w := wins[rng.IntN(len(wins))]
				x0, y0 = float64(w.X+rng.IntN(2)*w.W), float64(w.Y+rng.IntN(2)*w.H)
			} else {
				x0, y0 = rng.Float64()*float64(c.w), rng.Float64()*float64(c.h)
			}
			x1, y1 = x0, y0
			if !point {
				x1, y1 = x0+rng.Float64()*90, y0+rng.Float64()*90
			}
			var got, want []int
			g.each(x0, y0, x1, y1, point, func(k int) { got = append(got, k) })
			for k, w := range wins {
				var in bool
				if point {
					in = float64(w.X) <= x0 && x0 < float64(w.X+w.W) && float64(w.Y) <= y0 && y0 < float64(w.Y+w.H)
				} else {
					in = float64(w.X) < x1 && x0 < float64(w.X+w.W) && float64(w.Y) < y1 && y0 < float64(w.Y+w.H)
				}
				if in {
					want = append(want, k)
				}
			}
			sort.Ints(got)
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("%+v: (%v,%v)-(%v,%v) point %v: windows %v, want %v", c, x0, y0, x1, y1, point, got, want)
			}
			if point && x0 < float64(c.w) && y0 < float64(c.h) && len(got) == 0 {
				t.Fatalf("%+v: point (%v,%v) in no window", c, x0, y0)
			}
		}
	}
}

// TestWorstWindowsRanking: errors are the missed truth boxes and the false
// positives centred in a window; most errors first, ties by raster then
// window; windows without errors are left out; the boxes drawn are those
// overlapping the window.
func TestWorstWindowsRanking(t *testing.T) {
	// Two 200×100 rasters, windows of 100×100 without overlap: 0 = left, 1 = right.
	wins := [][]Window{slidingWindows(200, 100, 100, 0), slidingWindows(200, 100, 100, 0)}
	b := func(x, y float64) box.Box { return box.Box{Xmin: x, Ymin: y, Xmax: x + 20, Ymax: y + 20} }
	images := []box.Image{
		{Path: "a.tif", Truth: []box.Truth{{Box: b(10, 10)}, {Box: b(30, 10)}, {Box: b(130, 10)}, {Box: b(90, 50)}}},
		{Path: "b.tif", Truth: []box.Truth{{Box: b(10, 10)}, {Box: b(110, 10)}}},
	}
	dets := [][]box.Detection{
		{{Box: b(10, 10), Score: 0.9}, {Box: b(150, 70), Score: 0.8}},
		{{Box: b(50, 50), Score: 0.7}, {Box: b(130, 70), Score: 0.6}},
	}
	matches := []metrics.Match{
		{Image: 0, TruthID: 0, PredID: 0, Match: true},
		{Image: 0, TruthID: 1, PredID: -1}, {Image: 0, TruthID: 2, PredID: -1},
		{Image: 0, TruthID: 3, PredID: 1, Match: false}, // assigned, IoU too low: missed; the detection a false positive
		{Image: 1, TruthID: 0, PredID: -1}, {Image: 1, TruthID: 1, PredID: -1},
	}
	// a.tif window 0: truth 0 (found), 1 (missed); det 0 matched → 1 error.
	// truth 3 is centred at x 100: window 1 → a.tif window 1: truths 2, 3 missed, det 1 fp → 3 errors.
	// b.tif window 0: truth 0 missed, det 0 fp → 2; window 1: truth 1 missed, det 1 fp → 2.
	got := worstWindows(images, dets, matches, wins, 10)
	var order []string
	for _, s := range got {
		order = append(order, fmt.Sprintf("%d/%d:%d+%d of %d,%d", s.raster, s.window, s.missed, s.fp, s.truth, s.dets))
	}
	want := "[0/1:2+1 of 2,1 1/0:1+1 of 1,1 1/1:1+1 of 1,1 0/0:1+0 of 2,1]"
	if fmt.Sprint(order) != want {
		t.Fatalf("ranking %v, want %s", order, want)
	}
	// a.tif window 0 draws truth 0, 1 and 3 (3 overlaps x 90-110), det 0.
	if s := got[3]; fmt.Sprint(s.drawTruth, s.drawDets) != "[0 1 3] [0]" {
		t.Fatalf("a.tif window 0 draws truth %v, dets %v", s.drawTruth, s.drawDets)
	}
	if got := worstWindows(images, dets, matches, wins, 2); len(got) != 2 || got[1].raster != 1 || got[1].window != 0 {
		t.Fatalf("n=2: %+v", got)
	}
	if got := worstWindows(images, dets, matches, wins, 0); got != nil {
		t.Fatalf("n=0 draws %d", len(got))
	}
}

// TestTilePageDrawsOnlyWorstWindows: the eval --tile page reads only the
// windows it draws, draws them with their captions, says how worst is
// defined, draws a window it cannot read as grey with the reason, and
// escapes the raster's name and labels.
func TestTilePageDrawsOnlyWorstWindows(t *testing.T) {
	const name = `<img src=x onerror=alert(1)>&"r'.tif`
	wins := slidingWindows(900, 700, 300, 0.1)
	rng := rand.New(rand.NewPCG(5, 6))
	im := box.Image{Path: name}
	var dets []box.Detection
	for k := 0; k < 150; k++ {
		x, y := rng.Float64()*860, rng.Float64()*660
		bx := box.Box{Xmin: x, Ymin: y, Xmax: x + 30, Ymax: y + 30}
		im.Truth = append(im.Truth, box.Truth{Box: bx})
		if rng.Float64() < 0.7 {
			dets = append(dets, box.Detection{Box: bx, Score: rng.Float64()})
		}
	}
	labels := box.SortedLabelMap([]string{`<script>alert("l")</script>`})
	in := metrics.Input{Images: []box.Image{im}, Dets: [][]box.Detection{dets}, Labels: labels}
	res, err := metrics.Compute(in, metrics.Options{IoUThreshold: 0.4}, metrics.All, false)
	if err != nil {
		t.Fatal(err)
	}
	var read []int
	tl := &Tile{Windows: [][]Window{wins}, Settings: [][2]string{{"tile: windows", "12"}}}
	want := worstWindows(in.Images, in.Dets, res.Matches, tl.Windows, 7)
	if len(want) != 7 {
		t.Fatalf("%d windows with errors, want 7 drawn", len(want))
	}
	bad := want[2].window // its read fails
	tl.Read = func(r, k int) (image.Image, error) {
		read = append(read, k)
		if r != 0 {
			t.Fatalf("raster %d read", r)
		}
		if k == bad {
			return nil, errors.New("a <b>bad</b> block")
		}
		w := wins[k]
		m := image.NewRGBA(image.Rect(0, 0, w.W, w.H))
		for i := range m.Pix {
			m.Pix[i] = uint8(i)
		}
		return m, nil
	}
	rj := []byte(`{"metrics": {"box_recall": 0.7}, "run": {"ranks": 3, "iou_threshold": 0.4}}`)
	var page bytes.Buffer
	e := Eval{ReportJSON: rj, Images: in.Images, Dets: in.Dets, Labels: labels, Matches: res.Matches, PR: res.PR, Tile: tl}
	if err := WriteEval(&page, e, Options{Worst: 7, Thumb: 120}); err != nil {
		t.Fatal(err)
	}
	s := page.String()
	var drawn []int
	for _, w := range want {
		drawn = append(drawn, w.window)
	}
	if fmt.Sprint(read) != fmt.Sprint(drawn) {
		t.Fatalf("read windows %v, drew %v: the page reads only the windows it draws", read, drawn)
	}
	if n := strings.Count(s, "<figure>"); n != 7 {
		t.Fatalf("%d figures, want 7", n)
	}
	d, err := ReadData(page.Bytes())
	if err != nil || d.Images != 7 {
		t.Fatalf("data block: %+v %v", d, err)
	}
	for _, w := range want {
		cap := fmt.Sprintf("window %d at x %d–%d, y %d–%d: %d of %d truth boxes missed, %d of %d detections false positives",
			w.window, wins[w.window].X, wins[w.window].X+wins[w.window].W, wins[w.window].Y, wins[w.window].Y+wins[w.window].H, w.missed, w.truth, w.fp, w.dets)
		if !strings.Contains(s, cap) {
			t.Fatalf("no caption %q", cap)
		}
	}
	for _, frag := range []string{"<h2 id=\"images\">Worst windows</h2>", "IoU above 0.4", "At most 7 windows", "tile: windows"} {
		if !strings.Contains(s, frag) {
			t.Fatalf("page lacks %q", frag)
		}
	}
	if strings.Count(s, "window not drawn (a &lt;b&gt;bad&lt;/b&gt; block): boxes drawn on grey") != 1 {
		t.Fatalf("window %d, whose read failed, is not drawn on grey with the reason", bad)
	}
	for _, raw := range []string{"<img src=x", "<script>alert", "<b>bad"} {
		if strings.Contains(s, raw) {
			t.Fatalf("page holds %q unescaped", raw)
		}
	}
	if !strings.Contains(s, "&lt;img src=x onerror=alert(1)&gt;&amp;&#34;r&#39;.tif") {
		t.Fatal("the raster's name is not on the page, escaped")
	}
}

// BenchmarkWorstWindows: the ranking on a 20,000² raster cut as predict
// --tile's default (400, 0.05: 2,809 windows) with 120,000 truth boxes and
// 120,000 detections, a third of them missed or false.
func BenchmarkWorstWindows(b *testing.B) {
	wins := [][]Window{slidingWindows(20000, 20000, 400, 0.05)}
	rng := rand.New(rand.NewPCG(7, 8))
	im := box.Image{Path: "big.tif"}
	var dets []box.Detection
	var matches []metrics.Match
	for k := 0; k < 120000; k++ {
		x, y := rng.Float64()*19960, rng.Float64()*19960
		bx := box.Box{Xmin: x, Ymin: y, Xmax: x + 40, Ymax: y + 40}
		im.Truth = append(im.Truth, box.Truth{Box: bx})
		dets = append(dets, box.Detection{Box: bx, Score: 0.5})
		matches = append(matches, metrics.Match{TruthID: k, PredID: k, Match: k%3 != 0})
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if got := worstWindows([]box.Image{im}, [][]box.Detection{dets}, matches, wins, 12); len(got) != 12 {
			b.Fatal(len(got))
		}
	}
}
