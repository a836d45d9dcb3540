package retinanet

import (
	"fmt"
	"math"
	"testing"

	"github.com/canopy-hpc/canopy/infer/gemm"
)

// Each clone of the C kernels (gemm.SetSIMD: generic, AVX2, AVX-512, those
// this CPU runs), forced in turn, gives the same detection bytes on 1 and 3
// threads. The AVX2 and AVX-512 clones give the same bytes as each other:
// they compute every value alike (infer/gemm's TestWinoMatchesGo and
// TestMulPacked hold them to the bit), so on one machine only OpenBLAS's
// kernels set the last bits. The generic clone (CPUs without FMA) differs
// in the packed GEMM's roundings only, within torchvision's tolerances.
func TestClonesSameBytes(t *testing.T) {
	_, m := goldenModel(t, "r18.json")
	imgs := []Image{forestSet.imageAt(t, 0), forestSet.imageAt(t, 6)} // 400×400 and 997×601
	defer gemm.SetSIMD(gemm.Kernels())
	var fma [][]Detection // the first FMA clone's
	var generic [][]Detection
	var fmaClone gemm.SIMD
	for s := gemm.Generic; s <= gemm.AVX512; s++ {
		if err := gemm.SetSIMD(s); err != nil {
			t.Logf("%s: %v", s, err)
			continue
		}
		var first [][]Detection
		for _, threads := range []int{1, 3} {
			r := NewRunner(m, threads)
			for i, img := range imgs {
				d := r.Detect(img)
				if len(d) == 0 {
					t.Fatalf("%s image %d: no detections to compare", s, i)
				}
				if len(first) <= i {
					first = append(first, d)
				} else if fmt.Sprintf("%#v", d) != fmt.Sprintf("%#v", first[i]) {
					t.Fatalf("image %d: clone %s gives other bytes on %d threads than on 1", i, s, threads)
				}
			}
		}
		switch {
		case s == gemm.Generic:
			generic = first
		case fma == nil:
			fma, fmaClone = first, s
		default:
			for i := range first {
				if fmt.Sprintf("%#v", first[i]) != fmt.Sprintf("%#v", fma[i]) {
					t.Fatalf("image %d: clone %s gives other bytes than %s", i, s, fmaClone)
				}
			}
		}
		t.Logf("clone %s: same bytes on 1 and 3 threads", s)
	}
	if fma == nil || generic == nil {
		t.Logf("generic against an FMA clone: not both runnable here")
		return
	}
	for i := range generic {
		if len(generic[i]) != len(fma[i]) {
			t.Fatalf("image %d: generic %d detections, %s %d", i, len(generic[i]), fmaClone, len(fma[i]))
		}
		for j, g := range generic[i] {
			f := fma[i][j]
			for k := range g.Box {
				if d := math.Abs(float64(g.Box[k] - f.Box[k])); !(d <= tolBox) {
					t.Fatalf("image %d detection %d: generic box %v, %s %v", i, j, g.Box, fmaClone, f.Box)
				}
			}
			if d := math.Abs(float64(g.Score - f.Score)); !(d <= tolScore) || g.Label != f.Label {
				t.Fatalf("image %d detection %d: generic %v, %s %v", i, j, g, fmaClone, f)
			}
		}
	}
}
