package jobs

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/canopy-hpc/canopy/internal/outdir"
	"github.com/canopy-hpc/canopy/internal/output"
)

// recordedOutputsOf is report.json's recorded outputs (outputs, or eval's
// run.outputs) without report.html, whose bytes hold the run's timings.
func recordedOutputsOf(t *testing.T, dir string) map[string]string {
	t.Helper()
	outs, _, err := output.RecordedOutputs(dir)
	if err != nil {
		t.Fatalf("%s: %v", dir, err)
	}
	delete(outs, "report.html")
	return outs
}

// canopy doctor --out's verdict agrees with what --resume then does, at
// every kill point of a new run of each command that resumes (each write,
// rename and removal of its output folder's steps, where a kill leaves the
// folder as it is: outStepHook): resumable (exit 8) or complete (exit 0)
// exactly when --resume succeeds, with the uninterrupted run's outputs;
// a verdict of neither (exit 1) only where --resume is refused, or where
// the next start finishes a publication and doctor says so. Issue 42's
// F6: killed after its manifest's rename, plain predict was "nothing to
// continue", yet --resume worked; a verdict that says it saved no work
// must also let a run without --resume start in the folder.
func TestDoctorAgreesWithResumeAtEveryKillPoint(t *testing.T) {
	cmds := fourCommands(t)
	for _, name := range []string{"predict", "eval", "predict-tile", "eval-tile"} {
		t.Run(name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out")
			var steps []string
			shots := t.TempDir()
			outdir.StepHook = func(step string) {
				steps = append(steps, step)
				copyTree(t, out, filepath.Join(shots, fmt.Sprintf("%03d", len(steps))))
			}
			code, stderr := runArgs(t, append(cmds[name], "--out", out)...)
			outdir.StepHook = nil
			if code != 0 {
				t.Fatalf("exit %d\n%s", code, stderr)
			}
			want := recordedOutputsOf(t, out)
			verdicts := map[int]int{}
			for i, step := range steps {
				d := filepath.Join(shots, fmt.Sprintf("%03d", i+1))
				fresh := d + "-fresh"
				copyTree(t, d, fresh)
				dc, msg := outState(d)
				verdicts[dc]++
				rc, rerr := runArgs(t, append(cmds[name], "--out", d, "--resume")...)
				what := fmt.Sprintf("killed after step %d %q: doctor %d %q; --resume exit %d %s", i+1, step, dc, msg, rc, strings.TrimSpace(rerr))
				publishing := strings.Contains(msg, "finishes the publication")
				switch {
				case dc == ExitResumable || dc == ExitOK || publishing:
					if rc != 0 {
						t.Errorf("%s", what)
						continue
					}
					got := recordedOutputsOf(t, d)
					g, _ := json.Marshal(got)
					w, _ := json.Marshal(want)
					if string(g) != string(w) {
						t.Errorf("%s: the resumed outputs %s, the uninterrupted run's %s", what, g, w)
					}
				case dc == ExitInternal:
					if rc == 0 {
						t.Errorf("%s: doctor says neither resumable nor complete, yet --resume worked", what)
					}
				default:
					t.Errorf("%s: doctor's exit is none of 0, 1, 8", what)
				}
				if strings.Contains(msg, "saved no work") {
					if fc, ferr := runArgs(t, append(cmds[name], "--out", fresh)...); fc != 0 {
						t.Errorf("%s: doctor says a run without --resume would start, but it exits %d %s", what, fc, ferr)
					}
				}
			}
			t.Logf("%d kill points, doctor's verdicts by exit code %v", len(steps), verdicts)
			if verdicts[ExitResumable] == 0 || verdicts[ExitInternal] == 0 || len(steps) < 6 {
				t.Fatalf("steps %v, verdicts %v: the test saw too few kinds of kill point", steps, verdicts)
			}
		})
	}
}
