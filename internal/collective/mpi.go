//go:build !nompi

package collective

import (
	"github.com/canopy-hpc/canopy/mpi"
	"github.com/canopy-hpc/canopy/mpi/cmpi"
)

// World starts MPI through the cgo binding. Run without a launcher it
// is a 1-rank job.
func World() (mpi.Comm, func() error, error) {
	c, err := cmpi.Init()
	if err != nil {
		return nil, nil, err
	}
	return c, c.Finalize, nil
}
