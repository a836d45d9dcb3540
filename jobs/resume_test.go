package jobs

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/canopy-hpc/canopy/internal/parts"
)

// runLocalInterrupt is runLocal with a context per rank, so the interrupt
// hook can cancel one rank's context as a SIGTERM would.
func runLocalInterrupt(t *testing.T, n int, cfg EvalConfig, stderr *bytes.Buffer) []int {
	t.Helper()
	ctxs := make([]context.Context, n)
	cancels := make([]context.CancelFunc, n)
	for r := range ctxs {
		ctxs[r], cancels[r] = context.WithCancel(context.Background())
		defer cancels[r]()
	}
	old := interruptSelf
	interruptSelf = func(rank int) { cancels[rank]() }
	defer func() { interruptSelf = old }()
	return runLocalCtx(t, n, cfg, func(r int) context.Context { return ctxs[r] }, stderr)
}

func resumeOf(t *testing.T, out string) resumeInfo {
	t.Helper()
	var rep struct {
		Run struct{ Resume resumeInfo }
	}
	readJSONFile(t, filepath.Join(out, "report.json"), &rep)
	return rep.Run.Resume
}

// An interrupted run (rank 1 stops after 2 batches, as after SIGTERM)
// exits 8 on every rank; --resume on another rank count computes only the
// images missing from the part files and gives the uninterrupted metrics,
// byte for byte.
func TestInterruptAndResume(t *testing.T) {
	ref := t.TempDir()
	if codes := runLocal(t, 1, setCfg("multi", ref)); codes[0] != 0 {
		t.Fatal(codes)
	}
	want, _ := reportMetrics(t, ref)

	out := t.TempDir()
	cfg := setCfg("multi", out)
	cfg.BatchSize = 5
	t.Setenv(InterruptEnv, "1:2")
	var stderr bytes.Buffer
	codes := runLocalInterrupt(t, 3, cfg, &stderr)
	for r, c := range codes {
		if c != ExitResumable {
			t.Fatalf("rank %d exit %d, want %d\n%s", r, c, ExitResumable, stderr.String())
		}
	}
	if !strings.Contains(stderr.String(), "rank 1/3") || !strings.Contains(stderr.String(), "--resume") {
		t.Errorf("stderr: %s", stderr.String())
	}
	if _, err := os.Stat(filepath.Join(out, "report.json")); err == nil {
		t.Fatal("an interrupted run wrote a report")
	}
	os.Unsetenv(InterruptEnv)

	cfg.Resume = true
	if codes := runLocal(t, 2, cfg); codes[0] != 0 {
		t.Fatalf("resume: %v", codes)
	}
	got, _ := reportMetrics(t, out)
	if !bytes.Equal(got, want) {
		t.Fatalf("resumed metrics\n%s\ndiffer from an uninterrupted run\n%s", got, want)
	}
	ri := resumeOf(t, out)
	// rank 1 saved its first 2 batches (10 images) and ranks 0 and 2 their
	// whole shards (about 100 each); only rank 1's unfinished images remain.
	if ri.Attempt != 1 || ri.FromParts+ri.Computed != 300 || ri.FromParts < 200 || ri.Computed > 100-10 {
		t.Fatalf("resume info %+v", ri)
	}
}

// A part file whose last record was cut by a crash: that record's images
// are recomputed and the metrics are unchanged.
func TestResumeAfterTornRecord(t *testing.T) {
	ref := t.TempDir()
	runLocal(t, 1, setCfg("three", ref))
	want, _ := reportMetrics(t, ref)
	out := t.TempDir()
	cfg := setCfg("three", out)
	cfg.BatchSize = 1
	if codes := runLocal(t, 1, cfg); codes[0] != 0 {
		t.Fatal(codes)
	}
	files, _ := parts.ReadAll(out)
	name := filepath.Join(out, parts.Dir, files[0].Name)
	os.WriteFile(name, files[0].Data[:len(files[0].Data)-5], 0o644)
	cfg.Resume = true
	if codes := runLocal(t, 2, cfg); codes[0] != 0 {
		t.Fatal(codes)
	}
	if got, _ := reportMetrics(t, out); !bytes.Equal(got, want) {
		t.Fatalf("%s vs %s", got, want)
	}
	if ri := resumeOf(t, out); ri.RecordsDropped != 1 || ri.Computed != 1 || ri.FromParts != 2 {
		t.Fatalf("%+v", ri)
	}
}

func TestResumeRefusedWhenInputsDiffer(t *testing.T) {
	out := t.TempDir()
	if codes := runLocal(t, 1, setCfg("three", out)); codes[0] != 0 {
		t.Fatal(codes)
	}
	cfg := setCfg("three", out)
	cfg.Resume = true
	cfg.Predictions = filepath.Join("..", "testdata", "sets", "edge", "predictions.csv")
	var stderr bytes.Buffer
	codes := runLocalCtx(t, 2, cfg, func(int) context.Context { return context.Background() }, &stderr)
	if codes[0] != ExitUsage || codes[1] != ExitUsage || !strings.Contains(stderr.String(), "predictions sha256") {
		t.Fatalf("codes %v, stderr %s", codes, stderr.String())
	}
	if codes := runLocal(t, 1, EvalConfig{CSV: cfg.CSV, Predictions: cfg.Predictions, Out: t.TempDir(), Resume: true}); codes[0] != ExitUsage {
		t.Fatalf("resume without a run: %v", codes)
	}
}
