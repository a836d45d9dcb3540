package crop

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/canopy-hpc/canopy/infer"
	"github.com/canopy-hpc/canopy/infer/nn"
	"github.com/canopy-hpc/canopy/infer/safetensors"
	"github.com/canopy-hpc/canopy/infer/torchfile"
)

// Form is the kind of file a crop model came from.
type Form string

const (
	// FormCheckpoint is a Lightning checkpoint (trainer.save_checkpoint):
	// state_dict, label_dict (CropModel.on_save_checkpoint),
	// hyper_parameters.config / config_args.
	FormCheckpoint Form = "lightning-checkpoint"
	// FormStateDict is torch.save(model.state_dict()): no labels.
	FormStateDict Form = "state-dict"
	// FormHub is a save_pretrained folder: config.json + model.safetensors.
	FormHub Form = "hub-folder"
)

// Options are Load's inputs besides the path.
type Options struct {
	// LabelDict is --crop-label-dict: the labels of a file that holds none
	// (a bare state dict, a hub folder whose config.json has no
	// cropmodel.label_dict); when the file has its own, they must be
	// equal.
	LabelDict map[string]int
	// Fallback makes LabelDict apply only to a file without labels of its
	// own (one --crop-label-dict for several crop models); a file's own
	// labels are then kept unchecked.
	Fallback bool
}

// source is what a crop model file holds, before the network is built.
type source struct {
	form     Form
	weights  map[string]torchfile.Floats
	dtypes   map[string]int
	settings Settings
	labels   map[string]int // the file's own (nil: none)
	from     string         // where the labels came from
	digest   string         // sha256 of the weights file
}

func modelErr(err error) error { return infer.ModelErr(err) }

// read opens a crop model's file or folder.
func read(path string) (*source, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("crop: %w", err)
	}
	if fi.IsDir() {
		return readHub(path)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("crop: %s is not a regular file or a folder", path)
	}
	return readTorch(path)
}

