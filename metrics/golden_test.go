package metrics

import (
	"math"
	"testing"

	"github.com/canopy-hpc/canopy/internal/testsupport/testfile"
)

// TestPairwiseSumNumpyGolden checks the np.mean reproduction bit for bit
// (testdata/golden/numpy/mean.json, made by tools/scipy/lsap_golden.py, and
// mean_edges.json, by tools/scipy/mean_edges.py).
func TestPairwiseSumNumpyGolden(t *testing.T) {
	var g struct {
		Version string
		Cases   []struct {
			Values []float64
			Mean   *float64
		}
	}
	testfile.ReadJSON(t, "../testdata/golden/numpy/mean.json", &g)
	cases := g.Cases
	// mean_edges.json: n = 7, 8, 9, … 128, 129, …: each edge of numpy's
	// pairwise blocks (tools/scipy/mean_edges.py).
	testfile.ReadJSON(t, "../testdata/golden/numpy/mean_edges.json", &g)
	cases = append(cases, g.Cases...)
	naiveDiffers := 0
	for i, c := range cases {
		if c.Mean == nil {
			continue
		}
		got := pairwiseSum(c.Values) / float64(len(c.Values))
		if got != *c.Mean {
			t.Errorf("case %d (n=%d): %v, numpy %s gives %v", i, len(c.Values), got, g.Version, *c.Mean)
		}
		naive := 0.0
		for _, v := range c.Values {
			naive += v
		}
		if naive/float64(len(c.Values)) != *c.Mean {
			naiveDiffers++
		}
	}
	if naiveDiffers == 0 {
		t.Error("no case tells pairwise from naive summation: the fixture cannot catch a regression")
	}
}

// TestRecallThresholdsFromTorch: the hard-coded list is the one the real
// torch printed (testdata/golden/coco/thresholds.json, tools/coco/golden.py).
func TestRecallThresholdsFromTorch(t *testing.T) {
	var g struct {
		RecThresholds []float64 `json:"rec_thresholds"`
		IoUThresholds []float64 `json:"iou_thresholds"`
	}
	testfile.ReadJSON(t, "../testdata/golden/coco/thresholds.json", &g)
	if len(g.RecThresholds) != len(cocoRecallThresholds) || len(g.IoUThresholds) != len(cocoIoUThresholds) {
		t.Fatalf("fixture has %d/%d thresholds", len(g.RecThresholds), len(g.IoUThresholds))
	}
	for i, v := range g.RecThresholds {
		if cocoRecallThresholds[i] != v {
			t.Errorf("rec threshold %d: %v, torch %v", i, cocoRecallThresholds[i], v)
		}
	}
	for i, v := range g.IoUThresholds {
		if cocoIoUThresholds[i] != v {
			t.Errorf("IoU threshold %d: %v, torch %v", i, cocoIoUThresholds[i], v)
		}
	}
}

// TestTorchSum32Golden: torchSum32 is torch.sum of a contiguous float32
// tensor bit for bit, from 1 element to 32767 (every level of the cascade),
// against testdata/golden/torch/sum.json (tools/metrics/torchsum.py, torch
// with its AVX2 kernel). The vectors are regenerated from the fixture's
// formula; a naive float32 loop must differ somewhere, or the fixture
// could not tell the orders apart.
func TestTorchSum32Golden(t *testing.T) {
	var g struct {
		Peer  map[string]any
		Cases []struct {
			N, V    int
			Scale   float64
			SumBits uint32 `json:"sum_bits"`
		}
	}
	testfile.ReadJSON(t, "../testdata/golden/torch/sum.json", &g)
	if len(g.Cases) == 0 {
		t.Fatal("no cases")
	}
	naiveDiffers := 0
	for _, c := range g.Cases {
		x := make([]float32, c.N)
		var naive float32
		for i := range x {
			u := float64((uint64(i)*2654435761+uint64(c.V)*40503)%(1<<32)) / (1 << 32)
			x[i] = float32((u - 0.25) * c.Scale)
			naive += x[i]
		}
		if got := torchSum32(x); math.Float32bits(got) != c.SumBits {
			t.Errorf("n=%d: %v, torch %v (peer %v)", c.N, got, math.Float32frombits(c.SumBits), g.Peer)
		}
		if math.Float32bits(naive) != c.SumBits {
			naiveDiffers++
		}
	}
	if naiveDiffers == 0 {
		t.Error("no case tells torch's order from a plain loop")
	}
}
