package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/canopy-hpc/canopy/internal/testhook"
	"github.com/canopy-hpc/canopy/internal/testsupport/torchckpt"
	"github.com/canopy-hpc/canopy/jobs"
	"github.com/canopy-hpc/canopy/metrics"
	"github.com/canopy-hpc/canopy/mpi"
	"github.com/canopy-hpc/canopy/mpi/local"
)

// These tests run the real binary under the real mpirun (through
// scripts/mpirun.sh, which adds the root and oversubscription flags and a
// timeout). They never skip: CI must have MPI.

var canopyBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "canopy-e2e")
	if err != nil {
		panic(err)
	}
	canopyBin = filepath.Join(dir, "canopy")
	if out, err := exec.Command("go", "build", "-o", canopyBin, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

type result struct {
	code           int
	stdout, stderr string
	took           time.Duration
}

// mpirun runs canopy on np ranks with a hard timeout.
func mpirun(t *testing.T, np int, env []string, args ...string) result {
	t.Helper()
	return mpirunBin(t, canopyBin, np, env, args...)
}

// mpirunBin is mpirun of the binary bin.
func mpirunBin(t *testing.T, bin string, np int, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "scripts/mpirun.sh", append([]string{"-np", fmt.Sprint(np), bin}, args...)...)
	cmd.Env = append(append(os.Environ(), "CANOPY_MPIRUN_TIMEOUT=60"), env...)
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	start := time.Now()
	err := cmd.Run()
	r := result{stdout: so.String(), stderr: se.String(), took: time.Since(start)}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	default:
		t.Fatalf("mpirun: %v", err)
	}
	if ctx.Err() != nil {
		t.Fatalf("mpirun -np %d hung (killed after 90 s): %s", np, r.stderr)
	}
	return r
}

func set(name, file string) string { return filepath.Join("testdata", "sets", name, file) }

