package jobs

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/canopy-hpc/canopy/infer/cuda"
	"github.com/canopy-hpc/canopy/internal/cropstage"
)

// smallCropHub is the parity ResNet-50 hub folder with cropmodel.resize
// [32, 32] (the host shim is slow at 224×224).
func smallCropHub(t *testing.T) string {
	t.Helper()
	pf, _ := cropParity(t)
	return resizedHub(t, pf.Hub)
}

// resizedHub is a copy of the hub folder src with cropmodel.resize
// [32, 32].
func resizedHub(t *testing.T, src string) string {
	t.Helper()
	pf := struct{ Hub string }{src}
	dir := filepath.Join(t.TempDir(), "crop-hub-32")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(pf.Hub, "model.safetensors"))
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, "model.safetensors"), raw, 0o644)
	}
	var cfg map[string]any
	if err == nil {
		raw, err = os.ReadFile(filepath.Join(pf.Hub, "config.json"))
	}
	if err == nil {
		err = json.Unmarshal(raw, &cfg)
	}
	cm, ok := cfg["cropmodel"].(map[string]any)
	if err != nil || !ok {
		t.Fatalf("the parity hub folder's config.json: %v", err)
	}
	cm["resize"] = []int{32, 32}
	raw, _ = json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(dir, "config.json"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestCropsOnTheDetectorsGPU: eval --device cuda --crop-model (a fake GPU:
// the host shim) classifies the crops on the detector's GPU engine
// (report: run.crops.device and the model's device name it), --device cpu
// on the CPU engine; the crop columns are there in both.
func TestCropsOnTheDetectorsGPU(t *testing.T) {
	withFakeGPUs(t, 1)
	hub := smallCropHub(t)
	for _, dev := range []string{"cuda", "cpu"} {
		out := t.TempDir()
		cfg := gpuCfg(t, out)
		cfg.Model.Device = device(dev)
		if dev == "cuda" {
			cfg.Model.Precision, cfg.Model.PrecisionSet = cuda.Exact, true
		}
		cfg.Model.ScoreThresh = 0.3 // a few crops: the shim runs one CUDA thread at a time
		cfg.Crops = cropstage.CropConfig{Models: []string{hub}}
		if codes := runLocal(t, 1, cfg); codes[0] != 0 {
			t.Fatalf("--device %s: exit %v", dev, codes)
		}
		var rep struct {
			Run struct {
				CropModels []cropstage.ModelInfo `json:"crop_models"`
				Crops      cropstage.Stats       `json:"crops"`
			} `json:"run"`
		}
		readJSONFile(t, filepath.Join(out, "report.json"), &rep)
		want := "cpu"
		if dev == "cuda" {
			want = "cuda exact on Fake GPU"
		}
		if rep.Run.Crops.Device != want || len(rep.Run.CropModels) != 1 || rep.Run.CropModels[0].Device != want {
			t.Errorf("--device %s: crops.device %q, crop_models %+v; want %q", dev, rep.Run.Crops.Device, rep.Run.CropModels, want)
		}
		preds, err := os.ReadFile(filepath.Join(out, "predictions.csv"))
		if err != nil || !bytes.Contains(bytes.SplitN(preds, []byte("\n"), 2)[0], []byte("cropmodel_label")) {
			t.Errorf("--device %s: predictions.csv without crop columns (%v)", dev, err)
		}
		t.Logf("--device %s: %d crops classified on %s", dev, rep.Run.Crops.Classified, rep.Run.Crops.Device)
		if rep.Run.Crops.Classified == 0 {
			t.Errorf("--device %s: no crops classified: the test shows nothing", dev)
		}
	}
}
