package lsap

import (
	"fmt"
	"math"
)

// Entry is one explicit entry of a sparse matrix: the value at (Row, Col).
type Entry struct {
	Row, Col int
	Value    float64
}

// AssignSparseMax is Assign(dense, nr, nc, true) for the nr×nc matrix that
// is zero except for the given entries, without ever allocating nr×nc: it
// returns for each row its column (or -1), pair for pair what scipy's
// linear_sum_assignment(dense, maximize=True) returns, ties and
// zero-valued pairs included. Entries must be finite and non-negative
// (an explicit zero is the same as an absent entry), each (row, column) at
// most once.
//
// It emulates scipy's rectangular_lsap step by step (see solver in
// lsap.go): the same transposition, the same shortest augmenting paths
// with the same floating-point expressions, scan order and tie rules. What
// changes is how a step finds the column of least path cost. The columns
// whose entry in every row visited so far is zero all have the path cost
// fl(A − v[j]), where A is the least fl(minVal − u[i]) over the visited
// rows; the least of those is at the largest potential v[j], so the
// columns are kept in two ordered sets (unassigned, assigned) keyed by
// potential and index, and scipy's scan order (columns from the last,
// reordered by each removal) is tracked only for the few columns a step
// has moved. Memory is O(nr + nc + entries); a step costs O(log nc) plus
// the entries of the rows the current path has visited. docs/design.md
// gives the argument that every choice equals scipy's.
func AssignSparseMax(nr, nc int, entries []Entry) ([]int, error) {
	if nr < 0 || nc < 0 {
		return nil, fmt.Errorf("metrics: %d×%d matrix", nr, nc)
	}
	out := unassigned(nr)
	if nr == 0 || nc == 0 {
		return out, nil
	}
	transpose := nc < nr
	rows, cols := nr, nc
	if transpose {
		rows, cols = nc, nr
	}
	// CSR of the (transposed) matrix; rows' entries in column order.
	start := make([]int, rows+1)
	for _, e := range entries {
		if e.Row < 0 || e.Row >= nr || e.Col < 0 || e.Col >= nc {
			return nil, fmt.Errorf("metrics: entry (%d, %d) outside the %d×%d matrix", e.Row, e.Col, nr, nc)
		}
		if math.IsNaN(e.Value) || math.IsInf(e.Value, 0) {
			return nil, ErrInfeasible
		}
		if e.Value < 0 {
			return nil, fmt.Errorf("metrics: entry (%d, %d) is negative (%v)", e.Row, e.Col, e.Value)
		}
		if e.Value == 0 {
			continue
		}
		r := e.Row
		if transpose {
			r = e.Col
		}
		start[r+1]++
	}
	for i := 0; i < rows; i++ {
		start[i+1] += start[i]
	}
	col := make([]int32, start[rows])
	neg := make([]float64, start[rows])
	fill := append([]int(nil), start[:rows]...)
	for _, e := range entries {
		if e.Value == 0 {
			continue
		}
		r, c := e.Row, e.Col
		if transpose {
			r, c = c, r
		}
		col[fill[r]] = int32(c)
		neg[fill[r]] = -e.Value // maximising: scipy negates the matrix
		fill[r]++
	}
	fill = nil
	for r := 0; r < rows; r++ {
		sortEntries(col[start[r]:start[r+1]], neg[start[r]:start[r+1]])
		for k := start[r] + 1; k < start[r+1]; k++ {
			if col[k] == col[k-1] {
				c, rr := int(col[k]), r
				if transpose {
					c, rr = rr, c
				}
				return nil, fmt.Errorf("metrics: entry (%d, %d) given twice", rr, c)
			}
		}
	}
	s := newSparseSolver(rows, cols, start, col, neg)
	for cur := 0; cur < rows; cur++ {
		if err := s.augment(cur); err != nil {
			return nil, err
		}
	}
	if transpose {
		for i := 0; i < rows; i++ {
			out[s.col4row[i]] = i
		}
	} else {
		for i := 0; i < rows; i++ {
			out[i] = int(s.col4row[i])
		}
	}
	return out, nil
}

