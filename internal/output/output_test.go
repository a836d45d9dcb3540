package output

import (
	"bytes"
	"encoding/json"
	"image"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/metrics"
)

// A NaN, an infinity or None is null in report.json (json.Marshal would
// refuse them); finite values are Python's repr; lists keep their order.
func TestMetricsJSON(t *testing.T) {
	vals := []metrics.Value{
		{Key: "box_recall", V: 0.1},
		{Key: "nan", V: math.NaN()},
		{Key: "inf", V: math.Inf(-1)},
		{Key: "none", Null: true},
		{Key: "whole", V: 2},
		{Key: "per_class", Array: []float64{0.5, math.NaN()}},
		{Key: "classes", Ints: []int{0, 3}},
		{Key: "q\"uote", V: 1e-7},
	}
	got := string(MetricsJSON(vals))
	want := `{"box_recall": 0.1, "nan": null, "inf": null, "none": null, "whole": 2.0, "per_class": [0.5, null], "classes": [0, 3], "q\"uote": 1e-07}`
	if got != want {
		t.Fatalf("MetricsJSON\n got %s\nwant %s", got, want)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(got), &m); err != nil {
		t.Fatalf("not JSON: %v", err)
	}
	sweep := string(SweepJSON([]float64{0.4, 0.5}, [][]metrics.Value{vals[:1], vals[4:5]}))
	wantSweep := "[\n  {\"iou_threshold\": 0.4, \"metrics\": {\"box_recall\": 0.1}},\n  {\"iou_threshold\": 0.5, \"metrics\": {\"whole\": 2.0}}\n ]"
	if sweep != wantSweep {
		t.Fatalf("SweepJSON\n got %q\nwant %q", sweep, wantSweep)
	}
	if SweepJSON(nil, nil) != nil {
		t.Fatal("SweepJSON without thresholds is not nil")
	}
}

// The table's columns fit the widest key (in runes, a label's terminal
// escape made printable) and value, six spaces wider.
func TestPrintTable(t *testing.T) {
	var b bytes.Buffer
	PrintTable(&b, []metrics.Value{{Key: "box_précision_\x1b[31m", V: 0.25}, {Key: "x", V: math.NaN()}})
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(lines) != 6 || strings.Contains(b.String(), "\x1b") {
		t.Fatalf("table:\n%s", b.String())
	}
	width := len([]rune(lines[0]))
	for i, l := range lines {
		if n := len([]rune(l)); n != width {
			t.Errorf("line %d is %d runes, line 0 %d:\n%s", i, n, width, b.String())
		}
	}
	if !strings.Contains(lines[4], " null ") || !strings.Contains(lines[3], " 0.25 ") {
		t.Fatalf("cells missing:\n%s", b.String())
	}
}

// predictions.csv and results.csv: labels and paths CSV-quoted, an
// unassigned truth's prediction id, score and predicted label empty.
func TestWritePredictionsAndResults(t *testing.T) {
	labels, err := box.NewLabelMap([]string{"Tree", "dead, standing"})
	if err != nil {
		t.Fatal(err)
	}
	images := []box.Image{{Path: "a.png"}, {Path: "b \"q\".png"}}
	dets := [][]box.Detection{
		{{Box: box.Box{Xmin: 1, Ymin: 2, Xmax: 3.5, Ymax: 4}, Label: 1, Score: 0.75}},
		{{Box: box.Box{Xmin: 0, Ymin: 0, Xmax: 10, Ymax: 10}, Label: 0, Score: 0.5}},
	}
	var p bytes.Buffer
	if err := WritePredictions(&p, images, dets, labels, nil); err != nil {
		t.Fatal(err)
	}
	wantP := "image_path,xmin,ymin,xmax,ymax,label,score\n" +
		"a.png,1.0,2.0,3.5,4.0,\"dead, standing\",0.75\n" +
		"\"b \"\"q\"\".png\",0.0,0.0,10.0,10.0,Tree,0.5\n"
	if p.String() != wantP {
		t.Fatalf("predictions.csv\n got %q\nwant %q", p.String(), wantP)
	}
	matches := []metrics.Match{
		{Image: 0, TruthID: 0, PredID: 0, IoU: 0.625, Score: 0.75, Match: true, TrueLabel: 1, PredLabel: 1},
		{Image: 1, TruthID: 0, PredID: -1, TrueLabel: 0, PredLabel: -1},
	}
	var r bytes.Buffer
	if err := WriteResults(&r, images, labels, matches); err != nil {
		t.Fatal(err)
	}
	wantR := "image_path,truth_id,prediction_id,IoU,score,match,true_label,predicted_label\n" +
		"a.png,0,0,0.625,0.75,True,\"dead, standing\",\"dead, standing\"\n" +
		"\"b \"\"q\"\".png\",0,,0.0,,False,Tree,\n"
	if r.String() != wantR {
		t.Fatalf("results.csv\n got %q\nwant %q", r.String(), wantR)
	}
}

// The COCO files: ids from 1, bbox as xywh, iscrowd from the truth.
func TestStageCOCO(t *testing.T) {
	out := t.TempDir()
	labels, err := box.NewLabelMap([]string{"Tree"})
	if err != nil {
		t.Fatal(err)
	}
	images := []box.Image{{Path: "a.png", Truth: []box.Truth{{Box: box.Box{Xmin: 1, Ymin: 2, Xmax: 4, Ymax: 6}}, {Box: box.Box{Xmax: 1, Ymax: 1}, Crowd: true}}}}
	dets := [][]box.Detection{{{Box: box.Box{Xmin: 1, Ymin: 1, Xmax: 2, Ymax: 3}, Score: 0.5}}}
	set, err := StageCOCO(out, images, dets, labels)
	if err != nil || len(set) != 2 {
		t.Fatalf("%v %v", set, err)
	}
	read := func(s string) string {
		b, err := os.ReadFile(filepath.Join(out, s))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	truth, preds := read(set[0].Tmp), read(set[1].Tmp)
	wantT := `{"images":[{"id":1,"file_name":"a.png"`
	if !strings.HasPrefix(truth, wantT) || !strings.Contains(truth, `"id":1,"image_id":1,"category_id":0,"bbox":[1,2,3,4],"area":12,"iscrowd":0`) ||
		!strings.Contains(truth, `"id":2,"image_id":1,"category_id":0,"bbox":[0,0,1,1],"area":1,"iscrowd":1`) {
		t.Errorf("coco_truth.json: %s", truth)
	}
	if want := `[{"image_id":1,"category_id":0,"bbox":[1,1,1,2],"score":0.5}]` + "\n"; preds != want {
		t.Errorf("coco_predictions.json\n got %s\nwant %s", preds, want)
	}
}

// The page opens no image outside its root unless told to, and then
// decodes it.
func TestDrawnImageConfined(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := png.Encode(&b, image.NewRGBA(image.Rect(0, 0, 2, 1))); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "outside.png"), b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := DrawnImage(false, 0)(root, "../outside.png"); err == nil {
		t.Fatal("opened a path outside the root")
	}
	m, err := DrawnImage(true, 0)(root, "../outside.png")
	if err != nil || m.Bounds().Dx() != 2 || m.Bounds().Dy() != 1 {
		t.Fatalf("--allow-outside-root: %v", err)
	}
	if _, err := DrawnImage(true, 1)(root, "../outside.png"); err == nil {
		t.Fatal("decoded 2 pixels under a cap of 1")
	}
}
