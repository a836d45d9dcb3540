package tilerun

import (
	"fmt"

	"github.com/canopy-hpc/canopy/internal/collective"
	"github.com/canopy-hpc/canopy/internal/dataset"
	"github.com/canopy-hpc/canopy/internal/errkind"
	"github.com/canopy-hpc/canopy/internal/limits"
	"github.com/canopy-hpc/canopy/internal/modelsel"
	"github.com/canopy-hpc/canopy/mpi"
)

// Bytes a round holds per window at most: a window's detections (up to
// maxWindowDets, as this rank's result, the gathered buffer and the
// decoded copy) and its bookkeeping.
const (
	maxWindowDets   = 300 // torchvision's detections_per_img ceiling
	roundWindowCost = maxWindowDets * 3 * 56
)

// tileMemory fixes the round size and checks, on every rank, that a
// round, the largest window and the rasters' bookkeeping fit the rank's
// memory before anything is allocated for them: over the budget is exit
// 3, naming the raster and the need.
func tileMemory(c mpi.Comm, cfg Config, model *modelsel.Model, t *tileRun) error {
	t.round = cfg.RoundWindows
	if t.round <= 0 {
		// 32 detector calls per rank: a round's end (the gather, the
		// slowest chunk) costs a few per cent, and the first rasters
		// are published after 32·ranks·batch windows
		t.round = max(64, 32*c.Size()*cfg.BatchSize)
	}
	var err error
	largest, lr := 0, -1
	for i, g := range t.ix.grids {
		if w := g.At(0); w.W*w.H > largest {
			largest, lr = w.W*w.H, i
		}
	}
	budget, from, ok := limits.RankBudget(cfg.Model, c.LocalSize())
	if ok && cfg.RoundWindows <= 0 {
		t.round = int(max(int64(c.Size()*cfg.BatchSize), min(int64(t.round), budget/8/roundWindowCost)))
	}
	if t.global && cfg.RoundWindows <= 0 { // whole global batches per round
		t.round = (t.round + cfg.BatchSize - 1) / cfg.BatchSize * cfg.BatchSize
	}
	if ok {
		book := int64(len(t.rasters))*512 + int64(len(t.resumed))*64
		need := limits.ResidentBytes() + book + int64(t.round)*roundWindowCost
		if need > budget {
			err = &errkind.Error{Code: errkind.ExitInput, Err: fmt.Errorf("jobs: the job's %d rasters (%d windows; the largest, %s, %d) need about %s on this rank for their bookkeeping and a round of %d windows, which may use %s (%s): "+
				"run fewer ranks per node, give fewer rasters, a smaller --round-windows, or set --rank-memory: %w",
				len(t.rasters), t.ix.total(), t.rasters[lr].File, t.ix.grids[lr].Len(), limits.GiB(need), t.round, limits.GiB(budget), from, dataset.ErrInput)}
		}
	}
	if err == nil && lr >= 0 {
		w := t.ix.grids[lr].At(0)
		err = limits.CheckMemory(t.rasters[lr].File, w.W, w.H, model, cfg.Model, cfg.BatchSize, c.LocalSize())
	}
	return collective.AgreeErr(c, errkind.ExitInput, err)
}
