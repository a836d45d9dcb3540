//go:build mpicc

package cmpi

// Built with -tags mpicc: no pkg-config module; the MPI compiler wrapper's
// flags come in through CGO_CFLAGS and CGO_LDFLAGS, as the Makefile sets
// them from scripts/mpicc-flags.sh (`mpicc --showme:compile/link` of Open
// MPI, `mpicc -show` of MPICH and its derivatives), for an MPI that ships
// no .pc file.

import "C"
