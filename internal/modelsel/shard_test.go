package modelsel

import (
	"slices"
	"testing"
)

// TestRankShard: every rank's shard is its plan shard mapped through todo
// (global indices, not positions in todo), and the ranks' shards together
// are todo, each image once.
func TestRankShard(t *testing.T) {
	var lm *Model // replayed predictions: plan.Balance
	todo := []int{2, 3, 5, 7, 11, 13, 17}
	costs := []int64{1, 4, 2, 8, 1, 3, 5}
	const ranks = 3
	p, err := lm.Plan(todo, costs, 1, ranks)
	if err != nil {
		t.Fatal(err)
	}
	var all []int
	for r := 0; r < ranks; r++ {
		shard, err := lm.RankShard(todo, costs, 1, r, ranks)
		if err != nil {
			t.Fatal(err)
		}
		if len(shard) != len(p.Shards[r]) {
			t.Fatalf("rank %d: %d images, plan gives %d", r, len(shard), len(p.Shards[r]))
		}
		for k, j := range p.Shards[r] {
			if shard[k] != todo[j] {
				t.Fatalf("rank %d image %d: %d, want todo[%d] = %d", r, k, shard[k], j, todo[j])
			}
		}
		all = append(all, shard...)
	}
	slices.Sort(all)
	if !slices.Equal(all, todo) {
		t.Fatalf("shards together %v, want %v", all, todo)
	}
}
