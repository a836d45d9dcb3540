package collective

import (
	"encoding/json"
	"time"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/internal/errkind"
	"github.com/canopy-hpc/canopy/internal/shardmetrics"
	"github.com/canopy-hpc/canopy/internal/wire"
	"github.com/canopy-hpc/canopy/mpi"
)

// GatherMerge encodes this rank's detections, gathers every rank's (plus
// prev, images computed by an earlier attempt, from the part files) and
// places them at their global image index, checking that each of the n
// images comes exactly once: the result is the same on every rank. detect
// is the rank's detection time (SendDetections' watchdog); the time spent
// here is stats.Seconds["gather"].
func GatherMerge(c mpi.Comm, timeout, detect time.Duration, mine, prev []wire.Image, n int, stats *RankStats) ([][]box.Detection, []*box.Loss, error) {
	t := time.Now()
	gathered, err := SendDetections(c, timeout, detect, mine, stats)
	if err != nil {
		return nil, nil, err
	}
	// Resumed records go in as two buffers, those with losses and those
	// without (part files of an older canopy): a buffer holds one kind, and
	// an image without losses makes the loss rows null (eval.LossValues).
	var with, without []wire.Image
	for _, im := range prev {
		if im.Loss != nil {
			with = append(with, im)
		} else {
			without = append(without, im)
		}
	}
	for _, set := range [][]wire.Image{with, without} {
		if len(set) == 0 {
			continue
		}
		pb, err := wire.Encode(nil, set)
		if err != nil {
			return nil, nil, errkind.Collective(errkind.ExitInternal, "jobs: %w", err)
		}
		gathered = append(gathered, pb)
	}
	dets, losses, err := wire.Merge(gathered, n)
	if err != nil {
		return nil, nil, errkind.Collective(errkind.ExitInternal, "jobs: merge: %w", err)
	}
	stats.Seconds["gather"] = time.Since(t).Seconds()
	return dets, losses, nil
}

type RankStats struct {
	Rank int    `json:"rank"`
	Host string `json:"host"`
	// LocalRank and LocalSize: the rank's place among the ranks of its
	// node (MPI_COMM_TYPE_SHARED), which also picks its GPU.
	LocalRank int `json:"local_rank"`
	LocalSize int `json:"local_size"`
	// SGEMM names the matrix kernels (float32 rounding differs between
	// kernel sets, so ranks on different CPUs may differ in the last bits).
	SGEMM      string `json:"sgemm,omitempty"`
	Images     int    `json:"images"`
	Detections int    `json:"detections"`
	// Skipped: a tile run's windows --skip-empty gave no detections
	// without the model (not in Images).
	Skipped   int                `json:"skipped_windows,omitempty"`
	BytesSent int                `json:"bytes_sent"`
	Seconds   map[string]float64 `json:"seconds"`
	// MetricsImages and MetricsBytesSent: the images this rank matched and
	// the bytes of match records it sent (eval, eval --tile).
	MetricsImages    int               `json:"metrics_images,omitempty"`
	MetricsBytesSent int               `json:"metrics_bytes_sent,omitempty"`
	MetricsCPU       *shardmetrics.CPU `json:"metrics_cpu_seconds,omitempty"`
}

// SendDetections encodes this rank's detections and gathers every rank's.
// It is the first collective after detection: ranks that finished their
// shard wait there for the slowest, which may take hours on a CPU. The plan
// gives ranks equal work, so a rank waits up to the watchdog's limit plus
// twice its own detection time before it calls the others hung (ranks
// other than 0 one limit more, so that rank 0, which knows who is missing,
// speaks first); then the limit is restored.
func SendDetections(c mpi.Comm, timeout, detect time.Duration, mine []wire.Image, stats *RankStats) ([][]byte, error) {
	buf, err := wire.Encode(nil, mine)
	if err != nil {
		return nil, errkind.Local(errkind.ExitInternal, "jobs: encode: %w", err)
	}
	stats.BytesSent = len(buf)
	if timeout > 0 {
		limit := timeout + 2*detect // ranks but 0 wait twice this (cmpi)
		if err := SetTimeout(c, limit); err != nil {
			return nil, err
		}
	}
	g, err := mpi.AllgatherBytes(c, buf)
	if err == nil && timeout > 0 {
		err = SetTimeout(c, timeout)
	}
	if err != nil {
		return nil, errkind.Local(errkind.ExitMPI, "jobs: gather detections: %w", err)
	}
	return g, nil
}

// WriteReport ends a job: it gathers every rank's statistics (the
// report's per_rank, in rank order; a record that does not decode is left
// out), rank 0 writes the outputs with them, and every rank learns whether
// that worked (finalStatus; what names the outputs in its message).
func WriteReport(c mpi.Comm, stats RankStats, what string, write func(allStats []RankStats) error) error {
	sb, _ := json.Marshal(stats)
	all, err := mpi.AllgatherBytes(c, sb)
	if err != nil {
		return errkind.Local(errkind.ExitMPI, "jobs: gather stats: %w", err)
	}
	var werr error
	if c.Rank() == 0 {
		decoded := make([]RankStats, 0, len(all))
		for _, b := range all {
			var s RankStats
			if json.Unmarshal(b, &s) == nil {
				decoded = append(decoded, s)
			}
		}
		werr = write(decoded)
	}
	return FinalStatus(c, werr, what)
}
