package modelfile

// DeepForest's torch files: a Lightning checkpoint (.ckpt, from
// deepforest.save_model() or `deepforest train`) and a bare state dict
// (.pt, torch.save(model.model.state_dict())), read through
// infer/torchfile.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/canopy-hpc/canopy/infer"
	"github.com/canopy-hpc/canopy/infer/nn"
	"github.com/canopy-hpc/canopy/infer/retinanet"
	"github.com/canopy-hpc/canopy/infer/torchfile"
)

// IsTorchFile reports whether spec names a torch.save file by its
// extension (.ckpt, .pt, .pth).
func IsTorchFile(spec string) bool {
	switch strings.ToLower(filepath.Ext(spec)) {
	case ".ckpt", ".pt", ".pth":
		return true
	}
	return false
}

// TorchKind says which torch file a model came from.
type TorchKind string

const (
	// KindCheckpoint is a Lightning checkpoint: state_dict,
	// hyper_parameters.config, label_dict.
	KindCheckpoint TorchKind = "lightning-checkpoint"
	// KindStateDict is a bare state dict.
	KindStateDict TorchKind = "state-dict"
)

// TorchModel is what LoadTorch read besides the network.
type TorchModel struct {
	Kind TorchKind
	// LabelsFrom says where the labels came from: "checkpoint label_dict",
	// "hyper_parameters.config.label_dict", "--label-dict" or "default".
	LabelsFrom string
	// Set lists the options the checkpoint's config set (sorted), as
	// "key=value".
	Set []string
	// DTypes counts the weight tensors by stored dtype.
	DTypes map[string]int
}

// LoadTorch loads a .ckpt or .pt file. For a Lightning checkpoint the
// labels are its label_dict (what DeepForest's on_load_checkpoint
// restores), else hyper_parameters.config.label_dict, else given; the
// options are DefaultOptions with the stored config's score_thresh (or the
// pre-2.0 retinanet.score_thresh, which DeepForest prefers), nms_thresh,
// detections_per_img and topk_candidates. A bare state dict carries no
// labels: given (--label-dict or a config's label_dict) must name them. A
// leading "model." is stripped (Normalize) and num_batches_tracked counters
// are skipped. digest is the file's hex SHA-256. Every error wraps
// infer.ErrModel.
func LoadTorch(path string, given map[string]int) (m *retinanet.Model, cfg Config, tm TorchModel, digest string, err error) {
	defer func() { err = modelErr(err) }()
	cfg = Config{Options: retinanet.DefaultOptions()}
	if digest, err = fileDigest(path); err != nil {
		return nil, cfg, tm, "", fmt.Errorf("retinanet: %w", err)
	}
	f, err := torchfile.Open(path)
	if err != nil {
		return nil, cfg, tm, "", err
	}
	defer f.Close()
	root, ok := f.Root.(*torchfile.Dict)
	if !ok {
		return nil, cfg, tm, "", fmt.Errorf("retinanet: %s holds a %s, want a state dict or a Lightning checkpoint (a dict)", path, kindName(f.Root))
	}
	sd := root
	if v, ok := root.Get("state_dict"); ok {
		tm.Kind = KindCheckpoint
		if sd, ok = v.(*torchfile.Dict); !ok {
			return nil, cfg, tm, "", fmt.Errorf("retinanet: %s: state_dict is a %s, want a dict of tensors", path, kindName(v))
		}
	} else if strings.EqualFold(filepath.Ext(path), ".ckpt") || hasKey(root, "hyper_parameters") || hasKey(root, "pytorch-lightning_version") {
		return nil, cfg, tm, "", fmt.Errorf("retinanet: %s is a checkpoint without a state_dict (keys: %s): nothing to load", path, keyList(root))
	} else {
		tm.Kind = KindStateDict
	}
	w, dtypes, err := weightsOf(f, sd)
	if err != nil {
		return nil, cfg, tm, "", err
	}
	tm.DTypes = dtypes
	if err := CheckFinite(w); err != nil {
		return nil, cfg, tm, "", fmt.Errorf("%w (in %s)", err, path)
	}
	if w, err = Normalize(w); err != nil {
		return nil, cfg, tm, "", fmt.Errorf("%w (in %s)", err, path)
	}
	var conf *torchfile.Dict
	if tm.Kind == KindCheckpoint {
		if hp, ok := root.Get("hyper_parameters"); ok {
			if hd, ok := hp.(*torchfile.Dict); ok {
				if c, ok := hd.Get("config"); ok {
					conf, _ = c.(*torchfile.Dict)
				}
			}
		}
		if conf != nil {
			if tm.Set, err = applyStoredConfig(&cfg, conf, path); err != nil {
				return nil, cfg, tm, "", err
			}
		}
	}
	if m, err = retinanet.New(w, cfg.Options); err != nil {
		return nil, cfg, tm, "", fmt.Errorf("%w (in %s)", err, path)
	}
	cfg.HasConfig = conf != nil
	switch {
	case tm.Kind == KindCheckpoint && hasKey(root, "label_dict") && !isNone(root, "label_dict"):
		v, _ := root.Get("label_dict")
		if cfg.LabelDict, err = labelDict(v, path+": label_dict"); err != nil {
			return nil, cfg, tm, "", err
		}
		tm.LabelsFrom = "checkpoint label_dict"
	case conf != nil && hasKey(conf, "label_dict") && !isNone(conf, "label_dict"):
		v, _ := conf.Get("label_dict")
		if cfg.LabelDict, err = labelDict(v, path+": hyper_parameters.config.label_dict"); err != nil {
			return nil, cfg, tm, "", err
		}
		tm.LabelsFrom = "hyper_parameters.config.label_dict"
	case given != nil:
		cfg.LabelDict = given
		tm.LabelsFrom = "--label-dict"
	case tm.Kind == KindStateDict:
		return nil, cfg, tm, "", fmt.Errorf("retinanet: %s is a bare state dict, which holds no labels: give them with --label-dict (label,id CSV) or a --config whose label_dict names them", path)
	default:
		tm.LabelsFrom = "default"
	}
	if err := cfg.checkLabels(path, torchNoLabels, m.Classes); err != nil {
		return nil, cfg, tm, "", err
	}
	return m, cfg, tm, digest, nil
}

