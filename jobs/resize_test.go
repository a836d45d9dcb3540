package jobs

import (
	"bytes"
	"context"
	"encoding/json"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/canopy-hpc/canopy/infer/retinanet"
	"github.com/canopy-hpc/canopy/internal/pipeline/predict"
	"github.com/canopy-hpc/canopy/internal/testsupport/forest"
	"github.com/canopy-hpc/canopy/mpi"
	"github.com/canopy-hpc/canopy/mpi/local"
)

// --resize selects the transform's size rule and --blend its rounding; the
// report and the manifest name them, and a 1500×900 image (400×240 under
// torchvision ≥ 0.16, 399×239 under ≤ 0.15 at the test model's 400/400)
// gives other detections.
func TestPredictResizeRule(t *testing.T) {
	model, _, _ := testModelSet(t)
	dir := t.TempDir()
	img, _ := forest.Generate(5, 2, 1500, 900)
	f, err := os.Create(filepath.Join(dir, "wide.png"))
	if err != nil {
		t.Fatal(err)
	}
	png.Encode(f, img)
	f.Close()
	var preds [2][]byte
	for i, rule := range []retinanet.ResizeRule{retinanet.ResizeTorchvision, retinanet.ResizeTorchvision015} {
		out := t.TempDir()
		blend := retinanet.BlendRule(i) // fma with the first, no-fma with the second
		cfg := PredictConfig{Images: dir, Out: out, BatchSize: 1,
			Model: ModelConfig{Spec: model, Threads: 1, ScoreThresh: -1, NMSThresh: -1, Device: device("cpu"), Resize: rule, Blend: blend}}
		for r, err := range local.Run(1, func(c mpi.Comm) error { return predict.Run(context.Background(), c, cfg) }) {
			if err != nil {
				t.Fatalf("%s: rank %d: %v", rule, r, err)
			}
		}
		var rep struct {
			Model struct {
				Resize string `json:"resize"`
				Blend  string `json:"blend"`
			} `json:"model"`
		}
		b, _ := os.ReadFile(filepath.Join(out, "report.json"))
		if err := json.Unmarshal(b, &rep); err != nil {
			t.Fatal(err)
		}
		if rep.Model.Resize != rule.String() || rep.Model.Blend != blend.String() {
			t.Errorf("report.json model.resize %q, blend %q, want %q, %q", rep.Model.Resize, rep.Model.Blend, rule, blend)
		}
		preds[i], _ = os.ReadFile(filepath.Join(out, "predictions.csv"))
		if bytes.Count(preds[i], []byte("\n")) < 2 {
			t.Fatalf("%s: no detections to compare", rule)
		}
	}
	if bytes.Equal(preds[0], preds[1]) {
		t.Error("the two resize rules give the same predictions on a 1500×900 image")
	}
}

func TestResizeFlag(t *testing.T) {
	for _, c := range []struct {
		flag string
		args []string
	}{
		{"--resize", []string{"predict", "--model", "m", "--images", "d", "--resize", "torchvision-0.14"}},
		{"--resize", []string{"eval", "--csv", "x.csv", "--predictions", "p.csv", "--resize", "torchvision"}},
		{"--blend", []string{"predict", "--model", "m", "--images", "d", "--blend", "avx512"}},
		{"--blend", []string{"eval", "--csv", "x.csv", "--predictions", "p.csv", "--blend", "fma"}},
	} {
		var so, se bytes.Buffer
		code := MainWith(context.Background(), append([]string{"canopy"}, c.args...), &so, &se, nil)
		if code != ExitUsage || !strings.Contains(se.String(), c.flag) {
			t.Errorf("%v: exit %d, want %d naming %s; stderr %s", c.args, code, ExitUsage, c.flag, se.String())
		}
	}
}