func metricsOf(t *testing.T, out string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(out, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rep struct{ Metrics json.RawMessage }
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	return rep.Metrics
}

// inProcess computes the same job with the in-process communicator.
func inProcess(t *testing.T, n int, cfg jobs.EvalConfig) []byte {
	t.Helper()
	errs := local.Run(n, func(c mpi.Comm) error { return jobs.Eval(context.Background(), c, cfg) })
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	return metricsOf(t, cfg.Out)
}

func TestMPIRankCountsBitIdentical(t *testing.T) {
	for _, s := range []string{"multi", "single"} {
		for _, sem := range []metrics.Semantics{metrics.Validation, metrics.EvaluateBoxes} {
			refOut := t.TempDir()
			ref := inProcess(t, 1, jobs.EvalConfig{CSV: set(s, "truth.csv"), Predictions: set(s, "predictions.csv"),
				Out: refOut, IoUThreshold: 0.4, Semantics: sem, BatchSize: 1})
			for np := 1; np <= 4; np++ {
				out := t.TempDir()
				r := mpirun(t, np, nil, "eval", "--csv", set(s, "truth.csv"), "--predictions", set(s, "predictions.csv"),
					"--semantics", sem.String(), "--out", out, "--force")
				if r.code != 0 {
					t.Fatalf("%s %s np%d: exit %d\n%s", s, sem, np, r.code, r.stderr)
				}
				if got := metricsOf(t, out); !bytes.Equal(got, ref) {
					t.Fatalf("%s %s np%d: metrics\n%s\ndiffer from the in-process run\n%s", s, sem, np, got, ref)
				}
				// each rank matched its own images: the tables rank 0
				// writes from the gathered records are np 1's bytes
				for _, f := range []string{"results.csv", "predictions.csv"} {
					a, errA := os.ReadFile(filepath.Join(out, f))
					b, errB := os.ReadFile(filepath.Join(refOut, f))
					if errA != nil || errB != nil || len(b) == 0 || !bytes.Equal(a, b) {
						t.Fatalf("%s %s np%d: %s differs from the in-process np 1 run (%v, %v)", s, sem, np, f, errA, errB)
					}
				}
				if n := strings.Count(r.stdout, "Validate metric"); n != 1 {
					t.Errorf("np%d: the table was printed %d times", np, n)
				}
			}
		}
	}
}

// TestMPIIoUSweep: --iou-sweep under mpirun at np 3 gives the in-process
// np 1 run's report bytes (metrics and metrics_by_iou_threshold), and a
// malformed list is one usage error (exit 2) naming the item.
func TestMPIIoUSweep(t *testing.T) {
	refOut := t.TempDir()
	inProcess(t, 1, jobs.EvalConfig{CSV: set("multi", "truth.csv"), Predictions: set("multi", "predictions.csv"),
		Out: refOut, IoUThreshold: 0.4, IoUSweep: []float64{0.5, 0.75}, BatchSize: 1})
	sweepOf := func(out string) string {
		b, err := os.ReadFile(filepath.Join(out, "report.json"))
		if err != nil {
			t.Fatal(err)
		}
		var rep map[string]json.RawMessage
		if err := json.Unmarshal(b, &rep); err != nil {
			t.Fatal(err)
		}
		return string(rep["metrics"]) + string(rep["metrics_by_iou_threshold"])
	}
	ref := sweepOf(refOut)
	if !strings.Contains(ref, `"iou_threshold": 0.75`) {
		t.Fatalf("no sweep in the in-process report: %s", ref)
	}
	out := t.TempDir()
	r := mpirun(t, 3, nil, "eval", "--csv", set("multi", "truth.csv"), "--predictions", set("multi", "predictions.csv"),
		"--iou-sweep", "0.5,0.75", "--out", out, "--force")
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	if got := sweepOf(out); got != ref {
		t.Fatalf("np 3 under mpirun:\n%s\ndiffers from np 1 in-process:\n%s", got, ref)
	}
	r = mpirun(t, 2, nil, "eval", "--csv", set("multi", "truth.csv"), "--predictions", set("multi", "predictions.csv"),
		"--iou-sweep", "0.5,,0.75", "--out", t.TempDir())
	if r.code != jobs.ExitUsage || !strings.Contains(r.stderr, `--iou-sweep`) {
		t.Fatalf("exit %d, want %d naming --iou-sweep\n%s", r.code, jobs.ExitUsage, r.stderr)
	}
}

// More ranks than images: idle ranks join every collective.
func TestMPIFiveRanksThreeImages(t *testing.T) {
	ref := inProcess(t, 1, jobs.EvalConfig{CSV: set("three", "truth.csv"), Predictions: set("three", "predictions.csv"), Out: t.TempDir(), IoUThreshold: 0.4})
	out := t.TempDir()
	r := mpirun(t, 5, nil, "eval", "--csv", set("three", "truth.csv"), "--predictions", set("three", "predictions.csv"), "--out", out)
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	if got := metricsOf(t, out); !bytes.Equal(got, ref) {
		t.Fatalf("metrics %s, want %s", got, ref)
	}
	var rep struct {
		Run struct {
			PerRank []struct{ Images int } `json:"per_rank"`
		}
	}
	b, _ := os.ReadFile(filepath.Join(out, "report.json"))
	json.Unmarshal(b, &rep)
	idle := 0
	for _, p := range rep.Run.PerRank {
		if p.Images == 0 {
			idle++
		}
	}
	if len(rep.Run.PerRank) != 5 || idle != 2 {
		t.Fatalf("per_rank %+v", rep.Run.PerRank)
	}
}

// A failure on rank 1 only ends every rank, non-zero, within seconds.
func TestMPIOneRankFailsNoHang(t *testing.T) {
	r := mpirun(t, 3, []string{"CANOPY_TEST_FAIL_RANK=1"}, "eval", "--csv", set("multi", "truth.csv"),
		"--predictions", set("multi", "predictions.csv"), "--out", t.TempDir())
	if r.code != jobs.ExitModel {
		t.Errorf("exit %d, want %d\n%s", r.code, jobs.ExitModel, r.stderr)
	}
	if !strings.Contains(r.stderr, "rank 1/3 (") || !strings.Contains(r.stderr, "injected failure") {
		t.Errorf("stderr does not name rank 1 and the failure:\n%s", r.stderr)
	}
	if r.took > 20*time.Second {
		t.Errorf("took %v", r.took)
	}
}

func TestMPIDisagreementExits6(t *testing.T) {
	r := mpirun(t, 2, []string{testhook.PerturbEnv + "=1"}, "eval", "--csv", set("three", "truth.csv"),
		"--predictions", set("three", "predictions.csv"), "--out", t.TempDir())
	if r.code != jobs.ExitDisagree || !strings.Contains(r.stderr, "ranks [1]") {
		t.Fatalf("exit %d, want %d\n%s", r.code, jobs.ExitDisagree, r.stderr)
	}
}

// A bad CSV is one error, printed once by rank 0; every rank exits 3 and
// no report is written.
func TestMPIBadCSVExit3(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.csv")
	os.WriteFile(bad, []byte("image_path,xmin,ymin,xmax,ymax,label\na.png,1,2,3,4,Tree\na.png,5,2,3,4,Tree\n"), 0o644)
	out := filepath.Join(dir, "out")
	r := mpirun(t, 3, nil, "eval", "--csv", bad, "--predictions", set("three", "predictions.csv"), "--out", out)
	if r.code != jobs.ExitInput {
		t.Fatalf("exit %d, want 3\n%s", r.code, r.stderr)
	}
	if n := strings.Count(r.stderr, "bad.csv:3: xmax 3 < xmin 5"); n != 1 {
		t.Errorf("error printed %d times, want once:\n%s", n, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(out, "report.json")); err == nil {
		t.Error("report written")
	}
}

// A usage error found before MPI starts is printed once, with exit 2.
// Rank 0 alone prints it, so the other ranks must not end the job first:
// CI once saw exit 2 with no message, rank 1 having exited before rank 0
// printed. The second case makes rank 0 start 1 s late, so a rank that
// exits at once always loses the message.
func TestMPIUsageErrorOnce(t *testing.T) {
	for _, env := range [][]string{nil, {testhook.StartDelayEnv + "=0:1000"}} {
		r := mpirun(t, 2, env, "eval", "--no-such-flag")
		if r.code != jobs.ExitUsage {
			t.Fatalf("%v: exit %d, want 2\n%s", env, r.code, r.stderr)
		}
		if n := strings.Count(r.stderr, "no-such-flag"); n != 1 {
			t.Errorf("%v: usage error printed %d times:\n%s", env, n, r.stderr)
		}
	}
}

// An error before MPI starts that only a rank other than 0 meets (here its
// CPU profile file cannot be created: PREFIX.rank1 is a folder) is said
// once, by that rank, with its rank; the job exits 2 and does not hang.
// Before, every rank > 0 kept such errors to itself, so the job ended
// with exit 2 and no word. The shared-error case above still prints once:
// rank 0's exit ends the job within rank 1's grace.
func TestMPIPreMPIErrorOfOneRankSaid(t *testing.T) {
	prefix := filepath.Join(t.TempDir(), "prof")
	if err := os.Mkdir(prefix+".rank1", 0o755); err != nil {
		t.Fatal(err)
	}
	r := mpirun(t, 2, []string{jobs.ProfileEnv + "=" + prefix}, "eval", "--csv", set("three", "truth.csv"), "--predictions", set("three", "predictions.csv"), "--out", t.TempDir())
	if r.code != jobs.ExitUsage {
		t.Fatalf("exit %d, want %d\n%s", r.code, jobs.ExitUsage, r.stderr)
	}
	if n := strings.Count(r.stderr, "prof.rank1"); n != 1 {
		t.Errorf("rank 1's error said %d times, want once:\n%s", n, r.stderr)
	}
	if !strings.Contains(r.stderr, "canopy: rank 1/2 (") {
		t.Errorf("the line does not name rank 1 of 2:\n%s", r.stderr)
	}
}

func run1(t *testing.T, args ...string) result {
	t.Helper()
	var so, se bytes.Buffer
	cmd := exec.Command(canopyBin, args...)
	cmd.Stdout, cmd.Stderr = &so, &se
	err := cmd.Run()
	r := result{stdout: so.String(), stderr: se.String()}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return r
}

// Flags go before or after the positional argument; without a launcher the
// binary is a 1-rank job.
func TestFlagsBeforeAndAfterArguments(t *testing.T) {
	truth, preds := set("three", "truth.csv"), set("three", "predictions.csv")
	var ref []byte
	for i, args := range [][]string{
		{"eval", "--predictions", preds, "--out", "OUT", truth},
		{"eval", truth, "--predictions", preds, "--out", "OUT"},
		{"eval", "--out", "OUT", truth, "--iou-threshold=0.4", "--predictions", preds, "--force"},
		{"eval", "--csv", truth, "--predictions", preds, "--out", "OUT"},
	} {
		out := t.TempDir()
		for k := range args {
			if args[k] == "OUT" {
				args[k] = out
			}
		}
		r := run1(t, args...)
		if r.code != 0 {
			t.Fatalf("case %d %v: exit %d\n%s", i, args, r.code, r.stderr)
		}
		got := metricsOf(t, out)
		if ref == nil {
			ref = got
		} else if !bytes.Equal(got, ref) {
			t.Fatalf("case %d: %s vs %s", i, got, ref)
		}
	}
	if r := run1(t, "eval", truth, "extra.csv", "--predictions", preds); r.code != jobs.ExitUsage {
		t.Errorf("two positional arguments: exit %d", r.code)
	}
	if r := run1(t, "version", "--help"); r.code != 0 || !strings.Contains(r.stdout, "version") {
		t.Errorf("version --help: %d %s", r.code, r.stdout)
	}
	if r := run1(t, "eval", "--iou-threshold", "1.5", truth, "--predictions", preds); r.code != jobs.ExitUsage {
		t.Errorf("iou 1.5: exit %d", r.code)
	}
}

func TestHelpListsFlagsAndExitCodes(t *testing.T) {
	r := run1(t, "eval", "--help")
	for _, want := range []string{"--csv", "--root-dir", "--predictions", "--iou-threshold", "--semantics", "--label-dict", "--out", "--force", "--batch-size", "--max-image-pixels", "--rank-memory", "--verbose", "EXIT CODES", "6  ranks disagree"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("eval --help lacks %q", want)
		}
	}
	if r := run1(t, "--help"); !strings.Contains(r.stdout, "EXIT CODES") {
		t.Errorf("--help lacks the exit codes:\n%s", r.stdout)
	}
}

func TestMetricsFamiliesFlag(t *testing.T) {
	truth, preds := set("coco", "truth.csv"), set("coco", "predictions.csv")
	keys := func(args ...string) map[string]any {
		out := t.TempDir()
		r := run1(t, append([]string{"eval", truth, "--predictions", preds, "--out", out}, args...)...)
		if r.code != 0 {
			t.Fatalf("%v: exit %d %s", args, r.code, r.stderr)
		}
		var m map[string]any
		json.Unmarshal(metricsOf(t, out), &m)
		return m
	}
	all := keys()
	for _, k := range []string{"box_recall", "iou", "iou/cl_0", "map", "mar_large", "map_per_class"} {
		if _, ok := all[k]; !ok {
			t.Errorf("default run lacks %s", k)
		}
	}
	if all["map_per_class"] != -1.0 {
		t.Errorf("map_per_class without --class-metrics: %v, want -1", all["map_per_class"])
	}
	if _, ok := all["classes"]; ok {
		t.Error("classes reported without --class-metrics")
	}
	only := keys("--metrics", "recall")
	if _, ok := only["map"]; ok || only["box_recall"] == nil {
		t.Errorf("--metrics recall: %v", only)
	}
	cm := keys("--metrics", "coco", "--class-metrics")
	if arr, ok := cm["map_per_class"].([]any); !ok || len(arr) != 3 || fmt.Sprint(cm["classes"]) != "[0 1 2]" {
		t.Errorf("--class-metrics: map_per_class %v classes %v", cm["map_per_class"], cm["classes"])
	}
	if r := run1(t, "eval", truth, "--predictions", preds, "--metrics", "bogus"); r.code != jobs.ExitUsage {
		t.Errorf("--metrics bogus: exit %d", r.code)
	}
}

// A rank frozen by SIGSTOP before a collective: the others' watchdog fires,
// rank 0 names the rank and host it waits for, and the job ends with exit 5.
func TestMPIWatchdogFrozenRank(t *testing.T) {
	frozenRank(t, "1", "rank 0/3", "Allgather", "waiting for rank 1 (", "; hosts: ")
}

// The watchdog guards every collective, not only the gather: a rank frozen
// before the first one (the broadcast of the inputs) is named the same way.
func TestMPIWatchdogFrozenAtStart(t *testing.T) {
	frozenRank(t, "2:start", "rank 0/3", "broadcast inputs", "Bcast (collective #1)", "waiting for rank 2 (", "; hosts: ")
}

// A rank frozen inside a collective, after its arrival round (so the
// watchdog's round passed on every rank): the stall guard ends the job.
// Rank 0 waits max(floor, 3 × the 2 s timeout) = 6 s with the floor at 3 s,
// then says the collective did not complete and aborts with exit 5; before
// the guard the job waited for mpirun's own limit (60 s here: exit 124).
func TestMPIWatchdogFrozenInsideGather(t *testing.T) {
	frozenRank(t, "1:in-Allgather", "rank 0/3", "Allgather (collective #", "did not complete 6s after every rank entered it")
}

// frozenRank runs eval on 3 ranks with testhook.StopEnv=stop and a 2 s collective
// timeout (the stall guard's floor at 3 s): exit 5 within 30 s, and stderr
// holds every one of want.
func frozenRank(t *testing.T, stop string, want ...string) {
	t.Helper()
	r := mpirun(t, 3, []string{testhook.StopEnv + "=" + stop, testhook.StallFloorEnv + "=3s"}, "eval", "--csv", set("multi", "truth.csv"),
		"--predictions", set("multi", "predictions.csv"), "--out", t.TempDir(), "--collective-timeout", "2s")
	if r.code != jobs.ExitMPI {
		t.Fatalf("exit %d, want %d\n%s", r.code, jobs.ExitMPI, r.stderr)
	}
	for _, w := range want {
		if !strings.Contains(r.stderr, w) {
			t.Errorf("stderr lacks %q:\n%s", w, r.stderr)
		}
	}
	if r.took > 30*time.Second {
		t.Errorf("took %v", r.took)
	}
}

// A launcher that says 2 ranks while MPI has 1 (srun with the wrong --mpi
// plugin) is refused with exit 5 instead of evaluating everything twice.
func TestLauncherMismatchExit5(t *testing.T) {
	cmd := exec.Command(canopyBin, "eval", "--csv", set("three", "truth.csv"), "--predictions", set("three", "predictions.csv"), "--out", t.TempDir())
	cmd.Env = append(os.Environ(), "PMI_SIZE=2")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != jobs.ExitMPI {
		t.Fatalf("err %v, want exit %d\n%s", err, jobs.ExitMPI, out)
	}
	if !strings.Contains(string(out), "launcher started 2 (PMI_SIZE)") {
		t.Errorf("message:\n%s", out)
	}
}

// The same mismatch as a launcher meets it: two processes, launcher ranks
// 0 and 1 of 2, each its own 1-rank MPI job, under a launcher that kills
// the others once one exits non-zero (srun --kill-on-bad-exit=1, played
// here by the test). Launcher rank 0 says why, once, although it starts
// 0.5 s late: the other process's finalize waits for nobody, so it must not
// exit first (it did, and the job ended without a word). Margins: rank 0
// speaks 0.5 s plus its MPI start (0.7-1.2 s at load 7) after it begins,
// rank 1 exits after its own MPI start plus the 3 s hold, so about 1.3 s
// to spare at that load; without the hold rank 1 exited first in 5 runs
// of 5 at load 6 (with the delay at 0.25 s too).
func TestLauncherMismatchSaidOnce(t *testing.T) {
	var stderr [2]bytes.Buffer
	procs := make([]*exec.Cmd, 2)
	exited := make(chan int, 2)
	for r := range procs {
		cmd := exec.Command(canopyBin, "eval", "--csv", set("three", "truth.csv"), "--predictions", set("three", "predictions.csv"), "--out", t.TempDir())
		cmd.Env = append(os.Environ(), "PMI_SIZE=2", fmt.Sprintf("PMI_RANK=%d", r), testhook.StartDelayEnv+"=0:500")
		cmd.Stdout, cmd.Stderr = &stderr[r], &stderr[r]
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		procs[r] = cmd
		go func() { cmd.Wait(); exited <- r }()
	}
	first := <-exited
	code := procs[first].ProcessState.ExitCode()
	procs[1-first].Process.Kill() // the launcher ends the job (a no-op when it has ended)
	<-exited
	all := stderr[0].String() + stderr[1].String()
	if code != jobs.ExitMPI || strings.Count(all, "launcher started 2 (PMI_SIZE)") != 1 {
		t.Fatalf("launcher rank %d exited %d first (want %d), the mismatch said %d times (want once):\n%s",
			first, code, jobs.ExitMPI, strings.Count(all, "launcher started 2 (PMI_SIZE)"), all)
	}
}

func TestMPIDoctor(t *testing.T) {
	r := mpirun(t, 2, nil, "doctor")
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	for _, want := range []string{"MPI: Open MPI", "2 rank(s)", "OMPI_COMM_WORLD_SIZE=2", "0/2", "1/2"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("doctor output lacks %q:\n%s", want, r.stdout)
		}
	}
}

