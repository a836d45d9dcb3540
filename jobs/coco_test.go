package jobs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/internal/dataset"
	"github.com/canopy-hpc/canopy/internal/htmlreport"
	"github.com/canopy-hpc/canopy/internal/outdir"
	"github.com/canopy-hpc/canopy/internal/output"
	"github.com/canopy-hpc/canopy/internal/testsupport/testfile"
	"github.com/canopy-hpc/canopy/metrics"
)

// TestCOCOOutIsWhatPycocotoolsEvaluated: --coco-out on testdata/sets/coco
// writes, on 1 and 3 ranks, exactly the files tools/coco/verify_coco_out.py
// fed to the real pycocotools (their sha256 is in the fixture), and
// canopy's map/mar equal pycocotools' stats on them (as float32, with
// torch's thresholds set in COCOeval's params as torchmetrics does).
func TestCOCOOutIsWhatPycocotoolsEvaluated(t *testing.T) {
	var g struct {
		Pycocotools string             `json:"pycocotools"`
		Truth       string             `json:"truth_sha256"`
		Preds       string             `json:"predictions_sha256"`
		Stats       map[string]float64 `json:"stats_torch_thresholds"`
	}
	b, err := os.ReadFile("../testdata/golden/cocoout/coco.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &g); err != nil || len(g.Stats) != 12 {
		t.Fatalf("fixture: %v (%d stats)", err, len(g.Stats))
	}
	for _, n := range []int{1, 3} {
		out := t.TempDir()
		cfg := setCfg("coco", out)
		cfg.COCOOut = true
		if codes := runLocal(t, n, cfg); codes[0] != 0 {
			t.Fatalf("np%d: exit %v", n, codes)
		}
		for f, want := range map[string]string{output.COCOTruthFile: g.Truth, output.COCOPredFile: g.Preds} {
			data, err := os.ReadFile(filepath.Join(out, f))
			if err != nil {
				t.Fatal(err)
			}
			if got := outdir.SHA256Hex(data); got != want {
				t.Errorf("np%d: %s sha256 %s, pycocotools %s evaluated %s", n, f, got, g.Pycocotools, want)
			}
		}
		_, m := reportMetrics(t, out)
		for k, v := range g.Stats {
			if got, ok := m[k].(float64); !ok || got != float64(float32(v)) {
				t.Errorf("np%d: %s = %v, pycocotools %s gives %v", n, k, m[k], g.Pycocotools, float32(v))
			}
		}
	}
}

// TestCOCOTruthIn: the truth read back from coco_truth.json (by its .json
// extension) gives the same metric bytes as the CSV it came from.
func TestCOCOTruthIn(t *testing.T) {
	for _, set := range []string{"coco", "multi", "edge"} {
		first := t.TempDir()
		cfg := setCfg(set, first)
		cfg.COCOOut = true
		if codes := runLocal(t, 2, cfg); codes[0] != 0 {
			t.Fatalf("%s: exit %v", set, codes)
		}
		want, _ := reportMetrics(t, first)
		second := t.TempDir()
		cfg = setCfg(set, second)
		cfg.CSV = filepath.Join(first, output.COCOTruthFile)
		if codes := runLocal(t, 2, cfg); codes[0] != 0 {
			t.Fatalf("%s from COCO JSON: exit %v", set, codes)
		}
		if got, _ := reportMetrics(t, second); !bytes.Equal(got, want) {
			t.Errorf("%s: metrics from the COCO truth\n%s\ndiffer from the CSV's\n%s", set, got, want)
		}
	}
	bad := filepath.Join(t.TempDir(), "bad.json")
	os.WriteFile(bad, []byte(`{"images": [{"id": 1, "file_name": "a.png"}], "annotations": [{"id": 1, "image_id": 1, "category_id": 9, "bbox": [0, 0, 5, 5]}], "categories": []}`), 0o644)
	cfg := setCfg("single", t.TempDir())
	cfg.CSV = bad
	if codes := runLocal(t, 1, cfg); codes[0] != ExitInput {
		t.Errorf("unknown category: exit %v, want %d", codes, ExitInput)
	}
}

