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

	"encoding/json"
	"syscall"
	"time"

	"github.com/canopy-hpc/canopy/internal/confine"
	"github.com/canopy-hpc/canopy/internal/htmlreport"
	"github.com/canopy-hpc/canopy/report"
	"github.com/urfave/cli/v2"
)

// The fixtures in report/testdata/compare are hand-written reports, each
// named for the one thing it changes against baseline.json.
func fixture(name string) string { return filepath.Join("..", "report", "testdata", "compare", name) }

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
	var s report.JUnitSuite
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

// compareDirect runs runCompare itself (no command line) and returns the
// exit code and stdout.
func compareDirect(t *testing.T, opts CompareOptions) (int, string) {
	t.Helper()
	var so bytes.Buffer
	code, err := runCompare(opts, &so)
	if err != nil && Code(err) != code {
		t.Fatalf("runCompare returned code %d with an error carrying %d: %v", code, Code(err), err)
	}
	if err == nil && code != ExitOK && code != ExitRegression {
		t.Fatalf("runCompare: code %d without an error", code)
	}
	return code, so.String()
}

// verdicts compares two fixtures and returns each row's verdict.
func verdicts(t *testing.T, opts CompareOptions) map[string]string {
	t.Helper()
	res, err := compareReports(opts)
	if err != nil {
		t.Fatal(err)
	}
	v := map[string]string{}
	for _, r := range res.Rows {
		v[r.Key] = r.Verdict
	}
	return v
}

func TestCompareDirectIdenticalAllSame(t *testing.T) {
	code, out := compareDirect(t, CompareOptions{Baseline: fixture("baseline.json"), Current: fixture("baseline.json")})
	if code != ExitOK || !strings.Contains(out, "9 metrics: 9 same, 0 better, 0 worse, 0 changed, 0 appeared, 0 vanished") {
		t.Errorf("exit %d\n%s", code, out)
	}
	for k, v := range verdicts(t, CompareOptions{Baseline: fixture("baseline.json"), Current: fixture("baseline.json")}) {
		if v != "same" {
			t.Errorf("%s: %s", k, v)
		}
	}
	// the text table has a header and one row per metric, no trailing blanks
	for _, l := range strings.Split(out, "\n") {
		if strings.HasSuffix(l, " ") {
			t.Errorf("trailing blanks: %q", l)
		}
	}
}

func TestCompareDirectTolerances(t *testing.T) {
	opts := CompareOptions{Baseline: fixture("baseline.json"), Current: fixture("worse_recall.json")} // box_recall 0.8 → 0.79
	for _, c := range []struct {
		tol  []string
		want int
	}{
		{nil, ExitRegression},
		{[]string{"box_recall=0.009"}, ExitRegression}, // below the drop
		{[]string{"box_recall=0.011"}, ExitOK},
		{[]string{"iou=0,box_recall=0.011"}, ExitOK}, // comma list
		{[]string{"iou=0", "box_recall=1e-1"}, ExitOK},
		{[]string{"default=0.011"}, ExitOK},
		{[]string{"default=0.011", "box_recall=0"}, ExitRegression}, // the metric's own wins
	} {
		o := opts
		o.Tolerance = c.tol
		if code, out := compareDirect(t, o); code != c.want {
			t.Errorf("--tolerance %q: exit %d, want %d\n%s", c.tol, code, c.want, out)
		}
	}
	if v := verdicts(t, CompareOptions{Baseline: opts.Baseline, Current: opts.Current, Tolerance: []string{"box_recall=0.011"}}); v["box_recall"] != "same" {
		t.Errorf("box_recall within tolerance: %s, want same", v["box_recall"])
	}
	for _, bad := range []string{"box_recall", "=0.1", "box_recall=x", "box_recall=-1", "box_recall=NaN", "default=+Inf"} {
		o := opts
		o.Tolerance = []string{bad}
		if code, _ := compareDirect(t, o); code != ExitUsage {
			t.Errorf("--tolerance %q: exit %d, want %d", bad, code, ExitUsage)
		}
	}
}

func TestCompareDirectFailOn(t *testing.T) {
	for _, c := range []struct {
		base, cur, failOn string
		want              int
	}{
		{"baseline.json", "better_only.json", "", ExitOK},
		{"baseline.json", "better_only.json", FailOnWorse, ExitOK},
		{"baseline.json", "better_only.json", FailOnChange, ExitRegression},
		{"vanished.json", "baseline.json", FailOnWorse, ExitOK}, // appeared only
		{"vanished.json", "baseline.json", FailOnChange, ExitRegression},
		{"baseline.json", "vanished.json", FailOnWorse, ExitRegression},
		{"baseline.json", "same.json", FailOnChange, ExitOK},
		{"baseline.json", "same.json", "sometimes", ExitUsage},
	} {
		code, out := compareDirect(t, CompareOptions{Baseline: fixture(c.base), Current: fixture(c.cur), FailOn: c.failOn})
		if code != c.want {
			t.Errorf("%s → %s --fail-on %q: exit %d, want %d\n%s", c.base, c.cur, c.failOn, code, c.want, out)
		}
	}
}