// slowRun starts mpirun -np 2 canopy eval with a slow replay detector and
// returns once both ranks have saved part records, with the ranks' pids.
func slowRun(t *testing.T, truth, preds, out string, slowMS int, env ...string) (*exec.Cmd, *bytes.Buffer, []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, "scripts/mpirun.sh", "-np", "2", canopyBin, "eval", "--csv", truth, "--predictions", preds,
		"--out", out, "--batch-size", "2")
	cmd.Env = append(append(os.Environ(), fmt.Sprintf("CANOPY_TEST_SLOW_MS=%d", slowMS)), env...)
	var se bytes.Buffer
	cmd.Stderr = &se
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ok := waitParts(out, 2)
	// the rank processes only (not mpirun or the timeout wrapper)
	pids, _ := exec.Command("pgrep", "-f", "--", "^"+canopyBin+" eval .*--out "+out).Output()
	if !ok {
		for _, p := range strings.Fields(string(pids)) {
			exec.Command("kill", "-9", p).Run() // no rank outlives the test
		}
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("no part records from both ranks in 30 s\n%s", se.String())
	}
	return cmd, &se, strings.Fields(string(pids))
}

// waitParts waits (at most 30 s) until n part files in out hold records,
// and says whether they did.
func waitParts(out string, n int) bool {
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		files, _ := filepath.Glob(filepath.Join(out, "parts", "*.part"))
		k := 0
		for _, f := range files {
			if st, err := os.Stat(f); err == nil && st.Size() > 0 {
				k++
			}
		}
		if k == n {
			return true
		}
	}
	return false
}

type resumeReport struct {
	FromParts int `json:"images_from_parts"`
	Computed  int `json:"images_computed"`
}

// resumeAndCompare resumes the run in out on 3 ranks and checks the metrics
// equal ref; it returns the report's resume block.
func resumeAndCompare(t *testing.T, truth, preds, out string, ref []byte) resumeReport {
	t.Helper()
	r := mpirun(t, 3, nil, "eval", "--csv", truth, "--predictions", preds, "--out", out, "--resume")
	if r.code != 0 {
		t.Fatalf("resume: exit %d\n%s", r.code, r.stderr)
	}
	if got := metricsOf(t, out); !bytes.Equal(got, ref) {
		t.Fatalf("resumed metrics\n%s\ndiffer from\n%s", got, ref)
	}
	var rep struct{ Run struct{ Resume resumeReport } }
	b, _ := os.ReadFile(filepath.Join(out, "report.json"))
	json.Unmarshal(b, &rep)
	if rep.Run.Resume.FromParts == 0 || rep.Run.Resume.FromParts+rep.Run.Resume.Computed != 300 {
		t.Errorf("resume info %+v", rep.Run.Resume)
	}
	return rep.Run.Resume
}

