package treeformer

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/canopy-hpc/canopy/infer"
	"github.com/canopy-hpc/canopy/infer/modelfile"
	"github.com/canopy-hpc/canopy/infer/nn"
	"github.com/canopy-hpc/canopy/infer/safetensors"
	"github.com/canopy-hpc/canopy/infer/torchfile"
)

// Marker is the tensor that names a TreeFormer state dict (with or
// without Lightning's "model." prefix): PvT's first patch embedding.
const Marker = "backbone.encoder.layers.0.patch_embedding.proj.weight"

// Config is what a TreeFormer file holds besides its weights.
type Config struct {
	// Backbone is the PvT name as stored ("OpenGVLab/pvt_v2_b3").
	Backbone string
	// LabelDict maps names to ids; LabelsFrom says where it came from.
	LabelDict  map[string]int
	LabelsFrom string
	// Format is "folder", "lightning-checkpoint" or "state-dict".
	Format string
	// Ignored lists stored settings DeepForest's own values replace
	// (score_thresh and score_integration_radius: point.yaml's win, as
	// DeepForest passes them to from_pretrained).
	Ignored []string
}

func modelErr(err error) error { return infer.ModelErr(err) }

// Probe reports whether path is a TreeFormer: a folder whose
// model.safetensors holds Marker, or a torch file whose state dict does.
// It reads only the safetensors header or the pickle, never the weights.
func Probe(path string) bool {
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		keys, err := safetensorsKeys(filepath.Join(path, "model.safetensors"))
		return err == nil && hasMarker(keys)
	}
	if !modelfile.IsTorchFile(path) {
		return false
	}
	f, err := torchfile.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	sd, _, _ := stateDictOf(f)
	if sd == nil {
		return false
	}
	var keys []string
	for _, k := range sd.Keys {
		if s, ok := k.(string); ok {
			keys = append(keys, s)
		}
	}
	return hasMarker(keys)
}

func hasMarker(keys []string) bool {
	for _, k := range keys {
		if strings.TrimPrefix(k, "model.") == Marker {
			return true
		}
	}
	return false
}

// safetensorsKeys reads a safetensors file's tensor names from its header
// alone (8-byte length, then at most safetensors.MaxHeader bytes of JSON).
func safetensorsKeys(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var n uint64
	if err := binary.Read(f, binary.LittleEndian, &n); err != nil {
		return nil, err
	}
	if n == 0 || n > safetensors.MaxHeader {
		return nil, fmt.Errorf("%s: header length %d", path, n)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(f, b); err != nil {
		return nil, err
	}
	var h map[string]json.RawMessage
	if err := json.Unmarshal(b, &h); err != nil {
		return nil, err
	}
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	return keys, nil
}

// Load reads a TreeFormer from a DeepForest hub folder (config.json and
// model.safetensors, TreeFormerModel.save_pretrained), a Lightning .ckpt
// (state_dict with "model." prefixes, hyper_parameters.config, label_dict)
// or a bare state dict (.pt/.pth: pvt_v2_b3, the labels given). given is
// the run's --label-dict (nil: none). digest is the weights file's hex
// SHA-256. The weights pass the RetinaNet loaders' checks (finite values,
// "model." stripped, every tensor with its shape and none left over).
// Every error wraps infer.ErrModel.
func Load(path string, given map[string]int) (m *Model, cfg Config, digest string, err error) {
	defer func() { err = modelErr(err) }()
	var w nn.Weights
	if fi, e := os.Stat(path); e == nil && fi.IsDir() {
		w, cfg, digest, err = readFolder(path)
	} else if modelfile.IsTorchFile(path) {
		w, cfg, digest, err = readTorch(path)
	} else {
		return nil, cfg, "", fmt.Errorf("treeformer: %s is neither a model folder nor a .ckpt/.pt/.pth file", path)
	}
	if err != nil {
		return nil, cfg, "", err
	}
	if cfg.LabelDict == nil {
		if given == nil {
			return nil, cfg, "", fmt.Errorf("treeformer: %s holds no label_dict: give the labels with --label-dict (label,id CSV) or a --config label_dict", path)
		}
		cfg.LabelDict, cfg.LabelsFrom = given, "--label-dict"
	}
	arch, err := ArchByName(cfg.Backbone)
	if err != nil {
		return nil, cfg, "", fmt.Errorf("%w (in %s)", err, path)
	}
	if err := modelfile.CheckFinite(w); err != nil {
		return nil, cfg, "", fmt.Errorf("%w (in %s)", err, path)
	}
	if w, err = modelfile.Normalize(w); err != nil {
		return nil, cfg, "", fmt.Errorf("%w (in %s)", err, path)
	}
	if m, err = New(w, arch); err != nil {
		return nil, cfg, "", fmt.Errorf("%w (in %s)", err, path)
	}
	if len(cfg.LabelDict) != m.Classes {
		return nil, cfg, "", fmt.Errorf("treeformer: %s: label_dict %v names %d labels, the model has %d classes", path, cfg.LabelDict, len(cfg.LabelDict), m.Classes)
	}
	for name, id := range cfg.LabelDict {
		if id < 0 || id >= m.Classes {
			return nil, cfg, "", fmt.Errorf("treeformer: %s: label %q has id %d, want 0..%d", path, name, id, m.Classes-1)
		}
	}
	return m, cfg, digest, nil
}

// hubConfig is the part of config.json canopy reads.
type hubConfig struct {
	Backbone               *string         `json:"backbone"`
	NumClasses             *int            `json:"num_classes"`
	LabelDict              map[string]int  `json:"label_dict"`
	ScoreThresh            json.RawMessage `json:"score_thresh"`
	ScoreIntegrationRadius json.RawMessage `json:"score_integration_radius"`
}

func readFolder(dir string) (nn.Weights, Config, string, error) {
	cfg := Config{Format: "folder"}
	st := filepath.Join(dir, "model.safetensors")
	b, err := os.ReadFile(st)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, cfg, "", fmt.Errorf("treeformer: %s: no model.safetensors (not a DeepForest model folder?)", dir)
	}
	if err != nil {
		return nil, cfg, "", fmt.Errorf("treeformer: %w", err)
	}
	sum := sha256.Sum256(b)
	cb, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		return nil, cfg, "", fmt.Errorf("treeformer: %s: config.json names the backbone and the labels: %w", dir, err)
	}
	var hc hubConfig
	if err := json.Unmarshal(cb, &hc); err != nil {
		return nil, cfg, "", fmt.Errorf("treeformer: %s/config.json: %w", dir, err)
	}
	if hc.Backbone == nil {
		return nil, cfg, "", fmt.Errorf("treeformer: %s/config.json has no backbone", dir)
	}
	cfg.Backbone = *hc.Backbone
	if hc.LabelDict != nil {
		cfg.LabelDict, cfg.LabelsFrom = hc.LabelDict, "config.json label_dict"
	}
	if hc.NumClasses != nil && *hc.NumClasses != 1 {
		return nil, cfg, "", fmt.Errorf("treeformer: %s/config.json: num_classes %d: DeepForest's point path reads one density map (it fails on more)", dir, *hc.NumClasses)
	}
	if hc.ScoreThresh != nil {
		cfg.Ignored = append(cfg.Ignored, "score_thresh (DeepForest's own value wins)")
	}
	if hc.ScoreIntegrationRadius != nil {
		cfg.Ignored = append(cfg.Ignored, "score_integration_radius (DeepForest's own value wins)")
	}
	ts, _, err := safetensors.Parse(st, b)
	if err != nil {
		return nil, cfg, "", err
	}
	w := make(nn.Weights, len(ts))
	for k, t := range ts {
		w[k] = nn.Tensor{Shape: t.Shape, Data: t.Data}
	}
	return w, cfg, hex.EncodeToString(sum[:]), nil
}