// torchNoLabels is checkLabels' words for a .ckpt without labels (not the
// folder's "is missing", which names a missing config.json: the checkpoint
// is there, its labels are not).
const torchNoLabels = "holds no label_dict (neither its own nor hyper_parameters.config's; --label-dict or a --config label_dict can give one)"

func fileDigest(path string) (string, error) { return infer.FileSHA256(path) }

// weightsOf converts a state dict's float tensors (torchfile's
// StateDict: integer num_batches_tracked counters skipped, any other
// non-tensor or non-float value an error naming it).
func weightsOf(f *torchfile.File, sd *torchfile.Dict) (nn.Weights, map[string]int, error) {
	ts, dtypes, err := f.StateDict(sd)
	if err != nil {
		return nil, nil, fmt.Errorf("retinanet: %w", err)
	}
	w := make(nn.Weights, len(ts))
	for k, t := range ts {
		w[k] = nn.Tensor{Shape: t.Shape, Data: t.Data}
	}
	return w, dtypes, nil
}

// applyStoredConfig applies a checkpoint's stored DeepForest config: the
// options RetinaNetHub's constructor takes from it.
func applyStoredConfig(cfg *Config, conf *torchfile.Dict, path string) ([]string, error) {
	var set []string
	o := &cfg.Options
	num := func(key string, v any) (float64, bool, error) {
		switch x := v.(type) {
		case nil:
			return 0, false, nil
		case float64:
			return x, true, nil
		case int64:
			return float64(x), true, nil
		}
		return 0, false, fmt.Errorf("retinanet: %s: hyper_parameters.config.%s is a %s, want a number", path, key, kindName(v))
	}
	score := func(key string, v any) error {
		f, ok, err := num(key, v)
		if err != nil || !ok {
			return err
		}
		if !(f >= 0 && f <= 1) {
			return fmt.Errorf("retinanet: %s: hyper_parameters.config.%s is %v, want a number in [0, 1]", path, key, f)
		}
		o.ScoreThresh = float32(f)
		set = append(set, fmt.Sprintf("score_thresh=%v", f))
		return nil
	}
	if v, ok := conf.Get("score_thresh"); ok {
		if err := score("score_thresh", v); err != nil {
			return nil, err
		}
	}
	// Pre 2.0 checkpoints: DeepForest copies retinanet.score_thresh over
	// score_thresh when it exists.
	if r, ok := conf.Get("retinanet"); ok {
		if rd, ok := r.(*torchfile.Dict); ok {
			if v, ok := rd.Get("score_thresh"); ok {
				set = set[:0]
				if err := score("retinanet.score_thresh", v); err != nil {
					return nil, err
				}
			}
		}
	}
	if v, ok := conf.Get("nms_thresh"); ok {
		f, ok, err := num("nms_thresh", v)
		if err != nil {
			return nil, err
		}
		if ok {
			if !(f >= 0 && f <= 1) {
				return nil, fmt.Errorf("retinanet: %s: hyper_parameters.config.nms_thresh is %v, want a number in [0, 1]", path, f)
			}
			o.NMSThresh = f
			set = append(set, fmt.Sprintf("nms_thresh=%v", f))
		}
	}
	for _, k := range []string{"detections_per_img", "topk_candidates"} {
		v, ok := conf.Get(k)
		if !ok || v == nil {
			continue
		}
		n, isInt := v.(int64)
		if !isInt || n < 1 || n > 1<<30 {
			return nil, fmt.Errorf("retinanet: %s: hyper_parameters.config.%s is %v, want a positive integer", path, k, v)
		}
		if k == "detections_per_img" {
			o.DetectionsPerImg = int(n)
		} else {
			o.TopkCandidates = int(n)
		}
		set = append(set, fmt.Sprintf("%s=%d", k, n))
	}
	if v, ok := conf.Get("num_classes"); ok && v != nil {
		n, isInt := v.(int64)
		if !isInt || n < 1 || n > 1<<20 {
			return nil, fmt.Errorf("retinanet: %s: hyper_parameters.config.num_classes is %v, want a positive integer", path, v)
		}
		cfg.NumClasses = int(n)
	}
	sort.Strings(set)
	return set, nil
}