// readTorch reads a .ckpt or .pt/.pth file through infer/torchfile's
// restricted unpickler.
func readTorch(path string) (*source, error) {
	s := &source{settings: DefaultSettings()}
	var err error
	if s.digest, err = digest(path); err != nil {
		return nil, err
	}
	f, err := torchfile.Open(path)
	var fg *torchfile.ForbiddenGlobalError
	if errors.As(err, &fg) && (strings.HasPrefix(fg.Name, "omegaconf.") || strings.HasPrefix(fg.Name, "deepforest.")) {
		return nil, fmt.Errorf("%w: a CropModel built with config= stores its OmegaConf config as Python objects in the checkpoint, "+
			"which canopy does not unpickle; save it with save_pretrained (a hub folder), or torch.save(crop_model.model.state_dict()) "+
			"and give --crop-label-dict", err)
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	root, ok := f.Root.(*torchfile.Dict)
	if !ok {
		return nil, fmt.Errorf("crop: %s holds a %s, want a state dict or a Lightning checkpoint (a dict)", path, torchfile.KindName(f.Root))
	}
	sd := root
	if v, ok := root.Get("state_dict"); ok {
		s.form = FormCheckpoint
		if sd, ok = v.(*torchfile.Dict); !ok {
			return nil, fmt.Errorf("crop: %s: state_dict is a %s, want a dict of tensors", path, torchfile.KindName(v))
		}
	} else if strings.EqualFold(filepath.Ext(path), ".ckpt") || has(root, "hyper_parameters") || has(root, "pytorch-lightning_version") {
		return nil, fmt.Errorf("crop: %s is a checkpoint without a state_dict: nothing to load", path)
	} else {
		s.form = FormStateDict
	}
	if s.weights, s.dtypes, err = f.StateDict(sd); err != nil {
		return nil, fmt.Errorf("crop: %w", err)
	}
	if s.form == FormCheckpoint {
		// CropModel(config=..., config_args=...): the stored config's
		// cropmodel section, then config_args over it, as
		// utilities.load_config(overrides={"cropmodel": config_args}).
		for _, keys := range [][]string{{"hyper_parameters", "config", "cropmodel"}, {"hyper_parameters", "config_args"}} {
			v, ok := torchfile.Lookup(root, keys...)
			if !ok || v == nil {
				continue
			}
			where := path + ": " + strings.Join(keys, ".") + "."
			cm, err := pyToJSON(v)
			if err != nil {
				return nil, fmt.Errorf("crop: %s: %w", where, err)
			}
			var m map[string]json.RawMessage
			if err := strictJSON(cm, &m); err != nil {
				return nil, fmt.Errorf("crop: %s is not a dict", strings.TrimSuffix(where, "."))
			}
			if err := s.settings.apply(m, where); err != nil {
				return nil, err
			}
		}
		if v, ok := root.Get("label_dict"); ok && v != nil {
			if s.labels, err = torchfile.LabelDict(v, path+": label_dict"); err != nil {
				return nil, fmt.Errorf("crop: %w", err)
			}
			s.from = "checkpoint label_dict"
		} else if s.settings.LabelDict != nil {
			s.labels, s.from = s.settings.LabelDict, "hyper_parameters cropmodel.label_dict"
		}
	}
	return s, nil
}

// readHub reads a save_pretrained folder: config.json (optional: a
// folder without one takes DeepForest's defaults and needs
// --crop-label-dict) and model.safetensors.
func readHub(dir string) (*source, error) {
	s := &source{form: FormHub, settings: DefaultSettings()}
	cfgPath := filepath.Join(dir, "config.json")
	b, err := readSmall(cfgPath, MaxConfigBytes)
	switch {
	case err == nil:
		if s.settings, err = ParseConfig(b); err != nil {
			return nil, fmt.Errorf("%w (in %s)", err, cfgPath)
		}
		if s.settings.LabelDict != nil {
			s.labels, s.from = s.settings.LabelDict, "config.json cropmodel.label_dict"
		}
	case !errors.Is(err, os.ErrNotExist):
		return nil, fmt.Errorf("crop: %w", err)
	}
	wpath := filepath.Join(dir, "model.safetensors")
	if s.digest, err = digest(wpath); err != nil {
		return nil, err
	}
	ts, _, err := safetensors.Read(wpath)
	if err != nil {
		return nil, fmt.Errorf("crop: %w", err)
	}
	s.weights = make(map[string]torchfile.Floats, len(ts))
	s.dtypes = map[string]int{}
	for name, t := range ts {
		s.weights[name] = torchfile.Floats{Shape: t.Shape, Data: t.Data}
		s.dtypes[t.DType]++
	}
	return s, nil
}

// stored is the weights by their names in the file (a leading "model."
// kept), for the messages that name a tensor.
func (s *source) stored() map[string]nn.Tensor {
	w := make(map[string]nn.Tensor, len(s.weights))
	for k, t := range s.weights {
		w[k] = nn.Tensor{Shape: t.Shape, Data: t.Data}
	}
	return w
}

// labelsFor settles a model's labels: its own, else given; both must
// then be equal.
func (s *source) labelsFor(path string, given map[string]int, fallback bool) (map[string]int, string, error) {
	switch {
	case s.labels != nil && fallback:
		return s.labels, s.from, nil
	case s.labels != nil && given != nil:
		if !maps.Equal(s.labels, given) {
			return nil, "", fmt.Errorf("crop: %s holds the labels %s (%s), but --crop-label-dict gives %s", path, labelString(s.labels), s.from, labelString(given))
		}
		return s.labels, s.from, nil
	case s.labels != nil:
		return s.labels, s.from, nil
	case given != nil:
		return given, "--crop-label-dict", nil
	}
	what := "a bare state dict, which holds no labels"
	if s.form == FormHub {
		what = "a hub folder whose config.json has no cropmodel.label_dict"
	} else if s.form == FormCheckpoint {
		what = "a checkpoint without label_dict"
	}
	return nil, "", fmt.Errorf("crop: %s is %s: give them with --crop-label-dict (label,id CSV)", path, what)
}

// labelString lists labels by id: {Alive: 0, Dead: 1}.
func labelString(ld map[string]int) string {
	type kv struct {
		k string
		v int
	}
	var l []kv
	for k, v := range ld {
		l = append(l, kv{k, v})
	}
	sort.Slice(l, func(i, j int) bool { return l[i].v < l[j].v || l[i].v == l[j].v && l[i].k < l[j].k })
	var b strings.Builder
	b.WriteByte('{')
	for i, e := range l {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.Quote(e.k) + ": " + strconv.Itoa(e.v))
	}
	b.WriteByte('}')
	return b.String()
}

