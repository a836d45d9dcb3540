package collective

import (
	"errors"

	"github.com/canopy-hpc/canopy/internal/errkind"
	"github.com/canopy-hpc/canopy/internal/shardmetrics"
	"github.com/canopy-hpc/canopy/metrics"
	"github.com/canopy-hpc/canopy/mpi"
)

// ScoreShard runs the sharded metric stage and records its parts in the
// rank's stats: seconds.metrics_match, _gather, _reduce (wall),
// metrics_cpu_seconds (the process's CPU seconds per part: match, exchange,
// merge, reduce), metrics_images and metrics_bytes_sent.
func ScoreShard(c mpi.Comm, in metrics.Input, mine []int, cfg shardmetrics.Config, stats *RankStats) (shardmetrics.Outcome, error) {
	out, err := shardmetrics.Run(c, in, mine, cfg)
	if errors.Is(err, shardmetrics.ErrComm) {
		return out, errkind.Local(errkind.ExitMPI, "jobs: metrics: %w", err)
	}
	if err != nil {
		return out, errkind.Collective(errkind.ExitInternal, "jobs: metrics: %w", err)
	}
	s := out.Stats
	stats.Seconds["metrics_match"], stats.Seconds["metrics_gather"] = s.Match, s.Gather
	stats.Seconds["metrics_reduce"], stats.MetricsCPU = s.Reduce, &s.CPU
	stats.MetricsImages, stats.MetricsBytesSent = s.Images, s.BytesSent
	return out, nil
}
