package jobs

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/canopy-hpc/canopy/infer/cuda"
	"github.com/canopy-hpc/canopy/internal/pipeline/predict"
	"github.com/canopy-hpc/canopy/internal/tilerun"
	"github.com/canopy-hpc/canopy/mpi"
)

// closeFailsOn is a fake GPU that fails to close (after freeing itself,
// as closeFails) when it is device 1 and *on holds: one rank's late fault.
type closeFailsOn struct {
	cuda.Device
	on *atomic.Bool
}

func (d closeFailsOn) Close() error {
	if d.Info().Index == 1 && d.on.Load() {
		return closeFails{d.Device}.Close()
	}
	return d.Device.Close()
}

// TestDetectorCloseError: eval --model, predict and predict --tile on two
// fake GPUs, rank 1's failing to close (as a late CUDA fault is found by
// the close): every rank exits 5, as eval-crops does; the close's error is
// printed once, by rank 1; nothing more is published (no report.json). The
// detections already saved stand: --resume, the device closing now,
// finishes the run (exit 0, the same predictions as a run that never
// failed).
func TestDetectorCloseError(t *testing.T) {
	withFakeGPUs(t, 2)
	var failing atomic.Bool
	wrapFakeGPUs(func(d cuda.Device) cuda.Device { return closeFailsOn{d, &failing} })
	_, tif := tileRasterFile(t, 260, 200, 7)
	_, _, images := testModelSet(t)
	model := gpuCfg(t, t.TempDir()).Model
	model.Precision, model.PrecisionSet = cuda.Exact, true
	for _, c := range []struct {
		name, file string
		job        func(out string, resume bool) func(context.Context, mpi.Comm) error
	}{
		{"eval", "predictions.csv", func(out string, resume bool) func(context.Context, mpi.Comm) error {
			cfg := gpuCfg(t, out)
			cfg.Model, cfg.Resume = model, resume
			return func(ctx context.Context, c mpi.Comm) error { return Eval(ctx, c, cfg) }
		}},
		{"predict", "predictions.csv", func(out string, resume bool) func(context.Context, mpi.Comm) error {
			cfg := PredictConfig{Images: images, Out: out, BatchSize: 2, Model: model, Resume: resume}
			return func(ctx context.Context, c mpi.Comm) error { return predict.Run(ctx, c, cfg) }
		}},
		{"predict --tile", "predictions.csv", func(out string, resume bool) func(context.Context, mpi.Comm) error {
			cfg := tileCfg(out, tif)
			cfg.Model, cfg.Resume, cfg.Settings.Patch = model, resume, 128
			return func(ctx context.Context, c mpi.Comm) error { return tilerun.Run(ctx, c, cfg) }
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			bg := func(int) context.Context { return context.Background() }
			ref := t.TempDir()
			failing.Store(false)
			if codes := runLocalJob(t, 2, bg, &bytes.Buffer{}, c.job(ref, false)); codes[0] != ExitOK || codes[1] != ExitOK {
				t.Fatalf("without the fault: exit %v", codes)
			}
			out := filepath.Join(t.TempDir(), "out")
			var stderr bytes.Buffer
			failing.Store(true)
			codes := runLocalJob(t, 2, bg, &stderr, c.job(out, false))
			failing.Store(false)
			msg := stderr.String()
			if codes[0] != ExitMPI || codes[1] != ExitMPI {
				t.Fatalf("exit %v, want %d on every rank\n%s", codes, ExitMPI, msg)
			}
			if n := strings.Count(msg, "the device did not close"); n != 1 || !strings.Contains(msg, "close the detector") {
				t.Errorf("the close error printed %d times (want once, naming the detector):\n%s", n, msg)
			}
			if _, err := os.Stat(filepath.Join(out, "report.json")); err == nil {
				t.Errorf("a run whose detector failed to close published report.json")
			}
			if codes := runLocalJob(t, 2, bg, &bytes.Buffer{}, c.job(out, true)); codes[0] != ExitOK || codes[1] != ExitOK {
				t.Fatalf("--resume after the close error: exit %v", codes)
			}
			want, err := os.ReadFile(filepath.Join(ref, c.file))
			got, err2 := os.ReadFile(filepath.Join(out, c.file))
			if err != nil || err2 != nil || bytes.Count(want, []byte("\n")) < 2 || !bytes.Equal(got, want) {
				t.Errorf("the resumed %s differs from a run without the fault (%v, %v)", c.file, err, err2)
			}
		})
	}
}