func TestCompareDefinedUndefined(t *testing.T) {
	v := verdicts(t, CompareOptions{Baseline: fixture("baseline.json"), Current: fixture("vanished.json")})
	for k, want := range map[string]string{
		"box_precision":        "vanished", // null
		"empty_frame_accuracy": "vanished", // absent
		"map_large":            "vanished", // -1
		"map_per_class[0]":     "vanished", // -1 in an array
		"map_per_class[2]":     "same",     // -1 in both
		"box_recall":           "same",
	} {
		if v[k] != want {
			t.Errorf("%s: %q, want %q", k, v[k], want)
		}
	}
	v = verdicts(t, CompareOptions{Baseline: fixture("vanished.json"), Current: fixture("baseline.json")})
	for _, k := range []string{"box_precision", "empty_frame_accuracy", "map_large", "map_per_class[0]"} {
		if v[k] != "appeared" {
			t.Errorf("%s undefined → defined: %q, want appeared", k, v[k])
		}
	}
}

func TestComparePerClassByClassID(t *testing.T) {
	// classes [2, 0] with the values in that order: the same per id
	v := verdicts(t, CompareOptions{Baseline: fixture("baseline.json"), Current: fixture("per_class_reordered.json")})
	if v["map_per_class[0]"] != "same" || v["map_per_class[2]"] != "same" || len(v) != 9 {
		t.Errorf("reordered classes: %v", v)
	}
	v = verdicts(t, CompareOptions{Baseline: fixture("baseline.json"), Current: fixture("per_class_worse_reordered.json")})
	if v["map_per_class[0]"] != "worse" || v["map_per_class[2]"] != "same" {
		t.Errorf("class 0 worse: %v", v)
	}
	if _, ok := v["map_per_class"]; ok {
		t.Error("an array gave a row under its own key")
	}
	// a -1 placeholder for the whole array (no --class-metrics) against
	// an array: the element rows appear, no row for the placeholder
	dir := t.TempDir()
	noClass := writeFile(t, dir, "no-class.json", strings.Replace(mustRead(t, fixture("baseline.json")),
		`"map_per_class": [0.4, -1.0], "classes": [0, 2]`, `"map_per_class": -1.0`, 1))
	v = verdicts(t, CompareOptions{Baseline: noClass, Current: fixture("better_only.json")})
	if _, ok := v["map_per_class"]; ok || v["map_per_class[0]"] != "appeared" || v["map_per_class[2]"] != "appeared" {
		t.Errorf("placeholder → array: %v", v)
	}
}

// The directions themselves are report's (report.TestDirections).
func TestCompareUnknownKeyChanged(t *testing.T) {
	v := verdicts(t, CompareOptions{Baseline: fixture("unknown_key_baseline.json"), Current: fixture("unknown_key_changed.json")})
	if v["score_spread"] != "changed" {
		t.Errorf("unknown key: %q, want changed", v["score_spread"])
	}
	opts := CompareOptions{Baseline: fixture("unknown_key_baseline.json"), Current: fixture("unknown_key_changed.json")}
	if code, _ := compareDirect(t, opts); code != ExitOK {
		t.Errorf("changed with --fail-on worse: exit %d, want 0", code)
	}
	opts.FailOn = FailOnChange
	if code, _ := compareDirect(t, opts); code != ExitRegression {
		t.Errorf("changed with --fail-on change: exit %d, want 7", code)
	}
}

func TestCompareTruthAndRunDifferences(t *testing.T) {
	opts := CompareOptions{Baseline: fixture("baseline.json"), Current: fixture("other_truth.json")}
	code, err := runCompare(opts, &bytes.Buffer{})
	if code != ExitInput || Code(err) != ExitInput || err == nil || !strings.HasPrefix(err.Error(), "jobs: compare: ") {
		t.Errorf("different truth: exit %d, %v", code, err)
	}
	var stderr bytes.Buffer
	opts.AllowDifferentTruth, opts.Stderr = true, &stderr
	code, out := compareDirect(t, opts)
	if code != ExitOK || !strings.Contains(out, "allowed by --allow-different-truth") || !strings.Contains(stderr.String(), "truth CSVs differ") {
		t.Errorf("--allow-different-truth: exit %d\n%s\n%s", code, out, stderr.String())
	}
	// same.json differs in predictions and ranks: listed, not refused
	code, out = compareDirect(t, CompareOptions{Baseline: fixture("baseline.json"), Current: fixture("same.json")})
	if code != ExitOK || !strings.Contains(out, "inputs.predictions.sha256") || !strings.Contains(out, "ranks") {
		t.Errorf("run differences: exit %d\n%s", code, out)
	}
}

