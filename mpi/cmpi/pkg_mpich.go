//go:build mpich && !mpicc

package cmpi

// Built with -tags mpich: link against MPICH's "mpich" pkg-config module.

// #cgo pkg-config: mpich
import "C"