// sortEntries sorts one row's entries by column (insertion sort: rows are
// short; a long row falls back to a merge sort).
func sortEntries(col []int32, val []float64) {
	if len(col) > 32 {
		mergeSortEntries(col, val, make([]int32, len(col)), make([]float64, len(col)))
		return
	}
	for i := 1; i < len(col); i++ {
		c, v := col[i], val[i]
		k := i
		for ; k > 0 && col[k-1] > c; k-- {
			col[k], val[k] = col[k-1], val[k-1]
		}
		col[k], val[k] = c, v
	}
}

func mergeSortEntries(col []int32, val []float64, tc []int32, tv []float64) {
	if len(col) <= 32 {
		sortEntries(col, val)
		return
	}
	h := len(col) / 2
	mergeSortEntries(col[:h], val[:h], tc[:h], tv[:h])
	mergeSortEntries(col[h:], val[h:], tc[h:], tv[h:])
	i, j, k := 0, h, 0
	for i < h || j < len(col) {
		if j >= len(col) || (i < h && col[i] <= col[j]) {
			tc[k], tv[k] = col[i], val[i]
			i++
		} else {
			tc[k], tv[k] = col[j], val[j]
			j++
		}
		k++
	}
	copy(col, tc)
	copy(val, tv)
}

// negZero is what scipy's negation makes of a zero entry when maximising.
var negZero = math.Copysign(0, -1)

// sparseSolver holds scipy's state (u, v, col4row, row4col) and, per
// augmenting-path search, only what the search touched.
type sparseSolver struct {
	nr, nc  int
	start   []int
	col     []int32
	neg     []float64
	u, v    []float64
	col4row []int32
	row4col []int32

	// The columns still to scan that no step has moved, in two ordered
	// sets by (v descending, index ascending): unassigned and assigned.
	unassigned, assigned treap

	// Per search, stamped with gen so nothing is cleared per search.
	gen      uint32
	stamp    []uint32 // stamp[j] == gen: column j has per-search state
	tIndex   []int32  // index into touched, or -1
	selSpc   []float64
	selPath  []int32 // visit index of path[j] for a selected column
	selected []bool
	movedPos []int32 // scan position of a moved column, or -1
	posStamp []uint32
	posCol   []int32 // column at a scan position that a removal rewrote

	visited []int32   // rows in visit order
	records []aRecord // visits where A fell, in visit order
	touched []touchedCol
	moved   []int32 // moved columns still to scan (not in the treaps)
	sel     []int32 // selected columns in order
}

// aRecord is a visit whose a = fl(minVal − u[i]) set a new least A.
type aRecord struct {
	visit int32
	a     float64
}

// touchedCol is a column with an explicit entry in a visited row: the
// least path cost through those entries, and the first visit giving it.
type touchedCol struct {
	j     int32
	spc   float64
	visit int32
}

func newSparseSolver(nr, nc int, start []int, col []int32, neg []float64) *sparseSolver {
	s := &sparseSolver{
		nr: nr, nc: nc, start: start, col: col, neg: neg,
		u: make([]float64, nr), v: make([]float64, nc),
		col4row: make([]int32, nr), row4col: make([]int32, nc),
		stamp: make([]uint32, nc), tIndex: make([]int32, nc),
		selSpc: make([]float64, nc), selPath: make([]int32, nc), selected: make([]bool, nc),
		movedPos: make([]int32, nc), posStamp: make([]uint32, nc), posCol: make([]int32, nc),
	}
	for i := range s.col4row {
		s.col4row[i] = -1
	}
	for j := range s.row4col {
		s.row4col[j] = -1
	}
	s.unassigned.init(nc, s.v)
	s.assigned.init(nc, s.v)
	// every column starts unassigned at v = 0: a treap built in order
	s.unassigned.buildSorted(nc)
	return s
}

// touch gives column j per-search state on first use in this search.
func (s *sparseSolver) touch(j int32) {
	if s.stamp[j] != s.gen {
		s.stamp[j] = s.gen
		s.tIndex[j] = -1
		s.selected[j] = false
		s.movedPos[j] = -1
	}
}

