package jobs

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
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
		for f, want := range map[string]string{cocoTruthFile: g.Truth, cocoPredFile: g.Preds} {
			data, err := os.ReadFile(filepath.Join(out, f))
			if err != nil {
				t.Fatal(err)
			}
			if got := sha256Hex(data); got != want {
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
		cfg.CSV = filepath.Join(first, cocoTruthFile)
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
