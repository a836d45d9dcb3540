package jobs

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/canopy-hpc/canopy/infer/cuda"
	"github.com/canopy-hpc/canopy/mpi"
	"github.com/canopy-hpc/canopy/mpi/local"
)

// runLocal runs Eval on n in-process ranks (each with its own copy of cfg)
// through runJob, the same error rule the binary uses, and returns each
// rank's exit code.
func runLocal(t *testing.T, n int, cfg EvalConfig) []int {
	t.Helper()
	return runLocalCtx(t, n, cfg, func(int) context.Context { return context.Background() }, &bytes.Buffer{})
}

// runLocalCtx is runLocal with a context per rank and a shared stderr
// (written by one rank at a time; read it once the ranks are done).
func runLocalCtx(t *testing.T, n int, cfg EvalConfig, ctxOf func(rank int) context.Context, stderr io.Writer) []int {
	t.Helper()
	return runLocalJob(t, n, ctxOf, stderr, func(ctx context.Context, c mpi.Comm) error { return Eval(ctx, c, cfg) })
}

// runLocalJob runs job on n in-process ranks as runJob runs it (errors
// agreed, a local error aborting every rank) and returns the exit codes.
func runLocalJob(t *testing.T, n int, ctxOf func(rank int) context.Context, stderr io.Writer, job func(ctx context.Context, c mpi.Comm) error) []int {
	t.Helper()
	stderr = &lockedWriter{w: stderr}
	codes := make([]int, n)
	errs := local.Run(n, func(c mpi.Comm) error {
		ctx := ctxOf(c.Rank())
		codes[c.Rank()] = runJob(ctx, func() (mpi.Comm, func() error, error) {
			return c, func() error { return nil }, nil
		}, stderr, jobOptions{}, func(c mpi.Comm) error { return job(ctx, c) })
		return nil
	})
	for r, err := range errs {
		if code, ok := local.AbortCode(err); ok {
			codes[r] = code
		} else if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	return codes
}

// reportMetrics reads the "metrics" object of out/report.json as raw
// bytes (the line canopy writes first) and parsed.
func reportMetrics(t *testing.T, out string) ([]byte, map[string]any) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(out, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Metrics json.RawMessage `json:"metrics"`
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatalf("report.json: %v", err)
	}
	var m map[string]any
	if err := json.Unmarshal(rep.Metrics, &m); err != nil {
		t.Fatal(err)
	}
	return rep.Metrics, m
}

func setCfg(set, out string) EvalConfig {
	d := filepath.Join("..", "testdata", "sets", set)
	return EvalConfig{
		CSV: filepath.Join(d, "truth.csv"), Predictions: filepath.Join(d, "predictions.csv"),
		Out: out, IoUThreshold: 0.4, BatchSize: 3,
	}
}

// device and precision parse a --device and a --precision value for a
// ModelConfig built in a test.
func device(s string) cuda.Request {
	r, err := cuda.ParseDevice(s)
	if err != nil {
		panic(err)
	}
	return r
}

func precision(s string) cuda.Precision {
	p, err := cuda.ParsePrecision(s)
	if err != nil {
		panic(err)
	}
	return p
}

// lockedWriter serialises the writes of in-process ranks to one writer.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
