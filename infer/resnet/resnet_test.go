package resnet

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/canopy-hpc/canopy/infer/cpu"
	"github.com/canopy-hpc/canopy/infer/nn"
	"github.com/canopy-hpc/canopy/internal/testsupport/testweights"
)

// bodyWeights is the body of a generated RetinaNet state dict (the test
// weight generator), renamed from backbone.body. to prefix.
func bodyWeights(t *testing.T, arch, prefix string) nn.Weights {
	t.Helper()
	entries, err := testweights.StateDict(arch, 1, 64, false)
	if err != nil {
		t.Fatal(err)
	}
	vals, err := testweights.Values(entries, 5)
	if err != nil {
		t.Fatal(err)
	}
	w := nn.Weights{}
	for _, e := range entries {
		if n, ok := strings.CutPrefix(e.Name, "backbone.body."); ok {
			w[prefix+n] = nn.Tensor{Shape: e.Shape, Data: vals[e.Name]}
		}
	}
	return w
}

// Load reads the depth from the tensor names under any prefix and takes
// every body tensor; the arch and the widths of C2..C5 follow.
func TestLoad(t *testing.T) {
	for _, c := range []struct {
		arch, prefix string
		ch           [4]int
		blocks       int
		convs        int // stem, blocks, downsamples
	}{
		{"resnet18", "", [4]int{64, 128, 256, 512}, 8, 1 + 8*2 + 3},
		{"resnet50", "model.", [4]int{256, 512, 1024, 2048}, 16, 1 + 16*3 + 4},
	} {
		tk := nn.NewTake(bodyWeights(t, c.arch, c.prefix), "test")
		b, err := Load(tk, c.prefix)
		if err != nil {
			t.Fatal(err)
		}
		if err := tk.Err(); err != nil {
			t.Fatalf("%s: %v", c.arch, err)
		}
		n := 0
		for _, l := range b.Layers {
			n += len(l)
		}
		if b.Arch != c.arch || b.Channels != c.ch || n != c.blocks {
			t.Errorf("%s: arch %q, channels %v, %d blocks", c.arch, b.Arch, b.Channels, n)
		}
		if got := len(b.Convs()); got != c.convs {
			t.Errorf("%s: %d convolutions", c.arch, got)
		}
	}
	w := bodyWeights(t, "resnet18", "")
	for k := range w {
		if strings.HasPrefix(k, "layer3.") {
			delete(w, k)
		}
	}
	if _, err := Load(nn.NewTake(w, "test"), ""); err == nil || !strings.Contains(err.Error(), "no blocks in layer3") {
		t.Fatalf("a body without layer3: %v", err)
	}
}

// Features from level 5 gives C5's bytes of a run from level 3 (on
// another thread count) and leaves C3 and C4 zero; from level 3, C3..C5
// have layer2..layer4's shapes.
func TestFeaturesFirst(t *testing.T) {
	b, err := Load(nn.NewTake(bodyWeights(t, "resnet18", ""), "test"), "")
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	input := func() cpu.Fmap {
		x := cpu.NewFmap(3, 64, 96)
		for i := range x.D {
			x.D[i] = float32(r.NormFloat64())
		}
		return x
	}
	x := input()
	x2 := cpu.Fmap{C: x.C, H: x.H, W: x.W, D: append([]float32(nil), x.D...)} // Features puts x back
	all := Features[cpu.Fmap](b, cpu.NewEngine(2), x, 3)
	only := Features[cpu.Fmap](b, cpu.NewEngine(1), x2, 5)
	for L, c := range all {
		if c.C != b.Channels[L+1] || c.H != 64>>(L+3) || c.W != 96>>(L+3) {
			t.Fatalf("C%d: %dx%dx%d", L+3, c.C, c.H, c.W)
		}
	}
	if only[0].D != nil || only[1].D != nil {
		t.Fatal("from level 5: C3 or C4 returned")
	}
	for i := range all[2].D {
		if all[2].D[i] != only[2].D[i] || all[2].D[i] != all[2].D[i] {
			t.Fatalf("C5[%d]: %v from level 3, %v from level 5", i, all[2].D[i], only[2].D[i])
		}
	}
}

// unpaired hides a backend's ConvPair: Features runs every convolution
// alone.
type unpaired[T any] struct{ nn.Backend[T] }

// countPairs counts the convolution pairs a BatchEngine runs together.
type countPairs struct {
	*cpu.BatchEngine
	n int
}

func (c *countPairs) ConvPair(c1 *nn.Conv, x cpu.Batch, res *cpu.Batch, c2 *nn.Conv) (cpu.Batch, cpu.Batch) {
	if c.CanPair(c1, c2, x) {
		c.n++
	}
	return c.BatchEngine.ConvPair(c1, x, res, c2)
}

// A bottleneck body gives the same bytes when the BatchEngine runs a
// block's last 1×1 and the next block's first together (ConvPair: here
// layer1's two pairs, 2 images of 96×96 on one worker) as when it runs
// every convolution alone.
func TestFeaturesPairedSameBits(t *testing.T) {
	b, err := Load(nn.NewTake(bodyWeights(t, "resnet50", ""), "test"), "")
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(3, 4))
	x := cpu.Batch{C: 3, N: 2, H: 96, W: 96, D: make([]float32, 3*2*96*96)}
	for i := range x.D {
		x.D[i] = float32(r.NormFloat64())
	}
	x2 := x
	x2.D = append([]float32(nil), x.D...) // Features puts x back
	pe := &countPairs{BatchEngine: cpu.NewBatchEngine(1)}
	paired := Features[cpu.Batch](b, pe, x, 3)
	alone := Features[cpu.Batch](b, unpaired[cpu.Batch]{cpu.NewBatchEngine(1)}, x2, 3)
	if pe.n != 2 {
		t.Fatalf("%d pairs run together, want layer1's 2", pe.n)
	}
	for L := range paired {
		p, a := paired[L], alone[L]
		if len(p.D) != len(a.D) || len(a.D) == 0 {
			t.Fatalf("C%d: %d values paired, %d alone", L+3, len(p.D), len(a.D))
		}
		for i := range a.D {
			if math.Float32bits(p.D[i]) != math.Float32bits(a.D[i]) {
				t.Fatalf("C%d[%d]: %v paired, %v alone", L+3, i, p.D[i], a.D[i])
			}
		}
	}
}
