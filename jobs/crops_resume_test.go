package jobs

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/canopy-hpc/canopy/internal/cropstage"
	"github.com/canopy-hpc/canopy/internal/pipeline/predict"
	"github.com/canopy-hpc/canopy/internal/testsupport/torchckpt"
	"github.com/canopy-hpc/canopy/mpi"
)

func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestTileResumeChecksCropModels (issue 42, F1): a predict --tile run with
// two crop models (a hub folder with its own labels, a bare state dict
// with --crop-label-dict), then --resume with each crop model input
// changed in place: the hub folder's weights replaced at the same path,
// the --crop-label-dict file rewritten with the ids swapped, the hub
// folder's config.json given another expand (the transform). Each resume
// is refused with exit 2 before any work, naming the crop model and what
// changed, and leaves the folder as it was; with the inputs put back, the
// same --resume runs (exit 0). The manifest kept only the paths: each of
// these resumed, the rasters finished before the stop keeping the old
// model's labels.
func TestTileResumeChecksCropModels(t *testing.T) {
	pf, det := cropParity(t)
	k, err := torchckpt.CropClasses("..")
	if err != nil {
		t.Fatal(err)
	}
	other, err := torchckpt.CropPlanted("..", t.TempDir(), map[string][]float32{"fc.bias": make([]float32, k)})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	hub := filepath.Join(dir, "hub")
	os.MkdirAll(hub, 0o755)
	for _, f := range []string{"config.json", "model.safetensors"} {
		copyFile(t, filepath.Join(pf.Hub, f), filepath.Join(hub, f))
	}
	r18 := filepath.Join(dir, "r18.pt")
	copyFile(t, pf.R18, r18)
	labels := filepath.Join(dir, "labels.csv")
	os.WriteFile(labels, []byte("label,id\nhealthy,0\nsick,1\n"), 0o644)
	out := filepath.Join(t.TempDir(), "out")
	args := []string{"predict", "--tile", "--raster", pf.Tile, "--patch-size", "300", "--model", det, "--threads", "1",
		"--crop-model", hub, "--crop-model", r18, "--crop-label-dict", labels, "--out", out}
	if code, stderr := runArgs(t, args...); code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	before := snapshot(t, out)
	cfgJSON, err := os.ReadFile(filepath.Join(hub, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	expand := bytes.Replace(cfgJSON, []byte(`"expand": 0`), []byte(`"expand": 2`), 1)
	if bytes.Equal(expand, cfgJSON) {
		t.Fatal(`the hub config has no "expand": 0 to change`)
	}
	cases := []struct {
		name   string
		change func()
		put    func()
		want   []string
	}{
		{"crop model replaced at the same path",
			func() {
				copyFile(t, filepath.Join(other.Hub, "model.safetensors"), filepath.Join(hub, "model.safetensors"))
			},
			func() {
				copyFile(t, filepath.Join(pf.Hub, "model.safetensors"), filepath.Join(hub, "model.safetensors"))
			},
			[]string{"crop model 1 (" + hub + ") weights_sha256"}},
		{"--crop-label-dict replaced",
			func() { os.WriteFile(labels, []byte("label,id\nsick,0\nhealthy,1\n"), 0o644) },
			func() { os.WriteFile(labels, []byte("label,id\nhealthy,0\nsick,1\n"), 0o644) },
			[]string{"crop model 2 (" + r18 + ") labels: [\"healthy\",\"sick\"] in the run to resume, [\"sick\",\"healthy\"] now", "crop model 2 (" + r18 + ") label_dict_sha256"}},
		{"transform changed",
			func() { os.WriteFile(filepath.Join(hub, "config.json"), expand, 0o644) },
			func() { os.WriteFile(filepath.Join(hub, "config.json"), cfgJSON, 0o644) },
			[]string{"crop model 1 (" + hub + ") transform.expand: 0 in the run to resume, 2 now"}},
	}
	for _, c := range cases {
		c.change()
		code, stderr := runArgs(t, append(args, "--resume")...)
		c.put()
		for _, w := range c.want {
			if code != ExitUsage || !strings.Contains(stderr, w) {
				t.Errorf("%s: exit %d, want %d naming %q:\n%s", c.name, code, ExitUsage, w, stderr)
			}
		}
		sameTree(t, c.name, before, snapshot(t, out))
	}
	if code, stderr := runArgs(t, append(args, "--resume")...); code != 0 {
		t.Errorf("--resume with the run's own crop models: exit %d\n%s", code, stderr)
	}
}

// TestPredictResumeTakesCropModelsGivenNow (issue 42, F1, plain predict):
// plain predict saves detections, not crop labels, and classifies every
// crop at the end, so a --resume with another --crop-label-dict (the ids
// swapped) is not refused: every row gets the labels given now, the same
// bytes as an uninterrupted run with them; no row keeps the stopped run's.
func TestPredictResumeTakesCropModelsGivenNow(t *testing.T) {
	pf, _ := cropParity(t)
	dir := t.TempDir()
	cmd := exec.Command("go", "run", "./cmd/forestgen", "-out", dir, "-n", "4", "-sizes", "300x300", "-seed", "5")
	cmd.Dir = ".."
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("forestgen: %v\n%s", err, out)
	}
	os.Remove(filepath.Join(dir, "annotations.csv"))
	ld := filepath.Join(t.TempDir(), "labels.csv")
	cfgWith := func(out string) PredictConfig {
		return PredictConfig{Images: dir, BatchSize: 1, Out: out, Model: tileCfg("", "").Model,
			Crops: cropstage.CropConfig{Models: []string{pf.R18}, LabelDicts: []string{ld}}}
	}
	run := func(n int, cfg PredictConfig, interrupt string) ([]int, string) {
		t.Helper()
		return runStoppable(t, n, interrupt, func(ctx context.Context, c mpi.Comm, _ io.Writer) error {
			return predict.Run(ctx, c, cfg)
		})
	}
	os.WriteFile(ld, []byte("label,id\nsick,0\nhealthy,1\n"), 0o644)
	ref := cfgWith(t.TempDir())
	if codes, msg := run(1, ref, ""); codes[0] != ExitOK {
		t.Fatalf("uninterrupted run: exit %v\n%s", codes, msg)
	}
	want, err := os.ReadFile(filepath.Join(ref.Out, "predictions.csv"))
	if err != nil || !bytes.Contains(want, []byte(",sick,")) && !bytes.Contains(want, []byte(",healthy,")) {
		t.Fatalf("reference predictions.csv: %v\n%s", err, want)
	}
	os.WriteFile(ld, []byte("label,id\nhealthy,0\nsick,1\n"), 0o644)
	stop := cfgWith(t.TempDir())
	if codes, msg := run(3, stop, "0:1"); codes[0] != ExitResumable {
		t.Fatalf("stopped run: exit %v, want %d\n%s", codes, ExitResumable, msg)
	}
	os.WriteFile(ld, []byte("label,id\nsick,0\nhealthy,1\n"), 0o644)
	stop.Resume = true
	if codes, msg := run(2, stop, ""); codes[0] != ExitOK {
		t.Fatalf("--resume with the label dict changed: exit %v\n%s", codes, msg)
	}
	if got, err := os.ReadFile(filepath.Join(stop.Out, "predictions.csv")); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("the resumed predictions.csv is not the run with the labels given now (%v):\n%s\nwant:\n%s", err, got, want)
	}
	b, _ := os.ReadFile(filepath.Join(stop.Out, "report.json"))
	if !bytes.Contains(b, []byte(`"images_from_parts": `)) || bytes.Contains(b, []byte(`"images_from_parts": 0`)) {
		t.Fatalf("the resume took no image from the part files: %s", b)
	}
}
