package treeformer

import (
	"math"
	"sort"

	"github.com/canopy-hpc/canopy/infer/tile"
)

// The point path's postprocess, bit for bit DeepForest 1bad4419's
// (utilities.density_to_points with skimage's peak_local_max,
// TreeFormerModel.postprocess_density's scale, predict.reduce_points) on the
// same density map.

// PeakSettings are density_to_points' parameters: point.yaml's score_thresh
// (threshold_rel, relative to the map's maximum) and
// point.score_integration_radius (peak_local_max's min_distance, which is
// also its border: exclude_border=True).
type PeakSettings struct {
	ScoreThresh float32
	MinDistance int
}

// DefaultPeaks are point.yaml's values (the class default 0.5 is not what
// the CLI or the hub model use).
var DefaultPeaks = PeakSettings{ScoreThresh: 0.3, MinDistance: 5}

// Peak is one local maximum of a density map: its cell and its score, the
// map's value there over the map's maximum (float32, as torch divides).
type Peak struct {
	Row, Col int
	Score    float32
}

// normalise divides the map by its maximum clamped at 1e-6 (torch's
// density_map / amax.clamp(min=1e-6), float32).
func normalise(dm []float32) []float32 {
	amax := float32(math.Inf(-1))
	for _, v := range dm {
		if v > amax || v != v {
			amax = v
		}
	}
	den := max(amax, float32(1e-6))
	out := make([]float32, len(dm))
	for i, v := range dm {
		out[i] = v / den
	}
	return out
}

// Peaks finds the peaks of an h×w density map as density_to_points does:
// the map over its maximum, then peak_local_max(min_distance=d,
// threshold_rel=t, exclude_border=True):
//
//   - threshold = max(min(map), float32(t)·max(map)) (NumPy 2 keeps the
//     float32 of the map: the Python float is a weak scalar);
//   - a candidate equals the maximum of its (2d+1)² window, the image edge
//     repeated beyond the border (maximum_filter, mode "nearest"), and is
//     above the threshold; a map whose every cell is its window's maximum
//     (a flat map) has none;
//   - cells within d of the border are dropped;
//   - candidates in row-major order are sorted by score, highest first,
//     stably; each is kept unless one kept before it lies at a Chebyshev
//     distance below d (ensure_spacing, p = ∞).
func Peaks(dm []float32, h, w int, s PeakSettings) []Peak {
	if h*w == 0 || len(dm) != h*w {
		return nil
	}
	img := normalise(dm)
	lo, hi := img[0], img[0]
	for _, v := range img {
		lo, hi = min(lo, v), max(hi, v)
	}
	thr := max(lo, s.ScoreThresh*hi)
	d := s.MinDistance
	// separable maximum filter, edges repeated
	rowMax := make([]float32, h*w)
	for y := 0; y < h; y++ {
		r := img[y*w : (y+1)*w]
		for x := 0; x < w; x++ {
			m := r[x]
			for k := max(0, x-d); k <= min(w-1, x+d); k++ {
				m = max(m, r[k])
			}
			rowMax[y*w+x] = m
		}
	}
	peak := make([]bool, h*w)
	all := true
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			m := rowMax[y*w+x]
			for k := max(0, y-d); k <= min(h-1, y+d); k++ {
				m = max(m, rowMax[k*w+x])
			}
			peak[y*w+x] = img[y*w+x] == m
			all = all && peak[y*w+x]
		}
	}
	if all {
		return nil
	}
	var cand []Peak
	for y := d; y < h-d; y++ {
		for x := d; x < w-d; x++ {
			if peak[y*w+x] && img[y*w+x] > thr {
				cand = append(cand, Peak{y, x, img[y*w+x]})
			}
		}
	}
	sort.SliceStable(cand, func(i, j int) bool { return cand[i].Score > cand[j].Score })
	var kept []Peak
	if d <= 1 {
		return cand
	}
	for _, c := range cand {
		ok := true
		for _, k := range kept {
			if max(abs(c.Row-k.Row), abs(c.Col-k.Col)) < d {
				ok = false
				break
			}
		}
		if ok {
			kept = append(kept, c)
		}
	}
	return kept
}

