package lsap

import "math"

// AssignFunc is Assign on an nr×nc cost matrix that is never stored: cost(i,
// j) gives entry (i, j) when the solver needs it, so memory is O(nr + nc)
// while the work stays that of scipy's dense solver (every augmenting step
// scans a row's every column). It minimises (maximize: maximises), resolves
// ties as Assign and scipy.optimize.linear_sum_assignment do (same
// transpose, same column scan order, same preference for unassigned
// columns), and returns each row's column or -1. cost must be a pure
// function: the solver may ask for an entry more than once.
func AssignFunc(nr, nc int, cost func(i, j int) float64, maximize bool) ([]int, error) {
	out := unassigned(nr)
	if nr == 0 || nc == 0 {
		return out, nil
	}
	at := cost
	rows, cols := nr, nc
	if nc < nr { // scipy solves tall matrices transposed
		rows, cols = nc, nr
		at = func(i, j int) float64 { return cost(j, i) }
	}
	c := at
	if maximize {
		c = func(i, j int) float64 { return -at(i, j) }
	}
	f := funcSolver{
		rows: rows, cols: cols, cost: c,
		u: make([]float64, rows), v: make([]float64, cols),
		shortest: make([]float64, cols),
		path:     make([]int, cols),
		col4row:  make([]int, rows),
		row4col:  make([]int, cols),
		seenRow:  make([]bool, rows),
		seenCol:  make([]bool, cols),
		remain:   make([]int, cols),
	}
	for j := range f.row4col {
		f.row4col[j], f.path[j] = -1, -1
	}
	for i := range f.col4row {
		f.col4row[i] = -1
	}
	for cur := 0; cur < rows; cur++ {
		sink, d, err := f.shortestPath(cur)
		if err != nil {
			return nil, err
		}
		f.update(cur, sink, d)
	}
	if nc < nr {
		for i := 0; i < rows; i++ {
			out[f.col4row[i]] = i
		}
	} else {
		copy(out, f.col4row)
	}
	return out, nil
}

// funcSolver is the state of AssignFunc's shortest augmenting path method:
// the dual variables u (rows) and v (columns), the tentative path lengths
// and predecessors, and the current assignment.
type funcSolver struct {
	rows, cols       int
	cost             func(i, j int) float64
	u, v, shortest   []float64
	path             []int
	col4row, row4col []int
	seenRow, seenCol []bool
	remain           []int
}

// shortestPath grows Dijkstra's tree from row cur over reduced costs until
// it reaches an unassigned column; it returns that column and the path's
// length. A NaN or -Inf entry is ErrInfeasible, as scipy refuses them.
func (f *funcSolver) shortestPath(cur int) (int, float64, error) {
	for k := 0; k < f.cols; k++ {
		f.remain[k] = f.cols - 1 - k
		f.seenCol[k] = false
		f.shortest[k] = math.Inf(1)
	}
	clear(f.seenRow)
	left := f.cols
	d := 0.0
	for i := cur; ; {
		f.seenRow[i] = true
		best, lowest := -1, math.Inf(1)
		for k := 0; k < left; k++ {
			j := f.remain[k]
			x := f.cost(i, j)
			if math.IsNaN(x) || math.IsInf(x, -1) {
				return -1, 0, ErrInfeasible
			}
			if r := d + x - f.u[i] - f.v[j]; r < f.shortest[j] {
				f.path[j], f.shortest[j] = i, r
			}
			if s := f.shortest[j]; s < lowest || (s == lowest && f.row4col[j] == -1) {
				best, lowest = k, s
			}
		}
		d = lowest
		if math.IsInf(d, 1) {
			return -1, 0, ErrInfeasible
		}
		j := f.remain[best]
		f.seenCol[j] = true
		left--
		f.remain[best] = f.remain[left]
		if f.row4col[j] == -1 {
			return j, d, nil
		}
		i = f.row4col[j]
	}
}

// update moves the duals by the path length d and flips the assignment
// along the path that ends at column sink.
func (f *funcSolver) update(cur, sink int, d float64) {
	f.u[cur] += d
	for i, seen := range f.seenRow {
		if seen && i != cur {
			f.u[i] += d - f.shortest[f.col4row[i]]
		}
	}
	for j, seen := range f.seenCol {
		if seen {
			f.v[j] -= d - f.shortest[j]
		}
	}
	for j := sink; ; {
		i := f.path[j]
		f.row4col[j] = i
		f.col4row[i], j = j, f.col4row[i]
		if i == cur {
			break
		}
	}
}