// labelDict reads a {name: id} dict (torchfile.LabelDict).
func labelDict(v any, what string) (map[string]int, error) {
	ld, err := torchfile.LabelDict(v, what)
	if err != nil {
		return nil, fmt.Errorf("retinanet: %w", err)
	}
	return ld, nil
}

func hasKey(d *torchfile.Dict, k string) bool { _, ok := d.Get(k); return ok }

func isNone(d *torchfile.Dict, k string) bool { v, _ := d.Get(k); return v == nil }

func keyList(d *torchfile.Dict) string {
	var ks []string
	for _, k := range d.Keys {
		ks = append(ks, fmt.Sprint(k))
	}
	if len(ks) > 12 {
		ks = append(ks[:12], "...")
	}
	return strings.Join(ks, ", ")
}

func kindName(v any) string { return torchfile.KindName(v) }

// Load loads a model folder (LoadFolder) or a torch file (LoadTorch, with
// given labels for a bare state dict).
func Load(path string, given map[string]int) (*retinanet.Model, Config, *TorchModel, string, error) {
	if fi, err := os.Stat(path); err == nil && fi.Mode().IsRegular() {
		m, cfg, tm, digest, err := LoadTorch(path, given)
		return m, cfg, &tm, digest, err
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, Config{}, nil, "", modelErrf("retinanet: %w", err)
	}
	m, cfg, digest, err := LoadFolder(path)
	return m, cfg, nil, digest, err
}
