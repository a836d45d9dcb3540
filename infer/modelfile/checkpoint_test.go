package modelfile

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/canopy-hpc/canopy/infer"
	"github.com/canopy-hpc/canopy/infer/nn"
	"github.com/canopy-hpc/canopy/infer/retinanet"
	"github.com/canopy-hpc/canopy/internal/testsupport/torchckpt"
)

// rebuildDF rebuilds one of tools/deepforest/checkpoints.py's files from
// its committed data.pkl (testdata/deepforest/NAME.data.pkl).
func rebuildDF(t *testing.T, dir, name string) string {
	t.Helper()
	out := filepath.Join(dir, name)
	if err := torchckpt.RebuildFile(filepath.Join("testdata", "deepforest"), name, out); err != nil {
		t.Fatal(err)
	}
	return out
}

// hubFolder writes the R50 test weights as a model folder (safetensors in
// dtype, the config.json DeepForest's save_pretrained wrote).
func hubFolder(t *testing.T, dir, dtype string) string {
	t.Helper()
	out := filepath.Join(dir, "hub-"+dtype)
	if err := torchckpt.HubFolder(filepath.Join("testdata", "deepforest"), out, dtype); err != nil {
		t.Fatal(err)
	}
	return out
}

// modelDigest hashes every folded weight and bias of the network.
func modelDigest(m *retinanet.Model) string {
	h := sha256.New()
	put := func(c *nn.Conv) {
		if c == nil {
			return
		}
		for _, v := range c.W {
			binary.Write(h, binary.LittleEndian, math.Float32bits(v))
		}
		for _, v := range c.B {
			binary.Write(h, binary.LittleEndian, math.Float32bits(v))
		}
	}
	for _, c := range m.Convs() {
		put(c)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// TestDeepForestCheckpoints: DeepForest's save_model() .ckpt, its
// torch.save(state_dict) .pt and its save_pretrained folder give the same
// network, labels and options; the bfloat16 .ckpt and .pt give the network
// of a BF16 safetensors folder. With CANOPY_DF_CHECKPOINTS (make
// df-checkpoints) the real files the tool wrote are read too and must give
// the same networks as the rebuilt ones.
func TestDeepForestCheckpoints(t *testing.T) {
	if testing.Short() {
		t.Skip("loads six R50 networks")
	}
	dir := t.TempDir()
	folder, _, _, err := LoadFolder(hubFolder(t, dir, "F32"))
	if err != nil {
		t.Fatal(err)
	}
	folderBF, _, _, err := LoadFolder(hubFolder(t, dir, "BF16"))
	if err != nil {
		t.Fatal(err)
	}
	want, wantBF := modelDigest(folder), modelDigest(folderBF)
	if want == wantBF {
		t.Fatal("the BF16 folder gives the F32 network: the comparison cannot tell them apart")
	}
	real := os.Getenv("CANOPY_DF_CHECKPOINTS")
	for _, c := range []struct {
		name   string
		want   string
		kind   TorchKind
		labels string
	}{
		{"model.ckpt", want, KindCheckpoint, "checkpoint label_dict"},
		{"model.pt", want, KindStateDict, "--label-dict"},
		{"model-bf16.ckpt", wantBF, KindCheckpoint, "checkpoint label_dict"},
		{"model-bf16.pt", wantBF, KindStateDict, "--label-dict"},
	} {
		paths := []string{rebuildDF(t, dir, c.name)}
		if real != "" {
			paths = append(paths, filepath.Join(real, c.name))
		}
		for _, p := range paths {
			m, cfg, tm, _, err := LoadTorch(p, map[string]int{"Tree": 0})
			if err != nil {
				t.Fatalf("%s: %v", p, err)
			}
			if got := modelDigest(m); got != c.want {
				t.Errorf("%s: network %s, the folder's %s", p, got[:12], c.want[:12])
			}
			if tm.Kind != c.kind || tm.LabelsFrom != c.labels || len(cfg.Labels) != 1 || cfg.Labels[0] != "Tree" {
				t.Errorf("%s: kind %s, labels %v from %q", p, tm.Kind, cfg.Labels, tm.LabelsFrom)
			}
			if m.Opt != folder.Opt {
				t.Errorf("%s: options %+v, the folder's %+v", p, m.Opt, folder.Opt)
			}
		}
	}
	if real == "" {
		t.Log("CANOPY_DF_CHECKPOINTS unset: the real DeepForest files were not read (make df-checkpoints reads them)")
	}
}

// TestLoadTorchErrors: a .pt without labels, a .ckpt without state_dict,
// a forbidden global, a truncated file: each an infer.ErrModel naming the
// file.
func TestLoadTorchErrors(t *testing.T) {
	dir := t.TempDir()
	pt := rebuildDF(t, dir, "model.pt")
	_, _, _, _, err := LoadTorch(pt, nil)
	wantModelErr(t, err, pt, "holds no labels", "--label-dict")

	b, err := os.ReadFile(pt)
	if err != nil {
		t.Fatal(err)
	}
	cut := filepath.Join(dir, "cut.pt")
	if err := os.WriteFile(cut, b[:len(b)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, _, _, err = LoadTorch(cut, map[string]int{"Tree": 0})
	wantModelErr(t, err, cut, "not a torch.save zip")

	for _, c := range []struct{ src, name, want string }{
		{"../torchfile/testdata/forbidden.pt", "forbidden.pt", "argparse.Namespace"},
		{"../torchfile/testdata/hparams.pt", "nostate.ckpt", ""},
	} {
		b, err := os.ReadFile(c.src)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, c.name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		_, _, _, _, err = LoadTorch(p, nil)
		if c.want != "" {
			wantModelErr(t, err, p, c.want)
		} else if err == nil {
			t.Fatalf("%s loaded", p)
		}
	}
}

// TestCheckpointWithoutLabels (issue 35): a Lightning checkpoint holding
// no label_dict and no hyper_parameters is read as DeepForest reads it (one
// class: {"Tree": 0}); with more classes the refusal says the checkpoint
// holds no labels (it said "x.ckpt is missing and the weights have 2
// classes", the folder's wording for a missing config.json).
func TestCheckpointWithoutLabels(t *testing.T) {
	pkl, err := os.ReadFile(filepath.Join("testdata", "deepforest", "model.ckpt.data.pkl"))
	if err != nil {
		t.Fatal(err)
	}
	for old, new := range map[string]string{"\x00\x00hyper_parameters": "\x00\x00hyper_parameterz", "\x00\x00label_dict": "\x00\x00label_dicz"} {
		if bytes.Count(pkl, []byte(old)) != 1 {
			t.Fatalf("%q is not in the skeleton once", old)
		}
		pkl = bytes.Replace(pkl, []byte(old), []byte(new), 1)
	}
	p := filepath.Join(t.TempDir(), "nolabels.ckpt")
	if err := torchckpt.Rebuild(pkl, p, 0); err != nil {
		t.Fatal(err)
	}
	m, cfg, tm, _, err := LoadTorch(p, nil)
	if err != nil || m.Classes != 1 || cfg.HasConfig || tm.LabelsFrom != "default" || cfg.Labels[0] != "Tree" {
		t.Fatalf("a 1-class checkpoint without labels: %v %+v", err, tm)
	}
	// The same checkpoint state with two classes (the skeleton has one).
	cfg = Config{Options: retinanet.DefaultOptions()}
	err = modelErr(cfg.checkLabels(p, torchNoLabels, 2))
	wantModelErr(t, err, p, "nolabels.ckpt holds no label_dict (neither its own nor hyper_parameters.config's", "the weights have 2 classes")
	if err != nil && strings.Contains(err.Error(), "is missing") {
		t.Errorf("garbled: %v", err)
	}
}

func wantModelErr(t *testing.T, err error, parts ...string) {
	t.Helper()
	if err == nil || !errors.Is(err, infer.ErrModel) {
		t.Fatalf("error %v, want an infer.ErrModel", err)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Fatalf("error %q does not contain %q", err, p)
		}
	}
}
