package jobs

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/canopy-hpc/canopy/internal/testsupport/approx"
	"github.com/canopy-hpc/canopy/internal/testsupport/shareddata"
	"github.com/canopy-hpc/canopy/internal/testsupport/testfile"
	"github.com/canopy-hpc/canopy/metrics"
)

// golden is a file written by tools/deepforest/golden.py from DeepForest's
// own code (commit 1bad4419); the file records the versions and command.
type golden struct {
	Commit        string
	Truth         string
	Predictions   string
	IoUThreshold  float64 `json:"iou_threshold"`
	Validation    orderedMap
	EvaluateBoxes struct {
		BoxRecall    *float64 `json:"box_recall"`
		BoxPrecision *float64 `json:"box_precision"`
		ClassRecall  []struct {
			Label             string
			Recall, Precision float64
		} `json:"class_recall"`
		Results []struct {
			ImagePath      string   `json:"image_path"`
			TruthID        int      `json:"truth_id"`
			PredictionID   *float64 `json:"prediction_id"`
			IoU            float64
			Match          bool
			TrueLabel      string  `json:"true_label"`
			PredictedLabel *string `json:"predicted_label"`
		}
	} `json:"evaluate_boxes"`
}

// orderedMap keeps the key order of a JSON object.
type orderedMap struct {
	keys []string
	vals map[string]*float64
}

func (o *orderedMap) UnmarshalJSON(b []byte) error {
	d := json.NewDecoder(bytesReader(b))
	if _, err := d.Token(); err != nil {
		return err
	}
	o.vals = map[string]*float64{}
	for d.More() {
		k, err := d.Token()
		if err != nil {
			return err
		}
		var v *float64
		if err := d.Decode(&v); err != nil {
			return err
		}
		o.keys = append(o.keys, k.(string))
		o.vals[k.(string)] = v
	}
	return nil
}

func goldenFiles(t *testing.T) []string {
	files, err := filepath.Glob("../testdata/golden/deepforest/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden files: %v", err)
	}
	return files
}

func repoPath(p string) string { return filepath.Join("..", p) }

// TestGoldenDeepForest runs the whole eval job on 1, 2 and 3 in-process
// ranks for every golden set and compares every metric, bit for bit, with
// what DeepForest's own RecallPrecision and evaluate_boxes computed.
func TestGoldenDeepForest(t *testing.T) {
	for _, f := range goldenFiles(t) {
		var g golden
		testfile.ReadJSON(t, f, &g)
		t.Run(filepath.Base(f), func(t *testing.T) {
			shareddata.Need(t, repoPath(g.Truth), "its input "+g.Truth)
			shareddata.Need(t, repoPath(g.Predictions), "its input "+g.Predictions)
			goldenDeepForest(t, g)
		})
	}
}

func goldenDeepForest(t *testing.T, g golden) {
	for _, sem := range []metrics.Semantics{metrics.Validation, metrics.EvaluateBoxes} {
		for _, n := range []int{1, 2, 3} {
			t.Run(fmt.Sprintf("%s/np%d", sem, n), func(t *testing.T) {
				out := t.TempDir()
				cfg := EvalConfig{CSV: repoPath(g.Truth), Predictions: repoPath(g.Predictions), Out: out,
					IoUThreshold: g.IoUThreshold, Semantics: sem, BatchSize: 2, Families: metrics.Recall}
				if codes := runLocal(t, n, cfg); codes[0] != 0 {
					t.Fatalf("exit codes %v", codes)
				}
				_, got := reportMetrics(t, out)
				want := g.Validation
				if sem == metrics.EvaluateBoxes {
					want = g.evaluateBoxesMetrics()
				}
				compareMetrics(t, got, want)
				if sem == metrics.EvaluateBoxes && len(g.EvaluateBoxes.Results) > 0 {
					compareResults(t, filepath.Join(out, "results.csv"), &g)
				}
			})
		}
	}
}

func (g *golden) evaluateBoxesMetrics() orderedMap {
	o := orderedMap{vals: map[string]*float64{}}
	add := func(k string, v *float64) { o.keys = append(o.keys, k); o.vals[k] = v }
	add("box_precision", g.EvaluateBoxes.BoxPrecision)
	add("box_recall", g.EvaluateBoxes.BoxRecall)
	for _, c := range g.EvaluateBoxes.ClassRecall {
		r, p := c.Recall, c.Precision
		add(c.Label+"_Recall", &r)
		add(c.Label+"_Precision", &p)
	}
	return o
}

func compareMetrics(t *testing.T, got map[string]any, want orderedMap) {
	t.Helper()
	if len(got) != len(want.keys) {
		t.Errorf("keys: got %d %v, DeepForest has %v", len(got), got, want.keys)
	}
	for _, k := range want.keys {
		g, ok := got[k]
		if !ok {
			t.Errorf("%s: missing; DeepForest gives %v", k, fmtPtr(want.vals[k]))
			continue
		}
		w := want.vals[k]
		switch {
		case w == nil && g != nil:
			t.Errorf("%s: got %v, DeepForest gives NaN/None (null)", k, g)
		case w != nil && (g == nil || g.(float64) != *w):
			t.Errorf("%s: got %v, DeepForest gives %v", k, g, *w)
		}
	}
}

func fmtPtr(p *float64) string {
	if p == nil {
		return "null"
	}
	return strconv.FormatFloat(*p, 'g', -1, 64)
}

// compareResults checks the match table row by row against evaluate_boxes'
// results: same assignment, same match decision, IoU within 1e-12 (shapely
// computes the union area from the union polygon; canopy as a+b-inter).
func compareResults(t *testing.T, path string, g *golden) {
	t.Helper()
	recs := testfile.ReadCSV(t, path)
	type key struct {
		path string
		id   int
	}
	rows := map[key][]string{}
	for _, r := range recs[1:] {
		id, _ := strconv.Atoi(r[1])
		rows[key{r[0], id}] = r
	}
	if len(rows) != len(g.EvaluateBoxes.Results) {
		t.Errorf("results.csv has %d rows, DeepForest %d", len(rows), len(g.EvaluateBoxes.Results))
	}
	for _, w := range g.EvaluateBoxes.Results {
		r, ok := rows[key{w.ImagePath, w.TruthID}]
		if !ok {
			t.Errorf("no row for %s truth %d", w.ImagePath, w.TruthID)
			continue
		}
		wantPid := ""
		if w.PredictionID != nil {
			wantPid = strconv.Itoa(int(*w.PredictionID))
		}
		iou, _ := strconv.ParseFloat(r[3], 64)
		wantLabel := ""
		if w.PredictedLabel != nil {
			wantLabel = *w.PredictedLabel
		}
		if r[2] != wantPid || r[5] != map[bool]string{true: "True", false: "False"}[w.Match] ||
			r[6] != w.TrueLabel || r[7] != wantLabel || approx.Far(approx.Diff(iou, w.IoU), 1e-12) {
			t.Errorf("%s truth %d: canopy %v; DeepForest pred %q IoU %v match %v labels %s/%s",
				w.ImagePath, w.TruthID, r, wantPid, w.IoU, w.Match, w.TrueLabel, wantLabel)
		}
	}
}