// COCO truth is checked like CSV before anything runs: an annotation
// without a bbox, or a short one, is exit 3 naming the file and the
// annotation id; a bbox of 1e308 is refused at input (it published
// report.json and both CSVs, then exited 1 writing coco_truth.json).
// Nothing is published.
func TestCOCOTruthCheckedAtInput(t *testing.T) {
	dir := t.TempDir()
	for i, ann := range []string{`"bbox": [10, 10, 40]`, `"area": 5`, `"bbox": [0, 0, 1e308, 1e308]`} {
		truth := filepath.Join(dir, fmt.Sprintf("t%d.json", i))
		os.WriteFile(truth, []byte(`{"images": [{"id": 1, "file_name": "a.png"}, {"id": 2, "file_name": "b.png"}], "categories": [{"id": 1, "name": "Tree"}],
 "annotations": [{"id": 5, "image_id": 2, "category_id": 1, "bbox": [1, 1, 5, 5]}, {"id": 31, "image_id": 1, "category_id": 1, `+ann+`}]}`), 0o644)
		preds := filepath.Join(dir, "p.csv")
		os.WriteFile(preds, []byte("image_path,xmin,ymin,xmax,ymax,label,score\na.png,0,0,10,10,Tree,0.5\n"), 0o644)
		out := t.TempDir()
		cfg := EvalConfig{CSV: truth, Predictions: preds, Out: out, IoUThreshold: 0.4, COCOOut: true, HTML: &htmlreport.Options{}}
		var stderr bytes.Buffer
		codes := runLocalCtx(t, 2, cfg, func(int) context.Context { return context.Background() }, &stderr)
		if codes[0] != ExitInput || codes[1] != ExitInput || !strings.Contains(stderr.String(), filepath.Base(truth)+": annotation 31") {
			t.Errorf("%s: codes %v\n%s", ann, codes, stderr.String())
		}
		if present := outNames.Present(out); len(present) > 0 && present[0] != outdir.ManifestFile {
			t.Errorf("%s: published %v", ann, present)
		}
	}
}

// The outputs are one publication: when a later file of the set (the
// COCO files, report.html) fails, nothing is published and no staged file
// is left; report.json is never there without the others.
func TestFailedStagePublishesNothing(t *testing.T) {
	out := t.TempDir()
	cfg := setCfg("three", out)
	cfg.COCOOut = true
	var calls int
	err := writeOutputs(cfg, reportRecord{metrics: []byte("{}")}, nil, nil, box.LabelMap{}, metrics.Result{},
		func(rj []byte) ([]outdir.Staged, error) {
			calls++
			set, err := output.StageCOCO(cfg.Out, nil, nil, box.LabelMap{})
			if err != nil || len(set) != 2 || !bytes.Contains(rj, []byte(`"metrics": {}`)) {
				t.Fatalf("%v %v", set, err)
			}
			return set, errors.New("report.html: planted failure")
		})
	if err == nil || calls != 1 {
		t.Fatalf("err %v, calls %d", err, calls)
	}
	ents, _ := os.ReadDir(out)
	for _, e := range ents {
		t.Errorf("left in --out: %s", e.Name())
	}
}