// SIGTERM to every rank mid-run (what scancel does) ends the job with exit
// 8 within seconds; --resume on another rank count recomputes only what
// was not saved and reports the uninterrupted metrics byte for byte.
func TestMPISigtermThenResume(t *testing.T) {
	truth, preds := set("multi", "truth.csv"), set("multi", "predictions.csv")
	ref := inProcess(t, 1, jobs.EvalConfig{CSV: truth, Predictions: preds, Out: t.TempDir(), IoUThreshold: 0.4})
	out := filepath.Join(t.TempDir(), "run with space")
	cmd, se, pids := slowRun(t, truth, preds, out, 20)
	for _, p := range pids {
		exec.Command("kill", "-TERM", p).Run()
	}
	sent := time.Now()
	err := cmd.Wait()
	took := time.Since(sent)
	var ee *exec.ExitError
	if len(pids) != 2 || !errors.As(err, &ee) || ee.ExitCode() != jobs.ExitResumable {
		t.Fatalf("signalled %v; mpirun: %v (want exit %d)\n%s", pids, err, jobs.ExitResumable, se.String())
	}
	if n := strings.Count(se.String(), "interrupted by a signal"); n != 1 {
		t.Errorf("the interruption was reported %d times, want once per job:\n%s", n, se.String())
	}
	t.Logf("SIGTERM to all ranks: exited after %v", took)
	if took > 15*time.Second {
		t.Errorf("ranks took %v to exit after SIGTERM", took)
	}
	ri := resumeAndCompare(t, truth, preds, out, ref)
	t.Logf("resume: %d images from part files, %d recomputed", ri.FromParts, ri.Computed)
}

// SIGTERM to every rank while rank 0 is late to report it (the hook holds
// its report 5 s, as a long batch in flight would; rank 1 waits 3 s before
// it speaks): the interruption is still said once. Open MPI's SIGKILL after
// an abort comes 1 s after its SIGTERM, which canopy catches; here it is
// put off to 8 s, so rank 0 lives to reach its report and only canopy
// itself can keep the second line back, not the launcher's kill.
func TestMPIInterruptSaidOnceRank0Late(t *testing.T) {
	truth, preds := set("multi", "truth.csv"), set("multi", "predictions.csv")
	cmd, se, pids := slowRun(t, truth, preds, t.TempDir(), 20,
		testhook.ReportDelayEnv+"=0:5000", "OMPI_MCA_odls_base_sigkill_timeout=8")
	for _, p := range pids {
		exec.Command("kill", "-TERM", p).Run()
	}
	err := cmd.Wait()
	var ee *exec.ExitError
	if len(pids) != 2 || !errors.As(err, &ee) || ee.ExitCode() != jobs.ExitResumable {
		t.Fatalf("signalled %v; mpirun: %v (want exit %d)\n%s", pids, err, jobs.ExitResumable, se.String())
	}
	if n := strings.Count(se.String(), "interrupted by a signal"); n != 1 {
		t.Errorf("the interruption was reported %d times, want once per job:\n%s", n, se.String())
	}
}

// A rank killed outright (SIGKILL, a crash): mpirun ends the job; what the
// ranks appended survives, and --resume finishes with the same metrics.
func TestMPIKillThenResume(t *testing.T) {
	truth, preds := set("multi", "truth.csv"), set("multi", "predictions.csv")
	ref := inProcess(t, 1, jobs.EvalConfig{CSV: truth, Predictions: preds, Out: t.TempDir(), IoUThreshold: 0.4})
	out := t.TempDir()
	cmd, se, pids := slowRun(t, truth, preds, out, 20)
	if len(pids) != 2 {
		t.Fatalf("pids %v", pids)
	}
	exec.Command("kill", "-KILL", pids[1]).Run()
	if err := cmd.Wait(); err == nil {
		t.Fatalf("the job succeeded although a rank was killed\n%s", se.String())
	}
	ri := resumeAndCompare(t, truth, preds, out, ref)
	t.Logf("after SIGKILL: %d images from part files, %d recomputed", ri.FromParts, ri.Computed)
}

// demoModel is the detector the project trained (tools/demo/train.py).
const demoModel = "testdata/models/canopy-demo-r18"

// demoImages writes n labelled forest images of the demo set (seed 3) into
// a temporary folder: what make demo generates with cmd/forestgen.
func demoImages(t *testing.T, n int) string {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command("go", "run", "./cmd/forestgen", "-out", dir, "-n", fmt.Sprint(n), "-seed", "3").CombinedOutput(); err != nil {
		t.Fatalf("forestgen: %v\n%s", err, out)
	}
	return filepath.Join(dir, "annotations.csv")
}

// The real job: every rank infers its shard with the demo model under
// mpirun; metrics and predictions are byte-identical for -np 1, 2 and 3
// (with mpirun's default core binding, one thread per rank) and the
// detector finds the trees.
func TestMPIModelRankCountsBitIdentical(t *testing.T) {
	csv := demoImages(t, 6)
	var refMetrics, refPreds []byte
	for np := 1; np <= 3; np++ {
		out := t.TempDir()
		r := mpirun(t, np, nil, "eval", "--model", demoModel, "--csv", csv, "--out", out, "--batch-size", fmt.Sprint(np))
		if r.code != 0 {
			t.Fatalf("np%d: exit %d\n%s", np, r.code, r.stderr)
		}
		m := metricsOf(t, out)
		p, err := os.ReadFile(filepath.Join(out, "predictions.csv"))
		if err != nil {
			t.Fatal(err)
		}
		if refMetrics == nil {
			var v map[string]any
			json.Unmarshal(m, &v)
			if rec, _ := v["box_recall"].(float64); !(rec >= 0.5) {
				t.Fatalf("the demo model's box_recall is %v on its demo images", v["box_recall"])
			}
			refMetrics, refPreds = m, p
			continue
		}
		if !bytes.Equal(m, refMetrics) || !bytes.Equal(p, refPreds) {
			t.Fatalf("np%d: metrics or predictions differ from np1:\n%s\n%s", np, m, refMetrics)
		}
	}
}

// hostkernBin builds canopy with -tags hostkerngpu into dir.
func hostkernBin(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "canopy-hostkerngpu")
	if out, err := exec.Command("go", "build", "-tags", "hostkerngpu", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	return bin
}

// gpuTestModel writes a small generated ResNet-18-FPN32 at min_size 128
// (forestgen's labels) into dir/model, so the host shim runs it in
// seconds.
func gpuTestModel(t *testing.T, dir string) string {
	t.Helper()
	model := filepath.Join(dir, "model")
	if out, err := exec.Command("go", "run", "./cmd/testmodel", "-arch", "resnet18", "-classes", "2", "-fpn", "32",
		"-min-size", "128", "-max-size", "128", "-out", model).CombinedOutput(); err != nil {
		t.Fatalf("testmodel: %v\n%s", err, out)
	}
	cfgPath := filepath.Join(model, "config.json")
	b, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	cfg["label_dict"] = map[string]int{"Tree": 0, "Dead": 1} // forestgen's labels
	if b, err = json.Marshal(cfg); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfgPath, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return model
}

