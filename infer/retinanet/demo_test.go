package retinanet

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/canopy-hpc/canopy/infer/nn"
	"github.com/canopy-hpc/canopy/infer/safetensors"
)

// demoDir is the demo model folder (float16 weights, a config.json).
var demoDir = filepath.Join("..", "..", "testdata", "models", "canopy-demo-r18")

// demoModel is the demo model folder's network: its model.safetensors
// with the options its config.json sets, as the demo fixture records them
// (goldenOptions of demo.json's config, under torchvision's current size
// rule). Reading the folder itself is infer/modelfile's LoadFolder, which
// gives this same model (modelfile's TestLoadFolderDemo).
func demoModel(t testing.TB) (*Model, error) {
	t.Helper()
	st := filepath.Join(demoDir, "model.safetensors")
	b, err := os.ReadFile(st)
	if err != nil {
		return nil, err
	}
	ts, _, err := safetensors.Parse(st, b)
	if err != nil {
		return nil, err
	}
	w := nn.Weights{}
	for k, x := range ts {
		w[k] = nn.Tensor{Shape: x.Shape, Data: x.Data}
	}
	opt := goldenOptions(t, readGolden(t, "demo.json"))
	opt.Resize = DefaultOptions().Resize
	return New(w, opt)
}
