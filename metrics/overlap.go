package metrics

import (
	"math"
	"runtime"
	"slices"
	"sync"

	"github.com/canopy-hpc/canopy/box"
)

// overlapIndex finds the pairs of boxes whose intersection has positive
// area through a uniform grid over one side's boxes, in memory linear in
// the boxes and the pairs (never the product of the two sides).
type overlapIndex struct {
	x0, y0, cell float64
	nx, ny       int
	start        []int32 // cell c holds ids[start[c]:start[c+1]]
	ids          []int32
	big          []int32 // boxes spanning more than bigSpan cells, checked against every query
	linear       bool    // few boxes: every query scans them all, no grid
}

// linearMax is the most boxes an index scans instead of building a grid.
const linearMax = 32

// bigSpan is the most cells one box is entered in; larger boxes go to the
// big list, so the index stays linear in the boxes whatever their sizes.
const bigSpan = 64

// maxGridCells bounds the grid: cells never outnumber 4× the boxes (plus a
// constant), so a few huge boxes cannot blow up the index.
func maxGridCells(n int) int { return 4*n + 64 }

func newOverlapIndex(bs []box.Box) *overlapIndex {
	ix := &overlapIndex{}
	if len(bs) == 0 {
		return ix
	}
	if len(bs) <= linearMax {
		ix.linear = true
		return ix
	}
	minX, minY := math.Inf(1), math.Inf(1)
	maxX, maxY := math.Inf(-1), math.Inf(-1)
	sides := make([]float64, 0, len(bs))
	for _, b := range bs {
		minX, minY = min(minX, b.Xmin), min(minY, b.Ymin)
		maxX, maxY = max(maxX, b.Xmax), max(maxY, b.Ymax)
		sides = append(sides, max(b.Xmax-b.Xmin, b.Ymax-b.Ymin))
	}
	slices.Sort(sides)
	// a cell about the size of a typical box, but no more cells than
	// maxGridCells
	cell := sides[len(sides)/2]
	w, h := maxX-minX, maxY-minY
	if floor := math.Sqrt(w * h / float64(maxGridCells(len(bs)))); cell < floor {
		cell = floor
	}
	if !(cell > 0) || math.IsInf(cell, 0) || math.IsNaN(w+h) || math.IsInf(w+h, 0) {
		cell = math.Max(w, h) + 1
		if !(cell > 0) || math.IsInf(cell, 0) || math.IsNaN(cell) {
			cell = 1
		}
	}
	ix.x0, ix.y0, ix.cell = minX, minY, cell
	ix.nx = min(int(w/cell)+1, maxGridCells(len(bs)))
	ix.ny = min(int(h/cell)+1, maxGridCells(len(bs))/ix.nx+1)
	ix.start = make([]int32, ix.nx*ix.ny+1)
	for k, b := range bs {
		cx0, cy0, cx1, cy1 := ix.span(b)
		if (cx1-cx0+1)*(cy1-cy0+1) > bigSpan {
			ix.big = append(ix.big, int32(k))
			continue
		}
		for cy := cy0; cy <= cy1; cy++ {
			for cx := cx0; cx <= cx1; cx++ {
				ix.start[cy*ix.nx+cx+1]++
			}
		}
	}
	for c := 0; c < len(ix.start)-1; c++ {
		ix.start[c+1] += ix.start[c]
	}
	ix.ids = make([]int32, ix.start[len(ix.start)-1])
	fill := slices.Clone(ix.start[:len(ix.start)-1])
	for k, b := range bs {
		cx0, cy0, cx1, cy1 := ix.span(b)
		if (cx1-cx0+1)*(cy1-cy0+1) > bigSpan {
			continue
		}
		for cy := cy0; cy <= cy1; cy++ {
			for cx := cx0; cx <= cx1; cx++ {
				c := cy*ix.nx + cx
				ix.ids[fill[c]] = int32(k)
				fill[c]++
			}
		}
	}
	return ix
}

