package modelfile

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/canopy-hpc/canopy/infer"
	"github.com/canopy-hpc/canopy/infer/nn"
	"github.com/canopy-hpc/canopy/infer/retinanet"
	"github.com/canopy-hpc/canopy/infer/safetensors"
	"github.com/canopy-hpc/canopy/internal/testsupport/testweights"
)

// A ResNet-18 body, 64 FPN channels, 2 classes: torchvision's
// RetinaNet(BackboneWithFPN(resnet18(), {layer2: 0, layer3: 1, layer4: 2},
// [128, 256, 512], 64, LastLevelP6P7(64, 64)), num_classes=2).
var (
	r18Once    sync.Once
	r18Entries []testweights.Entry
	r18Values  map[string][]float32
	r18Err     error
)

func r18(t *testing.T) ([]testweights.Entry, map[string][]float32) {
	t.Helper()
	r18Once.Do(func() {
		r18Entries, r18Err = testweights.StateDict("resnet18", 2, 64, false)
		if r18Err == nil {
			r18Values, r18Err = testweights.Values(r18Entries, 11)
		}
	})
	if r18Err != nil {
		t.Fatal(r18Err)
	}
	return r18Entries, r18Values
}

// tensors is the state dict for safetensors.Write (values shared, not
// copied: nothing may modify them).
func tensors(t *testing.T) map[string]safetensors.Tensor {
	entries, vals := r18(t)
	out := make(map[string]safetensors.Tensor, len(entries))
	for _, e := range entries {
		out[e.Name] = safetensors.Tensor{Shape: e.Shape, Data: vals[e.Name]}
	}
	return out
}

// weights is the same state dict as Weights, each value passed through
// round.
func weights(t *testing.T, round func(float32) float32) nn.Weights {
	entries, vals := r18(t)
	w := make(nn.Weights, len(entries))
	for _, e := range entries {
		d := vals[e.Name]
		if round != nil {
			r := make([]float32, len(d))
			for i, x := range d {
				r[i] = round(x)
			}
			d = r
		}
		w[e.Name] = nn.Tensor{Shape: e.Shape, Data: d}
	}
	return w
}