// The GPU engine under the real mpirun: a binary built with -tags
// hostkerngpu sees fake GPUs that are host shims (internal/modelsel/hostkerngpu.go), one
// per rank; eval --model (the device transform, postprocess and losses,
// CUDA graphs) gives byte-identical metrics and predictions for -np 1, 2
// and 3 at batch 2. The model is a small generated ResNet-18-FPN32 at
// min_size 128, so the shim runs it in seconds.
func TestMPIGPUEngineRankCountsBitIdentical(t *testing.T) {
	dir := t.TempDir()
	bin := hostkernBin(t, dir)
	model := gpuTestModel(t, dir)
	csv := demoImages(t, 6)
	env := []string{"CANOPY_TEST_HOSTKERN_GPUS=3"}
	var refMetrics, refPreds []byte
	for np := 1; np <= 3; np++ {
		out := t.TempDir()
		r := mpirunBin(t, bin, np, env, "eval", "--model", model, "--csv", csv, "--out", out, "--batch-size", "2", "--device", "cuda", "--precision", "exact")
		if r.code != 0 {
			t.Fatalf("np%d: exit %d\n%s", np, r.code, r.stderr)
		}
		rep, err := os.ReadFile(filepath.Join(out, "report.json"))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(rep, []byte("retinanet-hostkern")) || !bytes.Contains(rep, []byte(fmt.Sprintf("GPU-hostkern-%d", np-1))) {
			t.Fatalf("np%d: the report names no host-shim GPU for every rank:\n%s", np, rep)
		}
		m := metricsOf(t, out)
		p, err := os.ReadFile(filepath.Join(out, "predictions.csv"))
		if err != nil {
			t.Fatal(err)
		}
		if refMetrics == nil {
			if n := bytes.Count(p, []byte("\n")) - 1; n < 10 {
				t.Fatalf("only %d detections: the comparison would be thin", n)
			}
			refMetrics, refPreds = m, p
			continue
		}
		if !bytes.Equal(m, refMetrics) || !bytes.Equal(p, refPreds) {
			t.Fatalf("np%d: metrics or predictions differ from np1:\n%s\n%s", np, m, refMetrics)
		}
	}
}

// A fault on one rank while the others are detecting: the launcher stops
// the others (SIGTERM), and they stay silent; the job prints one line.
// --verbose lets every rank speak.
func TestMPIFaultIsOneLine(t *testing.T) {
	args := []string{"eval", "--csv", set("multi", "truth.csv"), "--predictions", set("multi", "predictions.csv"), "--batch-size", "2"}
	env := []string{"CANOPY_TEST_FAIL_RANK=1", "CANOPY_TEST_SLOW_MS=20"}
	r := mpirun(t, 3, env, append(args, "--out", t.TempDir())...)
	if r.code != jobs.ExitModel {
		t.Fatalf("exit %d, want %d\n%s", r.code, jobs.ExitModel, r.stderr)
	}
	if n := strings.Count(r.stderr, "canopy: rank"); n != 1 || strings.Contains(r.stderr, "interrupted") {
		t.Errorf("%d canopy lines, want the fault alone:\n%s", n, r.stderr)
	}
}

// SIGTERM to mpirun itself (what the batch script forwards): Open MPI
// passes it to the ranks and kills them a second later, and mpirun exits 1,
// not canopy's 8. The ranks saved their part files and rank 0 said so once;
// canopy doctor --out tells the resumable stop (exit 8), the mpirun batch
// script turns the job's exit into 8, and --resume finishes the run.
func TestMPIRunSigtermIsResumable(t *testing.T) {
	truth, preds := set("multi", "truth.csv"), set("multi", "predictions.csv")
	ref := inProcess(t, 1, jobs.EvalConfig{CSV: truth, Predictions: preds, Out: t.TempDir(), IoUThreshold: 0.4})
	out := filepath.Join(t.TempDir(), "out")
	wd, _ := os.Getwd()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "scripts/slurm/canopy-mpirun.sbatch", "--batch-size", "2")
	cmd.Env = append(os.Environ(), "SLURM_JOB_ID=e2e", "SLURM_NTASKS=2", "CANOPY_CSV="+truth, "CANOPY_PREDICTIONS="+preds,
		"CANOPY_OUT="+out, "CANOPY_BIN="+canopyBin, "CANOPY_MPIRUN="+filepath.Join(wd, "scripts", "mpirun.sh"), "CANOPY_TEST_SLOW_MS=20")
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if !waitParts(out, 2) {
		cmd.Process.Kill()
		t.Fatalf("no part records from both ranks in 30 s\n%s", se.String())
	}
	cmd.Process.Signal(syscall.SIGTERM)
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != jobs.ExitResumable {
		t.Fatalf("batch script: %v, want exit 8\n%s\n%s", err, so.String(), se.String())
	}
	for _, want := range []string{"the launcher exited 1", "resumable: an interrupted eval run", "resubmit with --resume"} {
		if !strings.Contains(se.String(), want) {
			t.Errorf("the script's stderr lacks %q:\n%s", want, se.String())
		}
	}
	if n := strings.Count(se.String(), "interrupted by a signal"); n > 1 {
		t.Errorf("the interruption was reported %d times:\n%s", n, se.String())
	}
	if r := run1(t, "doctor", "--out", out); r.code != jobs.ExitResumable || !strings.Contains(r.stdout, "resumable") {
		t.Errorf("doctor --out: exit %d\n%s", r.code, r.stdout)
	}
	resumeAndCompare(t, truth, preds, out, ref)
	if r := run1(t, "doctor", "--out", out); r.code != 0 || !strings.Contains(r.stdout, "complete") {
		t.Errorf("doctor --out after the resume: exit %d\n%s", r.code, r.stdout)
	}
}

// Two runs into one --out: the second, started while the first runs, is
// refused with exit 2 naming the first (its job id, host and pid), even
// with --force; the first finishes with its own complete outputs.
func TestMPISecondRunIntoOneOutRefused(t *testing.T) {
	truth, preds := set("multi", "truth.csv"), set("multi", "predictions.csv")
	ref := inProcess(t, 1, jobs.EvalConfig{CSV: truth, Predictions: preds, Out: t.TempDir(), IoUThreshold: 0.4})
	out := t.TempDir()
	// The first run's ranks are frozen (SIGSTOP) while the second runs, so
	// the first still holds the folder however long the second takes to
	// start on a loaded machine; they go on (SIGCONT) once it was refused.
	// The second's rank 0 starts 4 s late, past the 3 s the first has
	// left (150 images a rank at 20 ms), so without the freeze the first
	// would be gone and the second would not be refused.
	first, se, pids := slowRun(t, truth, preds, out, 20)
	signal := func(sig string) {
		for _, p := range pids {
			exec.Command("kill", sig, p).Run()
		}
	}
	signal("-STOP")
	defer signal("-CONT") // should the second run fail the test
	r := mpirun(t, 2, []string{"SLURM_JOB_ID=second", testhook.StartDelayEnv + "=0:4000"}, "eval", "--csv", truth, "--predictions", preds, "--out", out, "--force")
	signal("-CONT")
	if len(pids) != 2 || r.code != jobs.ExitUsage || !strings.Contains(r.stderr, "in use by another canopy run (job none on host") {
		t.Fatalf("second run (the first's ranks %v frozen): exit %d, want 2 naming the holder\n%s", pids, r.code, r.stderr)
	}
	if err := first.Wait(); err != nil {
		t.Fatalf("the first run: %v\n%s", err, se.String())
	}
	if got := metricsOf(t, out); !bytes.Equal(got, ref) {
		t.Fatalf("the first run's metrics changed:\n%s", got)
	}
}

// A run killed (kill -9) while rank 0 wrote report.html published nothing
// of its set: canopy doctor --out calls it resumable (exit 8), not
// complete, and --resume then writes the whole set.
func TestKilledWhileWritingHTMLIsResumable(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	cmd := exec.Command(canopyBin, "eval", "--csv", set("three", "truth.csv"), "--predictions", set("three", "predictions.csv"), "--out", out, "--html")
	cmd.Env = append(os.Environ(), testhook.StopEnv+"=0:html")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	for i := 0; i < 600 && !stopped; i++ { // SIGSTOP inside stageHTML
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", cmd.Process.Pid))
		f := strings.Fields(string(b))
		stopped = len(f) > 2 && f[2] == "T"
		time.Sleep(50 * time.Millisecond)
	}
	cmd.Process.Kill()
	cmd.Wait()
	if !stopped {
		t.Fatal("the run never reached report.html")
	}
	r := run1(t, "doctor", "--out", out)
	if r.code != jobs.ExitResumable || !strings.Contains(r.stdout, "resumable") {
		t.Fatalf("doctor after the kill: exit %d %s", r.code, r.stdout)
	}
	if _, err := os.Stat(filepath.Join(out, "report.json")); err == nil {
		t.Fatal("report.json published before report.html was written")
	}
	r = run1(t, "eval", "--csv", set("three", "truth.csv"), "--predictions", set("three", "predictions.csv"), "--out", out, "--html", "--resume")
	if r.code != 0 {
		t.Fatalf("--resume: exit %d %s", r.code, r.stderr)
	}
	for _, f := range []string{"report.json", "report.html", "predictions.csv", "results.csv"} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Errorf("after --resume: %v", err)
		}
	}
	if r := run1(t, "doctor", "--out", out); r.code != 0 {
		t.Errorf("doctor after --resume: %d %s", r.code, r.stdout)
	}
}