func abs(a int) int {
	if a < 0 {
		return -a
	}
	return a
}

// Point is a point in a window's or an image's pixels.
type Point struct {
	X, Y  float64
	Score float32
	Label int
}

// ScalePeaks maps peaks of an oh×ow density map to image pixels as
// postprocess_density does: column·(pw/ow), row·(ph/oh), where ph×pw is the
// input padded to a multiple of 32 and oh×ow = (h/4)×(w/4) the cropped map,
// so the scale is not exactly 4 when a side is not a multiple of 32. torch
// multiplies the float32 coordinates by the Python float ratio in float32
// (the ratio rounded to float32 first).
func ScalePeaks(peaks []Peak, ph, pw, oh, ow int) []Point {
	sx := float32(float64(pw) / float64(ow))
	sy := float32(float64(ph) / float64(oh))
	out := make([]Point, len(peaks))
	for i, p := range peaks {
		out[i] = Point{X: float64(float32(p.Col) * sx), Y: float64(float32(p.Row) * sy), Score: p.Score}
	}
	return out
}

// ReducePoints is predict.reduce_points: in the order of descending score,
// each point still kept drops every other point within r (Euclidean,
// distance ≤ r: cKDTree.query_ball_point). DeepForest orders with numpy's
// default argsort reversed, whose tie order is not portable (introsort, and
// a SIMD sort on AVX-512 machines); canopy's order for equal scores is the
// later point first, which is what a stable sort reversed gives and what
// numpy gives for up to 16 points. The kept points keep their input order.
func ReducePoints(pts []Point, r float64) []Point {
	if r <= 0 || len(pts) <= 1 {
		return pts
	}
	order := make([]int, len(pts))
	for i := range order {
		order[i] = len(pts) - 1 - i
	}
	sort.SliceStable(order, func(a, b int) bool { return pts[order[a]].Score > pts[order[b]].Score })
	kept := make([]bool, len(pts))
	for i := range kept {
		kept[i] = true
	}
	r2 := r * r
	for _, i := range order {
		if !kept[i] {
			continue
		}
		for j := range pts {
			if j == i || !kept[j] {
				continue
			}
			dx, dy := pts[j].X-pts[i].X, pts[j].Y-pts[i].Y
			if float64(dx*dx)+float64(dy*dy) <= r2 {
				kept[j] = false
			}
		}
	}
	var out []Point
	for i, k := range kept {
		if k {
			out = append(out, pts[i])
		}
	}
	return out
}

// PointsPossible reports whether an h×w window can have a point under s:
// peak_local_max drops the MinDistance cells along each border, so a
// density map of (h/4)×(w/4) cells needs 2·MinDistance+1 on each side
// (DeepForest runs the network and finds none; canopy may skip it).
func PointsPossible(h, w int, s PeakSettings) bool {
	return h/Stride > 2*s.MinDistance && w/Stride > 2*s.MinDistance
}

// WindowPoints are a window's points in its pixels: the peaks of its
// density map, scaled (density_to_points, then postprocess_density).
func WindowPoints(d Density, s PeakSettings) []Point {
	return ScalePeaks(Peaks(d.Map, d.H, d.W, s), d.PadH, d.PadW, d.H, d.W)
}

// Mosaic is predict.mosaic for points: each window's points moved by the
// window's origin (float64 additions, as shapely's translate), in window
// order, then ReducePoints at r (point.nms_distance_thresh, 5 px).
func Mosaic(wins []tile.Window, pts [][]Point, r float64) []Point {
	var all []Point
	for k, w := range wins {
		for _, p := range pts[k] {
			p.X += float64(w.X)
			p.Y += float64(w.Y)
			all = append(all, p)
		}
	}
	return ReducePoints(all, r)
}

// NMSDistance is point.nms_distance_thresh.
const NMSDistance = 5.0
