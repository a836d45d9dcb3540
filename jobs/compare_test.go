package jobs

import (
	"bytes"
	"context"
	"encoding/xml"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The fixtures in testdata/compare are hand-written reports, each named
// for the one thing it changes against baseline.json.
func fixture(name string) string { return filepath.Join("testdata", "compare", name) }

// compareCLI runs `canopy compare` through the real command line.
func compareCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var so, se bytes.Buffer
	code := MainWith(context.Background(), append([]string{"canopy", "compare"}, args...), &so, &se, nil)
	return code, so.String(), se.String()
}

func verdictOf(t *testing.T, out, metric string) string {
	t.Helper()
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(strings.TrimSuffix(strings.TrimSpace(l), "!"))
		if len(f) >= 4 && f[0] == metric {
			return f[len(f)-1]
		}
	}
	t.Fatalf("no row for %s in\n%s", metric, out)
	return ""
}

func TestCompareVerdictsAndExitCodes(t *testing.T) {
	code, out, _ := compareCLI(t, fixture("baseline.json"), fixture("same.json"))
	// box_recall moved by 1e-13, inside the default tolerance of 1e-9
	if code != 0 || !strings.Contains(out, "9 metrics: 9 same") || verdictOf(t, out, "box_recall") != "same" {
		t.Errorf("same: exit %d\n%s", code, out)
	}
	if !strings.Contains(out, "ranks") || !strings.Contains(out, "p2.csv") {
		t.Errorf("run differences (ranks, predictions) not shown:\n%s", out)
	}

	code, out, _ = compareCLI(t, fixture("baseline.json"), fixture("worse_recall.json"))
	if code != ExitRegression || verdictOf(t, out, "box_recall") != "worse" {
		t.Errorf("worse recall: exit %d\n%s", code, out)
	}
	// a tolerance covering the drop makes it same
	if code, _, _ := compareCLI(t, fixture("baseline.json"), fixture("worse_recall.json"), "--tolerance", "box_recall=0.02"); code != 0 {
		t.Errorf("within tolerance: exit %d", code)
	}
	if code, _, _ := compareCLI(t, fixture("baseline.json"), fixture("worse_recall.json"), "--tolerance", "default=0.05"); code != 0 {
		t.Errorf("default tolerance: exit %d", code)
	}

	code, out, _ = compareCLI(t, fixture("baseline.json"), fixture("better_only.json"))
	if code != 0 || verdictOf(t, out, "box_precision") != "better" || verdictOf(t, out, "val_loss") != "better" {
		t.Errorf("better only, fail-on worse: exit %d\n%s", code, out)
	}
	if verdictOf(t, out, "map_per_class[2]") != "appeared" {
		t.Errorf("per-class -1 → 0.1 should be appeared:\n%s", out)
	}
	if code, _, _ := compareCLI(t, fixture("baseline.json"), fixture("better_only.json"), "--fail-on", "change"); code != ExitRegression {
		t.Errorf("better only, fail-on change: exit %d", code)
	}
}

func TestCompareUndefined(t *testing.T) {
	code, out, _ := compareCLI(t, fixture("baseline.json"), fixture("vanished.json"))
	if code != ExitRegression {
		t.Errorf("exit %d", code)
	}
	for _, m := range []string{"box_precision", "empty_frame_accuracy", "map_large", "map_per_class[0]"} {
		if v := verdictOf(t, out, m); v != "vanished" { // null, absent, -1, -1 in an array
			t.Errorf("%s: %s, want vanished", m, v)
		}
	}
	// the other way round: undefined → defined is a change, not worse
	code, out, _ = compareCLI(t, fixture("vanished.json"), fixture("baseline.json"))
	if code != 0 || verdictOf(t, out, "box_precision") != "appeared" {
		t.Errorf("appeared: exit %d\n%s", code, out)
	}
}

