package htmlreport

import (
	"fmt"
	"image"
	"math"
	"sort"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/metrics"
)

// Tile is eval --tile's part of the page: each image is a raster cut into
// windows, and the raster's worst windows are drawn instead of whole
// images (a raster is never read whole for the page).
type Tile struct {
	// Windows[i] are raster i's windows, in the run's window order.
	Windows [][]Window
	// Settings are rows the run table adds (the windows' settings).
	Settings [][2]string
	// Read returns the pixels of window k of raster i, Windows[i][k].W ×
	// .H with its origin at (0, 0); only the windows drawn are read. A
	// window it does not give is drawn as its boxes on grey with the
	// reason.
	Read func(raster, window int) (image.Image, error)
}

// Window is a rectangle of a raster, in pixels.
type Window struct{ X, Y, W, H int }

// windowStat is one window's line in the worst-windows ranking.
type windowStat struct {
	raster, window      int
	truth, missed       int // truth boxes centred in the window, and those no detection matched
	dets, fp            int // merged detections centred in the window, and those that matched no truth box
	drawTruth, drawDets []int
}

func (s windowStat) errors() int { return s.missed + s.fp }

// worstWindowsRule says on the page what "worst" means (the run's IoU
// threshold and --html-worst filled in).
const worstWindowsRule = "A window's errors are the truth boxes whose centre lies in it that no merged detection matched (DeepForest's one-to-one match, IoU above %v, as in results.csv) plus the merged detections whose centre lies in it that matched no truth box. Windows overlap, so a box near a window's edge counts in every window that holds its centre. At most %d windows (--html-worst), those with the most errors, are drawn with every box that overlaps them; ties go to the raster first in the truth CSV, then to the lower window index (report.json's window order, from 0). Windows without errors are not drawn."

// worstWindows ranks every window of every raster by its errors and
// returns at most n with at least one (ties: raster, then window index),
// with the boxes each overlaps (to draw).
func worstWindows(images []box.Image, dets [][]box.Detection, matches []metrics.Match, wins [][]Window, n int) []windowStat {
	if n <= 0 {
		return nil
	}
	type key struct{ image, id int }
	matchedTruth, matchedPred := map[key]bool{}, map[key]bool{}
	for _, m := range matches {
		if m.Match {
			matchedTruth[key{m.Image, m.TruthID}] = true
			matchedPred[key{m.Image, m.PredID}] = true
		}
	}
	var cand []windowStat
	grids := make([]winGrid, len(images))
	for i := range images {
		if i >= len(wins) || len(wins[i]) == 0 {
			continue
		}
		g := newWinGrid(wins[i])
		grids[i] = g
		st := make([]windowStat, len(wins[i]))
		for t, tr := range images[i].Truth {
			x, y := g.centre(tr.Box)
			g.each(x, y, x, y, true, func(k int) {
				st[k].truth++
				if !matchedTruth[key{i, t}] {
					st[k].missed++
				}
			})
		}
		for d, det := range dets[i] {
			x, y := g.centre(det.Box)
			g.each(x, y, x, y, true, func(k int) {
				st[k].dets++
				if !matchedPred[key{i, d}] {
					st[k].fp++
				}
			})
		}
		for k := range st {
			if st[k].errors() > 0 {
				st[k].raster, st[k].window = i, k
				cand = append(cand, st[k])
			}
		}
	}
	// cand is in (raster, window) order: a stable sort keeps the tie-break.
	sort.SliceStable(cand, func(a, b int) bool { return cand[a].errors() > cand[b].errors() })
	if len(cand) > n {
		cand = cand[:n]
	}
	// The boxes each drawn window overlaps, in their file order.
	byRaster := map[int][]int{}
	for c := range cand {
		byRaster[cand[c].raster] = append(byRaster[cand[c].raster], c)
	}
	for i, cs := range byRaster {
		at := map[int]int{} // window -> candidate
		for _, c := range cs {
			at[cand[c].window] = c
		}
		g := grids[i]
		for t, tr := range images[i].Truth {
			b := tr.Box
			g.each(b.Xmin, b.Ymin, b.Xmax, b.Ymax, false, func(k int) {
				if c, ok := at[k]; ok {
					cand[c].drawTruth = append(cand[c].drawTruth, t)
				}
			})
		}
		for d, det := range dets[i] {
			b := det.Box
			g.each(b.Xmin, b.Ymin, b.Xmax, b.Ymax, false, func(k int) {
				if c, ok := at[k]; ok {
					cand[c].drawDets = append(cand[c].drawDets, d)
				}
			})
		}
	}
	return cand
}

// winGrid finds a raster's windows by position: the windows grouped in
// columns by X (ascending), each column's windows by Y (ascending).
type winGrid struct {
	wins       []Window
	cols       []winColumn
	maxW, maxH int
	w, h       int // the windows' extent (the raster's size)
}

