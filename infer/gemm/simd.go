package gemm

import (
	"fmt"
	"os"
)

// SIMD names a clone of the C kernels (Winograd transforms, im2col, the
// convolution epilogue): each is compiled for generic x86-64, for AVX2+FMA
// and for AVX-512 (F, BW, DQ, VL), and the widest the CPU runs is chosen at
// start-up. Every clone computes each value with the same operations in the
// same order and no fused multiply-add (-ffp-contract=off), so they give
// the same bits: the choice changes speed, never a result. Chain, the
// products of the CPU detector and the crop classifier, fuses on purpose,
// alike in every clone (one FMA per step). (Mul, the point model's
// products, is OpenBLAS's, whose kernels, chosen by OpenBLAS for the CPU,
// do change the last bits between AVX2 and AVX-512 machines;
// OPENBLAS_CORETYPE picks them.)
type SIMD int

const (
	Generic SIMD = iota
	AVX2
	AVX512
)

var simdNames = [...]string{"generic", "avx2", "avx512"}

func (s SIMD) String() string {
	if s >= 0 && int(s) < len(simdNames) {
		return simdNames[s]
	}
	return fmt.Sprintf("SIMD(%d)", int(s))
}

// ParseSIMD reads a clone's name (generic, avx2, avx512).
func ParseSIMD(name string) (SIMD, error) {
	for i, n := range simdNames {
		if n == name {
			return SIMD(i), nil
		}
	}
	return 0, fmt.Errorf("gemm: unknown kernel set %q (want generic, avx2 or avx512)", name)
}

// SIMDEnv forces a clone for the whole process (tests, benchmarks,
// reproducing another machine's speed): CANOPY_SIMD=generic|avx2|avx512.
// A clone the CPU cannot run, or an unknown name, is refused with a line
// on stderr and the detected clone is kept.
const SIMDEnv = "CANOPY_SIMD"

// simd is the clone in use; best the widest this CPU (and build) runs.
var simd, best SIMD

func init() {
	best = detectSIMD()
	simd = best
	if v := os.Getenv(SIMDEnv); v != "" {
		if err := SetSIMD(mustParse(v)); err != nil {
			fmt.Fprintf(os.Stderr, "canopy: %s=%s ignored: %v\n", SIMDEnv, v, err)
		}
	}
}

func mustParse(v string) SIMD {
	s, err := ParseSIMD(v)
	if err != nil {
		return -1
	}
	return s
}

// Kernels is the clone in use.
func Kernels() SIMD { return simd }

// BestKernels is the widest clone this CPU and build run.
func BestKernels() SIMD { return best }

// SetSIMD switches every later kernel call to clone s (not while kernels
// run: tests and start-up only). It refuses a clone the CPU or the build
// cannot run.
func SetSIMD(s SIMD) error {
	if s < Generic || s > AVX512 {
		return fmt.Errorf("gemm: unknown kernel set (want generic, avx2 or avx512)")
	}
	if s > best {
		return fmt.Errorf("gemm: this CPU (or this build, %s) runs kernels up to %s, not %s", backend, best, s)
	}
	simd = s
	return nil
}
