package modelsel

import (
	"fmt"

	"github.com/canopy-hpc/canopy/infer/cuda"
	"github.com/canopy-hpc/canopy/infer/cuda/cudnn"
	"github.com/canopy-hpc/canopy/infer/gpu"
	"github.com/canopy-hpc/canopy/internal/errkind"
	"github.com/canopy-hpc/canopy/internal/plan"
)

// The cuDNN path's settings (--precision fp32/tf32/bf16, --cudnn, --plan)
// and its global batching.

// gpuOptions loads this rank's cuDNN and plan file for the GPU detector.
// A missing or wrong library, or a plan file for another stack, is a GPU
// error (exit 5) that names what was searched or what differs.
func (lm *Model) gpuOptions(info cuda.Info) (gpu.Options, error) {
	o := gpu.Options{Precision: lm.precision}
	if !lm.precision.Cudnn() {
		if lm.planPath != "" {
			return o, &errkind.Error{Code: errkind.ExitUsage, Err: fmt.Errorf("jobs: --plan is for --precision fp32, tf32 or bf16 (cuDNN), not %s", lm.precision)}
		}
		return o, nil
	}
	lib, err := FindCUDNN(cudnn.Search{Flag: lm.cudnnPath})
	if err != nil {
		return o, &errkind.Error{Code: errkind.ExitMPI, Err: fmt.Errorf("jobs: --precision %s: %w (or run --precision exact, canopy's own kernels)", lm.precision, err)}
	}
	o.CUDNN = lib
	if lm.planPath == "" {
		return o, nil
	}
	pf, sum, err := cudnn.ReadPlanFile(lm.planPath)
	if err != nil {
		return o, &errkind.Error{Code: errkind.ExitMPI, Err: fmt.Errorf("jobs: --plan: %w", err)}
	}
	here := cudnn.PlanKey{CUDNN: lib.Version, GPU: info.Name, CC: info.SM, SMs: info.SMs}
	var diff []string
	if d := pf.Key.Mismatch(here); d != "" {
		diff = append(diff, d)
	}
	if pf.Precision != lm.precision.String() {
		diff = append(diff, fmt.Sprintf("precision %s in the file, %s here", pf.Precision, lm.precision))
	}
	if lm.batch > 0 && pf.Batch != lm.batch {
		diff = append(diff, fmt.Sprintf("batch size %d in the file, %d here", pf.Batch, lm.batch))
	}
	if len(diff) > 0 {
		return o, &errkind.Error{Code: errkind.ExitMPI, Err: fmt.Errorf("jobs: --plan %s was made for another stack: %v (make one here: canopy gpu-plan)", lm.planPath, diff)}
	}
	o.Plans, o.PlanSHA = pf, sum
	return o, nil
}

// NoteCUDNN records, after detection, the cuDNN path's library, plan and
// engines in the report's model section (rank 0's detector).
func (lm *Model) NoteCUDNN(det any) {
	if d, ok := det.(interface{ CUDNN() *gpu.CUDNNReport }); ok {
		lm.Info.CUDNN = d.CUDNN()
	}
}

// Batching is the report's record of the global batching: batch k is
// images kN…kN+N−1 (in the input's order), each in slot i mod N, padded
// to N; images of different resized sizes in one batch run as separate
// sub-batches, each padded to N.
type Batching struct {
	N        int    `json:"n"`
	Grouping string `json:"grouping"`
}

// GlobalBatching says whether the ranks run the cuDNN path, whose bytes
// hold only for a fixed batch and slot.
func (lm *Model) GlobalBatching() bool {
	return lm != nil && lm.Place.Kind == "cuda" && lm.precision.Cudnn()
}

// Plan assigns the images to the ranks: todo (global indices, increasing)
// with their costs by plan.Balance; on the cuDNN path whole global batches
// of batchSize by plan.BalanceBatches (and the report records the
// Batching). lm may be nil (replayed predictions).
func (lm *Model) Plan(todo []int, costs []int64, batchSize, ranks int) (plan.Plan, error) {
	if !lm.GlobalBatching() {
		return plan.Balance(costs, ranks)
	}
	n := max(batchSize, 1)
	lm.batch = n
	lm.Info.Batching = &Batching{N: n, Grouping: fmt.Sprintf("global batches of %d by input position (batch k = images %d·k…%d·k+%d, image i in slot i mod %d, padded to %d with black images); "+
		"a batch's images of different resized sizes run as separate sub-batches, each padded to %d; a rank runs whole batches", n, n, n, n-1, n, n, n)}
	return plan.BalanceBatches(todo, n, ranks)
}

// RankShard is rank's part of Plan: the global indices (taken from todo)
// of the images rank detects, in the plan's order.
func (lm *Model) RankShard(todo []int, costs []int64, batchSize, rank, ranks int) ([]int, error) {
	p, err := lm.Plan(todo, costs, batchSize, ranks)
	if err != nil {
		return nil, err
	}
	shard := make([]int, len(p.Shards[rank]))
	for k, j := range p.Shards[rank] {
		shard[k] = todo[j]
	}
	return shard, nil
}
