package jobs

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/canopy-hpc/canopy/internal/testsupport/torchckpt"
)

// overflowCrops are the parity crop models with finite weights whose
// logits overflow (fc.weight all 3e38), in every file form.
func overflowCrops(t *testing.T) torchckpt.CropFiles {
	t.Helper()
	k, err := torchckpt.CropClasses("..")
	if err != nil {
		t.Fatal(err)
	}
	w := make([]float32, k*2048)
	for i := range w {
		w[i] = 3e38
	}
	huge, err := torchckpt.CropPlanted("..", t.TempDir(), map[string][]float32{"fc.weight": w})
	if err != nil {
		t.Fatal(err)
	}
	return huge
}

// readJSONFile decodes the JSON file path into v.
func readJSONFile(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err == nil {
		err = json.Unmarshal(b, v)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// TestNonFiniteCropModels (issue 42, F2): predict --tile and plain
// predict with a crop model that holds a NaN weight, in each file form
// (.ckpt, .pt, hub folder), and with finite weights whose logits overflow
// (fc.weight all 3e38), exit 4 as the detector's non-finite weights and
// outputs do: naming the tensor, or the crop model and the detection. No
// prediction file is published (it held class 0 with score NaN on every
// row).
func TestNonFiniteCropModels(t *testing.T) {
	pf, hub := cropParity(t)
	k, err := torchckpt.CropClasses("..")
	if err != nil {
		t.Fatal(err)
	}
	bias := make([]float32, k)
	bias[1] = float32(math.NaN())
	nan, err := torchckpt.CropPlanted("..", t.TempDir(), map[string][]float32{"fc.bias": bias})
	if err != nil {
		t.Fatal(err)
	}
	huge := overflowCrops(t)
	ld := filepath.Join(t.TempDir(), "labels.csv")
	os.WriteFile(ld, []byte("label,id\nAlive,0\nDead,1\nSnag,2\n"), 0o644)
	images := t.TempDir()
	raw, err := os.ReadFile(pf.Tile)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(images, "a.png"), raw, 0o644)
	runs := map[string][]string{
		"predict --tile": {"predict", "--tile", "--raster", pf.Tile, "--patch-size", "300", "--model", hub, "--threads", "1"},
		"predict":        {"predict", "--images", images, "--model", hub, "--threads", "1"},
	}
	cases := []struct {
		name  string
		model []string
		want  string
	}{
		{"NaN weight, checkpoint", []string{"--crop-model", nan.Ckpt}, "fc.bias holds NaN at index 1"},
		{"NaN weight, state dict", []string{"--crop-model", nan.PT, "--crop-label-dict", ld}, "fc.bias holds NaN at index 1"},
		{"NaN weight, hub folder", []string{"--crop-model", nan.Hub}, "fc.bias holds NaN at index 1"},
		{"overflowing logits, checkpoint", []string{"--crop-model", huge.Ckpt}, "--crop-model " + huge.Ckpt + ", detection "},
		{"overflowing logits, hub folder", []string{"--crop-model", huge.Hub}, "logits for crop"},
	}
	i := 0
	for run, base := range runs {
		for _, c := range cases {
			i++
			out := filepath.Join(t.TempDir(), "o"+strconv.Itoa(i))
			code, stderr := runArgs(t, append(append(append([]string{}, base...), c.model...), "--out", out)...)
			if code != ExitModel || !strings.Contains(stderr, c.want) {
				t.Errorf("%s, %s: exit %d %q; want %d naming %q", run, c.name, code, strings.TrimSpace(stderr), ExitModel, c.want)
			}
			for _, f := range []string{"predictions.csv", "report.json"} {
				if _, err := os.Stat(filepath.Join(out, f)); err == nil {
					t.Errorf("%s, %s: %s published", run, c.name, f)
				}
			}
		}
	}
}
