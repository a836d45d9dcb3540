package treeformer

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/canopy-hpc/canopy/infer"
	"github.com/canopy-hpc/canopy/infer/safetensors"
	"github.com/canopy-hpc/canopy/infer/tile"
)

// writeFolder writes a hub folder of the small model's seeded weights.
func writeFolder(t *testing.T, config string, edit func(map[string]safetensors.Tensor)) string {
	t.Helper()
	dir := t.TempDir()
	ts := map[string]safetensors.Tensor{}
	for k, v := range seeded(t, small) {
		ts[k] = safetensors.Tensor{Shape: v.Shape, Data: v.Data}
	}
	if edit != nil {
		edit(ts)
	}
	if err := safetensors.Write(filepath.Join(dir, "model.safetensors"), ts, "F32", nil); err != nil {
		t.Fatal(err)
	}
	if config != "" {
		if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(config), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestLoadRefusals: each bad folder is a model error naming its cause.
func TestLoadRefusals(t *testing.T) {
	ok := `{"backbone": "OpenGVLab/pvt_v2_b3", "num_classes": 1, "label_dict": {"Tree": 0}}`
	for _, c := range []struct {
		name, config, want string
		edit               func(map[string]safetensors.Tensor)
	}{
		{"b2", `{"backbone": "OpenGVLab/pvt_v2_b2", "label_dict": {"Tree": 0}}`, "pvt_v2_b2 is not tabulated", nil},
		{"unknown", `{"backbone": "resnet50", "label_dict": {"Tree": 0}}`, "unknown backbone", nil},
		{"no config", "", "config.json", nil},
		{"no backbone", `{"label_dict": {"Tree": 0}}`, "no backbone", nil},
		{"two classes", `{"backbone": "pvt_v2_b3", "num_classes": 2, "label_dict": {"Tree": 0}}`, "num_classes 2", nil},
		{"no labels", `{"backbone": "pvt_v2_b3"}`, "no label_dict", nil},
		// the one-block weights under the b3 name: block 1 of each stage is missing
		{"depth", ok, "missing tensor backbone.encoder.layers.0.blocks.1.", nil},
		{"nan", ok, "NaN", func(ts map[string]safetensors.Tensor) {
			ts["proj.0.bias"].Data[3] = float32(math.NaN())
		}},
	} {
		dir := writeFolder(t, c.config, c.edit)
		_, _, _, err := Load(dir, nil)
		if err == nil || !strings.Contains(err.Error(), c.want) || !errors.Is(err, infer.ErrModel) {
			t.Errorf("%s: %v, want a model error with %q", c.name, err, c.want)
		}
	}
	if _, _, _, err := Load(filepath.Join(t.TempDir(), "x.bin"), nil); err == nil || !errors.Is(err, infer.ErrModel) {
		t.Errorf("x.bin: %v", err)
	}
}

func TestProbe(t *testing.T) {
	dir := writeFolder(t, `{"backbone": "pvt_v2_b3"}`, nil)
	if !Probe(dir) {
		t.Fatal("a TreeFormer folder is not recognised")
	}
	other := writeFolder(t, "", func(ts map[string]safetensors.Tensor) {
		ts["backbone.body.conv1.weight"] = ts[Marker]
		delete(ts, Marker)
	})
	if Probe(other) || Probe(t.TempDir()) || Probe(filepath.Join(dir, "config.json")) {
		t.Fatal("a non-TreeFormer is recognised")
	}
}

// TestLoadHubAndCheckpointSame: DeepForest's hub folder and its Lightning
// .ckpt of the same model give the same labels and the same bytes.
func TestLoadHubAndCheckpointSame(t *testing.T) {
	d := refDir(t)
	hub, hc, _, err := Load(filepath.Join(d, "hub"), nil)
	if err != nil {
		t.Fatal(err)
	}
	ck, cc, _, err := Load(filepath.Join(d, "model.ckpt"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !Probe(filepath.Join(d, "hub")) || !Probe(filepath.Join(d, "model.ckpt")) {
		t.Fatal("Probe misses DeepForest's files")
	}
	if hc.LabelDict["Tree"] != 0 || len(hc.LabelDict) != 1 || cc.LabelDict["Tree"] != 0 || len(cc.LabelDict) != 1 {
		t.Fatalf("labels %v (%s) and %v (%s)", hc.LabelDict, hc.LabelsFrom, cc.LabelDict, cc.LabelsFrom)
	}
	if hc.Format != "folder" || cc.Format != "lightning-checkpoint" {
		t.Fatalf("formats %q %q", hc.Format, cc.Format)
	}
	im := readImage(t, filepath.Join(d, "img_0000.png"))
	win := tile.Window{X: 300, Y: 200, W: 96, H: 64}
	a, err := NewRunner(hub, 2).Forward(im, win)
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewRunner(ck, 1).Forward(im, win)
	if err != nil {
		t.Fatal(err)
	}
	for i := range a.Map {
		if math.Float32bits(a.Map[i]) != math.Float32bits(b.Map[i]) {
			t.Fatalf("element %d: %v from the folder, %v from the checkpoint", i, a.Map[i], b.Map[i])
		}
	}
}
