package report

import (
	"slices"
	"strings"
	"testing"
)

func sweepReport(t *testing.T, recall50, recall75 string) *Report {
	t.Helper()
	b := `{"metrics": {"box_recall": 0.6, "iou": 0.7},
 "metrics_by_iou_threshold": [
  {"iou_threshold": 0.5, "metrics": {"box_recall": ` + recall50 + `, "iou/cl_1": 0.7}},
  {"iou_threshold": 0.75, "metrics": {"box_recall": ` + recall75 + `}}
 ],
 "run": {"inputs": {"csv": {"path": "t.csv", "sha256": "ab"}}}}`
	r, err := Parse("r.json", []byte(b))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestCompareReadsSweep: compare reads metrics_by_iou_threshold as rows
// @<threshold>/<key>, judges them like their key (direction, tolerance
// by key or by row) and refuses a malformed list.
func TestCompareReadsSweep(t *testing.T) {
	base := sweepReport(t, "0.5", "0.3")
	cur := sweepReport(t, "0.5", "0.2")
	if got := base.metrics.order; !slices.Equal(got, []string{"box_recall", "iou", "@0.5/box_recall", "@0.5/iou/cl_1", "@0.75/box_recall"}) {
		t.Fatalf("rows %v", got)
	}
	res, err := Compare(base, cur, Options{FailOn: FailOnWorse})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Regressions, []string{"@0.75/box_recall"}) {
		t.Fatalf("regressions %v, want the 0.75 recall's drop", res.Regressions)
	}
	for _, tol := range []map[string]float64{{"box_recall": 0.2}, {"@0.75/box_recall": 0.2}} {
		res, _ := Compare(base, cur, Options{FailOn: FailOnWorse, Tolerances: tol})
		if len(res.Regressions) != 0 {
			t.Fatalf("tolerance %v: regressions %v", tol, res.Regressions)
		}
	}
	for _, bad := range []string{
		`{"metrics": {}, "metrics_by_iou_threshold": [{"metrics": {}}]}`,
		`{"metrics": {}, "metrics_by_iou_threshold": [{"iou_threshold": 1.5, "metrics": {}}]}`,
		`{"metrics": {}, "metrics_by_iou_threshold": [{"iou_threshold": 0.5, "metrics": {}}, {"iou_threshold": 0.5, "metrics": {}}]}`,
		`{"metrics": {}, "metrics_by_iou_threshold": [{"iou_threshold": 0.5, "metrics": [1]}]}`,
	} {
		if _, err := Parse("bad.json", []byte(bad)); err == nil || !strings.Contains(err.Error(), "metrics_by_iou_threshold") {
			t.Errorf("%s: %v", bad, err)
		}
	}
}