func (s *sparseSolver) isSelected(j int32) bool { return s.stamp[j] == s.gen && s.selected[j] }

// colAt is the column at scan position p: scipy's remaining[p].
func (s *sparseSolver) colAt(p int) int32 {
	if s.posStamp[p] == s.gen {
		return s.posCol[p]
	}
	return int32(s.nc - 1 - p)
}

// pos is column j's scan position (j still to scan).
func (s *sparseSolver) pos(j int32) int {
	if s.stamp[j] == s.gen && s.movedPos[j] >= 0 {
		return int(s.movedPos[j])
	}
	return s.nc - 1 - int(j)
}

func (s *sparseSolver) treapOf(j int32) *treap {
	if s.row4col[j] < 0 {
		return &s.unassigned
	}
	return &s.assigned
}

// augment is scipy's augmenting_path from row cur followed by its dual
// update and augmentation.
func (s *sparseSolver) augment(cur int) error {
	s.gen++
	if s.gen == 0 { // wrapped: clear the stamps once
		clear(s.stamp)
		clear(s.posStamp)
		s.gen = 1
	}
	s.visited = s.visited[:0]
	s.records = s.records[:0]
	s.touched = s.touched[:0]
	s.moved = s.moved[:0]
	s.sel = s.sel[:0]
	minVal := 0.0
	numRem := s.nc
	A := math.Inf(1)
	i := int32(cur)
	sink := int32(-1)
	for sink == -1 {
		// Visit row i: every remaining column's path cost may fall.
		visit := int32(len(s.visited))
		s.visited = append(s.visited, i)
		base := minVal + negZero
		ui := s.u[i]
		if a := base - ui; a < A {
			A = a
			s.records = append(s.records, aRecord{visit, a})
		}
		for k := s.start[i]; k < s.start[i+1]; k++ {
			j := s.col[k]
			s.touch(j)
			if s.selected[j] {
				continue
			}
			r := minVal + s.neg[k] - ui - s.v[j]
			if t := s.tIndex[j]; t < 0 {
				s.tIndex[j] = int32(len(s.touched))
				s.touched = append(s.touched, touchedCol{j, r, visit})
			} else if r < s.touched[t].spc {
				s.touched[t].spc, s.touched[t].visit = r, visit
			}
		}
		// The least path cost m over the remaining columns.
		m := math.Inf(1)
		for _, t := range s.touched {
			if !s.isSelected(t.j) && t.spc < m {
				m = t.spc
			}
		}
		zero := math.Inf(1) // least fl(A − v[j]) over the remaining columns
		if j, ok := s.topColumn(); ok {
			zero = A - s.v[j]
		}
		for _, j := range s.moved {
			if z := A - s.v[j]; z < zero {
				zero = z
			}
		}
		m = min(m, zero)
		if math.IsInf(m, 1) {
			return ErrInfeasible
		}
		// scipy's choice among the columns at m: the last one scanned that
		// is unassigned, else the first one scanned.
		c := chooser{bestU: -1, bestA: math.MaxInt, colU: -1, colA: -1}
		for _, t := range s.touched {
			if t.spc == m && !s.isSelected(t.j) {
				c.consider(t.j, s.pos(t.j), s.row4col[t.j] < 0)
			}
		}
		for _, j := range s.moved {
			if A-s.v[j] == m {
				c.consider(j, s.pos(j), s.row4col[j] < 0)
			}
		}
		if zero == m {
			s.chooseZeroTier(&c, A, m)
		}
		j := c.colU
		if j < 0 {
			j = c.colA
		}
		s.selectColumn(j, m, A, &numRem)
		minVal = m
		if s.row4col[j] == -1 {
			sink = j
		} else {
			i = s.row4col[j]
		}
	}
	// Dual update (scipy's order; each update is independent).
	s.u[cur] += minVal
	for _, i := range s.visited[1:] {
		s.u[i] += minVal - s.selSpc[s.col4row[i]]
	}
	for _, j := range s.sel {
		s.v[j] -= minVal - s.selSpc[j]
	}
	// Augment along the path.
	for j := sink; ; {
		i := s.visited[s.selPath[j]]
		s.row4col[j] = i
		s.col4row[i], j = j, s.col4row[i]
		if int(i) == cur {
			break
		}
	}
	// The selected and moved columns go back to the ordered sets under
	// their new potentials and assignment.
	for _, j := range s.sel {
		s.treapOf(j).insert(j)
	}
	for _, j := range s.moved {
		s.treapOf(j).insert(j)
	}
	return nil
}