func direct(t *testing.T, w nn.Weights, opt retinanet.Options) *retinanet.Model {
	t.Helper()
	n, err := Normalize(w)
	if err != nil {
		t.Fatal(err)
	}
	m, err := retinanet.New(n, opt)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

const config2 = `{"num_classes": 2, "label_dict": {"Tree": 0, "Bird": 1}, "nms_thresh": 0.05, "score_thresh": 0.1,
 "detections_per_img": 300, "topk_candidates": 1000}`

func writeFolder(t *testing.T, dir string, ts map[string]safetensors.Tensor, dtype, config string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := safetensors.Write(filepath.Join(dir, "model.safetensors"), ts, dtype, map[string]string{"format": "pt"}); err != nil {
		t.Fatal(err)
	}
	if config != "" {
		if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(config), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestLoadFolder(t *testing.T) {
	dir := t.TempDir()
	cfg := `{"num_classes": 2, "label_dict": {"Tree": 0, "Bird": 1}, "nms_thresh": 0.4, "score_thresh": 0.3,
	 "detections_per_img": 50, "topk_candidates": 200, "min_size": [640, 672, 704], "max_size": 1000,
	 "image_mean": [0.5, 0.25, 0.125], "image_std": [0.2, 0.3, 0.4], "fg_iou_thresh": 0.5, "backbone_name": "x", "image_size": null}`
	writeFolder(t, dir, tensors(t), "F32", cfg)
	m, c, digest, err := LoadFolder(dir)
	if err != nil {
		t.Fatal(err)
	}
	if m.Arch != "resnet18-fpn64" || m.Classes != 2 || m.FPN != 64 {
		t.Errorf("Arch %q Classes %d FPN %d", m.Arch, m.Classes, m.FPN)
	}
	want := retinanet.Options{MinSize: 704, MaxSize: 1000, ScoreThresh: 0.3, NMSThresh: 0.4, DetectionsPerImg: 50, TopkCandidates: 200,
		ImageMean: [3]float32{0.5, 0.25, 0.125}, ImageStd: [3]float32{0.2, 0.3, 0.4}}
	if m.Opt != want || c.Options != want {
		t.Errorf("options %+v, want %+v", m.Opt, want)
	}
	if !reflect.DeepEqual(c.Labels, []string{"Tree", "Bird"}) || c.LabelDict["Bird"] != 1 || c.NumClasses != 2 || !c.HasConfig {
		t.Errorf("config %+v", c)
	}
	if !reflect.DeepEqual(c.Extra, []string{"backbone_name", "fg_iou_thresh", "image_size"}) {
		t.Errorf("Extra %v", c.Extra)
	}
	if !reflect.DeepEqual(c.Set, []string{"detections_per_img", "image_mean", "image_std", "max_size", "min_size", "nms_thresh", "score_thresh", "topk_candidates"}) {
		t.Errorf("Set %v", c.Set)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "model.safetensors"))
	if sum := sha256.Sum256(b); digest != hex.EncodeToString(sum[:]) {
		t.Errorf("digest %s", digest)
	}
	if ref := direct(t, weights(t, nil), want); !reflect.DeepEqual(m, ref) {
		t.Error("the folder's model differs from retinanet.New on the same weights")
	}

	// Defaults where config.json says nothing; min_size as a plain int.
	writeFolder(t, dir, tensors(t), "F32", `{"label_dict": {"a": 1, "b": 0}, "min_size": 512}`)
	m, c, _, err = LoadFolder(dir)
	if err != nil {
		t.Fatal(err)
	}
	want = retinanet.DefaultOptions()
	want.MinSize = 512
	if m.Opt != want || !reflect.DeepEqual(c.Labels, []string{"b", "a"}) || c.Extra != nil || c.NumClasses != 0 {
		t.Errorf("options %+v config %+v", m.Opt, c)
	}
}

func TestLoadFolderHalf(t *testing.T) {
	for _, c := range []struct {
		dtype string
		round func(float32) float32
	}{
		{"F16", func(x float32) float32 { return safetensors.F16ToF32(safetensors.F32ToF16(x)) }},
		{"BF16", func(x float32) float32 { return safetensors.BF16ToF32(safetensors.F32ToBF16(x)) }},
	} {
		dir := t.TempDir()
		writeFolder(t, dir, tensors(t), c.dtype, config2)
		m, _, _, err := LoadFolder(dir)
		if err != nil {
			t.Fatal(err)
		}
		ref := direct(t, weights(t, c.round), retinanet.DefaultOptions())
		if !reflect.DeepEqual(m, ref) {
			t.Errorf("%s: the model differs from retinanet.New on the %s-rounded weights", c.dtype, c.dtype)
		}
		if exact := direct(t, weights(t, nil), retinanet.DefaultOptions()); reflect.DeepEqual(m, exact) {
			t.Errorf("%s: no value was rounded (test too weak)", c.dtype)
		}
		// A tensor without batch norm is stored as read: the rounded values.
		_, vals := r18(t)
		x := vals["head.regression_head.bbox_reg.bias"]
		cs := m.Convs()
		for i, y := range cs[len(cs)-1].B { // bbox_reg
			if y != c.round(x[i]) {
				t.Fatalf("%s: bbox_reg.bias[%d] = %g, want %g", c.dtype, i, y, c.round(x[i]))
			}
		}
	}
}

var (
	newFPN  = regexp.MustCompile(`^(backbone\.fpn\.(?:inner|layer)_blocks\.\d+)\.0\.`)
	newHead = regexp.MustCompile(`^(head\.\w+_head\.conv)\.(\d)\.0\.`)
)

// Old layouts (v1 FPN inner_blocks.{i}.weight, head conv.{2i}) and the
// legacy "model." prefix load to the same Model.
func TestLoadFolderKeyLayouts(t *testing.T) {
	base := tensors(t)
	ref := direct(t, weights(t, nil), retinanet.DefaultOptions())
	old := func(k string) string {
		k = newFPN.ReplaceAllString(k, "$1.")
		if m := newHead.FindStringSubmatch(k); m != nil {
			k = m[1] + "." + string('0'+2*(m[2][0]-'0')) + "." + k[len(m[0]):]
		}
		return k
	}
	for _, c := range []struct {
		name   string
		rename func(string) string
	}{
		{"model. prefix", func(k string) string { return "model." + k }},
		{"old FPN and head", old},
		{"both", func(k string) string { return "model." + old(k) }},
	} {
		ts := make(map[string]safetensors.Tensor, len(base))
		for k, v := range base {
			ts[c.rename(k)] = v
		}
		if _, ok := ts[c.rename("head.classification_head.conv.3.0.weight")]; !ok && c.name != "model. prefix" {
			t.Fatal("renaming broken")
		}
		dir := t.TempDir()
		writeFolder(t, dir, ts, "F32", config2)
		m, _, _, err := LoadFolder(dir)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if !reflect.DeepEqual(m, ref) {
			t.Errorf("%s: model differs", c.name)
		}
	}
	if k := old("head.regression_head.conv.3.0.bias"); k != "head.regression_head.conv.6.bias" {
		t.Errorf("old head name %s", k)
	}
	if k := old("backbone.fpn.layer_blocks.2.0.weight"); k != "backbone.fpn.layer_blocks.2.weight" {
		t.Errorf("old FPN name %s", k)
	}
}

func TestLoadFolderNoConfig(t *testing.T) {
	dir := t.TempDir()
	writeFolder(t, dir, tensors(t), "BF16", "")
	_, _, _, err := LoadFolder(dir)
	if err == nil || !errors.Is(err, infer.ErrModel) || !strings.Contains(err.Error(), "config.json is missing and the weights have 2 classes") {
		t.Errorf("2 classes without config.json: %v", err)
	}
	// One class: {"Tree": 0} and the defaults.
	entries, err := testweights.StateDict("resnet18", 1, 64, false)
	if err != nil {
		t.Fatal(err)
	}
	vals, err := testweights.Values(entries, 2)
	if err != nil {
		t.Fatal(err)
	}
	ts := map[string]safetensors.Tensor{}
	for _, e := range entries {
		ts[e.Name] = safetensors.Tensor{Shape: e.Shape, Data: vals[e.Name]}
	}
	writeFolder(t, dir, ts, "BF16", "")
	m, c, _, err := LoadFolder(dir)
	if err != nil {
		t.Fatal(err)
	}
	if m.Classes != 1 || m.Opt != retinanet.DefaultOptions() || !reflect.DeepEqual(c.Labels, []string{"Tree"}) || c.HasConfig {
		t.Errorf("classes %d opt %+v config %+v", m.Classes, m.Opt, c)
	}
}

func TestLoadFolderErrors(t *testing.T) {
	base := tensors(t)
	edit := func(f func(ts map[string]safetensors.Tensor)) map[string]safetensors.Tensor {
		ts := make(map[string]safetensors.Tensor, len(base))
		for k, v := range base {
			ts[k] = v
		}
		f(ts)
		return ts
	}
	cases := []struct {
		name   string
		ts     map[string]safetensors.Tensor
		config string
		want   string
	}{
		{"missing tensor", edit(func(ts map[string]safetensors.Tensor) { delete(ts, "backbone.body.layer3.1.bn2.running_var") }), config2,
			"missing tensor backbone.body.layer3.1.bn2.running_var [256]"},
		{"extra tensor", edit(func(ts map[string]safetensors.Tensor) {
			ts["backbone.body.fc.weight"] = safetensors.Tensor{Shape: []int{2, 2}, Data: []float32{1, 2, 3, 4}}
		}), config2, "unexpected tensor backbone.body.fc.weight [2 2]"},
		{"wrong shape", edit(func(ts map[string]safetensors.Tensor) {
			ts["head.regression_head.bbox_reg.bias"] = safetensors.Tensor{Shape: []int{35}, Data: make([]float32, 35)}
		}), config2, "tensor head.regression_head.bbox_reg.bias has shape [35], want [36]"},
		{"NaN weight", edit(func(ts map[string]safetensors.Tensor) {
			t := ts["head.classification_head.cls_logits.bias"]
			t.Data = append([]float32(nil), t.Data...)
			t.Data[1] = float32(math.NaN())
			ts["head.classification_head.cls_logits.bias"] = t
		}), config2, "tensor head.classification_head.cls_logits.bias holds NaN at index 1 (1 tensors hold NaN or Inf)"},
		{"Inf weight", edit(func(ts map[string]safetensors.Tensor) {
			for _, k := range []string{"backbone.body.conv1.weight", "head.regression_head.bbox_reg.bias"} {
				t := ts[k]
				t.Data = append([]float32(nil), t.Data...)
				t.Data[3] = float32(math.Inf(-1))
				ts[k] = t
			}
		}), config2, "tensor backbone.body.conv1.weight holds -Inf at index 3 (2 tensors hold NaN or Inf)"},
		// issue 35: DeepForest's other architectures are named, not only
		// refused (the same backbone, then rpn/roi_heads or DETR heads)
		{"faster r-cnn", edit(func(ts map[string]safetensors.Tensor) {
			for k, v := range ts {
				if strings.HasPrefix(k, "head.") {
					delete(ts, k)
					ts["roi_heads."+strings.TrimPrefix(k, "head.")] = v
				}
			}
			ts["rpn.head.conv.0.0.weight"] = safetensors.Tensor{Shape: []int{1}, Data: []float32{1}}
		}), config2, "the state dict is a Faster R-CNN (torchvision's fasterrcnn_resnet50_fpn, DeepForest's FasterRCNN: rpn, roi_heads), not a RetinaNet"},
		{"deformable detr", map[string]safetensors.Tensor{
			"model.net.class_embed.0.weight":         {Shape: []int{1}, Data: []float32{1}},
			"model.net.bbox_embed.0.layers.0.weight": {Shape: []int{1}, Data: []float32{1}},
		}, config2, "is a Deformable DETR"},
		{"point model", map[string]safetensors.Tensor{
			"model.net.point_embed.0.layers.0.weight": {Shape: []int{1}, Data: []float32{1}},
		}, config2, "is DeepForest's point model"},
		{"label_dict count", base, `{"label_dict": {"Tree": 0}}`, "label_dict has 1 labels, but the weights have 2 classes"},
		{"label_dict ids", base, `{"label_dict": {"Tree": 0, "Bird": 2}}`, `gives "Bird" the id 2, want 0..1`},
		{"label_dict twice", base, `{"label_dict": {"Tree": 1, "Bird": 1}}`, `the same id 1`},
		{"num_classes", base, `{"num_classes": 1, "label_dict": {"Tree": 0, "Bird": 1}}`, "num_classes 1, but the weights have 2 classes"},
		{"bad config", base, `{"label_dict": `, "not a JSON object"},
		{"bad option", base, `{"min_size": "800"}`, `"min_size" is "800", want a positive integer`},
		{"bad min_size list", base, `{"min_size": []}`, `"min_size" is []`},
		{"bad mean", base, `{"image_mean": [0.5, 0.5]}`, `"image_mean" is [0.5, 0.5], want a list of 3`},
	}
	shared := t.TempDir() // the base weights, written once for the config cases
	writeFolder(t, shared, base, "F16", "")
	for _, c := range cases {
		dir := shared
		if reflect.ValueOf(c.ts).Pointer() != reflect.ValueOf(base).Pointer() {
			dir = t.TempDir()
			writeFolder(t, dir, c.ts, "F16", c.config)
		} else if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(c.config), 0o644); err != nil {
			t.Fatal(err)
		}
		_, _, _, err := LoadFolder(dir)
		if err == nil {
			t.Errorf("%s: loaded", c.name)
			continue
		}
		if !errors.Is(err, infer.ErrModel) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v\nwant an infer.ErrModel containing %q", c.name, err, c.want)
		}
	}

	// A corrupt file: the safetensors error, naming the file.
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "model.safetensors"), []byte("\x10\x00\x00\x00\x00\x00\x00\x00{}"), 0o644)
	_, _, _, err := LoadFolder(dir)
	if err == nil || !errors.Is(err, infer.ErrModel) || !errors.Is(err, safetensors.ErrFormat) || !strings.Contains(err.Error(), "safetensors: "+filepath.Join(dir, "model.safetensors")) {
		t.Errorf("corrupt: %v", err)
	}
	// pytorch_model.bin only.
	dir = t.TempDir()
	os.WriteFile(filepath.Join(dir, "pytorch_model.bin"), []byte("PK"), 0o644)
	_, _, _, err = LoadFolder(dir)
	if err == nil || !errors.Is(err, infer.ErrModel) || !strings.Contains(err.Error(), "does not read pickled torch checkpoints") || !strings.Contains(err.Error(), "save_file(") {
		t.Errorf("pytorch_model.bin: %v", err)
	}
	_, _, _, err = LoadFolder(t.TempDir())
	if err == nil || !errors.Is(err, infer.ErrModel) || !strings.Contains(err.Error(), "no model.safetensors") {
		t.Errorf("empty folder: %v", err)
	}
}