// stateDictOf is the file's state dict: the root's state_dict (a
// Lightning checkpoint) or the root itself (a bare state dict).
func stateDictOf(f *torchfile.File) (sd, root *torchfile.Dict, ckpt bool) {
	root, ok := f.Root.(*torchfile.Dict)
	if !ok {
		return nil, nil, false
	}
	if v, ok := root.Get("state_dict"); ok {
		d, _ := v.(*torchfile.Dict)
		return d, root, true
	}
	return root, root, false
}

func readTorch(path string) (nn.Weights, Config, string, error) {
	cfg := Config{Format: "state-dict", Backbone: B3.Name}
	digest, err := infer.FileSHA256(path)
	if err != nil {
		return nil, cfg, "", fmt.Errorf("treeformer: %w", err)
	}
	f, err := torchfile.Open(path)
	if err != nil {
		return nil, cfg, "", err
	}
	defer f.Close()
	sd, root, ckpt := stateDictOf(f)
	if sd == nil {
		return nil, cfg, "", fmt.Errorf("treeformer: %s holds a %s, want a state dict or a Lightning checkpoint", path, torchfile.KindName(f.Root))
	}
	if ckpt {
		cfg.Format = "lightning-checkpoint"
		if v, ok := torchfile.Lookup(root, "hyper_parameters", "config", "point", "backbone"); ok {
			s, isStr := v.(string)
			if !isStr {
				return nil, cfg, "", fmt.Errorf("treeformer: %s: hyper_parameters.config.point.backbone is a %s, want a string", path, torchfile.KindName(v))
			}
			cfg.Backbone = s
		}
		if v, ok := torchfile.Lookup(root, "hyper_parameters", "config", "architecture"); ok {
			if s, _ := v.(string); s != "" && s != "treeformer" {
				return nil, cfg, "", fmt.Errorf("treeformer: %s: hyper_parameters.config.architecture is %q, but the state dict is a TreeFormer's", path, s)
			}
		}
		for _, src := range [][]string{{"label_dict"}, {"hyper_parameters", "config", "label_dict"}} {
			if v, ok := torchfile.Lookup(root, src...); ok && v != nil {
				ld, err := torchfile.LabelDict(v, path+": "+strings.Join(src, "."))
				if err != nil {
					return nil, cfg, "", fmt.Errorf("treeformer: %w", err)
				}
				cfg.LabelDict, cfg.LabelsFrom = ld, strings.Join(src, ".")
				break
			}
		}
	}
	ts, _, err := f.StateDict(sd)
	if err != nil {
		return nil, cfg, "", fmt.Errorf("treeformer: %w", err)
	}
	w := make(nn.Weights, len(ts))
	for k, t := range ts {
		w[k] = nn.Tensor{Shape: t.Shape, Data: t.Data}
	}
	return w, cfg, digest, nil
}
