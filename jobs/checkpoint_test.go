package jobs

import (
	"bytes"
	"fmt"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/canopy-hpc/canopy/internal/testsupport/forest"
	"github.com/canopy-hpc/canopy/internal/testsupport/torchckpt"
)

// dfSet is one 400×400 forest image with its truth, and a label map.
func dfSet(t *testing.T) (csv, labels string) {
	t.Helper()
	dir := t.TempDir()
	img, boxes := forest.Generate(28, 0, 400, 400)
	f, err := os.Create(filepath.Join(dir, "f0.png"))
	if err != nil {
		t.Fatal(err)
	}
	if err := png.Encode(f, img); err != nil {
		t.Fatal(err)
	}
	f.Close()
	var b strings.Builder
	b.WriteString("image_path,xmin,ymin,xmax,ymax,label\n")
	for _, bx := range boxes {
		fmt.Fprintf(&b, "f0.png,%d,%d,%d,%d,Tree\n", bx.XMin, bx.YMin, bx.XMax, bx.YMax)
	}
	csv = filepath.Join(dir, "truth.csv")
	labels = filepath.Join(dir, "labels.csv")
	if err := os.WriteFile(csv, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(labels, []byte("label,id\nTree,0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return csv, labels
}

// TestDeepForestModelForms: the R50 test network saved by DeepForest's own
// code three ways (tools/deepforest/checkpoints.py: save_model() .ckpt,
// torch.save(state_dict) .pt with --label-dict, save_pretrained folder)
// gives byte-identical predictions.csv and metrics; the report says which
// file kind and where the labels came from.
func TestDeepForestModelForms(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the R50 network three times")
	}
	skel := filepath.Join("..", torchckpt.Skeletons)
	dir := t.TempDir()
	ckpt, pt, hub := filepath.Join(dir, "model.ckpt"), filepath.Join(dir, "model.pt"), filepath.Join(dir, "hub")
	for _, n := range [][2]string{{"model.ckpt", ckpt}, {"model.pt", pt}} {
		if err := torchckpt.RebuildFile(skel, n[0], n[1]); err != nil {
			t.Fatal(err)
		}
	}
	if err := torchckpt.HubFolder(skel, hub, "F32"); err != nil {
		t.Fatal(err)
	}
	csv, labels := dfSet(t)
	var refM, refP []byte
	for _, c := range []struct {
		spec, labels, format string
	}{{hub, "", ""}, {ckpt, "", `"format": "lightning-checkpoint"`}, {pt, labels, `"format": "state-dict"`}} {
		out := t.TempDir()
		cfg := EvalConfig{CSV: csv, Out: out, IoUThreshold: 0.4, BatchSize: 1, LabelDict: c.labels,
			Model: ModelConfig{Spec: c.spec, Threads: 2, ScoreThresh: -1, NMSThresh: -1, Device: device("cpu")}}
		if codes := runLocal(t, 1, cfg); codes[0] != 0 {
			t.Fatalf("%s: exit %v", c.spec, codes)
		}
		m, _ := reportMetrics(t, out)
		p, err := os.ReadFile(filepath.Join(out, "predictions.csv"))
		if err != nil {
			t.Fatal(err)
		}
		rep, _ := os.ReadFile(filepath.Join(out, "report.json"))
		if c.format != "" && !bytes.Contains(rep, []byte(c.format)) {
			t.Errorf("%s: report.json lacks %s", c.spec, c.format)
		}
		if refM == nil {
			if n := bytes.Count(p, []byte("\n")) - 1; n < 5 {
				t.Fatalf("only %d detections: the comparison needs some", n)
			}
			refM, refP = m, p
			continue
		}
		if !bytes.Equal(m, refM) {
			t.Errorf("%s: metrics differ from the hub folder's:\n%s\n%s", c.spec, m, refM)
		}
		if !bytes.Equal(p, refP) {
			t.Errorf("%s: predictions.csv differs from the hub folder's", c.spec)
		}
	}
}

// TestTorchModelErrors: a .pt without labels is a model error (exit 4)
// naming the file; so is a truncated .ckpt.
func TestTorchModelErrors(t *testing.T) {
	skel := filepath.Join("..", torchckpt.Skeletons)
	dir := t.TempDir()
	pt := filepath.Join(dir, "model.pt")
	if err := torchckpt.RebuildFile(skel, "model.pt", pt); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(pt)
	cut := filepath.Join(dir, "cut.ckpt")
	os.WriteFile(cut, b[:len(b)/3], 0o644)
	csv, _ := dfSet(t)
	for _, c := range []struct{ spec, want string }{{pt, "holds no labels"}, {cut, "not a torch.save zip"}} {
		cfg := EvalConfig{CSV: csv, Out: t.TempDir(), IoUThreshold: 0.4, BatchSize: 1,
			Model: ModelConfig{Spec: c.spec, Threads: 1, ScoreThresh: -1, NMSThresh: -1, Device: device("cpu")}}
		codes, stderr := runLocalErr(t, 1, cfg)
		if codes[0] != ExitModel || !strings.Contains(stderr, c.want) || !strings.Contains(stderr, c.spec) {
			t.Errorf("%s: exit %v, stderr %q; want %d naming the file and %q", c.spec, codes, stderr, ExitModel, c.want)
		}
	}
}

// TestPredictLabelDict: predict's --label-dict names a bare .pt's classes
// (without it: exit 4) and must equal a model folder's own labels (else
// exit 4, before any image is read).
func TestPredictLabelDict(t *testing.T) {
	skel := filepath.Join("..", torchckpt.Skeletons)
	dir := t.TempDir()
	pt := filepath.Join(dir, "model.pt")
	if err := torchckpt.RebuildFile(skel, "model.pt", pt); err != nil {
		t.Fatal(err)
	}
	model, csv, _ := testModelSet(t)
	wrong := filepath.Join(dir, "wrong.csv")
	os.WriteFile(wrong, []byte("label,id\nTree,0\nBird,1\n"), 0o644)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--model", pt}, "holds no labels"},
		{[]string{"--model", model, "--label-dict", wrong}, "contradicts the model's own label_dict"},
	} {
		code, msg := cliRun(t, append([]string{"predict", "--csv", csv, "--out", filepath.Join(dir, "o"), "--device", "cpu"}, c.args...)...)
		if code != ExitModel || !strings.Contains(msg, c.want) {
			t.Errorf("%v: exit %d, want %d with %q: %s", c.args, code, ExitModel, c.want, msg)
		}
	}
}