// chooser applies scipy's rule over candidates at the least cost.
type chooser struct {
	bestU, bestA int
	colU, colA   int32
}

func (c *chooser) consider(j int32, p int, unassigned bool) {
	if unassigned && p > c.bestU {
		c.bestU, c.colU = p, j
	}
	if p < c.bestA {
		c.bestA, c.colA = p, j
	}
}

// topColumn is an unmoved remaining column of the largest potential.
func (s *sparseSolver) topColumn() (int32, bool) {
	a, okA := s.unassigned.first()
	b, okB := s.assigned.first()
	switch {
	case okA && okB:
		if s.v[b] > s.v[a] {
			return b, true
		}
		return a, true
	case okA:
		return a, true
	case okB:
		return b, true
	}
	return -1, false
}

// chooseZeroTier offers the chooser the unmoved remaining columns whose
// zero-entry path cost fl(A − v[j]) is m: potential levels from the top
// down. Unmoved columns are scanned in descending index, so within a level
// the unassigned column scanned last is the one of least index and the
// assigned column scanned first the one of largest index.
func (s *sparseSolver) chooseZeroTier(c *chooser, A, m float64) {
	lvl := math.Inf(1)
	for {
		// the next level below lvl (strictly), in either set
		j, ok := s.unassigned.firstBelow(lvl)
		k, okk := s.assigned.firstBelow(lvl)
		var v float64
		switch {
		case ok && okk:
			v = max(s.v[j], s.v[k])
		case ok:
			v = s.v[j]
		case okk:
			v = s.v[k]
		default:
			return
		}
		if A-v != m {
			return
		}
		if j, ok := s.unassigned.firstAtOrBelow(v); ok && s.v[j] == v {
			c.consider(j, s.nc-1-int(j), true)
		}
		if k, ok := s.assigned.lastAtOrAbove(v); ok && s.v[k] == v {
			c.consider(k, s.nc-1-int(k), false)
		}
		lvl = v
	}
}

// selectColumn removes j from the columns to scan as scipy does
// (remaining[index] = remaining[--num_remaining]) and records its path
// cost and the first visit that reached it.
func (s *sparseSolver) selectColumn(j int32, m, A float64, numRem *int) {
	s.touch(j)
	p := s.pos(j)
	// path[j]: the first visit whose cost to j is m. Through an explicit
	// entry, tracked in touched; through a zero entry, the first visit
	// whose a gives fl(a − v[j]) ≤ m (fl is monotone in a, so that is a
	// record of A).
	path := int32(math.MaxInt32)
	if t := s.tIndex[j]; t >= 0 && s.touched[t].spc == m {
		path = s.touched[t].visit
	}
	for _, r := range s.records {
		if r.visit >= path {
			break
		}
		if r.a-s.v[j] <= m {
			path = r.visit
			break
		}
	}
	if s.movedPos[j] >= 0 {
		s.dropMoved(j)
	} else {
		s.treapOf(j).remove(j)
	}
	last := *numRem - 1
	if p != last {
		lc := s.colAt(last)
		s.touch(lc)
		if s.movedPos[lc] < 0 {
			s.treapOf(lc).remove(lc)
			s.moved = append(s.moved, lc)
		}
		s.movedPos[lc] = int32(p)
		s.posStamp[p], s.posCol[p] = s.gen, lc
	}
	*numRem = last
	s.selected[j] = true
	s.selSpc[j] = m
	s.selPath[j] = path
	s.sel = append(s.sel, j)
}

func (s *sparseSolver) dropMoved(j int32) {
	for k, x := range s.moved {
		if x == j {
			s.moved = append(s.moved[:k], s.moved[k+1:]...)
			return
		}
	}
}