// iscrowd: 1 is counted as pycocotools and faster-coco-eval count it in
// mAP: a crowd region is ignored truth, a detection inside it (by the
// detection's own area) is neither a true nor a false positive, and it
// takes any number of detections. The fixture (tools/coco/crowd.py) holds
// the peers' 12 stats on a dataset with crowd regions; canopy's COCO
// family equals torchmetrics' (faster_coco_eval backend, iscrowd passed)
// bit for bit. DeepForest's recall/precision and torchmetrics' IoU have no
// notion of crowd: they count the same boxes as ordinary truth, exactly as
// the file with every iscrowd set to 0.
func TestCOCOCrowdAsPeers(t *testing.T) {
	var fx struct {
		Meta       map[string]string `json:"meta"`
		Names      []string          `json:"stat_names"`
		Dataset    json.RawMessage   `json:"dataset"`
		Detections []struct {
			ImageID    int64      `json:"image_id"`
			CategoryID int64      `json:"category_id"`
			BBox       [4]float64 `json:"bbox"`
			Score      float64    `json:"score"`
		} `json:"detections"`
		Torchmetrics []float64 `json:"torchmetrics_faster_coco_eval"`
		Without      []float64 `json:"pycocotools_without_crowd"`
		Agree        bool      `json:"agree"`
	}
	testfile.ReadJSON(t, filepath.Join("..", "testdata", "golden", "cococrowd", "crowd.json"), &fx)
	if !fx.Agree || fx.Meta["pycocotools"] == "" || len(fx.Torchmetrics) != 12 {
		t.Fatalf("fixture: %+v", fx.Meta)
	}
	var ds dataset.COCODataset
	if err := json.Unmarshal(fx.Dataset, &ds); err != nil {
		t.Fatal(err)
	}
	name := map[int64]string{}
	for _, c := range ds.Categories {
		name[c.ID] = c.Name
	}
	file := map[int64]string{}
	for _, im := range ds.Images {
		file[im.ID] = im.FileName
	}
	dir := t.TempDir()
	var p strings.Builder
	p.WriteString("image_path,xmin,ymin,xmax,ymax,label,score\n")
	for _, d := range fx.Detections {
		b := d.BBox
		fmt.Fprintf(&p, "%s,%v,%v,%v,%v,%s,%v\n", file[d.ImageID], b[0], b[1], b[0]+b[2], b[1]+b[3], name[d.CategoryID], d.Score)
	}
	preds := filepath.Join(dir, "p.csv")
	os.WriteFile(preds, []byte(p.String()), 0o644)
	crowdJSON := filepath.Join(dir, "crowd.json")
	os.WriteFile(crowdJSON, fx.Dataset, 0o644)
	for i := range ds.Annotations {
		ds.Annotations[i].IsCrowd = 0
	}
	plain, _ := json.Marshal(ds)
	plainJSON := filepath.Join(dir, "plain.json")
	os.WriteFile(plainJSON, plain, 0o644)

	metricsOf := func(truth string) map[string]any {
		out := t.TempDir()
		if codes := runLocal(t, 2, EvalConfig{CSV: truth, Predictions: preds, Out: out, IoUThreshold: 0.4}); codes[0] != 0 {
			t.Fatalf("%s: %v", truth, codes)
		}
		_, m := reportMetrics(t, out)
		return m
	}
	crowd, noCrowd := metricsOf(crowdJSON), metricsOf(plainJSON)
	for k, key := range fx.Names {
		if got, ok := crowd[key].(float64); !ok || got != fx.Torchmetrics[k] {
			t.Errorf("%s: canopy %v, torchmetrics %v (pycocotools without crowd %v)", key, crowd[key], fx.Torchmetrics[k], fx.Without[k])
		}
	}
	if crowd["map"] == noCrowd["map"] {
		t.Errorf("map %v with and without crowd: the fixture does not exercise the rule", crowd["map"])
	}
	for key, v := range noCrowd {
		if strings.HasPrefix(key, "map") || strings.HasPrefix(key, "mar") {
			continue
		}
		if fmt.Sprint(crowd[key]) != fmt.Sprint(v) {
			t.Errorf("%s: %v with crowd regions, %v counting them as ordinary boxes: DeepForest's metrics have no crowd", key, crowd[key], v)
		}
	}
	if _, ok := crowd["box_recall"]; !ok {
		t.Fatal("no box_recall")
	}
}
