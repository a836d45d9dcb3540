package jobs

import (
	"errors"
	"slices"

	"github.com/canopy-hpc/canopy/internal/collective"
	"github.com/canopy-hpc/canopy/internal/parts"
	"github.com/canopy-hpc/canopy/internal/shardmetrics"
	"github.com/canopy-hpc/canopy/metrics"
	"github.com/canopy-hpc/canopy/mpi"
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

// scoreShard runs the sharded metric stage and records its parts in the
// rank's stats: seconds.metrics_match, _gather, _reduce (wall),
// metrics_cpu_seconds (the process's CPU seconds per part: match, exchange,
// merge, reduce), metrics_images and metrics_bytes_sent.
func scoreShard(c mpi.Comm, in metrics.Input, mine []int, cfg shardmetrics.Config, stats *collective.RankStats) (shardmetrics.Outcome, error) {
	out, err := shardmetrics.Run(c, in, mine, cfg)
	if errors.Is(err, shardmetrics.ErrComm) {
		return out, localErr(ExitMPI, "jobs: metrics: %w", err)
	}
	if err != nil {
		return out, collectiveErr(ExitInternal, "jobs: metrics: %w", err)
	}
	s := out.Stats
	stats.Seconds["metrics_match"], stats.Seconds["metrics_gather"] = s.Match, s.Gather
	stats.Seconds["metrics_reduce"], stats.MetricsCPU = s.Reduce, &s.CPU
	stats.MetricsImages, stats.MetricsBytesSent = s.Images, s.BytesSent
	return out, nil
}
