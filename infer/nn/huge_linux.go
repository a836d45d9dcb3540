//go:build linux

package nn

import (
	"fmt"
	"os"
	"syscall"
	"unsafe"
)

// HugePagesEnv turns the huge-page advice off ("off"; "on", the default,
// keeps it). Huge pages cost system time when they are first touched
// (the kernel zeroes, and may compact memory for, each 2 MiB): on the
// 2-core test VM 0.3–0.7 s more for a one-image run, against 3–7% less CPU
// per 800×800 image after it, so a run of a few images is faster without.
const HugePagesEnv = "CANOPY_HUGEPAGES"

// hugeOn is whether bigFloats advises huge pages (HugePagesEnv, read once).
var hugeOn = true

func init() {
	switch v := os.Getenv(HugePagesEnv); v {
	case "", "on":
	case "off":
		hugeOn = false
	default:
		fmt.Fprintf(os.Stderr, "canopy: %s=%s ignored: want on or off\n", HugePagesEnv, v)
	}
}

// BigFloats is make([]float32, n) for a buffer that may be big: adviseHuge
// asks for huge pages before it is first written.
func BigFloats(n int) []float32 {
	d := make([]float32, n)
	adviseHuge(d)
	return d
}

// hugePage is the size of a transparent huge page on x86-64 and arm64.
const hugePage = 2 << 20

// adviseHuge asks the kernel to back the 2 MiB-aligned part of d with
// transparent huge pages (madvise MADV_HUGEPAGE; Linux's default mode,
// "madvise", gives them only to memory that asks). canopy's big buffers,
// the Winograd filters and block buffers and the feature maps, are read in
// long strides, where 4 KiB pages cost a TLB miss per row. It is called
// right after make, before the pages are first touched; a kernel that
// refuses changes nothing but speed.
func adviseHuge(d []float32) {
	if !wantHuge(len(d)) {
		return
	}
	start := uintptr(unsafe.Pointer(&d[0]))
	end := start + uintptr(len(d))*4
	a := (start + hugePage - 1) &^ (hugePage - 1)
	b := end &^ (hugePage - 1)
	if b <= a {
		return
	}
	bs := unsafe.Slice((*byte)(unsafe.Pointer(&d[0])), len(d)*4)
	_ = syscall.Madvise(bs[a-start:b-start], syscall.MADV_HUGEPAGE)
}

// wantHuge is whether a buffer of n floats gets the advice: huge pages on,
// and at least two of them in it (so one whole aligned page).
func wantHuge(n int) bool { return hugeOn && n*4 >= 2*hugePage }
