package retinanet

import (
	"crypto/sha256"
	"fmt"
	"testing"

	"github.com/canopy-hpc/canopy/infer/gemm"
	"github.com/canopy-hpc/canopy/internal/testsupport/forest"
)

// Each clone of the C kernels (gemm.SetSIMD: generic, AVX2, AVX-512, those
// this CPU runs), forced in turn, gives the same detection bytes on 1 and 3
// threads, and the same bytes as every other clone: the clones compute
// every value alike (infer/gemm's TestWinoMatchesGo and TestChainMatchesGo
// hold each kernel to the bit; the products are gemm.Chain, one FMA chain
// per value), so the detector's bytes do not depend on the machine's
// instruction set.
//
// Two cases: the vector clones on the full-size fixture images (800×800
// and 1333×803 network inputs), and every clone, the generic one too, on
// a small network input (min_size 128: every kind of layer, the stem,
// Winograd F(4×4) and F(2×2), stride-2 im2col, 1×1, P6/P7, all five head
// levels, decoding and NMS, at 1/40 of the work). The generic clone's
// products are a scalar fmaf chain (an FMA instruction or libm's exact
// fmaf behind a call per step), too slow for a full-size detector on a
// shared machine.
//
// It logs the digest of the small case's detections ("detection digest"):
// scripts/test-isa.sh compares it across every forced path (OpenBLAS core,
// clone, -tags noblas with the Go kernels), so that the bytes are also the
// same across builds and machines' instruction sets.
func TestClonesSameBytes(t *testing.T) {
	gold, m := goldenModel(t, "r18.json")
	small := smallGoldenModel(t, gold, m)
	rgba, _ := forest.Generate(11, 0, 150, 100)
	cases := []struct {
		name   string
		m      *Model
		imgs   []Image
		clones gemm.SIMD // the narrowest clone run
	}{
		{"full size", m, []Image{forestSet.imageAt(t, 0), forestSet.imageAt(t, 6)}, gemm.AVX2}, // 400×400 and 997×601
		{"min_size 128", small, []Image{toImage(rgba), forestSet.imageAt(t, 3)}, gemm.Generic}, // 150×100 and 96×64
	}
	defer gemm.SetSIMD(gemm.Kernels())
	for _, c := range cases {
		var ref []string
		var refClone gemm.SIMD
		ran := 0
		for s := c.clones; s <= gemm.AVX512; s++ {
			if err := gemm.SetSIMD(s); err != nil {
				t.Logf("%s, %s: %v", c.name, s, err)
				continue
			}
			ran++
			for _, threads := range []int{1, 3} {
				r := NewRunner(c.m, threads)
				for i, img := range c.imgs {
					d := r.Detect(img)
					if len(d) == 0 {
						t.Fatalf("%s, %s image %d: no detections to compare", c.name, s, i)
					}
					got := fmt.Sprintf("%#v", d)
					if len(ref) <= i {
						ref, refClone = append(ref, got), s
						continue
					}
					if got != ref[i] {
						t.Fatalf("%s, image %d: clone %s on %d threads gives other bytes than %s on 1", c.name, i, s, threads, refClone)
					}
				}
			}
			t.Logf("%s, clone %s: same bytes", c.name, s)
		}
		if c.clones == gemm.Generic {
			if ran < 2 && gemm.BestKernels() > gemm.Generic {
				t.Fatalf("%s: only %d clone ran; the generic one and this CPU's widest must", c.name, ran)
			}
			t.Logf("detection digest %x", sha256.Sum256([]byte(fmt.Sprint(ref))))
		}
	}
}