// cellOf maps a coordinate to its cell along one axis, clamped.
func cellOf(v, origin, cell float64, n int) int {
	c := math.Floor((v - origin) / cell)
	switch {
	case !(c >= 0):
		return 0
	case c >= float64(n):
		return n - 1
	}
	return int(c)
}

func (ix *overlapIndex) span(b box.Box) (cx0, cy0, cx1, cy1 int) {
	return cellOf(b.Xmin, ix.x0, ix.cell, ix.nx), cellOf(b.Ymin, ix.y0, ix.cell, ix.ny),
		cellOf(b.Xmax, ix.x0, ix.cell, ix.nx), cellOf(b.Ymax, ix.y0, ix.cell, ix.ny)
}

// each calls fn(k, area) once for every indexed box k whose intersection
// with q has positive area (Intersection(q, bs[k]) > 0), in no particular
// order. A pair is reported only from the cell holding the corner
// (max Xmin, max Ymin) of the overlap, which lies in both boxes' spans.
func (ix *overlapIndex) each(bs []box.Box, q box.Box, fn func(k int, area float64)) {
	if ix.linear {
		for k := range bs {
			if a := Intersection(q, bs[k]); a > 0 {
				fn(k, a)
			}
		}
		return
	}
	if ix.nx == 0 {
		return
	}
	for _, k := range ix.big {
		if a := Intersection(q, bs[k]); a > 0 {
			fn(int(k), a)
		}
	}
	cx0, cy0, cx1, cy1 := ix.span(q)
	for cy := cy0; cy <= cy1; cy++ {
		for cx := cx0; cx <= cx1; cx++ {
			c := cy*ix.nx + cx
			for _, k := range ix.ids[ix.start[c]:ix.start[c+1]] {
				b := bs[k]
				a := Intersection(q, b)
				if a <= 0 {
					continue
				}
				if cellOf(max(q.Xmin, b.Xmin), ix.x0, ix.cell, ix.nx) != cx || cellOf(max(q.Ymin, b.Ymin), ix.y0, ix.cell, ix.ny) != cy {
					continue
				}
				fn(int(k), a)
			}
		}
	}
}

// parallelMin is the query count from which the pair enumeration is split
// over goroutines.
const parallelMin = 4096

// queryRanges splits n queries into contiguous ranges, one per available
// thread when n is large (one range otherwise).
func queryRanges(n int) [][2]int {
	k := 1
	if n >= parallelMin {
		k = min(runtime.GOMAXPROCS(0), n/(parallelMin/4))
	}
	out := make([][2]int, 0, k)
	for i := range k {
		out = append(out, [2]int{n * i / k, n * (i + 1) / k})
	}
	return out
}

// enumerate lists what emit yields for queries 0..n-1, in query order: the
// queries' ranges are counted, then filled into their own parts of one
// slice allocated at its final size, on one goroutine per range. emit must
// yield the same items for a query each time it is called.
func enumerate[T any](n int, emit func(q int, yield func(T))) []T {
	ranges := queryRanges(n)
	counts := make([]int, len(ranges)+1)
	onRanges(ranges, func(k, lo, hi int) {
		c := 0
		for q := lo; q < hi; q++ {
			emit(q, func(T) { c++ })
		}
		counts[k+1] = c
	})
	for k := range ranges {
		counts[k+1] += counts[k]
	}
	out := make([]T, counts[len(ranges)])
	onRanges(ranges, func(k, lo, hi int) {
		p := counts[k]
		for q := lo; q < hi; q++ {
			emit(q, func(x T) { out[p] = x; p++ })
		}
	})
	return out
}

func onRanges(ranges [][2]int, fn func(k, lo, hi int)) {
	if len(ranges) == 1 {
		fn(0, ranges[0][0], ranges[0][1])
		return
	}
	var wg sync.WaitGroup
	for k, r := range ranges {
		wg.Add(1)
		go func() { defer wg.Done(); fn(k, r[0], r[1]) }()
	}
	wg.Wait()
}
