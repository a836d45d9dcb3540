// Package replay is the detector backend that replays stored predictions
// (a DeepForest prediction CSV) instead of running a model. Rows join the
// truth by exact image_path; no score threshold or cap is applied and
// images are never opened.
package replay

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/infer"
)

// Detector replays predictions grouped by image path.
type Detector struct {
	byPath map[string][]box.Detection
	// fail is the test hook: Detect fails with ErrModel.
	fail bool
}

var _ infer.Detector = (*Detector)(nil)

// New builds a replay detector from per-path detections (already mapped
// to label ids, in CSV row order).
func New(byPath map[string][]box.Detection) *Detector {
	return &Detector{byPath: byPath}
}

// FailEnv names the test hook: when CANOPY_TEST_FAIL_RANK equals this
// rank's number, Detect fails on that rank only (used by the tests that
// prove a one-rank failure aborts the job instead of hanging it).
const FailEnv = "CANOPY_TEST_FAIL_RANK"

// InjectFailure arms the test hook for rank if FailEnv names it.
func (d *Detector) InjectFailure(rank int) {
	if v, ok := os.LookupEnv(FailEnv); ok && v == strconv.Itoa(rank) {
		d.fail = true
	}
}

// SlowEnv is a test hook: milliseconds each image takes, so runs last long
// enough to be interrupted from outside.
const SlowEnv = "CANOPY_TEST_SLOW_MS"

// Name implements infer.Detector.
func (d *Detector) Name() string { return "replay" }

// Detect implements infer.Detector.
func (d *Detector) Detect(ctx context.Context, batch []infer.Input) ([][]box.Detection, error) {
	if d.fail {
		return nil, fmt.Errorf("replay: injected failure (%s): %w", FailEnv, infer.ErrModel)
	}
	out := make([][]box.Detection, len(batch))
	slow, _ := strconv.Atoi(os.Getenv(SlowEnv))
	for i, in := range batch {
		if slow > 0 {
			time.Sleep(time.Duration(slow) * time.Millisecond)
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		out[i] = d.byPath[in.Path]
	}
	return out, nil
}

// Close implements infer.Detector.
func (d *Detector) Close() error { return nil }
