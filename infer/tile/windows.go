// Package tile cuts a raster into the windows DeepForest's predict_tile
// predicts on, and merges the windows' detections back into the raster's
// detections as predict_tile does. It reads no pixels and knows no MPI:
// the window list and the merge are pure functions, so every rank computes
// the same list and the same merge.
//
// The windows are those of the slidingwindow package (0.0.14) that
// DeepForest's preprocess.compute_windows calls (DeepForest 1bad4419, the
// "single" and "window" strategies of predict_tile), per axis:
//
//	win  = min(patch, dim)
//	step = win - floor(win * overlap)
//	offsets 0, step, 2·step, … ≤ dim-win, then dim-win if it is not there
//
// so edge windows are moved inward, never padded, and every window has the
// same size. The list runs over x in the outer loop and y in the inner one.
// (predict_tile's "batch" strategy cuts otherwise: zero-padded edge windows
// in row-major order. canopy follows "single"/"window".)
package tile

import (
	"errors"
	"fmt"
	"math"
	"slices"
)

// ErrSettings marks window settings that cut no windows: a patch under one
// pixel, an overlap outside [0, 1), an empty raster, or more windows than
// MaxWindows.
var ErrSettings = errors.New("bad tile settings")

// MaxWindows bounds the windows of one raster (an overlap near 1 makes a
// window per pixel): the list is refused rather than allocated.
const MaxWindows = 50_000_000

// Window is a window of a raster in pixels: its top-left corner (X, Y) and
// its size W×H.
type Window struct {
	X, Y, W, H int
}

// Settings are predict_tile's patch_size and patch_overlap.
type Settings struct {
	Patch   int
	Overlap float64
}

// Check refuses settings that cut no windows (DeepForest fails on them
// later, with a Python error: a zero step).
func (s Settings) Check() error {
	if s.Patch < 1 {
		return fmt.Errorf("tile: patch size %d: must be at least 1: %w", s.Patch, ErrSettings)
	}
	if !(s.Overlap >= 0 && s.Overlap < 1) {
		return fmt.Errorf("tile: patch overlap %v: must be in [0, 1): %w", s.Overlap, ErrSettings)
	}
	return nil
}

// offsets are one axis's window offsets and the window size on it.
func offsets(dim, patch int, overlap float64) ([]int, int) {
	win := min(patch, dim)
	step := win - int(math.Floor(float64(win)*overlap))
	last := dim - win
	var o []int
	for x := 0; x <= last; x += step {
		o = append(o, x)
	}
	if len(o) == 0 || o[len(o)-1] != last {
		o = append(o, last)
	}
	return o, win
}

// axisCount is len(offsets(dim, patch, overlap)) without the list.
func axisCount(dim, patch int, overlap float64) int {
	win := min(patch, dim)
	step := win - int(math.Floor(float64(win)*overlap))
	last := dim - win
	n := last/step + 1
	if (n-1)*step != last {
		n++
	}
	return n
}

// Count is the number of windows of a width×height raster, without making
// the list.
func Count(width, height int, s Settings) (int, error) {
	if err := s.Check(); err != nil {
		return 0, err
	}
	if width < 1 || height < 1 {
		return 0, fmt.Errorf("tile: a %dx%d raster has no pixels: %w", width, height, ErrSettings)
	}
	nx, ny := axisCount(width, s.Patch, s.Overlap), axisCount(height, s.Patch, s.Overlap)
	if nx > MaxWindows/ny {
		return 0, fmt.Errorf("tile: a %dx%d raster cut by patch %d, overlap %v gives %d×%d windows, over the limit of %d: %w",
			width, height, s.Patch, s.Overlap, nx, ny, MaxWindows, ErrSettings)
	}
	return nx * ny, nil
}

// Grid is a raster's window list as arithmetic: window k of Len() is
// computed on demand (At), so a raster of 49 million windows costs a few
// words, not the 32 bytes per window of a list.
type Grid struct {
	nx, ny       int // windows per axis
	w, h         int // the window's size
	sx, sy       int // the step per axis
	lastX, lastY int // the last offset per axis (dim − win)
}

// NewGrid is the window grid of a width×height raster (Count's checks).
func NewGrid(width, height int, s Settings) (Grid, error) {
	if _, err := Count(width, height, s); err != nil {
		return Grid{}, err
	}
	g := Grid{w: min(s.Patch, width), h: min(s.Patch, height)}
	g.sx = g.w - int(math.Floor(float64(g.w)*s.Overlap))
	g.sy = g.h - int(math.Floor(float64(g.h)*s.Overlap))
	g.lastX, g.lastY = width-g.w, height-g.h
	g.nx, g.ny = axisCount(width, s.Patch, s.Overlap), axisCount(height, s.Patch, s.Overlap)
	return g, nil
}

// Len is the number of windows.
func (g Grid) Len() int { return g.nx * g.ny }

// At is window k (0 ≤ k < Len()) in DeepForest's order, x outer, y
// inner: offset i on an axis is min(i·step, dim − win), which is the
// slidingwindow rule (the offsets below the last, then the last).
func (g Grid) At(k int) Window {
	i, j := k/g.ny, k%g.ny
	return Window{X: min(i*g.sx, g.lastX), Y: min(j*g.sy, g.lastY), W: g.w, H: g.h}
}

// Windows is the window list of a width×height raster, in DeepForest's
// order (x outer, y inner).
func Windows(width, height int, s Settings) ([]Window, error) {
	if _, err := Count(width, height, s); err != nil {
		return nil, err
	}
	xs, w := offsets(width, s.Patch, s.Overlap)
	ys, h := offsets(height, s.Patch, s.Overlap)
	out := make([]Window, 0, len(xs)*len(ys))
	for _, x := range xs {
		for _, y := range ys {
			out = append(out, Window{X: x, Y: y, W: w, H: h})
		}
	}
	return out, nil
}

// Containing are the windows (indices k, increasing) that hold the
// rectangle of w×h pixels at (x, y) whole.
func (g Grid) Containing(x, y, w, h int) []int {
	is := axisContaining(g.nx, g.w, g.sx, g.lastX, x, w)
	js := axisContaining(g.ny, g.h, g.sy, g.lastY, y, h)
	var out []int
	for _, i := range is {
		for _, j := range js {
			out = append(out, i*g.ny+j)
		}
	}
	return out
}

// axisContaining are the offsets i (increasing) of an axis of n windows
// of size win, step and last offset whose span [off, off+win) holds
// [at, at+size). Offsets are min(i·step, last), non-decreasing in i: the
// last with off ≤ at is found, then the run below it still reaching
// at+size.
func axisContaining(n, win, step, last, at, size int) []int {
	off := func(i int) int { return min(i*step, last) }
	i := n - 1
	if last > at {
		i = min(n-1, at/max(step, 1))
	}
	var out []int
	for ; i >= 0 && off(i)+win >= at+size; i-- {
		if off(i) <= at {
			out = append(out, i)
		}
	}
	slices.Reverse(out)
	return out
}