func TestCompareBadReportsExit3(t *testing.T) {
	for _, name := range []string{"nope.json", "not_a_report.json", "string_metric.json", "truncated.json", "classes_length_mismatch.json", "junit.xsd"} {
		for _, swap := range []bool{false, true} {
			opts := CompareOptions{Baseline: fixture("baseline.json"), Current: fixture(name)}
			if swap {
				opts.Baseline, opts.Current = opts.Current, opts.Baseline
			}
			code, err := runCompare(opts, &bytes.Buffer{})
			if code != ExitInput || Code(err) != ExitInput {
				t.Errorf("%s (swap %v): exit %d, %v", name, swap, code, err)
			}
		}
	}
	// an empty folder holds no report.json
	if code, _ := runCompare(CompareOptions{Baseline: fixture("baseline.json"), Current: t.TempDir()}, &bytes.Buffer{}); code != ExitInput {
		t.Errorf("empty folder: exit %d", code)
	}
}

// The command on an app of its own, through reorder: flags after and
// between the paths, a BoolFlag that must not swallow the next path.
func TestCompareCommandStandaloneApp(t *testing.T) {
	run := func(args ...string) (int, string, error) {
		var so, se bytes.Buffer
		code := ExitOK
		app := &cli.App{
			Name: "canopy", Writer: &so, ErrWriter: &se,
			ExitErrHandler: func(*cli.Context, error) {},
			Commands:       []*cli.Command{CompareCommand(&code, &so, &se)},
		}
		err := app.Run(reorder(app, append([]string{"canopy", "compare"}, args...)))
		if err != nil {
			code = Code(err)
		}
		return code, so.String(), err
	}
	dir := t.TempDir()
	junit := filepath.Join(dir, "j.xml")
	code, out, err := run(fixture("baseline.json"), "--allow-different-truth", fixture("other_truth.json"),
		"--fail-on", "change", "--junit", junit, "--markdown", "-", "--tolerance", "box_recall=0.1")
	if err != nil || code != ExitOK || !strings.HasPrefix(out, "| metric | baseline | current | delta | verdict |") {
		t.Errorf("flags after the paths: exit %d, %v\n%s", code, err, out)
	}
	if _, err := os.Stat(junit); err != nil {
		t.Errorf("--junit after the paths: %v", err)
	}
	code, _, _ = run(fixture("baseline.json"), fixture("worse_recall.json"), "--fail-on=worse")
	if code != ExitRegression {
		t.Errorf("worse recall: exit %d", code)
	}
	code, _, _ = run(fixture("baseline.json"), fixture("folder"), "--tolerance=box_recall=0.5")
	if code != ExitOK {
		t.Errorf("folder, --tolerance=…: exit %d", code)
	}
	for _, args := range [][]string{
		{fixture("baseline.json")},
		{fixture("baseline.json"), fixture("same.json"), fixture("same.json")},
		{fixture("baseline.json"), fixture("same.json"), "--bogus"},
		{fixture("baseline.json"), fixture("same.json"), "--tolerance", "box_recall:0.1"},
		// output paths that cannot be written: a folder, a missing folder
		{fixture("baseline.json"), fixture("same.json"), "--junit", dir},
		{fixture("baseline.json"), fixture("same.json"), "--junit", filepath.Join(dir, "no", "j.xml")},
		{fixture("baseline.json"), fixture("same.json"), "--markdown", filepath.Join(junit, "m.md")},
	} {
		if code, _, err := run(args...); code != ExitUsage {
			t.Errorf("%q: exit %d (%v), want %d", args, code, err, ExitUsage)
		}
	}
}