// predict --tile under the real mpirun: one forestgen raster as a tiled,
// compressed GeoTIFF, its windows shared out among the ranks; the merged
// predictions.csv is the same bytes for -np 1, 2, 3 and 4.
func TestMPITileRankCountsBitIdentical(t *testing.T) {
	dir := t.TempDir()
	if out, err := exec.Command("go", "run", "./cmd/forestgen", "-out", dir, "-n", "1", "-sizes", "760x610", "-seed", "9").CombinedOutput(); err != nil {
		t.Fatalf("forestgen: %v\n%s", err, out)
	}
	tif := filepath.Join(dir, "forest.tif")
	if out, err := exec.Command("gdal_translate", "-q", "-co", "TILED=YES", "-co", "COMPRESS=DEFLATE", filepath.Join(dir, "img_0000.png"), tif).CombinedOutput(); err != nil {
		t.Fatalf("gdal_translate: %v\n%s", err, out)
	}
	var ref []byte
	for np := 1; np <= 4; np++ {
		out := t.TempDir()
		r := mpirun(t, np, nil, "predict", "--tile", "--raster", tif, "--model", demoModel, "--patch-size", "300", "--patch-overlap", "0.1",
			"--out", out, "--batch-size", fmt.Sprint(5-np))
		if r.code != 0 {
			t.Fatalf("np%d: exit %d\n%s", np, r.code, r.stderr)
		}
		p, err := os.ReadFile(filepath.Join(out, "predictions.csv"))
		if err != nil {
			t.Fatal(err)
		}
		if ref == nil {
			if n := bytes.Count(p, []byte("\n")); n < 20 {
				t.Fatalf("np1: %d rows", n-1)
			}
			ref = p
			continue
		}
		if !bytes.Equal(p, ref) {
			t.Fatalf("np%d: predictions.csv differs from np1", np)
		}
	}
}

// tileRasters writes n forestgen rasters of mixed sizes as GeoTIFFs
// (every other one with a CRS) and a CSV listing them.
func tileRasters(t *testing.T, n int) string {
	t.Helper()
	dir := t.TempDir()
	var list strings.Builder
	list.WriteString("image_path\n")
	for i := range n {
		w, h := 380+60*(i%3), 300+50*(i%2)
		src := filepath.Join(dir, fmt.Sprintf("src%d", i))
		if out, err := exec.Command("go", "run", "./cmd/forestgen", "-out", src, "-n", "1", "-sizes", fmt.Sprintf("%dx%d", w, h), "-seed", fmt.Sprint(20+i)).CombinedOutput(); err != nil {
			t.Fatalf("forestgen: %v\n%s", err, out)
		}
		args := []string{"-q", "-co", "TILED=YES", "-co", "COMPRESS=DEFLATE"}
		if i%2 == 0 {
			args = append(args, "-a_srs", "EPSG:32617", "-a_ullr", "404211", fmt.Sprint(3285123+i*100), fmt.Sprint(404211+w/10), fmt.Sprint(3285123+i*100-h/10))
		}
		name := fmt.Sprintf("r%02d.tif", i)
		if out, err := exec.Command("gdal_translate", append(args, filepath.Join(src, "img_0000.png"), filepath.Join(dir, name))...).CombinedOutput(); err != nil {
			t.Fatalf("gdal_translate: %v\n%s", err, out)
		}
		fmt.Fprintln(&list, name)
	}
	p := filepath.Join(dir, "rasters.csv")
	os.WriteFile(p, []byte(list.String()), 0o644)
	return p
}

// tileFiles are a tile run's outputs but report.json, by name.
func tileFiles(t *testing.T, out string) map[string][]byte {
	t.Helper()
	names, _ := filepath.Glob(filepath.Join(out, "rasters", "*"))
	got := map[string][]byte{}
	for _, n := range append(names, filepath.Join(out, "predictions.csv"), filepath.Join(out, "predictions.gpkg")) {
		b, err := os.ReadFile(n)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(out, n)
		got[rel] = b
	}
	return got
}

// TestMPITileStopResume: predict --tile over several rasters stopped by a
// SIGTERM at np 3 (exit 8 on every rank, rank 0's signal by the hook
// after 2 batches) and resumed at np 2 gives per-raster and combined
// files byte-identical to an uninterrupted np 1 run; doctor --out calls
// the stopped run resumable and names the command.
func TestMPITileStopResume(t *testing.T) {
	list := tileRasters(t, 5)
	args := func(out string, more ...string) []string {
		return append([]string{"predict", "--tile", "--csv", list, "--model", demoModel, "--patch-size", "300", "--patch-overlap", "0.1",
			"--out", out, "--batch-size", "1", "--threads", "1", "--round-windows", "3"}, more...)
	}
	refOut := t.TempDir()
	if r := mpirun(t, 1, nil, args(refOut)...); r.code != 0 {
		t.Fatalf("np1: exit %d\n%s", r.code, r.stderr)
	}
	want := tileFiles(t, refOut)
	if len(want) < 10 || bytes.Count(want["predictions.csv"], []byte("\n")) < 20 {
		t.Fatalf("reference: %d outputs", len(want))
	}
	out := stopThenResume(t, args, 2, "--resume", "report.json", "predict --tile --resume")
	sameResumedTile(t, out, want, "resumed")
}

// sameResumedTile checks a resumed tile run's outputs against np 1's, byte
// for byte, and that the resume took at least one window from the part
// files; it returns how many.
func sameResumedTile(t *testing.T, out string, want map[string][]byte, what string) (windowsFromParts int) {
	t.Helper()
	got := tileFiles(t, out)
	if len(got) != len(want) {
		t.Fatalf("%s: %d outputs, want %d", what, len(got), len(want))
	}
	for n, b := range want {
		if !bytes.Equal(got[n], b) {
			t.Fatalf("%s: %s differs from np1's", what, n)
		}
	}
	var rep struct {
		Tile struct {
			Resume struct {
				Windows int `json:"windows_from_parts"`
			}
		}
	}
	b, _ := os.ReadFile(filepath.Join(out, "report.json"))
	if json.Unmarshal(b, &rep); rep.Tile.Resume.Windows < 1 {
		t.Fatalf("%s: the resume took no window from the part files: %s", what, b)
	}
	return rep.Tile.Resume.Windows
}