type winColumn struct {
	x   int
	ids []int // by Y
}

func newWinGrid(wins []Window) winGrid {
	g := winGrid{wins: wins}
	ids := make([]int, len(wins))
	for k, w := range wins {
		ids[k] = k
		g.maxW, g.maxH = max(g.maxW, w.W), max(g.maxH, w.H)
		g.w, g.h = max(g.w, w.X+w.W), max(g.h, w.Y+w.H)
	}
	sort.SliceStable(ids, func(a, b int) bool {
		wa, wb := wins[ids[a]], wins[ids[b]]
		if wa.X != wb.X {
			return wa.X < wb.X
		}
		return wa.Y < wb.Y
	})
	for _, k := range ids {
		if n := len(g.cols); n == 0 || g.cols[n-1].x != wins[k].X {
			g.cols = append(g.cols, winColumn{x: wins[k].X})
		}
		c := &g.cols[len(g.cols)-1]
		c.ids = append(c.ids, k)
	}
	return g
}

// centre is a box's centre, moved into the raster when it lies outside.
func (g winGrid) centre(b box.Box) (float64, float64) {
	clamp := func(v float64, n int) float64 {
		return math.Max(0, math.Min(v, math.Nextafter(float64(n), 0)))
	}
	return clamp((b.Xmin+b.Xmax)/2, g.w), clamp((b.Ymin+b.Ymax)/2, g.h)
}

// each calls f, in no particular order, for every window holding the point
// (x0, y0) (point: the window's [X, X+W) × [Y, Y+H)), or else for every
// window the box [x0, x1] × [y0, y1] overlaps with a positive area.
func (g winGrid) each(x0, y0, x1, y1 float64, point bool, f func(k int)) {
	in := func(lo, size int, a, b float64) bool {
		if point {
			return float64(lo) <= a && a < float64(lo+size)
		}
		return float64(lo) < b && a < float64(lo+size)
	}
	// columns with x <= x1 (point) or x < x1 (box), back while x + maxW > x0
	end := sort.Search(len(g.cols), func(c int) bool {
		if point {
			return float64(g.cols[c].x) > x1
		}
		return float64(g.cols[c].x) >= x1
	})
	for c := end - 1; c >= 0 && float64(g.cols[c].x+g.maxW) > x0; c-- {
		ids := g.cols[c].ids
		e := sort.Search(len(ids), func(r int) bool {
			if point {
				return float64(g.wins[ids[r]].Y) > y1
			}
			return float64(g.wins[ids[r]].Y) >= y1
		})
		for r := e - 1; r >= 0 && float64(g.wins[ids[r]].Y+g.maxH) > y0; r-- {
			w := g.wins[ids[r]]
			if in(w.X, w.W, x0, x1) && in(w.Y, w.H, y0, y1) {
				f(ids[r])
			}
		}
	}
}

// drawWindow draws window s's pixels (or, when tl.Read does not give
// them, grey) with the truth boxes and detections that overlap it.
func drawWindow(im box.Image, dets []box.Detection, s windowStat, tl *Tile, opt Options) (thumb, error) {
	w := tl.Windows[s.raster][s.window]
	t := thumb{Path: im.Path, Alt: fmt.Sprintf("%s window %d", im.Path, s.window),
		Caption: fmt.Sprintf("window %d at x %d–%d, y %d–%d: %d of %d truth boxes missed, %d of %d detections false positives",
			s.window, w.X, w.X+w.W, w.Y, w.Y+w.H, s.missed, s.truth, s.fp, s.dets)}
	var src image.Image
	var err error
	if tl.Read != nil {
		src, err = tl.Read(s.raster, s.window)
	} else {
		err = fmt.Errorf("no reader")
	}
	if err == nil && (src.Bounds().Dx() != w.W || src.Bounds().Dy() != w.H) {
		err = fmt.Errorf("read %dx%d, not the window's %dx%d", src.Bounds().Dx(), src.Bounds().Dy(), w.W, w.H)
	}
	if err != nil {
		t.Note = "window not drawn (" + err.Error() + "): boxes drawn on grey"
		src = canvas{greyUniform, image.Rect(0, 0, w.W, w.H)}
	}
	dx, dy := float64(w.X), float64(w.Y)
	shift := func(b box.Box) box.Box {
		return box.Box{Xmin: b.Xmin - dx, Ymin: b.Ymin - dy, Xmax: b.Xmax - dx, Ymax: b.Ymax - dy}
	}
	var truth []box.Truth
	for _, k := range s.drawTruth {
		tr := im.Truth[k]
		tr.Box = shift(tr.Box)
		truth = append(truth, tr)
	}
	var ds []box.Detection
	for _, k := range s.drawDets {
		d := dets[k]
		d.Box = shift(d.Box)
		ds = append(ds, d)
	}
	return drawBoxes(t, src, truth, ds, opt.Thumb, nil)
}
