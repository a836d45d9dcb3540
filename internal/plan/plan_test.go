package plan

import (
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
)

func check(t *testing.T, costs []int64, ranks int) Plan {
	t.Helper()
	p, err := Balance(costs, ranks)
	if err != nil {
		t.Fatal(err)
	}
	seen := make([]int, len(costs))
	for r, s := range p.Shards {
		if !slices.IsSorted(s) {
			t.Errorf("rank %d shard not sorted", r)
		}
		var load int64
		for _, i := range s {
			seen[i]++
			load += costs[i]
		}
		if load != p.Load[r] {
			t.Errorf("rank %d load %d, recorded %d", r, load, p.Load[r])
		}
	}
	for i, n := range seen {
		if n != 1 {
			t.Fatalf("image %d assigned %d times", i, n)
		}
	}
	return p
}

// TestSkewedCosts bounds the imbalance on heavy-tailed costs: the
// greedy rule guarantees max-min <= the largest single cost.
func TestSkewedCosts(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, ranks := range []int{1, 2, 3, 7, 16} {
		costs := make([]int64, 2000)
		var maxCost int64
		for i := range costs {
			costs[i] = 1 + int64(rng.ExpFloat64()*20)
			if i%97 == 0 {
				costs[i] *= 40 // a few huge images
			}
			maxCost = max(maxCost, costs[i])
		}
		p := check(t, costs, ranks)
		lo, hi := slices.Min(p.Load), slices.Max(p.Load)
		if hi-lo > maxCost {
			t.Errorf("ranks %d: loads %d..%d differ by more than the largest cost %d", ranks, lo, hi, maxCost)
		}
		if ranks > 1 && float64(hi)/float64(lo) > 1.05 {
			t.Errorf("ranks %d: max/min load %.3f > 1.05", ranks, float64(hi)/float64(lo))
		}
	}
}

func TestMoreRanksThanImages(t *testing.T) {
	p := check(t, []int64{3, 1, 2}, 5)
	empty := 0
	for _, s := range p.Shards {
		if len(s) == 0 {
			empty++
		}
	}
	if empty != 2 {
		t.Fatalf("want 2 idle ranks, got shards %v", p.Shards)
	}
}

func TestDeterministic(t *testing.T) {
	costs := []int64{5, 5, 5, 1, 1, 9, 0, 0}
	a, _ := Balance(costs, 3)
	b, _ := Balance(costs, 3)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("plan differs between calls")
	}
	// ties go to the lower index and the lower rank
	if want := []int{5}; !reflect.DeepEqual(a.Shards[0], want) {
		t.Fatalf("rank 0 shard %v, want %v", a.Shards[0], want)
	}
}

func TestBadInput(t *testing.T) {
	if _, err := Balance([]int64{1}, 0); err == nil {
		t.Fatal("0 ranks accepted")
	}
	if _, err := Balance([]int64{-1}, 1); err == nil {
		t.Fatal("negative cost accepted")
	}
}

func TestBalanceBatches(t *testing.T) {
	// 11 images, batch 4, image 5 already done: batches {0..3}, {4,6,7}, {8..10}.
	todo := []int{0, 1, 2, 3, 4, 6, 7, 8, 9, 10}
	for ranks := 1; ranks <= 4; ranks++ {
		p, err := BalanceBatches(todo, 4, ranks)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[int]int{}
		for r, s := range p.Shards {
			for _, pos := range s {
				seen[pos]++
				// every image of a batch is on one rank
				for r2, s2 := range p.Shards {
					for _, q := range s2 {
						if todo[q]/4 == todo[pos]/4 && r2 != r {
							t.Fatalf("ranks %d: batch %d split over ranks %d and %d", ranks, todo[pos]/4, r, r2)
						}
					}
				}
			}
			if !slices.IsSorted(s) {
				t.Errorf("ranks %d: shard %d unsorted: %v", ranks, r, s)
			}
		}
		if len(seen) != len(todo) {
			t.Errorf("ranks %d: %d of %d images placed", ranks, len(seen), len(todo))
		}
		for pos, c := range seen {
			if c != 1 {
				t.Errorf("ranks %d: position %d placed %d times", ranks, pos, c)
			}
		}
	}
	if _, err := BalanceBatches([]int{3, 2}, 4, 2); err == nil {
		t.Error("decreasing indices accepted")
	}
}

// TestBlocks: every item exactly once, in order, contiguous, sizes within
// one of each other, for many (n, ranks).
func TestBlocks(t *testing.T) {
	for n := 0; n < 60; n++ {
		for ranks := 1; ranks < 9; ranks++ {
			p, err := Blocks(n, ranks)
			if err != nil {
				t.Fatal(err)
			}
			next := 0
			lo, hi := int64(n), int64(0)
			for r, s := range p.Shards {
				for _, i := range s {
					if i != next {
						t.Fatalf("n=%d ranks=%d: rank %d has %d, want %d", n, ranks, r, i, next)
					}
					next++
				}
				if p.Load[r] != int64(len(s)) {
					t.Fatalf("load %d for %d items", p.Load[r], len(s))
				}
				lo, hi = min(lo, p.Load[r]), max(hi, p.Load[r])
			}
			if next != n || hi-lo > 1 {
				t.Fatalf("n=%d ranks=%d: %d items dealt, loads %d..%d", n, ranks, next, lo, hi)
			}
		}
	}
	if _, err := Blocks(3, 0); err == nil {
		t.Fatal("0 ranks accepted")
	}
}
