package shardmetrics

import (
	"math"
	"strings"
	"testing"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/metrics"
	"github.com/canopy-hpc/canopy/mpi"
	"github.com/canopy-hpc/canopy/mpi/local"
)

func input() metrics.Input {
	in := metrics.Input{Labels: box.SortedLabelMap([]string{"a", "b"})}
	for i := range 9 {
		x := float64(10 * i)
		b := box.Box{Xmin: x, Ymin: 0, Xmax: x + 20, Ymax: 20}
		in.Images = append(in.Images, box.Image{Path: string(rune('z' - i)), Truth: []box.Truth{{Box: b, Label: int32(i % 2)}}})
		b.Xmin += float64(i % 4)
		in.Dets = append(in.Dets, []box.Detection{{Box: b, Label: int32(i % 2), Score: 0.5}})
	}
	return in
}

// TestRunEqualsCompute: on 1 to 4 ranks, with the split Shards gives, every
// rank's values, match table and sweep are Compute's; each rank's stats
// count its own images and bytes.
func TestRunEqualsCompute(t *testing.T) {
	in := input()
	opt := metrics.Options{IoUThreshold: 0.4, Semantics: metrics.EvaluateBoxes}
	want, err := metrics.Compute(in, opt, metrics.All, true)
	if err != nil {
		t.Fatal(err)
	}
	at6, err := metrics.Compute(in, metrics.Options{IoUThreshold: 0.6, Semantics: metrics.EvaluateBoxes}, metrics.Recall|metrics.IoUMean, false)
	if err != nil {
		t.Fatal(err)
	}
	costs := make([]int64, len(in.Images))
	for i := range costs {
		costs[i] = Cost(in, i)
	}
	for n := 1; n <= 4; n++ {
		split, err := Shards(costs, n)
		if err != nil {
			t.Fatal(err)
		}
		outs := make([]Outcome, n)
		errs := local.Run(n, func(c mpi.Comm) error {
			var err error
			outs[c.Rank()], err = Run(c, in, split[c.Rank()], Config{Options: opt, Families: metrics.All, ClassMetrics: true, Sweep: []float64{0.6}})
			return err
		})
		images := 0
		for r, o := range outs {
			if errs[r] != nil {
				t.Fatalf("np%d rank %d: %v", n, r, errs[r])
			}
			if len(o.Result.Values) != len(want.Values) || len(o.Result.Matches) != len(want.Matches) {
				t.Fatalf("np%d rank %d: %d values, %d rows; want %d, %d", n, r, len(o.Result.Values), len(o.Result.Matches), len(want.Values), len(want.Matches))
			}
			for k, w := range want.Values {
				if g := o.Result.Values[k]; g.Key != w.Key || math.Float64bits(g.V) != math.Float64bits(w.V) {
					t.Fatalf("np%d rank %d: %s = %v, want %v", n, r, g.Key, g.V, w.V)
				}
			}
			for k, w := range at6.Values {
				if g := o.Sweep[0][k]; g.Key != w.Key || math.Float64bits(g.V) != math.Float64bits(w.V) {
					t.Fatalf("np%d rank %d at 0.6: %s = %v, want %v", n, r, g.Key, g.V, w.V)
				}
			}
			if o.Stats.Images != len(split[r]) || o.Stats.BytesSent <= 1 {
				t.Fatalf("np%d rank %d: stats %+v for %d images", n, r, o.Stats, len(split[r]))
			}
			images += o.Stats.Images
		}
		if images != len(in.Images) {
			t.Fatalf("np%d: %d images matched of %d", n, images, len(in.Images))
		}
	}
}

// TestMatchErrorOnOneRankReachesAll: an image that cannot be matched (an
// infinite overlap) on rank 1 only makes every rank return rank 1's error,
// none waiting.
func TestMatchErrorOnOneRankReachesAll(t *testing.T) {
	in := input()
	inf := box.Box{Xmin: 0, Ymin: 0, Xmax: math.Inf(1), Ymax: math.Inf(1)}
	in.Images[7].Truth[0].Box = inf
	in.Dets[7][0].Box = inf
	if _, err := metrics.Compute(in, metrics.Options{}, metrics.Recall, false); err == nil {
		t.Fatal("the planted image matches without error: the test does not plant a failure")
	}
	split := [][]int{{0, 1, 2, 3}, {4, 5, 6, 7, 8}, nil}
	errs := local.Run(3, func(c mpi.Comm) error {
		_, err := Run(c, in, split[c.Rank()], Config{Families: metrics.All})
		return err
	})
	for r, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "rank 1:") {
			t.Fatalf("rank %d: %v, want rank 1's matching error", r, err)
		}
	}
}
