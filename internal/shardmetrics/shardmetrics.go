// Package shardmetrics runs the metric stage over the ranks: each rank
// matches only its own images (metrics.MatchImages), the ranks exchange
// the per-image match records (internal/records) in one Allgatherv, and
// every rank reduces all of them in global image order (metrics.Reduce) to
// the same values, bit for bit, whatever the rank count and whichever rank
// matched which image.
//
// A matching error on one rank travels in its buffer, so every rank
// returns it together and none waits for a rank that gave up.
package shardmetrics

import (
	"errors"
	"fmt"
	"slices"
	"syscall"
	"time"

	"github.com/canopy-hpc/canopy/internal/plan"
	"github.com/canopy-hpc/canopy/internal/records"
	"github.com/canopy-hpc/canopy/metrics"
	"github.com/canopy-hpc/canopy/mpi"
)

// ErrComm wraps a failure of the gather itself (an MPI error on this
// rank); every other error is the same on every rank.
var ErrComm = errors.New("shardmetrics: gather")

// Config is the metric stage's settings, the same on every rank.
type Config struct {
	Options      metrics.Options
	Families     metrics.Family
	ClassMetrics bool
	// Sweep holds further IoU thresholds: the recall and iou families are
	// reduced at each from the same records (Outcome.Sweep).
	Sweep []float64
}

// Stats are this rank's share of the stage: wall seconds of its three
// steps (Gather: the exchange and the decoding), the images it matched,
// the bytes it sent and the process CPU seconds (user + system) of each
// part: matching (and encoding), the exchange (a rank waiting in MPI polls,
// burning CPU for as long as the slowest rank takes), decoding the other
// ranks' records, and the reduction.
type Stats struct {
	Match, Gather, Reduce float64
	Images                int
	BytesSent             int
	CPU                   CPU
}

// CPU are process CPU seconds of the stage's parts.
type CPU struct {
	Match    float64 `json:"match"`
	Exchange float64 `json:"exchange"`
	Merge    float64 `json:"merge"`
	Reduce   float64 `json:"reduce"`
}

// Outcome is the stage's result on every rank.
type Outcome struct {
	Result metrics.Result
	// Sweep[k] are the values at Config.Sweep[k].
	Sweep [][]metrics.Value
	Stats Stats
}

// Buffer status bytes: the records follow, or the text of the rank's
// matching error.
const (
	statusOK  = 0
	statusErr = 1
)

// Run is the metric stage on this rank; mine are the global indices of the
// images it matches (each image on exactly one rank, in any order).
func Run(c mpi.Comm, in metrics.Input, mine []int, cfg Config) (Outcome, error) {
	var out Outcome
	mine = slices.Sorted(slices.Values(mine))
	cpu0 := cpuSeconds()
	t0 := time.Now()
	mopt := metrics.MatchOptions{Semantics: cfg.Options.Semantics, MinIoU: slices.Min(append([]float64{cfg.Options.IoUThreshold}, cfg.Sweep...))}
	buf := []byte{statusOK}
	recs, err := metrics.MatchImages(in, mine, mopt, cfg.Families)
	if err != nil {
		buf = append([]byte{statusErr}, err.Error()...)
	} else {
		buf = records.Encode(buf, recs, cfg.Families)
	}
	out.Stats.Images, out.Stats.BytesSent = len(mine), len(buf)
	t1 := time.Now()
	out.Stats.Match = t1.Sub(t0).Seconds()
	cpu1 := cpuSeconds()
	out.Stats.CPU.Match = cpu1 - cpu0

	parts, err := mpi.AllgatherBytes(c, buf)
	if err != nil {
		return Outcome{}, fmt.Errorf("%w: %w", ErrComm, err)
	}
	buf = nil
	cpu2 := cpuSeconds()
	out.Stats.CPU.Exchange = cpu2 - cpu1
	bufs := make([][]byte, len(parts))
	for r, p := range parts {
		if len(p) == 0 {
			return Outcome{}, fmt.Errorf("shardmetrics: rank %d sent an empty buffer", r)
		}
		if p[0] == statusErr {
			return Outcome{}, fmt.Errorf("rank %d: %s", r, p[1:])
		}
		bufs[r] = p[1:]
	}
	// this rank's own records are used as they are, not decoded again
	all, err := records.MergeOwn(bufs, c.Rank(), recs, cfg.Families, records.Limits{Images: len(in.Images), Labels: in.Labels.Len()})
	if err != nil {
		return Outcome{}, fmt.Errorf("shardmetrics: %w", err)
	}
	parts, bufs, recs = nil, nil, nil
	t2 := time.Now()
	out.Stats.Gather = t2.Sub(t1).Seconds()
	cpu3 := cpuSeconds()
	out.Stats.CPU.Merge = cpu3 - cpu2

	f := metrics.Frame{Images: in.Images, Labels: in.Labels, LabelValues: in.LabelValues}
	if out.Result, err = metrics.Reduce(f, all, cfg.Options, cfg.Families, cfg.ClassMetrics); err != nil {
		return Outcome{}, err
	}
	if len(cfg.Sweep) > 0 {
		if out.Sweep, err = metrics.ReduceSweep(f, all, cfg.Options, cfg.Families, cfg.Sweep); err != nil {
			return Outcome{}, err
		}
	}
	out.Stats.Reduce = time.Since(t2).Seconds()
	out.Stats.CPU.Reduce = cpuSeconds() - cpu3
	return out, nil
}

// Shards splits images over ranks for matching, balancing the cost of
// each (a pure function: every rank computes the same split).
func Shards(costs []int64, ranks int) ([][]int, error) {
	p, err := plan.Balance(costs, ranks)
	if err != nil {
		return nil, err
	}
	return p.Shards, nil
}

// Cost is an image's matching cost for Shards: its boxes.
func Cost(in metrics.Input, i int) int64 {
	return 1 + int64(len(in.Images[i].Truth)) + int64(len(in.Dets[i]))
}

// cpuSeconds is this process's user + system CPU time.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}
