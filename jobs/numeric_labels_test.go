package jobs

import (
	"bytes"
	"encoding/csv"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/canopy-hpc/canopy/internal/testsupport/shareddata"
	"github.com/canopy-hpc/canopy/internal/testsupport/testfile"
	"github.com/canopy-hpc/canopy/metrics"
)

var numericRelabel = map[string]func(i int) int{
	"one_class":   func(int) int { return 0 },
	"two_classes": func(i int) int { return i % 2 },
	"ten_and_two": func(i int) int { return []int{10, 2}[i%2] },
}

// relabelCSV rewrites the label column of a CSV: row i gets relabel(i).
func relabelCSV(t *testing.T, src, dst string, relabel func(int) int) {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(bytes.NewReader(data)).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	col := -1
	for i, h := range recs[0] {
		if h == "label" {
			col = i
		}
	}
	if col < 0 {
		t.Fatalf("%s: no label column", src)
	}
	for i, r := range recs[1:] {
		r[col] = strconv.Itoa(relabel(i))
	}
	var b bytes.Buffer
	w := csv.NewWriter(&b)
	if err := w.WriteAll(recs); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestNumericLabelNamesSJER: the SJER sample relabelled with numbers, as
// DeepForest reads it (pandas types the label columns as int64), names
// evaluate_boxes' classes "0.0_Recall", "1.0_…", in numeric order ("2.0"
// before "10.0"), with DeepForest's values, on 1 and 2 ranks.
func TestNumericLabelNamesSJER(t *testing.T) {
	const dir = "../../shared/data/deepforest"
	truthCSV := filepath.Join(dir, "2018_SJER_3_252000_4107000_image_477_truth.csv")
	predCSV := filepath.Join(dir, "2018_SJER_3_252000_4107000_image_477.csv")
	shareddata.Need(t, truthCSV, "the SJER truth CSV")
	shareddata.Need(t, predCSV, "the SJER predictions CSV")
	var raw struct {
		Deepforest string
		OneClass   numericCase `json:"one_class"`
		TwoClasses numericCase `json:"two_classes"`
		TenAndTwo  numericCase `json:"ten_and_two"`
	}
	testfile.ReadJSON(t, "../testdata/golden/numeric/sjer_numeric_labels.json", &raw)
	cases := map[string]numericCase{"one_class": raw.OneClass, "two_classes": raw.TwoClasses, "ten_and_two": raw.TenAndTwo}
	for name, want := range cases {
		if len(want.Classes) == 0 {
			t.Fatalf("%s: golden has no classes", name)
		}
		t.Run(name, func(t *testing.T) {
			tmp := t.TempDir()
			truth, preds := filepath.Join(tmp, "t.csv"), filepath.Join(tmp, "p.csv")
			relabelCSV(t, truthCSV, truth, numericRelabel[name])
			relabelCSV(t, predCSV, preds, numericRelabel[name])
			for _, n := range []int{1, 2} {
				t.Run(fmt.Sprintf("np%d", n), func(t *testing.T) {
					out := t.TempDir()
					cfg := EvalConfig{CSV: truth, Predictions: preds, RootDir: dir, Out: out, IoUThreshold: 0.4,
						Semantics: metrics.EvaluateBoxes, BatchSize: 2, Families: metrics.Recall}
					if codes := runLocal(t, n, cfg); codes[0] != 0 {
						t.Fatalf("exit codes %v", codes)
					}
					raw, got := reportMetrics(t, out)
					compareMetrics(t, got, want.metrics())
					// the keys in the order DeepForest lists them
					var order orderedMap
					if err := order.UnmarshalJSON(raw); err != nil {
						t.Fatal(err)
					}
					if w := want.metrics().keys; fmt.Sprint(order.keys) != fmt.Sprint(w) {
						t.Errorf("key order %v, DeepForest %v", order.keys, w)
					}
				})
			}
		})
	}
}

// numericCase is one case of tools/deepforest/numeric_labels.py's output:
// DeepForest (1bad4419) reading the relabelled SJER CSVs with read_file and
// naming evaluate_boxes' classes as its scripts do.
type numericCase struct {
	BoxRecall    float64 `json:"box_recall"`
	BoxPrecision float64 `json:"box_precision"`
	Classes      [][4]any
}

func (c numericCase) metrics() orderedMap {
	o := orderedMap{vals: map[string]*float64{}}
	add := func(k string, v float64) { o.keys = append(o.keys, k); o.vals[k] = &v }
	add("box_precision", c.BoxPrecision)
	add("box_recall", c.BoxRecall)
	for _, r := range c.Classes {
		add(r[0].(string), r[1].(float64))
		add(r[2].(string), r[3].(float64))
	}
	return o
}
