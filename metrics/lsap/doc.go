// Package lsap solves the rectangular linear sum assignment problem as
// scipy.optimize.linear_sum_assignment does, pair for pair, ties included:
// Assign on a dense matrix (the reference port of scipy's rectangular_lsap,
// checked against scipy's own answers), AssignFunc on a matrix whose entries
// are computed when the solver reads them, and AssignSparseMax on a matrix
// given by its non-zero entries (tested against Assign).
//
// It is the assignment solver of the metrics room: pure functions, no I/O,
// no MPI, and it imports nothing of canopy's. Its errors keep the "metrics:"
// prefix they had before the solver moved out of package metrics, so that a
// failed run's message is unchanged.
package lsap
