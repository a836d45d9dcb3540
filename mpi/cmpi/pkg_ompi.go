//go:build ompi && !mpich && !mpicc

package cmpi

// Built with -tags ompi: link against Open MPI's own "ompi-c" pkg-config
// module, which a module-loaded Open MPI installs (it has no "mpi.pc").

// #cgo pkg-config: ompi-c
import "C"