func TestCompareRefusesOtherTruth(t *testing.T) {
	code, _, se := compareCLI(t, fixture("baseline.json"), fixture("other_truth.json"))
	if code != ExitInput || !strings.Contains(se, "different truth") {
		t.Errorf("exit %d: %s", code, se)
	}
	if code, _, _ := compareCLI(t, fixture("baseline.json"), fixture("other_truth.json"), "--allow-different-truth"); code != 0 {
		t.Errorf("--allow-different-truth: exit %d", code)
	}
}

func TestCompareArgumentsAndFolders(t *testing.T) {
	// flags before and after the paths, a folder for CURRENT
	c1, _, _ := compareCLI(t, "--fail-on", "worse", fixture("baseline.json"), fixture("folder"))
	c2, _, _ := compareCLI(t, fixture("baseline.json"), fixture("folder"), "--tolerance", "box_recall=0.5")
	c3, _, _ := compareCLI(t, fixture("baseline.json"), "--tolerance=box_recall=0.5", fixture("folder"))
	if c1 != ExitRegression || c2 != 0 || c3 != 0 {
		t.Errorf("exits %d %d %d", c1, c2, c3)
	}
	for _, args := range [][]string{{fixture("baseline.json")}, {fixture("baseline.json"), fixture("same.json"), "--tolerance", "x"},
		{fixture("baseline.json"), fixture("same.json"), "--fail-on", "never"}} {
		if code, _, _ := compareCLI(t, args...); code != ExitUsage {
			t.Errorf("%v: exit %d, want %d", args, code, ExitUsage)
		}
	}
	if code, _, _ := compareCLI(t, fixture("baseline.json"), fixture("nope.json")); code != ExitInput {
		t.Errorf("missing report: exit %d", code)
	}
}

func TestCompareJUnitAndMarkdown(t *testing.T) {
	dir := t.TempDir()
	junit, md := filepath.Join(dir, "compare.xml"), filepath.Join(dir, "compare.md")
	code, out, _ := compareCLI(t, fixture("baseline.json"), fixture("vanished.json"), "--junit", junit, "--markdown", md)
	if code != ExitRegression {
		t.Fatalf("exit %d", code)
	}
	b, err := os.ReadFile(junit)
	if err != nil {
		t.Fatal(err)
	}
	var s junitSuite
	if err := xml.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	// baseline.json has 9 metric rows: 8 scalars (classes excluded) and
	// map_per_class split into [0] and [2]
	if s.Name != "canopy.compare" || s.Tests != len(s.Cases) || s.Tests != 9 {
		t.Errorf("suite %s tests %d cases %d, want 9", s.Name, s.Tests, len(s.Cases))
	}
	failed := 0
	for _, c := range s.Cases {
		if c.Failure != nil {
			failed++
			if !strings.Contains(out, c.Name) || c.Failure.Type != "regression" {
				t.Errorf("failure on %s: %+v", c.Name, c.Failure)
			}
		}
		if c.Name == "box_precision" && c.Failure == nil {
			t.Error("box_precision vanished but has no failure")
		}
		if c.Name == "box_recall" && c.Failure != nil {
			t.Error("box_recall is the same but failed")
		}
	}
	if failed != s.Failures || failed == 0 {
		t.Errorf("failures attr %d, failure elements %d", s.Failures, failed)
	}
	// the schema of what we emit; xmllint comes with Debian's libxml2-utils
	if xl, err := exec.LookPath("xmllint"); err == nil {
		if out, err := exec.Command(xl, "--noout", "--schema", fixture("junit.xsd"), junit).CombinedOutput(); err != nil {
			t.Errorf("xmllint: %v\n%s", err, out)
		}
	} else {
		t.Log("xmllint absent: JUnit checked by structure only")
	}
	m, _ := os.ReadFile(md)
	lines := strings.Split(strings.TrimSpace(string(m)), "\n")
	if lines[0] != "| metric | baseline | current | delta | verdict |" || !strings.HasPrefix(lines[1], "|:---|") ||
		len(lines) != 2+s.Tests+2 || !strings.Contains(lines[len(lines)-1], "4 regressions") {
		t.Errorf("markdown:\n%s", m)
	}
}
