package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/canopy-hpc/canopy/jobs"
)

// TestMPIPredictKillThenResume (issue 42, item 6): kill -9 of one rank of
// a plain predict run under mpirun, once both ranks have saved images:
// mpirun ends the job, canopy doctor --out calls the folder resumable, and
// --resume at np 3 takes the saved images from the part files and writes
// np 1's predictions.csv byte for byte.
func TestMPIPredictKillThenResume(t *testing.T) {
	csv := demoImages(t, 16)
	args := func(out string, more ...string) []string {
		return append([]string{"predict", "--csv", csv, "--model", demoModel, "--out", out, "--batch-size", "1", "--threads", "1"}, more...)
	}
	refOut := t.TempDir()
	if r := mpirun(t, 1, nil, args(refOut)...); r.code != 0 {
		t.Fatalf("np1: exit %d\n%s", r.code, r.stderr)
	}
	want, err := os.ReadFile(filepath.Join(refOut, "predictions.csv"))
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	killRankMidRun(t, out, 180*time.Second, nil, args(out))
	if _, err := os.Stat(filepath.Join(out, "predictions.csv")); err == nil {
		t.Fatal("the killed run published predictions.csv")
	}
	if d := run1(t, "doctor", "--out", out); d.code != jobs.ExitResumable || !strings.Contains(d.stdout, "canopy predict --resume") {
		t.Errorf("doctor --out after kill -9: exit %d, want %d naming canopy predict --resume\n%s%s", d.code, jobs.ExitResumable, d.stdout, d.stderr)
	}
	if r := mpirun(t, 3, nil, args(out, "--resume")...); r.code != 0 {
		t.Fatalf("resume np3 after kill -9: exit %d\n%s", r.code, r.stderr)
	}
	if got, err := os.ReadFile(filepath.Join(out, "predictions.csv")); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("resumed predictions.csv differs from np1's (%v)", err)
	}
	var rep struct {
		Resumed struct {
			FromParts int `json:"images_from_parts"`
			Computed  int `json:"images_computed"`
		} `json:"resumed"`
	}
	b, _ := os.ReadFile(filepath.Join(out, "report.json"))
	if json.Unmarshal(b, &rep); rep.Resumed.FromParts < 2 || rep.Resumed.FromParts+rep.Resumed.Computed != 16 {
		t.Fatalf("the resume took %d images from the part files and computed %d, want at least 2 and 16 in all: %s", rep.Resumed.FromParts, rep.Resumed.Computed, b)
	}
	t.Logf("after kill -9: %d images from the part files, %d computed", rep.Resumed.FromParts, rep.Resumed.Computed)
}

// killRankMidRun starts canopy with args under mpirun at np 2 (env added
// to the environment), waits until both ranks have saved part records in
// out, kills one rank with SIGKILL and requires the job to fail.
func killRankMidRun(t *testing.T, out string, timeout time.Duration, env, args []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "scripts/mpirun.sh", append([]string{"-np", "2", canopyBin}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	var se bytes.Buffer
	cmd.Stderr = &se
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ok := waitParts(out, 2)
	pids, _ := exec.Command("pgrep", "-f", "--", "^"+canopyBin+" "+args[0]+" .*--out "+out).Output()
	ranks := strings.Fields(string(pids))
	if !ok || len(ranks) != 2 {
		for _, p := range ranks {
			exec.Command("kill", "-9", p).Run()
		}
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("no part records from both ranks (ranks %v)\n%s", ranks, se.String())
	}
	exec.Command("kill", "-KILL", ranks[1]).Run()
	if err := cmd.Wait(); err == nil {
		t.Fatalf("the job succeeded although a rank was killed\n%s", se.String())
	}
}
