package crop

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
)

// MaxConfigBytes bounds a hub folder's config.json (DeepForest's whole
// config, a few kB).
const MaxConfigBytes = 1 << 20

// MaxBatchSize bounds cropmodel.batch_size.
const MaxBatchSize = 1 << 20

// MaxClasses bounds a crop model's class count (the hub's species model
// has 148).
const MaxClasses = 100000

// Settings are what a crop model's stored config says about inference
// (DeepForest's config.yaml, section cropmodel): its labels, when present,
// the transform and the architecture. Set lists the keys that were given,
// as "key=value", sorted, for the report.
type Settings struct {
	LabelDict    map[string]int // nil when the config has none
	Transform    Transform
	Architecture string // "" when not stated
	// BatchSize is cropmodel.batch_size (0 when not stated): the batches
	// of DeepForest's val_dataloader, which its val_loss averages.
	BatchSize int
	Set       []string
}

// DefaultSettings are DeepForest 2.1.0's (no labels).
func DefaultSettings() Settings { return Settings{Transform: DefaultTransform()} }

// ParseConfig reads a hub folder's config.json as DeepForest's
// CropModel.from_pretrained and get_transform read it: the object
// "cropmodel" with label_dict ({label: id}, ids 0..n-1), resize ([height,
// width]), expand (pixels ≥ 0), and 1bad4419's architecture ("resnet50",
// "resnet18"), normalize (true or false) and resize_interpolation
// ("bilinear" only). Other keys are ignored, as DeepForest ignores them; a
// key of the wrong type or value is an error naming it.
func ParseConfig(b []byte) (Settings, error) {
	s := DefaultSettings()
	if len(b) > MaxConfigBytes {
		return s, fmt.Errorf("crop: config.json is %d bytes, more than the %d a crop model's config needs", len(b), MaxConfigBytes)
	}
	var top map[string]json.RawMessage
	if err := strictJSON(b, &top); err != nil {
		return s, fmt.Errorf("crop: config.json: %w", err)
	}
	raw, ok := top["cropmodel"]
	if !ok || isNull(raw) {
		return s, nil
	}
	var cm map[string]json.RawMessage
	if err := strictJSON(raw, &cm); err != nil {
		return s, fmt.Errorf("crop: config.json: cropmodel: %w", err)
	}
	return s, s.apply(cm, "config.json: cropmodel.")
}

func (s *Settings) apply(cm map[string]json.RawMessage, where string) error {
	keys := make([]string, 0, len(cm))
	for k := range cm {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := cm[k]
		if isNull(v) {
			continue
		}
		bad := func(want string) error {
			return fmt.Errorf("crop: %s%s is %s, want %s", where, k, short(v), want)
		}
		switch k {
		case "label_dict":
			var d map[string]json.RawMessage
			if strictJSON(v, &d) != nil {
				return bad("an object {label: id}")
			}
			ld := make(map[string]int, len(d))
			for name, raw := range d {
				n := json.Number(strings.TrimSpace(string(raw)))
				id, err := n.Int64()
				if err != nil || id < 0 || id > MaxClasses {
					return fmt.Errorf("crop: %slabel_dict: the id of %q is %s, want an integer 0..%d", where, name, n, MaxClasses)
				}
				ld[name] = int(id)
			}
			if err := CheckLabels(ld); err != nil {
				return fmt.Errorf("crop: %slabel_dict: %w", where, err)
			}
			s.LabelDict = ld
			s.Set = append(s.Set, fmt.Sprintf("label_dict=%d labels", len(ld)))
		case "resize":
			var r []json.RawMessage
			if strictJSON(v, &r) != nil || len(r) != 2 {
				return bad("[height, width]")
			}
			for i, raw := range r {
				x, err := json.Number(strings.TrimSpace(string(raw))).Int64()
				if err != nil || x < 1 || x > MaxSide {
					return bad(fmt.Sprintf("[height, width], each an integer 1..%d", MaxSide))
				}
				s.Transform.Size[i] = int(x)
			}
			s.Set = append(s.Set, fmt.Sprintf("resize=[%d, %d]", s.Transform.Size[0], s.Transform.Size[1]))
		case "expand":
			x, err := json.Number(strings.TrimSpace(string(v))).Int64()
			if err != nil || x < 0 || x > MaxSide {
				return bad(fmt.Sprintf("an integer 0..%d", MaxSide))
			}
			s.Transform.Expand = int(x)
			s.Set = append(s.Set, fmt.Sprintf("expand=%d", x))
		case "architecture":
			var a string
			if strictJSON(v, &a) != nil || (a != "resnet50" && a != "resnet18") {
				return bad(`"resnet50" or "resnet18"`)
			}
			s.Architecture = a
			s.Set = append(s.Set, "architecture="+a)
		case "normalize":
			var on bool
			if strictJSON(v, &on) != nil {
				return bad("true or false (canopy takes no other normalization)")
			}
			s.Transform.Normalize = on
			s.Set = append(s.Set, fmt.Sprintf("normalize=%v", on))
		case "batch_size":
			x, err := json.Number(strings.TrimSpace(string(v))).Int64()
			if err != nil || x < 1 || x > MaxBatchSize {
				return bad(fmt.Sprintf("an integer 1..%d", MaxBatchSize))
			}
			s.BatchSize = int(x)
			s.Set = append(s.Set, fmt.Sprintf("batch_size=%d", x))
		case "resize_interpolation":
			var m string
			if strictJSON(v, &m) != nil || m != "bilinear" {
				return bad(`"bilinear" (canopy implements torchvision's antialiased bilinear resize only)`)
			}
			s.Set = append(s.Set, "resize_interpolation=bilinear")
		}
	}
	return nil
}

// CheckLabels checks a crop model's label_dict: at least one label, no
// empty name, ids exactly 0..n-1 (DeepForest maps the argmax back through
// numeric_to_label_dict, which must hold every class index).
func CheckLabels(ld map[string]int) error {
	if len(ld) == 0 {
		return errors.New("no labels")
	}
	if len(ld) > MaxClasses {
		return fmt.Errorf("%d labels, more than %d", len(ld), MaxClasses)
	}
	seen := make([]string, len(ld))
	for name, id := range ld {
		if name == "" {
			return errors.New("an empty label")
		}
		if id < 0 || id >= len(ld) {
			return fmt.Errorf("label %q has id %d: the ids of %d labels must be 0..%d", name, id, len(ld), len(ld)-1)
		}
		if seen[id] != "" {
			a, b := seen[id], name
			if b < a {
				a, b = b, a
			}
			return fmt.Errorf("labels %q and %q share id %d", a, b, id)
		}
		seen[id] = name
	}
	return nil
}

// Names lists a label_dict's names by id.
func Names(ld map[string]int) []string {
	out := make([]string, len(ld))
	for name, id := range ld {
		if id >= 0 && id < len(out) {
			out[id] = name
		}
	}
	return out
}

// strictJSON decodes one JSON value (numbers kept as text) and refuses
// trailing data.
func strictJSON(b []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	if err := d.Decode(v); err != nil {
		return err
	}
	if d.More() {
		return errors.New("trailing data after the JSON value")
	}
	return nil
}

func isNull(b json.RawMessage) bool { return strings.TrimSpace(string(b)) == "null" }

func short(b json.RawMessage) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 40 {
		s = s[:40] + "…"
	}
	return s
}
