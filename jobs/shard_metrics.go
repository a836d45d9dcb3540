package jobs

import (
	"slices"

	"github.com/canopy-hpc/canopy/internal/collective"
	"github.com/canopy-hpc/canopy/internal/parts"
	"github.com/canopy-hpc/canopy/internal/shardmetrics"
	"github.com/canopy-hpc/canopy/metrics"
)

// matchShard is the images this rank matches: those it detected (shard),
// and its share of the images an earlier attempt finished (done), split
// by their boxes. Every rank computes the same split.
func matchShard(shard []int, done map[int]parts.Done, in metrics.Input, ranks, rank int) ([]int, error) {
	if len(done) == 0 {
		return shard, nil
	}
	prev := make([]int, 0, len(done))
	for i := range done {
		prev = append(prev, i)
	}
	slices.Sort(prev)
	costs := make([]int64, len(prev))
	for k, i := range prev {
		costs[k] = shardmetrics.Cost(in, i)
	}
	split, err := shardmetrics.Shards(costs, ranks)
	if err != nil {
		return nil, err
	}
	mine := append([]int(nil), shard...)
	for _, k := range split[rank] {
		mine = append(mine, prev[k])
	}
	return mine, nil
}

// scoreShard is the sharded metric stage (internal/collective).
var scoreShard = collective.ScoreShard
