package jobs

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/canopy-hpc/canopy/internal/runkind"
)

// A --resume into a folder that holds another kind of run (issue 42's F4:
// predict --tile --resume into a plain predict folder said "not a tile
// run's manifest (<nil>)"; F5: plain predict --resume into a predict
// --tile folder blamed "an older canopy") is refused with exit 2, naming
// the kind of run the folder holds and the command that continues it, for
// every pair of the four kinds that resume; the folder is left as it was.
func TestResumeIntoAnotherKindOfRun(t *testing.T) {
	cmds := fourCommands(t)
	kinds := map[string]string{"predict": runkind.Predict, "eval": runkind.Eval, "predict-tile": runkind.PredictTile, "eval-tile": runkind.EvalTile}
	for have := range kinds {
		out := filepath.Join(t.TempDir(), "out")
		if code, stderr := runArgs(t, append(cmds[have], "--out", out)...); code != 0 {
			t.Fatalf("%s: exit %d\n%s", have, code, stderr)
		}
		before := snapshot(t, out)
		for want := range kinds {
			if want == have {
				continue
			}
			code, stderr := runArgs(t, append(cmds[want], "--out", out, "--resume")...)
			for _, s := range []string{runkind.Describe(kinds[have]), "not " + runkind.Describe(kinds[want]), "canopy " + kinds[have] + " --resume", "another --out"} {
				if code != ExitUsage || !strings.Contains(stderr, s) {
					t.Errorf("%s --resume into a %s folder: exit %d, want %d and %q in\n%s", want, have, code, ExitUsage, s, stderr)
				}
			}
			sameTree(t, want+" --resume into a "+have+" folder", before, snapshot(t, out))
		}
	}
}
