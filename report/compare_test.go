package report

import (
	"bytes"
	"encoding/xml"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The fixtures in testdata/compare are hand-written reports, each named
// for the one thing it changes against baseline.json (jobs' compare tests
// run the command on them too).
func fixture(name string) string { return filepath.Join("testdata", "compare", name) }

func compareFixtures(t *testing.T, base, cur string, o Options) *Result {
	t.Helper()
	b, err := Read(fixture(base))
	if err != nil {
		t.Fatal(err)
	}
	c, err := Read(fixture(cur))
	if err != nil {
		t.Fatal(err)
	}
	if o.FailOn == "" {
		o.FailOn = FailOnWorse
	}
	if o.Default == 0 {
		o.Default = DefaultTolerance
	}
	res, err := Compare(b, c, o)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func TestDirections(t *testing.T) {
	for k, want := range map[string]int{
		"box_recall": dirHigher, "box_precision": dirHigher, "empty_frame_accuracy": dirHigher,
		"Alive_Recall": dirHigher, "Dead_Precision": dirHigher, "iou": dirHigher, "iou/cl_3": dirHigher,
		"map": dirHigher, "map_50": dirHigher, "map_per_class[4]": dirHigher, "mar_100": dirHigher, "mar_100_per_class[0]": dirHigher,
		"val_loss": dirLower, "loss": dirLower, "box_loss_map": dirLower, "val_classification": dirLower, "val_bbox_regression": dirLower,
		"val_mae": dirLower, "point_recall": dirHigher, "polygon_precision": dirHigher,
		"score_spread": dirNone, "images": dirNone, "mapping": dirNone, "marker": dirNone,
	} {
		if got := metricDirection(k); got != want {
			t.Errorf("%s: direction %d, want %d", k, got, want)
		}
	}
}

// Different truths are refused without the allowance, warned about with it.
func TestCompareTruth(t *testing.T) {
	b, _ := Read(fixture("baseline.json"))
	c, _ := Read(fixture("other_truth.json"))
	if _, err := Compare(b, c, Options{FailOn: FailOnWorse}); err == nil || !strings.Contains(err.Error(), "different truth CSVs") {
		t.Errorf("different truth: %v", err)
	}
	var warn bytes.Buffer
	res, err := Compare(b, c, Options{FailOn: FailOnWorse, AllowDifferentTruth: true, Warn: &warn,
		Tolerances: map[string]float64{"nope": 1}})
	if err != nil || !res.TruthDiffers || !strings.Contains(warn.String(), "truth CSVs differ") || !strings.Contains(warn.String(), "--tolerance nope: no such metric") {
		t.Errorf("allowed: %v\n%s", err, warn.String())
	}
}

// The JUnit XML: its structure, and the schema (xmllint is optional)
// accepts it and rejects a failure without its type.
func TestJUnitSchema(t *testing.T) {
	res := compareFixtures(t, "baseline.json", "vanished.json", Options{RegressionExit: 7})
	var b bytes.Buffer
	if err := WriteJUnit(&b, res); err != nil {
		t.Fatal(err)
	}
	var s JUnitSuite
	if err := xml.Unmarshal(b.Bytes(), &s); err != nil {
		t.Fatal(err)
	}
	if s.Name != "canopy.compare" || s.Tests != 9 || len(s.Cases) != 9 || s.Failures != 4 || s.Errors != 0 || s.Skipped != 0 {
		t.Errorf("suite: %+v", s)
	}
	for _, c := range s.Cases {
		if c.Classname != "metrics" || (c.Failure != nil && c.Failure.Type != "regression") {
			t.Errorf("%s: %+v", c.Name, c)
		}
	}
	if !strings.Contains(res.Summary(), "4 regressions") || !strings.HasSuffix(res.Summary(), "(exit 7)") {
		t.Errorf("summary: %s", res.Summary())
	}
	xl, err := exec.LookPath("xmllint")
	if err != nil {
		t.Log("xmllint absent: JUnit checked by structure only")
		return
	}
	dir := t.TempDir()
	good := filepath.Join(dir, "good.xml")
	if err := os.WriteFile(good, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(xl, "--noout", "--schema", fixture("junit.xsd"), good).CombinedOutput(); err != nil {
		t.Errorf("xmllint: %v\n%s", err, out)
	}
	bad := filepath.Join(dir, "bad.xml")
	if err := os.WriteFile(bad, []byte(strings.Replace(b.String(), ` type="regression"`, "", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := exec.Command(xl, "--noout", "--schema", fixture("junit.xsd"), bad).Run(); err == nil {
		t.Error("the schema accepts a failure without its type")
	}
}

// FuzzCompareReport: compare's reader. What it accepts has finite values,
// one row per key, and compares with itself as "same" everywhere, even
// with --fail-on change.
func FuzzCompareReport(f *testing.F) {
	for _, n := range []string{"baseline.json", "per_class_reordered.json", "not_a_report.json"} {
		if b, err := os.ReadFile(fixture(n)); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(`{"metrics":{"box_recall":0.5,"map_per_class":[0.1,null],"classes":[3,7],"map":-1,"iou":null},"run":{"inputs":{}}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := Parse("r.json", b)
		if err != nil {
			return
		}
		m := r.metrics
		if len(m.order) != len(m.cells) {
			t.Fatalf("%d keys in order, %d cells", len(m.order), len(m.cells))
		}
		for _, k := range m.order {
			c, ok := m.cells[k]
			if !ok || math.IsNaN(c.V) || math.IsInf(c.V, 0) {
				t.Fatalf("%q: %+v, %v", k, c, ok)
			}
		}
		for _, row := range compareRows(m, m, nil, 0, FailOnChange) {
			if row.Verdict != VerdictSame || row.Regression {
				t.Fatalf("%q compared with itself: %s", row.Key, row.Verdict)
			}
		}
	})
}

// FuzzTolerances: --tolerance accepts only finite tolerances >= 0.
func FuzzTolerances(f *testing.F) {
	for _, s := range []string{"default=0.02", "map=0.01,box_recall=0", "map=1e400", "x=-0", "x=NaN", "=1", "map_per_class=0x1p-4"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, spec string) {
		tols, def, err := ParseTolerances([]string{spec})
		if err != nil {
			return
		}
		for k, v := range tols {
			if k == "" || !(v >= 0) || math.IsInf(v, 0) {
				t.Fatalf("%q: tolerance %q = %v", spec, k, v)
			}
		}
		if !(def >= 0) || math.IsInf(def, 0) {
			t.Fatalf("%q: default tolerance %v", spec, def)
		}
	})
}
