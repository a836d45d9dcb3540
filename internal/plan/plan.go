// Package plan assigns images to ranks: a pure, deterministic function of
// the per-image cost estimates and the rank count, so every rank computes
// the whole plan and knows what every other rank processes.
package plan

import (
	"fmt"
	"sort"
)

// Plan is the assignment of images to ranks.
type Plan struct {
	// Shards[r] lists rank r's global image indices in increasing order.
	Shards [][]int
	// Load[r] is the summed cost of rank r's images.
	Load []int64
}

// Balance assigns every image to exactly one of ranks ranks by the greedy
// longest-processing-time rule: images in decreasing cost (ties: lower
// index first), each to the rank with the least load so far (ties: lower
// rank). No image is repeated or padded. The rule guarantees
// max(Load) - min(Load) <= max(cost) and max(Load) <= 4/3 of the optimum.
// Ranks may outnumber images; the surplus ranks get empty shards.
func Balance(costs []int64, ranks int) (Plan, error) {
	if ranks < 1 {
		return Plan{}, fmt.Errorf("plan: %d ranks", ranks)
	}
	order := make([]int, len(costs))
	for i, c := range costs {
		if c < 0 {
			return Plan{}, fmt.Errorf("plan: image %d has negative cost %d", i, c)
		}
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return costs[order[a]] > costs[order[b]] })
	p := Plan{Shards: make([][]int, ranks), Load: make([]int64, ranks)}
	for _, i := range order {
		best := 0
		for r := 1; r < ranks; r++ {
			if p.Load[r] < p.Load[best] {
				best = r
			}
		}
		p.Shards[best] = append(p.Shards[best], i)
		p.Load[best] += costs[i]
	}
	for _, s := range p.Shards {
		sort.Ints(s)
	}
	return p, nil
}

// BalanceBatches is Balance over whole global batches: todo lists the
// global image indices to run, in increasing order; batch k is the indices
// in [kN, kN+N). Each batch goes to one rank (cost: its image count, by
// the same greedy rule), so a batch's images always run together, in the
// same slots, whatever the rank count. Shards list positions in todo, as
// Balance's do.
func BalanceBatches(todo []int, n, ranks int) (Plan, error) {
	if n < 1 {
		return Plan{}, fmt.Errorf("plan: batch size %d", n)
	}
	var groups [][]int // positions in todo, by batch
	for pos, i := range todo {
		if i < 0 || (pos > 0 && i <= todo[pos-1]) {
			return Plan{}, fmt.Errorf("plan: image indices not increasing at %d", pos)
		}
		if pos == 0 || i/n != todo[pos-1]/n {
			groups = append(groups, nil)
		}
		groups[len(groups)-1] = append(groups[len(groups)-1], pos)
	}
	costs := make([]int64, len(groups))
	for g, ps := range groups {
		costs[g] = int64(len(ps))
	}
	bp, err := Balance(costs, ranks)
	if err != nil {
		return Plan{}, err
	}
	p := Plan{Shards: make([][]int, ranks), Load: bp.Load}
	for r, gs := range bp.Shards {
		for _, g := range gs {
			p.Shards[r] = append(p.Shards[r], groups[g]...)
		}
		sort.Ints(p.Shards[r])
	}
	return p, nil
}

// Blocks deals n equal-cost items (a raster's windows, in DeepForest's
// order) to ranks in contiguous blocks: rank r gets [r·n/ranks,
// (r+1)·n/ranks), so block sizes differ by at most one, every item goes to
// exactly one rank, and each rank reads neighbouring windows (GDAL's block
// cache serves the overlap). Load[r] is the block size.
func Blocks(n, ranks int) (Plan, error) {
	if ranks < 1 {
		return Plan{}, fmt.Errorf("plan: %d ranks", ranks)
	}
	if n < 0 {
		return Plan{}, fmt.Errorf("plan: %d items", n)
	}
	p := Plan{Shards: make([][]int, ranks), Load: make([]int64, ranks)}
	for r := range ranks {
		lo, hi := int(int64(r)*int64(n)/int64(ranks)), int(int64(r+1)*int64(n)/int64(ranks))
		s := make([]int, 0, hi-lo)
		for i := lo; i < hi; i++ {
			s = append(s, i)
		}
		p.Shards[r], p.Load[r] = s, int64(hi-lo)
	}
	return p, nil
}
