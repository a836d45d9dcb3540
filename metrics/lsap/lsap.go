package lsap

import (
	"errors"
	"math"
)

// ErrInfeasible is returned by Assign for a cost matrix with NaN or -Inf
// entries (after the sign flip for maximisation), as scipy refuses them.
var ErrInfeasible = errors.New("metrics: cost matrix is infeasible")

// Assign solves the rectangular linear sum assignment problem on the
// row-major nr×nc matrix cost, maximising the total when maximize is set,
// and returns for each row its column (or -1 when the row is unassigned).
// min(nr, nc) pairs are assigned.
//
// The algorithm family is the one scipy.optimize.linear_sum_assignment
// uses (a shortest augmenting path method after Crouse, "On implementing 2D
// rectangular assignment algorithms", 2016), with the same conventions, so
// ties resolve the same way: wide matrices are solved as given, tall ones
// transposed; the negated matrix is minimised when maximising; columns are
// scanned from the last to the first, and among equally short paths an
// unassigned column is preferred.
func Assign(cost []float64, nr, nc int, maximize bool) ([]int, error) {
	out := unassigned(nr)
	if nr == 0 || nc == 0 {
		return out, nil
	}
	transpose := nc < nr
	rows, cols := nr, nc
	c := make([]float64, nr*nc)
	for i := 0; i < nr; i++ {
		for j := 0; j < nc; j++ {
			v := cost[i*nc+j]
			if maximize {
				v = -v
			}
			if math.IsNaN(v) || math.IsInf(v, -1) {
				return nil, ErrInfeasible
			}
			if transpose {
				c[j*nr+i] = v
			} else {
				c[i*nc+j] = v
			}
		}
	}
	if transpose {
		rows, cols = nc, nr
	}
	s := solver{
		nr: rows, nc: cols, cost: c,
		u: make([]float64, rows), v: make([]float64, cols),
		spc:     make([]float64, cols),
		path:    make([]int, cols),
		col4row: make([]int, rows),
		row4col: make([]int, cols),
		sr:      make([]bool, rows),
		sc:      make([]bool, cols),
		rem:     make([]int, cols),
	}
	for i := range s.path {
		s.path[i] = -1
		s.row4col[i] = -1
	}
	for i := range s.col4row {
		s.col4row[i] = -1
	}
	for cur := 0; cur < rows; cur++ {
		sink, minVal := s.augment(cur)
		if sink < 0 {
			return nil, ErrInfeasible
		}
		s.u[cur] += minVal
		for i := 0; i < rows; i++ {
			if s.sr[i] && i != cur {
				s.u[i] += minVal - s.spc[s.col4row[i]]
			}
		}
		for j := 0; j < cols; j++ {
			if s.sc[j] {
				s.v[j] -= minVal - s.spc[j]
			}
		}
		for j := sink; ; {
			i := s.path[j]
			s.row4col[j] = i
			s.col4row[i], j = j, s.col4row[i]
			if i == cur {
				break
			}
		}
	}
	if transpose {
		for i := 0; i < rows; i++ {
			out[s.col4row[i]] = i
		}
	} else {
		copy(out, s.col4row)
	}
	return out, nil
}

type solver struct {
	nr, nc           int
	cost             []float64
	u, v, spc        []float64
	path             []int
	col4row, row4col []int
	sr, sc           []bool
	rem              []int
}

// augment finds the shortest augmenting path from row cur and returns its
// sink column (or -1) and its length.
func (s *solver) augment(cur int) (int, float64) {
	minVal := 0.0
	n := s.nc
	for k := 0; k < s.nc; k++ {
		s.rem[k] = s.nc - k - 1
	}
	for i := range s.sr {
		s.sr[i] = false
	}
	for j := range s.sc {
		s.sc[j] = false
		s.spc[j] = math.Inf(1)
	}
	sink := -1
	i := cur
	for sink == -1 {
		index := -1
		lowest := math.Inf(1)
		s.sr[i] = true
		for k := 0; k < n; k++ {
			j := s.rem[k]
			r := minVal + s.cost[i*s.nc+j] - s.u[i] - s.v[j]
			if r < s.spc[j] {
				s.path[j] = i
				s.spc[j] = r
			}
			if s.spc[j] < lowest || (s.spc[j] == lowest && s.row4col[j] == -1) {
				lowest = s.spc[j]
				index = k
			}
		}
		minVal = lowest
		if math.IsInf(minVal, 1) {
			return -1, minVal
		}
		j := s.rem[index]
		if s.row4col[j] == -1 {
			sink = j
		} else {
			i = s.row4col[j]
		}
		s.sc[j] = true
		n--
		s.rem[index] = s.rem[n]
	}
	return sink, minVal
}

// unassigned is n rows assigned to no column (-1), what every solver
// starts from and returns for an empty side.
func unassigned(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = -1
	}
	return out
}
