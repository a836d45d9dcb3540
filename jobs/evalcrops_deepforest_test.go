package jobs

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/canopy-hpc/canopy/internal/output"
	"github.com/canopy-hpc/canopy/internal/pipeline/evalcrops"
	"github.com/canopy-hpc/canopy/internal/testsupport/approx"
	"github.com/canopy-hpc/canopy/internal/testsupport/torchckpt"
)

// cropTableFixture is the part of metrics/testdata/croptable.json
// (tools/cropmodel/validate.py) the end-to-end test reads.
type cropTableFixture struct {
	LabelDict map[string]int `json:"label_dict"`
	Samples   [][2]any
	FCBias    []uint32 `json:"fc_bias"`
	Logits    []uint32
	Table     map[string]float64
}

// writeValidationCropModel rebuilds the crop model DeepForest validated in
// the fixture: its save_pretrained folder (jobs/testdata/cropmodel: the
// safetensors header and config.json), the test weights (seed 36) and the
// fixture's fc.bias.
func writeValidationCropModel(t *testing.T, dir string, fx cropTableFixture) {
	t.Helper()
	hdr, err := os.ReadFile("testdata/cropmodel/hub-header.json")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := os.ReadFile("testdata/cropmodel/hub-config.json")
	if err != nil {
		t.Fatal(err)
	}
	bias := make([]float32, len(fx.FCBias))
	for i, u := range fx.FCBias {
		bias[i] = math.Float32frombits(u)
	}
	os.MkdirAll(dir, 0o755)
	if err := torchckpt.SafetensorsFrom(hdr, filepath.Join(dir, "model.safetensors"), 36, map[string][]float32{"fc.bias": bias}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestEvalCropsDeepForest: canopy eval-crops with the crop model DeepForest
// 2.1.0 validated (tools/cropmodel/validate.py: load_from_disk on
// jobs/testdata/cropfolder, trainer.validate on one CPU device) gives its
// table: every count-based metric equal, val_loss within 1e-6 (canopy's
// network is not torch's arithmetic: its logits differ in the last bits);
// crops.csv the same bytes on 1 and 3 ranks.
func TestEvalCropsDeepForest(t *testing.T) {
	b, err := os.ReadFile("../metrics/testdata/croptable.json")
	if err != nil {
		t.Fatal(err)
	}
	var fx cropTableFixture
	if err := json.Unmarshal(b, &fx); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	model := filepath.Join(dir, "crop-hub")
	writeValidationCropModel(t, model, fx)
	var ref []byte
	for _, ranks := range []int{1, 3} {
		out := filepath.Join(dir, "out", string(rune('0'+ranks)))
		cfg := evalcrops.Config{Folder: cropTestFolder, Out: out, CropModel: model, BatchSize: 5, Threads: 1}
		for r, err := range runEvalCrops(t, ranks, cfg) {
			if err != nil {
				t.Fatalf("%d ranks: rank %d: %v", ranks, r, err)
			}
		}
		var rep struct {
			Metrics       map[string]float64
			LossBatch     int    `json:"loss_batch_size"`
			LossBatchFrom string `json:"loss_batch_size_from"`
		}
		raw, _ := os.ReadFile(filepath.Join(out, "report.json"))
		if err := json.Unmarshal(raw, &rep); err != nil {
			t.Fatal(err)
		}
		csv, _ := os.ReadFile(filepath.Join(out, output.CropsCSV))
		if rep.LossBatch != 4 || rep.LossBatchFrom != "crop model cropmodel.batch_size" {
			t.Errorf("loss batch %d from %q; want the hub config's 4", rep.LossBatch, rep.LossBatchFrom)
		}
		if ref == nil {
			ref = csv
			// Each crop's predicted label is the argmax of torch's logits.
			names := make([]string, len(fx.LabelDict))
			for k, v := range fx.LabelDict {
				names[v] = k
			}
			lines := strings.Split(strings.TrimSpace(string(csv)), "\n")[1:]
			if len(lines) != len(fx.Samples) {
				t.Fatalf("crops.csv has %d crops, DeepForest %d", len(lines), len(fx.Samples))
			}
			for i, line := range lines {
				f := strings.Split(line, ",")
				row := fx.Logits[i*len(names) : (i+1)*len(names)]
				best := 0
				for c := range row {
					if math.Float32frombits(row[c]) > math.Float32frombits(row[best]) {
						best = c
					}
				}
				if f[0] != fx.Samples[i][0].(string) || f[2] != names[best] {
					t.Errorf("crop %d: %s predicted %s; DeepForest's %s, torch's argmax %s", i, f[0], f[2], fx.Samples[i][0], names[best])
				}
			}
			if len(rep.Metrics) != len(fx.Table) {
				t.Errorf("%d metrics, DeepForest's table %d", len(rep.Metrics), len(fx.Table))
			}
			for k, want := range fx.Table {
				got, ok := rep.Metrics[k]
				switch {
				case !ok:
					t.Errorf("%s: missing", k)
				case k == "val_loss":
					if approx.Far(approx.Diff(got, want), 1e-6) {
						t.Errorf("val_loss %v, Lightning %v", got, want)
					}
					t.Logf("val_loss %v, Lightning %v (difference %.3g)", got, want, got-want)
				case got != want:
					t.Errorf("%s: %v, DeepForest %v", k, got, want)
				}
			}
		} else if !bytes.Equal(csv, ref) {
			t.Errorf("%d ranks: crops.csv differs from 1 rank's", ranks)
		}
	}
}