const (
	commitMain = "0123456789abcdef0123456789abcdef01234567"
	commitPR   = "fedcba9876543210fedcba9876543210fedcba98"
)

// hubCache lays out a Hugging Face cache under root as huggingface_hub
// does: blobs named by content hash, snapshots/<commit>/ holding relative
// symlinks to them, refs/<revision> holding the commit.
func hubCache(t *testing.T, root string) {
	t.Helper()
	repo := filepath.Join(root, "models--weecology--deepforest-tree")
	st := filepath.Join(t.TempDir(), "st")
	writeFolder(t, st, tensors(t), "BF16", config2)
	for _, d := range []string{"blobs", "refs/refs/pr", "snapshots/" + commitMain, "snapshots/" + commitPR} {
		if err := os.MkdirAll(filepath.Join(repo, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"model.safetensors", "config.json"} {
		b, err := os.ReadFile(filepath.Join(st, f))
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		blob := hex.EncodeToString(sum[:])
		os.WriteFile(filepath.Join(repo, "blobs", blob), b, 0o644)
		for _, c := range []string{commitMain, commitPR} {
			if err := os.Symlink(filepath.Join("..", "..", "blobs", blob), filepath.Join(repo, "snapshots", c, f)); err != nil {
				t.Fatal(err)
			}
		}
	}
	os.WriteFile(filepath.Join(repo, "refs", "main"), []byte(commitMain), 0o644)
	os.WriteFile(filepath.Join(repo, "refs", "refs", "pr", "5"), []byte(commitPR+"\n"), 0o644)
}

func unsetenv(t *testing.T, keys ...string) {
	for _, k := range keys {
		t.Setenv(k, "") // restored after the test
		os.Unsetenv(k)
	}
}

func TestResolve(t *testing.T) {
	root := t.TempDir()
	cache := filepath.Join(root, "cache")
	hubCache(t, cache)
	t.Chdir(root) // so that no local folder "weecology/..." exists
	snap := func(c string) string {
		return filepath.Join(cache, "models--weecology--deepforest-tree", "snapshots", c)
	}

	unsetenv(t, "HF_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME")
	t.Setenv("HF_HUB_CACHE", cache)
	for spec, want := range map[string]string{
		"weecology/deepforest-tree":               snap(commitMain),
		"weecology/deepforest-tree@main":          snap(commitMain),
		"weecology/deepforest-tree@refs/pr/5":     snap(commitPR),
		"weecology/deepforest-tree@" + commitPR:   snap(commitPR),
		"weecology/deepforest-tree@" + commitMain: snap(commitMain),
	} {
		got, err := Resolve(spec)
		if err != nil || got != want {
			t.Errorf("Resolve(%q) = %q, %v; want %q", spec, got, err, want)
		}
	}
	// The snapshot loads through its symlinks.
	dir, _ := Resolve("weecology/deepforest-tree")
	if m, c, _, err := LoadFolder(dir); err != nil || m.Classes != 2 || c.Labels[1] != "Bird" {
		t.Errorf("LoadFolder(snapshot): %v", err)
	}

	// $HF_HOME/hub, then ~/.cache/huggingface/hub.
	unsetenv(t, "HF_HUB_CACHE")
	home := filepath.Join(root, "hfhome")
	os.MkdirAll(home, 0o755)
	os.Symlink(cache, filepath.Join(home, "hub"))
	t.Setenv("HF_HOME", home)
	if got, err := Resolve("weecology/deepforest-tree"); err != nil || got != filepath.Join(home, "hub", "models--weecology--deepforest-tree", "snapshots", commitMain) {
		t.Errorf("HF_HOME: %q, %v", got, err)
	}
	unsetenv(t, "HF_HOME")
	user := filepath.Join(root, "user")
	os.MkdirAll(filepath.Join(user, ".cache", "huggingface"), 0o755)
	os.Symlink(cache, filepath.Join(user, ".cache", "huggingface", "hub"))
	t.Setenv("HOME", user)
	if got, err := Resolve("weecology/deepforest-tree@refs/pr/5"); err != nil || got != filepath.Join(user, ".cache", "huggingface", "hub", "models--weecology--deepforest-tree", "snapshots", commitPR) {
		t.Errorf("HOME: %q, %v", got, err)
	}

	// A local folder of that name wins.
	os.MkdirAll(filepath.Join(root, "weecology", "deepforest-tree"), 0o755)
	if got, err := Resolve("weecology/deepforest-tree"); err != nil || got != "weecology/deepforest-tree" {
		t.Errorf("local folder: %q, %v", got, err)
	}
	if got, err := Resolve(cache); err != nil || got != cache {
		t.Errorf("absolute folder: %q, %v", got, err)
	}

	// Not found: every place looked at, and how to fetch.
	t.Setenv("HF_HUB_CACHE", cache)
	_, err := Resolve("weecology/deepforest-bird@refs/pr/5")
	for _, want := range []string{
		"weecology/deepforest-bird@refs/pr/5 (local folder: does not exist)",
		filepath.Join(cache, "models--weecology--deepforest-bird", "refs", "refs", "pr", "5") + " (hub cache from $HF_HUB_CACHE: does not exist)",
		"snapshot_download('weecology/deepforest-bird', revision='refs/pr/5')",
		"huggingface-cli download weecology/deepforest-bird --revision refs/pr/5",
		"HF_HUB_CACHE",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("not found: %v\nwant it to contain %q", err, want)
		}
	}
	if !errors.Is(err, infer.ErrModel) {
		t.Errorf("not found does not wrap infer.ErrModel: %v", err)
	}
	// A commit that is not in the cache.
	_, err = Resolve("weecology/deepforest-tree@" + strings.Repeat("a", 40))
	if err == nil || !strings.Contains(err.Error(), filepath.Join("snapshots", strings.Repeat("a", 40))) || !errors.Is(err, infer.ErrModel) {
		t.Errorf("absent commit: %v", err)
	}
	// A ref that does not hold a commit.
	os.WriteFile(filepath.Join(cache, "models--weecology--deepforest-tree", "refs", "bad"), []byte("nope"), 0o644)
	if _, err := Resolve("weecology/deepforest-tree@bad"); err == nil || !strings.Contains(err.Error(), `holds "nope", not a commit hash`) {
		t.Errorf("bad ref: %v", err)
	}
	for _, bad := range []string{"", "deepforest", "a/b/c", "a/b@", "a/b@../x", "/abs/absent/path"} {
		if _, err := Resolve(bad); err == nil || !errors.Is(err, infer.ErrModel) {
			t.Errorf("Resolve(%q): %v", bad, err)
		}
	}
}

// TestLoadFolderDemo: the demo model folder gives the network
// retinanet.New makes of its safetensors weights with the options its
// golden fixture (testdata/golden/retinanet/demo.json) records torchvision
// ran: the model infer/retinanet's demo golden and loss tests run
// (demoModel there), so those tests hold for the folder.
func TestLoadFolderDemo(t *testing.T) {
	root := filepath.Join("..", "..", "testdata")
	m, c, _, err := LoadFolder(filepath.Join(root, "models", "canopy-demo-r18"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "golden", "retinanet", "demo.json"))
	if err != nil {
		t.Fatal(err)
	}
	var g struct {
		Config map[string]any `json:"config"`
	}
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	num := func(k string) float64 { v, _ := g.Config[k].(float64); return v }
	want := retinanet.DefaultOptions()
	want.ScoreThresh, want.NMSThresh = float32(num("score_thresh")), num("nms_thresh")
	want.DetectionsPerImg, want.TopkCandidates = int(num("detections_per_img")), int(num("topk_candidates"))
	want.MinSize, want.MaxSize = int(num("min_size")), int(num("max_size"))
	if m.Opt != want || want.MinSize == 0 {
		t.Fatalf("options %+v, the fixture's %+v", m.Opt, want)
	}
	st := filepath.Join(root, "models", "canopy-demo-r18", "model.safetensors")
	sb, err := os.ReadFile(st)
	if err != nil {
		t.Fatal(err)
	}
	ts, _, err := safetensors.Parse(st, sb)
	if err != nil {
		t.Fatal(err)
	}
	w := nn.Weights{}
	for k, x := range ts {
		w[k] = nn.Tensor{Shape: x.Shape, Data: x.Data}
	}
	if ref := direct(t, w, want); !reflect.DeepEqual(m, ref) {
		t.Error("the demo folder's model differs from retinanet.New on its weights and the fixture's options")
	}
	if !reflect.DeepEqual(c.Labels, []string{"Tree", "Dead"}) {
		t.Errorf("labels %v", c.Labels)
	}
}