func has(d *torchfile.Dict, k string) bool { _, ok := d.Get(k); return ok }

func digest(path string) (string, error) {
	d, err := infer.FileSHA256(path)
	if err != nil {
		return "", fmt.Errorf("crop: %w", err)
	}
	return d, nil
}

// readSmall reads a regular file of at most limit bytes.
func readSmall(path string, limit int64) ([]byte, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	fi, err := fh.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	if fi.Size() > limit {
		return nil, fmt.Errorf("%s is %d bytes, more than %d", path, fi.Size(), limit)
	}
	return io.ReadAll(io.LimitReader(fh, limit+1))
}

// pyToJSON writes an unpickled value (dicts with str keys, lists,
// tuples, str, int, float, bool, None) as JSON, so that a checkpoint's
// stored config goes through the same rules as a hub folder's
// config.json.
func pyToJSON(v any) ([]byte, error) {
	var b bytes.Buffer
	var walk func(v any, depth int) error
	walk = func(v any, depth int) error {
		if depth > 32 {
			return errors.New("nested too deep")
		}
		switch x := v.(type) {
		case nil:
			b.WriteString("null")
		case bool:
			b.WriteString(strconv.FormatBool(x))
		case int64:
			b.WriteString(strconv.FormatInt(x, 10))
		case float64:
			s, err := json.Marshal(x)
			if err != nil {
				return fmt.Errorf("the float %v", x)
			}
			b.Write(s)
		case string:
			s, _ := json.Marshal(x)
			b.Write(s)
		case *torchfile.Dict:
			b.WriteByte('{')
			for i, k := range x.Keys {
				ks, ok := k.(string)
				if !ok {
					ks = fmt.Sprint(k)
				}
				if i > 0 {
					b.WriteByte(',')
				}
				s, _ := json.Marshal(ks)
				b.Write(s)
				b.WriteByte(':')
				if err := walk(x.Values[i], depth+1); err != nil {
					return err
				}
			}
			b.WriteByte('}')
		case *torchfile.List:
			return walkList(&b, x.Items, depth, walk)
		case torchfile.Tuple:
			return walkList(&b, x, depth, walk)
		default:
			return fmt.Errorf("a %s", torchfile.KindName(v))
		}
		return nil
	}
	if err := walk(v, 0); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func walkList(b *bytes.Buffer, items []any, depth int, walk func(any, int) error) error {
	b.WriteByte('[')
	for i, it := range items {
		if i > 0 {
			b.WriteByte(',')
		}
		if err := walk(it, depth+1); err != nil {
			return err
		}
	}
	b.WriteByte(']')
	return nil
}

// Probe reports whether path (a .ckpt/.pt file or a hub folder) holds a
// crop model's weights: a ResNet classifier's (conv1 and fc, no detector
// parts). It is how a detector loader explains a crop model given as a
// detector; any reading error is false.
func Probe(path string) bool {
	s, err := read(path)
	if err != nil {
		return false
	}
	_, err = classifierWeights(s.weights, path)
	return err == nil
}
