package retinanet

import (
	"fmt"
	"testing"

	"github.com/canopy-hpc/canopy/infer/gemm"
)

// Each clone of the C kernels (gemm.SetSIMD: generic, AVX2, AVX-512, those
// this CPU runs), forced in turn, gives the same detection bytes on 1 and 3
// threads, and the same bytes as every other clone: the clones compute
// every value alike (infer/gemm's TestWinoMatchesGo holds them to the
// bit), so on one machine only OpenBLAS's kernels set the last bits.
func TestClonesSameBytes(t *testing.T) {
	_, m := goldenModel(t, "r18.json")
	imgs := []Image{forestSet.imageAt(t, 0), forestSet.imageAt(t, 6)} // 400×400 and 997×601
	defer gemm.SetSIMD(gemm.Kernels())
	var ref []string
	var refClone gemm.SIMD
	for s := gemm.Generic; s <= gemm.AVX512; s++ {
		if err := gemm.SetSIMD(s); err != nil {
			t.Logf("%s: %v", s, err)
			continue
		}
		for _, threads := range []int{1, 3} {
			r := NewRunner(m, threads)
			for i, img := range imgs {
				d := r.Detect(img)
				if len(d) == 0 {
					t.Fatalf("%s image %d: no detections to compare", s, i)
				}
				got := fmt.Sprintf("%#v", d)
				if len(ref) <= i {
					ref, refClone = append(ref, got), s
					continue
				}
				if got != ref[i] {
					t.Fatalf("image %d: clone %s on %d threads gives other bytes than %s on 1", i, s, threads, refClone)
				}
			}
		}
		t.Logf("clone %s: same bytes", s)
	}
}