// stopThenResume runs args (a new --out) at np 3, rank 0 signalled by the
// test hook after its batch `after`: exit 8 saying says, nothing published (the file published), and doctor --out
// exit 8 naming resume; then the same args with --resume at np 2, which
// must exit 0. It returns the output folder.
func stopThenResume(t *testing.T, args func(out string, more ...string) []string, after int, says, published, resume string) string {
	t.Helper()
	out := t.TempDir()
	r := mpirun(t, 3, []string{fmt.Sprintf("%s=0:%d", testhook.InterruptEnv, after)}, args(out)...)
	if r.code != jobs.ExitResumable || !strings.Contains(r.stderr, says) {
		t.Fatalf("stopped np3: exit %d, want %d saying %q\n%s", r.code, jobs.ExitResumable, says, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(out, published)); err == nil {
		t.Fatalf("the stopped run published %s", published)
	}
	d := run1(t, "doctor", "--out", out)
	if d.code != jobs.ExitResumable || !strings.Contains(d.stdout+d.stderr, resume) {
		t.Fatalf("doctor on the stopped run: exit %d, want %d naming %s\n%s%s", d.code, jobs.ExitResumable, resume, d.stdout, d.stderr)
	}
	if r := mpirun(t, 2, nil, args(out, "--resume")...); r.code != 0 {
		t.Fatalf("resume np2: exit %d\n%s", r.code, r.stderr)
	}
	return out
}

// TestMPIPredictStopResume: plain predict (whole images) under the real
// mpirun (issue 34.2): stopped by SIGTERM at np 3 it exits 8 saying
// "continue with --resume", doctor names predict --resume, and --resume at
// np 2 takes the saved images from the part files and gives np 1's
// predictions.csv byte for byte.
func TestMPIPredictStopResume(t *testing.T) {
	csv := demoImages(t, 6)
	args := func(out string, more ...string) []string {
		return append([]string{"predict", "--csv", csv, "--model", demoModel, "--out", out, "--batch-size", "1", "--threads", "1"}, more...)
	}
	refOut := t.TempDir()
	if r := mpirun(t, 1, nil, args(refOut)...); r.code != 0 {
		t.Fatalf("np1: exit %d\n%s", r.code, r.stderr)
	}
	want, err := os.ReadFile(filepath.Join(refOut, "predictions.csv"))
	if err != nil || bytes.Count(want, []byte("\n")) < 7 {
		t.Fatalf("reference predictions.csv: %v\n%s", err, want)
	}
	out := stopThenResume(t, args, 1, "continue with --resume", "predictions.csv", "canopy predict --resume")
	if got, err := os.ReadFile(filepath.Join(out, "predictions.csv")); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("resumed predictions.csv differs from np1's (%v):\n%s\nwant:\n%s", err, got, want)
	}
	var rep struct {
		Resumed struct {
			FromParts int `json:"images_from_parts"`
		} `json:"resumed"`
	}
	b, _ := os.ReadFile(filepath.Join(out, "report.json"))
	if json.Unmarshal(b, &rep); rep.Resumed.FromParts < 1 {
		t.Fatalf("the resume took no image from the part files: %s", b)
	}
}

