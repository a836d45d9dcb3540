//go:build !mpich && !ompi && !mpicc

package cmpi

// Default: the "mpi" pkg-config module, which on Debian/Ubuntu is the
// alternatives-managed link to the system's default MPI (Open MPI or MPICH).

// #cgo pkg-config: mpi
import "C"
