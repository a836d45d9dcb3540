//go:build nompi

package collective

import (
	"github.com/canopy-hpc/canopy/mpi"
	"github.com/canopy-hpc/canopy/mpi/local"
)

// World, in a build with -tags nompi, is a 1-rank in-process group:
// a binary that needs no MPI library (for one machine, or to carry to a
// machine without MPI). Started by a launcher with more ranks, every
// process finds itself alone and the launcher check exits 5.
func World() (mpi.Comm, func() error, error) {
	return local.New(1)[0], func() error { return nil }, nil
}