// predict --tile --crop-model under the real mpirun (issue 36): the crop
// parity raster, the demo detector and the ResNet-18 crop model given
// twice (two column pairs; one --crop-label-dict for both); predictions.csv,
// crop columns included, is the same bytes at -np 2 as at -np 1 and as
// the in-process run's.
func TestMPICropModelsBitIdentical(t *testing.T) {
	dir := t.TempDir()
	pf, err := torchckpt.CropParity(".", dir)
	if err != nil {
		t.Fatal(err)
	}
	ld := filepath.Join(dir, "r18.csv")
	if err := os.WriteFile(ld, []byte("label,id\nhealthy,0\nsick,1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"predict", "--tile", "--raster", pf.Tile, "--model", demoModel, "--patch-size", "300",
		"--patch-overlap", "0.25", "--crop-model", pf.R18, "--crop-label-dict", ld, "--crop-model", pf.R18}
	read := func(out string) []byte {
		p, err := os.ReadFile(filepath.Join(out, "predictions.csv"))
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	local1 := t.TempDir()
	var stderr bytes.Buffer
	if code := jobs.Main(context.Background(), append(append([]string{"canopy"}, args...), "--out", local1, "--threads", "2"), &bytes.Buffer{}, &stderr); code != 0 {
		t.Fatalf("in-process: exit %d\n%s", code, stderr.String())
	}
	ref := read(local1)
	if !bytes.Contains(ref, []byte("cropmodel_label_1,cropmodel_score_1\n")) || bytes.Count(ref, []byte("\n")) < 10 {
		t.Fatalf("in-process predictions.csv:\n%s", ref)
	}
	for _, np := range []int{1, 2} {
		out := t.TempDir()
		r := mpirun(t, np, nil, append(args, "--out", out, "--threads", "1", "--batch-size", fmt.Sprint(np+1))...)
		if r.code != 0 {
			t.Fatalf("np%d: exit %d\n%s", np, r.code, r.stderr)
		}
		if !bytes.Equal(read(out), ref) {
			t.Fatalf("np%d: predictions.csv differs from the in-process run's", np)
		}
	}
}

// TestMPITileKillThenResume: kill -9 of one rank of a predict --tile run
// (CANOPY_TEST_SLOW_MS stretches each window) once both ranks have saved
// windows: mpirun ends the job, what was written survives, and --resume
// on another rank count finishes with the uninterrupted bytes.
func TestMPITileKillThenResume(t *testing.T) {
	list := tileRasters(t, 3)
	args := func(out string, more ...string) []string {
		return append([]string{"predict", "--tile", "--csv", list, "--model", demoModel, "--patch-size", "300", "--patch-overlap", "0.1",
			"--out", out, "--batch-size", "1", "--threads", "1", "--round-windows", "4"}, more...)
	}
	refOut := t.TempDir()
	if r := mpirun(t, 1, nil, args(refOut)...); r.code != 0 {
		t.Fatalf("np1: exit %d\n%s", r.code, r.stderr)
	}
	want := tileFiles(t, refOut)
	out := t.TempDir()
	killRankMidRun(t, out, 120*time.Second, []string{"CANOPY_TEST_SLOW_MS=400"}, args(out))
	if r := mpirun(t, 3, nil, args(out, "--resume")...); r.code != 0 {
		t.Fatalf("resume np3 after kill -9: exit %d\n%s", r.code, r.stderr)
	}
	n := sameResumedTile(t, out, want, "resumed after kill -9")
	t.Logf("after kill -9: %d windows from the part files", n)
}

// waitSaved waits (at most 60 s) until a tile run in out has saved a
// round: a part file holding records or a published raster; it says
// whether one did.
func waitSaved(out string) bool {
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if done, _ := filepath.Glob(filepath.Join(out, "rasters", "*")); len(done) > 0 {
			return true
		}
		files, _ := filepath.Glob(filepath.Join(out, "parts", "*.part"))
		for _, f := range files {
			if st, err := os.Stat(f); err == nil && st.Size() > 0 {
				return true
			}
		}
	}
	return false
}

// TestMPITileSigtermThenResume: a real SIGTERM from outside stops
// `mpirun -np 3 canopy predict --tile` (and eval --tile) once it has
// saved a round (CANOPY_TEST_SLOW_MS stretches each window), then
// `mpirun -np 2 … --resume` gives rasters/*, predictions.csv and
// predictions.gpkg (eval: results.csv and the metrics too) byte-identical
// to an uninterrupted -np 1 run, keeping what the stopped run saved. Two
// stops: SIGTERM to every rank's pid (what scancel does): mpirun exits 8,
// the interruption said once; and SIGTERM to mpirun itself: Open MPI
// forwards it to the ranks and kills them a moment later, so mpirun exits
// 1 (docs/reliability.md X3), and doctor --out calls the run resumable.
func TestMPITileSigtermThenResume(t *testing.T) {
	list := tileRasters(t, 4)
	// eval --tile's truth: each raster's forestgen boxes (pixels)
	truth := filepath.Join(filepath.Dir(list), "truth.csv")
	rows := []byte("image_path,xmin,ymin,xmax,ymax,label\n")
	for i := range 4 {
		a, err := os.ReadFile(filepath.Join(filepath.Dir(list), fmt.Sprintf("src%d", i), "annotations.csv"))
		if err != nil {
			t.Fatal(err)
		}
		_, body, _ := bytes.Cut(a, []byte("\n"))
		rows = append(rows, bytes.ReplaceAll(body, []byte("img_0000.png"), []byte(fmt.Sprintf("r%02d.tif", i)))...)
	}
	if err := os.WriteFile(truth, rows, 0o644); err != nil {
		t.Fatal(err)
	}
	args := func(cmd, out string, more ...string) []string {
		csv := list
		if cmd == "eval" {
			csv = truth
		}
		return append([]string{cmd, "--tile", "--csv", csv, "--model", demoModel, "--patch-size", "300", "--patch-overlap", "0.1",
			"--out", out, "--batch-size", "1", "--threads", "1", "--round-windows", "3"}, more...)
	}
	outputs := func(cmd, out string) map[string][]byte {
		got := tileFiles(t, out)
		if cmd == "eval" {
			r, err := os.ReadFile(filepath.Join(out, "results.csv"))
			if err != nil {
				t.Fatal(err)
			}
			got["results.csv"], got["metrics"] = r, metricsOf(t, out)
		}
		return got
	}
	want := map[string]map[string][]byte{}
	for _, c := range []string{"predict", "eval"} {
		refOut := t.TempDir()
		if r := mpirun(t, 1, nil, args(c, refOut)...); r.code != 0 {
			t.Fatalf("%s np1: exit %d\n%s", c, r.code, r.stderr)
		}
		want[c] = outputs(c, refOut)
		if len(want[c]) < 8 || bytes.Count(want[c]["predictions.csv"], []byte("\n")) < 20 || (c == "eval" && len(want[c]["metrics"]) < 10) {
			t.Fatalf("%s reference: %d outputs", c, len(want[c]))
		}
	}
	for _, tc := range []struct{ cmd, target string }{{"predict", "ranks"}, {"predict", "mpirun"}, {"eval", "ranks"}} {
		t.Run(tc.cmd+"/"+tc.target, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "tile out")
			ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, "scripts/mpirun.sh", append([]string{"-np", "3", canopyBin}, args(tc.cmd, out)...)...)
			cmd.Env = append(os.Environ(), "CANOPY_TEST_SLOW_MS=500", "CANOPY_MPIRUN_TIMEOUT=140")
			var se bytes.Buffer
			cmd.Stderr = &se
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			ok := waitSaved(out)
			// the ranks, and mpirun: the child of the wrapper's timeout
			pids, _ := exec.Command("pgrep", "-f", "--", "^"+canopyBin+" "+tc.cmd+" .*--out "+out).Output()
			ranks := strings.Fields(string(pids))
			mp, _ := exec.Command("pgrep", "-P", fmt.Sprint(cmd.Process.Pid), "-x", "mpirun").Output()
			launcher := strings.Fields(string(mp))
			if !ok || len(ranks) != 3 || len(launcher) != 1 {
				for _, p := range ranks {
					exec.Command("kill", "-9", p).Run() // no rank outlives the test
				}
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatalf("saved a round: %v; ranks %v, mpirun %v\n%s", ok, ranks, launcher, se.String())
			}
			perRaster := 0
			for n := range want[tc.cmd] {
				if strings.HasPrefix(n, "rasters"+string(filepath.Separator)) {
					perRaster++
				}
			}
			if done, _ := filepath.Glob(filepath.Join(out, "rasters", "*")); len(done) >= perRaster {
				t.Fatalf("all %d raster files were published before the stop: nothing left to resume", len(done))
			}
			victims := ranks
			if tc.target == "mpirun" {
				victims = launcher
			}
			for _, p := range victims {
				exec.Command("kill", "-TERM", p).Run()
			}
			sent := time.Now()
			err := cmd.Wait()
			took := time.Since(sent)
			code := -1
			var ee *exec.ExitError
			if err == nil {
				code = 0
			} else if errors.As(err, &ee) {
				code = ee.ExitCode()
			}
			t.Logf("SIGTERM to %s %v: exit %d after %v", tc.target, victims, code, took)
			if ctx.Err() != nil || took > 30*time.Second {
				t.Fatalf("the job took %v to end after SIGTERM\n%s", took, se.String())
			}
			if _, err := os.Stat(filepath.Join(out, "report.json")); err == nil {
				t.Fatal("the stopped run published report.json")
			}
			if tc.target == "ranks" {
				if code != jobs.ExitResumable || !strings.Contains(se.String(), tc.cmd+" --tile: interrupted by a signal") {
					t.Fatalf("SIGTERM to every rank: exit %d, want %d\n%s", code, jobs.ExitResumable, se.String())
				}
				if n := strings.Count(se.String(), "interrupted by a signal"); n != 1 {
					t.Errorf("the interruption was reported %d times, want once per job:\n%s", n, se.String())
				}
			} else if code != 1 {
				t.Fatalf("SIGTERM to mpirun: exit %d, want Open MPI's 1\n%s", code, se.String())
			}
			// the rasters the stopped run recorded done (OUT/parts/rasters/
			// <index>.json, written once their outputs are published): not
			// read again
			finished := map[int]bool{}
			recs, _ := filepath.Glob(filepath.Join(out, "parts", "rasters", "*.json"))
			for _, f := range recs {
				var i int
				if _, err := fmt.Sscanf(filepath.Base(f), "%d.json", &i); err != nil {
					t.Fatalf("done record %s: %v", f, err)
				}
				finished[i] = true
			}
			d := run1(t, "doctor", "--out", out)
			if d.code != jobs.ExitResumable || !strings.Contains(d.stdout+d.stderr, tc.cmd+" --tile --resume") {
				t.Fatalf("doctor on the stopped run: exit %d\n%s%s", d.code, d.stdout, d.stderr)
			}
			if r := mpirun(t, 2, nil, args(tc.cmd, out, "--resume")...); r.code != 0 {
				t.Fatalf("resume np2: exit %d\n%s", r.code, r.stderr)
			}
			got := outputs(tc.cmd, out)
			if len(got) != len(want[tc.cmd]) {
				t.Fatalf("resumed: %d outputs, want %d", len(got), len(want[tc.cmd]))
			}
			for n, b := range want[tc.cmd] {
				if !bytes.Equal(got[n], b) {
					t.Fatalf("resumed: %s differs from np1's", n)
				}
			}
			// only what the stopped run did not save is detected again
			var rep struct {
				PerRank []struct{ Images int } `json:"per_rank"`
				Tile    struct {
					Windows int
					Rasters []struct{ Windows int }
					Resume  struct {
						Windows int `json:"windows_from_parts"`
						Rasters int `json:"rasters_finished_before"`
					}
				}
			}
			b, _ := os.ReadFile(filepath.Join(out, "report.json"))
			if err := json.Unmarshal(b, &rep); err != nil || len(rep.PerRank) != 2 {
				t.Fatalf("report.json: %v\n%s", err, b)
			}
			left, detected := rep.Tile.Windows-rep.Tile.Resume.Windows, 0
			for i, r := range rep.Tile.Rasters {
				if finished[i] {
					left -= r.Windows
				}
			}
			for _, r := range rep.PerRank {
				detected += r.Images
			}
			res := rep.Tile.Resume
			if res.Windows+res.Rasters < 1 || res.Rasters != len(finished) || detected != left {
				t.Fatalf("resume %+v (%d rasters recorded done before): %d windows detected again, want %d of %d", res, len(finished), detected, left, rep.Tile.Windows)
			}
			t.Logf("resume np2: %d rasters finished before, %d windows from the part files, %d of %d detected again", res.Rasters, res.Windows, detected, rep.Tile.Windows)
		})
	}
}

// Points and polygons under the real mpirun: np 1 and np 3 write the same
// report metrics, results.csv and predictions.csv (each rank matched its
// own images; rank 0 wrote from the gathered records).
func TestMPIGeometryRankCounts(t *testing.T) {
	for _, c := range []string{"points_many", "polygons_many"} {
		dir := filepath.Join("jobs", "testdata", "geometry", c)
		for _, sem := range []string{"validation", "evaluate_boxes"} {
			var ref string
			for _, np := range []int{1, 3} {
				out := t.TempDir()
				r := mpirun(t, np, nil, "eval", "--csv", filepath.Join(dir, "truth.csv"), "--predictions", filepath.Join(dir, "preds.csv"),
					"--root-dir", dir, "--semantics", sem, "--out", out, "--force")
				if r.code != 0 {
					t.Fatalf("%s %s np%d: exit %d\n%s", c, sem, np, r.code, r.stderr)
				}
				if ref == "" {
					ref = out
					continue
				}
				if !bytes.Equal(metricsOf(t, out), metricsOf(t, ref)) {
					t.Fatalf("%s %s: np 3 metrics %s differ from np 1's %s", c, sem, metricsOf(t, out), metricsOf(t, ref))
				}
				for _, f := range []string{"results.csv", "predictions.csv"} {
					a, errA := os.ReadFile(filepath.Join(out, f))
					b, errB := os.ReadFile(filepath.Join(ref, f))
					if errA != nil || errB != nil || len(b) == 0 || !bytes.Equal(a, b) {
						t.Fatalf("%s %s: %s differs between np 1 and np 3 (%v, %v)", c, sem, f, errA, errB)
					}
				}
			}
		}
	}
}
