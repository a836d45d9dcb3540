// Package modelfile loads canopy's models from the files DeepForest and
// torch write: hub folders (model.safetensors + config.json, locally or in
// the Hugging Face cache), Lightning checkpoints (.ckpt) and bare state
// dicts (.pt), through infer/safetensors and infer/torchfile; their
// config.json or stored config onto the model's options, their label
// dicts, the key layouts DeepForest has used, and the finite check. It
// builds the network (retinanet.New); every error wraps infer.ErrModel.
package modelfile

// Model folders as DeepForest's hub models ship them (model.safetensors +
// config.json), found locally or in the Hugging Face hub cache
// (semantics.md §1.10).

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/canopy-hpc/canopy/infer"
	"github.com/canopy-hpc/canopy/infer/nn"
	"github.com/canopy-hpc/canopy/infer/retinanet"
	"github.com/canopy-hpc/canopy/infer/safetensors"
)

func modelErr(err error) error { return infer.ModelErr(err) }

func modelErrf(format string, a ...any) error { return modelErr(fmt.Errorf(format, a...)) }

var (
	repoPart   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)
	commitHash = regexp.MustCompile(`^[0-9a-f]{40}$`)
)

// parseRepo splits "owner/name[@revision]"; the revision defaults to main.
func parseRepo(spec string) (owner, name, rev string, ok bool) {
	repo, rev, found := strings.Cut(spec, "@")
	if !found {
		rev = "main"
	}
	owner, name, found = strings.Cut(repo, "/")
	if !found || !repoPart.MatchString(owner) || !repoPart.MatchString(name) || rev == "" {
		return "", "", "", false
	}
	for _, c := range strings.Split(rev, "/") {
		if c == "" || c == "." || c == ".." || strings.ContainsAny(c, `\`) {
			return "", "", "", false
		}
	}
	return owner, name, rev, true
}

// HubCache is the Hugging Face hub cache folder as huggingface_hub finds it:
// $HF_HUB_CACHE, else the older $HUGGINGFACE_HUB_CACHE, else $HF_HOME/hub,
// else $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub. from
// says which rule applied.
func HubCache() (dir, from string, err error) {
	expand := func(p string) (string, error) {
		if p == "~" || strings.HasPrefix(p, "~/") {
			h, err := os.UserHomeDir()
			if err != nil {
				return "", err
			}
			return filepath.Join(h, p[1:]), nil
		}
		return p, nil
	}
	if v := os.Getenv("HF_HUB_CACHE"); v != "" {
		d, err := expand(v)
		return d, "$HF_HUB_CACHE", err
	}
	if v := os.Getenv("HUGGINGFACE_HUB_CACHE"); v != "" {
		d, err := expand(v)
		return d, "$HUGGINGFACE_HUB_CACHE", err
	}
	if v := os.Getenv("HF_HOME"); v != "" {
		d, err := expand(v)
		return filepath.Join(d, "hub"), "$HF_HOME/hub", err
	}
	if v := os.Getenv("XDG_CACHE_HOME"); v != "" {
		d, err := expand(v)
		return filepath.Join(d, "huggingface", "hub"), "$XDG_CACHE_HOME/huggingface/hub", err
	}
	h, err := os.UserHomeDir()
	if err != nil {
		return "", "~/.cache/huggingface/hub", err
	}
	return filepath.Join(h, ".cache", "huggingface", "hub"), "~/.cache/huggingface/hub (neither HF_HUB_CACHE nor HF_HOME is set)", nil
}

// Resolve finds a model folder or file. spec is a local folder, a torch
// file (.ckpt, .pt, .pth: returned as given), or a Hugging Face
// repo id "owner/name[@revision]" (revision: a branch or tag such as main,
// a ref such as refs/pr/5, or a 40-hex commit) looked up in the hub cache
// (HubCache): models--{owner}--{name}/refs/{revision} holds the commit,
// whose files are in models--{owner}--{name}/snapshots/{commit}/. A local
// folder named spec wins. Nothing is downloaded; the error for a model not
// found says where it looked and how to fetch it.
func Resolve(spec string) (string, error) {
	if spec == "" {
		return "", modelErrf("retinanet: no model given: want a model folder or a Hugging Face repo id such as weecology/deepforest-tree")
	}
	fi, statErr := os.Stat(spec)
	if statErr == nil && fi.IsDir() {
		return spec, nil
	}
	if statErr == nil && fi.Mode().IsRegular() && IsTorchFile(spec) {
		return spec, nil // a .ckpt or .pt (LoadTorch)
	}
	if IsTorchFile(spec) {
		return "", modelErrf("retinanet: model %q: %s (a .ckpt, .pt or .pth file is read from the local filesystem)", spec, why(statErr, fi))
	}
	local := fmt.Sprintf("%s (local folder: %s)", spec, why(statErr, fi))
	owner, name, rev, ok := parseRepo(spec)
	if !ok {
		return "", modelErrf("retinanet: model %q: not a folder (%s) and not a Hugging Face repo id owner/name[@revision]", spec, why(statErr, fi))
	}
	looked := []string{local}
	cache, from, err := HubCache()
	if err != nil {
		looked = append(looked, fmt.Sprintf("the hub cache (%s: %v)", from, err))
		return "", notFound(spec, owner, name, rev, looked)
	}
	repo := filepath.Join(cache, "models--"+owner+"--"+name)
	commit := rev
	if !commitHash.MatchString(rev) {
		ref := filepath.Join(repo, "refs", filepath.FromSlash(rev))
		b, err := os.ReadFile(ref)
		if err != nil {
			looked = append(looked, fmt.Sprintf("%s (hub cache from %s: %s)", ref, from, why(err, nil)))
			return "", notFound(spec, owner, name, rev, looked)
		}
		commit = strings.TrimSpace(string(b))
		if !commitHash.MatchString(commit) {
			return "", modelErrf("retinanet: model %q: %s holds %q, not a commit hash", spec, ref, short(commit))
		}
	}
	snap := filepath.Join(repo, "snapshots", commit)
	fi, err = os.Stat(snap)
	if err == nil && fi.IsDir() {
		return snap, nil
	}
	looked = append(looked, fmt.Sprintf("%s (hub cache from %s: %s)", snap, from, why(err, fi)))
	return "", notFound(spec, owner, name, rev, looked)
}

func why(err error, fi fs.FileInfo) string {
	switch {
	case err == nil && fi != nil && !fi.IsDir():
		return "not a folder"
	case errors.Is(err, fs.ErrNotExist):
		return "does not exist"
	case err != nil:
		var pe *fs.PathError
		if errors.As(err, &pe) {
			return pe.Err.Error()
		}
		return err.Error()
	}
	return "not found"
}

func short(s string) string {
	if len(s) > 60 {
		return s[:60] + "..."
	}
	return s
}

func notFound(spec, owner, name, rev string, looked []string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "retinanet: model %q not found; looked at:\n", spec)
	for _, l := range looked {
		fmt.Fprintf(&b, "  %s\n", l)
	}
	id := owner + "/" + name
	arg, cli := "", ""
	if rev != "main" {
		arg = fmt.Sprintf(", revision='%s'", rev)
		cli = " --revision " + rev
	}
	fmt.Fprintf(&b, "fetch it on a login node with network access, with the same HF_HUB_CACHE (or HF_HOME) as the job:\n")
	fmt.Fprintf(&b, "  python -c \"from huggingface_hub import snapshot_download; snapshot_download('%s'%s)\"\n", id, arg)
	fmt.Fprintf(&b, "  (or: huggingface-cli download %s%s)\n", id, cli)
	fmt.Fprintf(&b, "compute nodes usually have no network: set HF_HUB_CACHE to a cache on a filesystem they share with the login node, or give the snapshot folder itself")
	return modelErr(errors.New(b.String()))
}

// Config is a model folder's config.json as canopy applies it.
type Config struct {
	// LabelDict maps label names to class ids (0..Classes-1), Labels the
	// ids to names.
	LabelDict map[string]int
	Labels    []string
	// Options are DefaultOptions overridden by config.json; Set lists the
	// config.json keys that overrode them (sorted).
	Options retinanet.Options
	Set     []string
	// NumClasses is config.json's num_classes (0 when absent); it must
	// equal the weights' class count.
	NumClasses int
	// Extra lists config.json's keys that canopy ignored (sorted), for the
	// report.
	Extra []string
	// HasConfig is false when the folder has no config.json (defaults
	// used).
	HasConfig bool
}

// The config.json keys LoadFolder applies.
var configKeys = map[string]bool{
	"num_classes": true, "label_dict": true,
	"score_thresh": true, "nms_thresh": true, "detections_per_img": true, "topk_candidates": true,
	"min_size": true, "max_size": true, "image_mean": true, "image_std": true,
}

// parseConfig reads config.json's keys onto DefaultOptions. null values
// count as absent (torchvision's defaults).
func parseConfig(file string, b []byte) (Config, error) {
	c := Config{Options: retinanet.DefaultOptions(), HasConfig: true}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return c, fmt.Errorf("retinanet: %s: not a JSON object: %v", file, err)
	}
	keyErr := func(k string, v json.RawMessage, want string) error {
		return fmt.Errorf("retinanet: %s: %q is %s, want %s", file, k, short(string(v)), want)
	}
	num := func(k string, v json.RawMessage) (float64, error) {
		var f float64
		if err := json.Unmarshal(v, &f); err != nil {
			return 0, keyErr(k, v, "a number")
		}
		return f, nil
	}
	posInt := func(k string, v json.RawMessage) (int, error) {
		var f float64
		if err := json.Unmarshal(v, &f); err != nil || f != math.Trunc(f) || f < 1 || f > 1<<30 {
			return 0, keyErr(k, v, "a positive integer")
		}
		return int(f), nil
	}
	// min_size and max_size are bounded: they size every feature map.
	sideInt := func(k string, v json.RawMessage) (int, error) {
		var f float64
		if err := json.Unmarshal(v, &f); err != nil || f != math.Trunc(f) || f < 1 || f > retinanet.MaxSide {
			return 0, keyErr(k, v, fmt.Sprintf("a positive integer of at most %d", retinanet.MaxSide))
		}
		return int(f), nil
	}
	triple := func(k string, v json.RawMessage) ([3]float32, error) {
		var f []float64
		var out [3]float32
		if err := json.Unmarshal(v, &f); err != nil || len(f) != 3 {
			return out, keyErr(k, v, "a list of 3 numbers (R, G, B)")
		}
		for i := range f {
			out[i] = float32(f[i]) // torch.as_tensor(..., dtype=float32)
			if math.IsInf(float64(out[i]), 0) {
				return out, keyErr(k, v, "a list of 3 numbers (R, G, B) that fit a float32")
			}
		}
		return out, nil
	}
	keys := make([]string, 0, len(raw))
	for k := range raw {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	o := &c.Options
	for _, k := range keys {
		v := raw[k]
		if !configKeys[k] {
			c.Extra = append(c.Extra, k)
			continue
		}
		if string(bytes.TrimSpace(v)) == "null" {
			continue
		}
		var err error
		switch k {
		case "num_classes":
			if c.NumClasses, err = posInt(k, v); err != nil {
				return c, err
			}
			continue // not an option
		case "label_dict":
			if e := json.Unmarshal(v, &c.LabelDict); e != nil {
				err = keyErr(k, v, `an object of label: class id, such as {"Tree": 0}`)
			}
			if err != nil {
				return c, err
			}
			continue
		case "score_thresh":
			var f float64
			f, err = num(k, v)
			o.ScoreThresh = float32(f) // torch compares float32 scores with it as float32
			if err == nil && math.IsInf(float64(o.ScoreThresh), 0) {
				err = keyErr(k, v, "a number that fits a float32")
			}
		case "nms_thresh":
			o.NMSThresh, err = num(k, v)
		case "detections_per_img":
			o.DetectionsPerImg, err = posInt(k, v)
		case "topk_candidates":
			o.TopkCandidates, err = posInt(k, v)
		case "min_size":
			// An int or a list; torchvision's transform uses the last
			// element at eval (self.min_size[-1]).
			var list []json.RawMessage
			if json.Unmarshal(v, &list) == nil {
				if len(list) == 0 {
					return c, keyErr(k, v, "a positive integer or a non-empty list of them")
				}
				v = list[len(list)-1]
			}
			o.MinSize, err = sideInt(k, v)
		case "max_size":
			o.MaxSize, err = sideInt(k, v)
		case "image_mean":
			o.ImageMean, err = triple(k, v)
		case "image_std":
			o.ImageStd, err = triple(k, v)
			for _, s := range o.ImageStd {
				if err == nil && s == 0 {
					err = keyErr(k, v, "non-zero standard deviations")
				}
			}
		}
		if err != nil {
			return c, err
		}
		c.Set = append(c.Set, k)
	}
	return c, nil
}

// checkLabels validates label_dict against the weights' class count and
// fills Labels; a missing label_dict is {"Tree": 0} for a 1-class model.
//
// absent says why there is no label_dict, for the message: "is missing"
// (a folder's config.json), "has no label_dict", or a checkpoint's own
// words.
func (c *Config) checkLabels(file, absent string, classes int) error {
	if c.NumClasses != 0 && c.NumClasses != classes {
		return fmt.Errorf("retinanet: %s says num_classes %d, but the weights have %d classes", file, c.NumClasses, classes)
	}
	if c.LabelDict == nil {
		if classes != 1 {
			return fmt.Errorf("retinanet: %s %s and the weights have %d classes: a label_dict {name: id} is needed for more than one class", file, absent, classes)
		}
		c.LabelDict = map[string]int{"Tree": 0}
	}
	if len(c.LabelDict) != classes {
		return fmt.Errorf("retinanet: %s: label_dict has %d labels, but the weights have %d classes", file, len(c.LabelDict), classes)
	}
	c.Labels = make([]string, classes)
	names := make([]string, 0, len(c.LabelDict))
	for k := range c.LabelDict {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		id := c.LabelDict[k]
		if id < 0 || id >= classes {
			return fmt.Errorf("retinanet: %s: label_dict gives %q the id %d, want 0..%d (the weights have %d classes)", file, k, id, classes-1, classes)
		}
		if c.Labels[id] != "" {
			return fmt.Errorf("retinanet: %s: label_dict gives %q and %q the same id %d", file, c.Labels[id], k, id)
		}
		c.Labels[id] = k
	}
	return nil
}

// LoadFolder loads a model folder: model.safetensors (F32, F16 or BF16;
// pytorch_model.bin is not read) and config.json (optional: without it the
// options are DefaultOptions and a 1-class model's label_dict is
// {"Tree": 0}). The options start from DefaultOptions and config.json's
// score_thresh, nms_thresh, detections_per_img, topk_candidates, min_size
// (an int or a list, whose last element torchvision uses at eval),
// max_size, image_mean and image_std override them; num_classes and
// label_dict (ids 0..K-1, each once) must agree with the weights' K
// classes; other keys are listed in Config.Extra. digest is the hex SHA-256
// of model.safetensors. Every error wraps infer.ErrModel.
func LoadFolder(dir string) (m *retinanet.Model, cfg Config, digest string, err error) {
	defer func() { err = modelErr(err) }()
	st := filepath.Join(dir, "model.safetensors")
	b, err := os.ReadFile(st)
	if errors.Is(err, fs.ErrNotExist) {
		if _, e := os.Stat(filepath.Join(dir, "pytorch_model.bin")); e == nil {
			return nil, cfg, "", fmt.Errorf("retinanet: %s has pytorch_model.bin but no model.safetensors: canopy does not read pickled torch checkpoints; convert it once where torch and safetensors are installed: "+
				"python -c \"import torch; from safetensors.torch import save_file; sd = torch.load('pytorch_model.bin', map_location='cpu'); "+
				"save_file({k: v.contiguous() for k, v in sd.items()}, 'model.safetensors')\"", dir)
		}
		return nil, cfg, "", fmt.Errorf("retinanet: %s: no model.safetensors (not a DeepForest model folder?)", dir)
	}
	if err != nil {
		return nil, cfg, "", fmt.Errorf("retinanet: %w", err)
	}
	sum := sha256.Sum256(b)
	digest = hex.EncodeToString(sum[:])
	cfgFile := filepath.Join(dir, "config.json")
	cb, err := os.ReadFile(cfgFile)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		cfg = Config{Options: retinanet.DefaultOptions()}
	case err != nil:
		return nil, cfg, "", fmt.Errorf("retinanet: %w", err)
	default:
		if cfg, err = parseConfig(cfgFile, cb); err != nil {
			return nil, cfg, "", err
		}
	}
	ts, _, err := safetensors.Parse(st, b)
	if err != nil {
		return nil, cfg, "", err
	}
	b = nil // the float32 tensors are all that is kept
	w := make(nn.Weights, len(ts))
	for k, t := range ts {
		w[k] = nn.Tensor{Shape: t.Shape, Data: t.Data}
	}
	ts = nil
	if err := CheckFinite(w); err != nil {
		return nil, cfg, "", fmt.Errorf("%w (in %s)", err, st)
	}
	if w, err = Normalize(w); err != nil {
		return nil, cfg, "", fmt.Errorf("%w (in %s)", err, st)
	}
	if m, err = retinanet.New(w, cfg.Options); err != nil {
		return nil, cfg, "", fmt.Errorf("%w (in %s)", err, st)
	}
	absent := "has no label_dict"
	if !cfg.HasConfig {
		absent = "is missing"
	}
	if err := cfg.checkLabels(cfgFile, absent, m.Classes); err != nil {
		return nil, cfg, "", err
	}
	return m, cfg, digest, nil
}
