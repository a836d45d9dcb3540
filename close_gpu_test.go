package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/canopy-hpc/canopy/jobs"
)

var errorLine = regexp.MustCompile(`canopy: rank \d+/\d+ \(`)

// TestMPIGPUCloseErrorOnce: under the real mpirun, a rank whose GPU fails
// to close (the host shim's device 1, as a late CUDA fault found by the
// close) fails the job: exit 5 (as eval-crops), the close's error printed
// once by that rank and no other line (the launcher stops rank 0, which
// stays silent), nothing published. eval --model runs the RetinaNet
// detector, predict --model the point model's own pipeline.
func TestMPIGPUCloseErrorOnce(t *testing.T) {
	dir := t.TempDir()
	bin := hostkernBin(t, dir)
	model := gpuTestModel(t, dir)
	pointModel, pointImages := pointSet(t)
	env := []string{"CANOPY_TEST_HOSTKERN_GPUS=2", "CANOPY_TEST_HOSTKERN_CLOSE_FAIL=1"}
	for _, c := range []struct {
		name string
		args []string
	}{
		{"eval", []string{"eval", "--model", model, "--csv", demoImages(t, 4), "--batch-size", "2"}},
		{"points", []string{"predict", "--model", pointModel, "--images", pointImages, "--threads", "1"}},
	} {
		out := filepath.Join(t.TempDir(), "out")
		args := append(c.args, "--out", out, "--device", "cuda", "--precision", "exact")
		r := mpirunBin(t, bin, 2, env, args...)
		if r.code != jobs.ExitMPI {
			t.Fatalf("%s: exit %d, want %d\n%s", c.name, r.code, jobs.ExitMPI, r.stderr)
		}
		// A rank's error line is "canopy: rank R/N (host): …" (progress
		// lines are rank 0's "canopy: rank 0: …").
		if n := strings.Count(r.stderr, "an injected late fault"); n != 1 || len(errorLine.FindAllString(r.stderr, -1)) != 1 {
			t.Errorf("%s: the close error printed %d times, want once and alone:\n%s", c.name, n, r.stderr)
		}
		for _, f := range []string{"report.json", "predictions.csv"} {
			if _, err := os.Stat(filepath.Join(out, f)); err == nil {
				t.Errorf("%s: a job whose GPU failed to close published %s", c.name, f)
			}
		}
	}
}