// JUnit and markdown files are written whole (no temporary left) and the
// schema rejects what it should; xmllint is optional.
func TestCompareOutputFilesAndSchema(t *testing.T) {
	dir := t.TempDir()
	junit, md := filepath.Join(dir, "c.xml"), filepath.Join(dir, "c.md")
	code, out := compareDirect(t, CompareOptions{Baseline: fixture("baseline.json"), Current: fixture("worse_recall.json"), JUnit: junit, Markdown: md})
	if code != ExitRegression {
		t.Fatalf("exit %d\n%s", code, out)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 2 {
		t.Errorf("folder holds %d entries, want c.xml and c.md only", len(ents))
	}
	var s report.JUnitSuite
	if err := xml.Unmarshal([]byte(mustRead(t, junit)), &s); err != nil {
		t.Fatal(err)
	}
	if s.Tests != 9 || len(s.Cases) != 9 || s.Failures != 1 || s.Errors != 0 || s.Skipped != 0 {
		t.Errorf("suite: %+v", s)
	}
	for _, c := range s.Cases {
		if c.Classname != "metrics" {
			t.Errorf("%s: classname %q", c.Name, c.Classname)
		}
		if (c.Failure != nil) != (c.Name == "box_recall") {
			t.Errorf("%s: failure %+v", c.Name, c.Failure)
		}
		if c.Failure != nil && (c.Failure.Type != "regression" || !strings.Contains(c.Failure.Message, "box_recall worse")) {
			t.Errorf("failure: %+v", c.Failure)
		}
	}
	lines := strings.Split(strings.TrimSpace(mustRead(t, md)), "\n")
	rows := 0
	for _, l := range lines[2:] {
		if strings.HasPrefix(l, "| ") {
			rows++
		}
	}
	if lines[0] != "| metric | baseline | current | delta | verdict |" || lines[1] != "|:---|---:|---:|---:|:---|" || rows != 9 ||
		!strings.Contains(mustRead(t, md), "**canopy compare:** 9 metrics: 8 same, 0 better, 1 worse") {
		t.Errorf("markdown:\n%s", mustRead(t, md))
	}

	xl, err := exec.LookPath("xmllint")
	if err != nil {
		t.Log("xmllint absent: JUnit checked by structure only")
		return
	}
	if out, err := exec.Command(xl, "--noout", "--schema", fixture("junit.xsd"), junit).CombinedOutput(); err != nil {
		t.Errorf("xmllint: %v\n%s", err, out)
	}
	bad := writeFile(t, dir, "bad.xml", strings.Replace(mustRead(t, junit), ` type="regression"`, "", 1))
	if err := exec.Command(xl, "--noout", "--schema", fixture("junit.xsd"), bad).Run(); err == nil {
		t.Error("the schema accepts a failure without its type")
	}
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// hostileSides runs eval twice on the "three" set with report.html (its
// root a copy of the set's folder) and returns the two --out folders and
// the baseline's root.
func hostileSides(t *testing.T) (base, cur, root string) {
	t.Helper()
	root = copyDir(t, filepath.Join("..", "testdata", "sets", "three"))
	var outs [2]string
	for k := range outs {
		outs[k] = filepath.Join(t.TempDir(), "out")
		cfg := EvalConfig{CSV: filepath.Join(root, "truth.csv"), Predictions: filepath.Join(root, "predictions.csv"), Out: outs[k],
			IoUThreshold: 0.4, HTML: &htmlreport.Options{Worst: 2, Thumb: 32}}
		if codes := runLocal(t, 1, cfg); codes[0] != 0 {
			t.Fatal(codes)
		}
	}
	return outs[0], outs[1], root
}

// recordTruth rewrites the truth path (and root) the baseline's
// report.html records, as a hostile report would.
func recordTruth(t *testing.T, out, csv, root string) {
	t.Helper()
	p := filepath.Join(out, "report.html")
	b, _ := os.ReadFile(p)
	d, err := htmlreport.ReadData(b)
	if err != nil || d == nil {
		t.Fatal(err)
	}
	old, _ := json.Marshal(map[string]string{"csv": d.CSV, "root_dir": d.RootDir})
	now, _ := json.Marshal(map[string]string{"csv": csv, "root_dir": root})
	old, now = old[1:len(old)-1], now[1:len(now)-1]
	if !bytes.Contains(b, old) {
		t.Fatalf("no %s in the data block", old)
	}
	os.WriteFile(p, bytes.Replace(b, old, now, 1), 0o644)
}

// compare --html reads the files a report records only as regular files
// inside the root that report records, under size caps: /dev/zero, a
// FIFO, /etc/passwd and a FIFO in place of report.html are each a note on
// the page (never their content), and nothing blocks (the FIFO blocked in
// open and ignored SIGTERM; /dev/zero grew RSS at 230 MB/s).
func TestCompareHTMLReadsOnlyRecordedRegularFiles(t *testing.T) {
	base, cur, root := hostileSides(t)
	fifo := filepath.Join(root, "truth.fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ csv, root, note string }{
		{"/etc/passwd", root, "outside the report&#39;s root folder"},
		{"/dev/zero", "/dev", "not a regular file (a character device)"},
		{fifo, root, "not a regular file (a named pipe)"},
		{filepath.Join(root, "truth.csv"), "", "the report records no root folder"},
	} {
		b := base
		src, _ := os.ReadFile(filepath.Join(b, "report.html")) // each case from the page eval wrote
		recordTruth(t, b, c.csv, c.root)
		page := filepath.Join(t.TempDir(), "c.html")
		start := time.Now()
		code, err := runCompare(CompareOptions{Baseline: b, Current: cur, HTML: page, Ctx: context.Background()}, &bytes.Buffer{})
		if err != nil || code != ExitOK || time.Since(start) > 20*time.Second {
			t.Fatalf("%s: exit %d %v after %v", c.csv, code, err, time.Since(start))
		}
		html, _ := os.ReadFile(page)
		if !bytes.Contains(html, []byte("truth boxes not drawn")) || !bytes.Contains(html, []byte(c.note)) || bytes.Contains(html, []byte("root:x:0")) {
			t.Errorf("%s: the page has no note %q, or has the file's content", c.csv, c.note)
		}
		os.WriteFile(filepath.Join(b, "report.html"), src, 0o644)
	}
	// report.html itself a FIFO
	os.Remove(filepath.Join(base, "report.html"))
	syscall.Mkfifo(filepath.Join(base, "report.html"), 0o644)
	page := filepath.Join(t.TempDir(), "c.html")
	if code, err := runCompare(CompareOptions{Baseline: base, Current: cur, HTML: page}, &bytes.Buffer{}); err != nil || code != ExitOK {
		t.Fatalf("report.html a FIFO: %d %v", code, err)
	}
	if html, _ := os.ReadFile(page); !bytes.Contains(html, []byte("no report.html")) || !bytes.Contains(html, []byte("a named pipe")) {
		t.Error("report.html a FIFO: no note")
	}
}

// A read of a recorded file that blocks (a stalled filesystem, made here
// by the test hook) ends at SIGTERM (the context) or at its timeout: the
// page is written with a note, promptly.
func TestCompareHTMLBlockedReadEnds(t *testing.T) {
	base, cur, _ := hostileSides(t)
	release := make(chan struct{})
	defer close(release)
	old := confine.ReadHook
	confine.ReadHook = func(p string) {
		if filepath.Base(p) == "truth.csv" {
			<-release
		}
	}
	defer func() { confine.ReadHook = old }()
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(300*time.Millisecond, cancel)
	page := filepath.Join(t.TempDir(), "c.html")
	start := time.Now()
	if code, err := runCompare(CompareOptions{Baseline: base, Current: cur, HTML: page, Ctx: ctx}, &bytes.Buffer{}); err != nil || code != ExitOK {
		t.Fatalf("%d %v", code, err)
	}
	if html, _ := os.ReadFile(page); time.Since(start) > 10*time.Second || !bytes.Contains(html, []byte("not read: interrupted")) {
		t.Fatalf("SIGTERM: %v, note missing", time.Since(start))
	}
	defer func(d time.Duration) { confine.RecordedFileTimeout = d }(confine.RecordedFileTimeout)
	confine.RecordedFileTimeout = 200 * time.Millisecond
	start = time.Now()
	if code, err := runCompare(CompareOptions{Baseline: base, Current: cur, HTML: page, Ctx: context.Background()}, &bytes.Buffer{}); err != nil || code != ExitOK {
		t.Fatalf("%d %v", code, err)
	}
	if html, _ := os.ReadFile(page); time.Since(start) > 10*time.Second || !bytes.Contains(html, []byte("not read within 200ms")) {
		t.Fatalf("timeout: %v, note missing", time.Since(start))
	}
}

// compare's two report paths are read without blocking: a FIFO nobody
// writes to (or a run folder whose report.json is one) is exit 3 at once,
// /dev/zero is refused.
func TestCompareReportFIFO(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "report.json")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{fifo, dir, "/dev/zero"} {
		done := make(chan int, 1)
		go func() {
			code, _ := runCompare(CompareOptions{Baseline: fixture("baseline.json"), Current: p}, &bytes.Buffer{})
			done <- code
		}()
		select {
		case code := <-done:
			if code != ExitInput {
				t.Errorf("%s: exit %d", p, code)
			}
		case <-time.After(15 * time.Second):
			t.Fatalf("%s: compare blocked", p)
		}
	}
}
