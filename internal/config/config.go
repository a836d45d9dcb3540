// Package config reads a DeepForest config.yaml (the schema of DeepForest
// 1bad4419 conf/schema.py) and the trailing key=value overrides of its CLI
// into the typed settings canopy's eval and predict use.
//
// Every key of the schema is known: a key that is not (a misspelling) is an
// error naming the nearest known key; a known key whose value has the wrong
// type is an error naming the key, the file and its line. Known keys canopy
// does not use are listed in Config.Ignored (the report's
// run.config_ignored). An override "a.b=value" is parsed as a YAML scalar
// (Hydra's grammar for the values DeepForest's keys take: numbers, true,
// false, null, strings, [lists], {maps}) and replaces the file's value.
// Which source wins over which is the caller's rule (jobs: flag, override,
// config, model, default).
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"
)

// ErrConfig is wrapped by every error about a config or an override.
var ErrConfig = errors.New("invalid DeepForest config")

// Source is where a setting came from.
type Source string

// The sources, strongest first.
const (
	Flag     Source = "flag"
	Override Source = "override"
	File     Source = "config"
	Model    Source = "model"
	Default  Source = "default"
)

// Float, Int, Str and Labels are settings the config or an override gave
// (Src "" when neither did).
type Float struct {
	V   float64
	Src Source
}

// Int is an integer setting.
type Int struct {
	V   int
	Src Source
}

// Str is a string setting.
type Str struct {
	V   string
	Src Source
}

// Labels is label_dict.
type Labels struct {
	V   map[string]int
	Src Source
}

// Config holds the keys canopy uses, typed.
type Config struct {
	ScoreThresh, NMSThresh, IoUThreshold Float
	DetectionsPerImg, TopkCandidates     Int
	BatchSize, NumClasses                Int
	LabelDict                            Labels
	ModelName, ModelRevision             Str
	ValidationCSV, ValidationRoot        Str
	// PatchSize and PatchOverlap: predict_tile's window (--tile only).
	PatchSize    Int
	PatchOverlap Float
	// Ignored lists the known keys given (in the file or an override)
	// that this command does not use, sorted, each once.
	Ignored []string
}

// kind is a schema leaf's type.
type kind int

const (
	kFloat kind = iota + 1
	kInt
	kStr
	kBool
	kList
	kMap
	kAny
)

type leaf struct {
	k        kind
	nullable bool
}

var kindName = map[kind]string{kFloat: "a number", kInt: "an integer", kStr: "a string", kBool: "true or false", kList: "a list", kMap: "a mapping", kAny: "a value"}

// schema is DeepForest's conf/schema.py, flattened to dotted keys.
var schema = func() map[string]leaf {
	s := map[string]leaf{}
	add := func(prefix string, keys map[string]leaf) {
		for k, v := range keys {
			if prefix != "" {
				k = prefix + "." + k
			}
			s[k] = v
		}
	}
	f, i, st, b := leaf{k: kFloat}, leaf{k: kInt}, leaf{k: kStr}, leaf{k: kBool}
	stn, in := leaf{k: kStr, nullable: true}, leaf{k: kInt, nullable: true}
	list, anyv := leaf{k: kList}, leaf{k: kAny, nullable: true}
	add("", map[string]leaf{"workers": i, "devices": anyv, "accelerator": st, "num_nodes": i, "strategy": st,
		"precision": stn, "sync_batchnorm": b, "use_distributed_sampler": b, "batch_size": i, "matmul_precision": st,
		"architecture": st, "num_classes": in, "label_dict": {k: kMap, nullable: true}, "nms_thresh": f, "score_thresh": f,
		"detections_per_img": i, "topk_candidates": i, "log_root": st, "path_to_raster": stn, "patch_size": i,
		"patch_overlap": f, "annotations_xml": stn, "rgb_dir": stn, "path_to_rgb": stn})
	add("model", map[string]leaf{"name": stn, "revision": st})
	sched := func(p string) {
		add(p, map[string]leaf{"type": stn})
		add(p+".params", map[string]leaf{"T_max": i, "eta_min": f, "lr_lambda": st, "step_size": i, "gamma": f,
			"milestones": list, "mode": st, "factor": f, "patience": i, "threshold": f, "threshold_mode": st,
			"cooldown": i, "min_lr": f, "eps": f})
	}
	add("train", map[string]leaf{"csv_file": stn, "root_dir": stn, "lr": f, "epochs": i, "fast_dev_run": b,
		"preload_images": b, "validate_coordinates": b, "augmentations": anyv})
	add("train.optimizer", map[string]leaf{"type": st, "weight_decay": f, "momentum": f, "betas": list})
	sched("train.scheduler")
	add("validation", map[string]leaf{"csv_file": stn, "root_dir": stn, "preload_images": b, "validate_coordinates": b,
		"size": in, "iou_threshold": f, "val_accuracy_interval": i, "lr_plateau_target": st, "augmentations": anyv})
	add("predict", map[string]leaf{"pin_memory": b})
	add("cropmodel", map[string]leaf{"architecture": st, "batch_size": i, "num_workers": i, "lr": f,
		"balance_classes": b, "resize": list, "resize_interpolation": st, "normalize": anyv, "expand": i})
	sched("cropmodel.scheduler")
	add("point", map[string]leaf{"backbone": st, "score_integration_radius": i, "nms_distance_thresh": f,
		"distance_threshold": f, "density_sigma": f, "mae_weight": f, "ot_weight": f, "density_l1_weight": f,
		"count_cls_weight": f, "sinkhorn_reg": f, "num_of_iter_in_ot": i, "losses": anyv, "norm_cood": b, "enforce_count": b})
	return s
}()

// sections are the schema's nested mappings.
var sections = func() map[string]bool {
	s := map[string]bool{}
	for k := range schema {
		for p := k; strings.Contains(p, "."); {
			p = p[:strings.LastIndex(p, ".")]
			s[p] = true
		}
	}
	return s
}()

// Used lists the keys each command applies.
var Used = map[string]map[string]bool{
	"eval": set("score_thresh", "nms_thresh", "detections_per_img", "topk_candidates", "batch_size", "num_classes",
		"label_dict", "model.name", "model.revision", "validation.csv_file", "validation.root_dir", "validation.iou_threshold"),
	"predict": set("score_thresh", "nms_thresh", "detections_per_img", "topk_candidates", "batch_size", "num_classes",
		"label_dict", "model.name", "model.revision"),
	// --tile: DeepForest's CLI --mode tile also passes patch_size,
	// patch_overlap and (as predict_tile's iou_threshold) nms_thresh.
	"predict --tile": set("score_thresh", "nms_thresh", "detections_per_img", "topk_candidates", "batch_size", "num_classes",
		"label_dict", "model.name", "model.revision", "patch_size", "patch_overlap"),
	"eval --tile": set("score_thresh", "nms_thresh", "detections_per_img", "topk_candidates", "batch_size", "num_classes",
		"label_dict", "model.name", "model.revision", "validation.csv_file", "validation.root_dir", "validation.iou_threshold",
		"patch_size", "patch_overlap"),
}

func set(keys ...string) map[string]bool {
	m := map[string]bool{}
	for _, k := range keys {
		m[k] = true
	}
	return m
}

var overrideKey = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*=`)

// IsOverride reports whether a command-line argument is a key=value
// override (its key a dotted identifier).
func IsOverride(arg string) bool { return overrideKey.MatchString(arg) }

// MalformedOverride is the error for a command-line argument that is not
// an override (IsOverride is false) but was meant as one, naming the
// nearest known key; nil for an argument that is something else (a file).
// Meant as one: a "=" whose left side is no path (=0.3, score-thresh=0.3,
// scöre_thresh=0.3, Hydra's +key=, ++key= and ~key=), or, when no file of
// that name exists (isFile false), a bare known key (score_thresh).
func MalformedOverride(arg string, isFile bool) error {
	key, _, hasEq := strings.Cut(arg, "=")
	if !hasEq {
		k := strings.TrimLeft(arg, "+~")
		if _, known := schema[k]; isFile || !(known || sections[k]) {
			return nil
		}
		return fmt.Errorf("config: argument %q is a key without a value: give %s=VALUE: %w", arg, k, ErrConfig)
	}
	if strings.ContainsAny(key, `/\`) {
		return nil // a path holding "="
	}
	if strings.TrimSpace(key) == "" {
		return fmt.Errorf("config: override %q has no key: want key=value (such as score_thresh=0.3): %w", arg, ErrConfig)
	}
	if len(key) > maxKeyLen {
		return fmt.Errorf("config: override %q…: a key of %d bytes, longer than any key of DeepForest's schema: %w", key[:40], len(key), ErrConfig)
	}
	if strings.HasPrefix(key, "+") || strings.HasPrefix(key, "~") {
		return fmt.Errorf("config: override %q: Hydra's +key, ++key and ~key forms are not read; give %s=… (a key of DeepForest's schema): %w", arg, nearest(strings.TrimLeft(key, "+~")), ErrConfig)
	}
	return fmt.Errorf("config: override %q: key %q is not a dotted name of ASCII letters, digits and _ (did you mean %s?): %w", arg, key, nearest(strings.ReplaceAll(key, "-", "_")), ErrConfig)
}

// MaxFile is the largest config file read (DeepForest's is 4 kB).
const MaxFile = 1 << 20

// Load reads a config's bytes (name for the messages; nil data: no file,
// overrides over DeepForest's defaults) and the overrides, for command
// ("eval" or "predict").
func Load(name string, data []byte, overrides []string, command string) (*Config, error) {
	values := map[string]*yaml.Node{}
	src := map[string]Source{}
	where := map[string]string{}
	if data != nil {
		if len(data) > MaxFile {
			return nil, fmt.Errorf("config: %s: %d bytes, over the %d-byte limit: %w", name, len(data), MaxFile, ErrConfig)
		}
		var doc yaml.Node
		dec := yaml.NewDecoder(bytes.NewReader(data))
		if err := dec.Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("config: %s: %v: %w", name, err, ErrConfig)
		}
		// OmegaConf.load reads one document (PyYAML's yaml.load): a
		// second one, even empty ("---" at the end), is an error there
		// ("expected a single document in the stream"), never ignored.
		var next yaml.Node
		if err := dec.Decode(&next); !errors.Is(err, io.EOF) {
			line := next.Line
			if err != nil {
				return nil, fmt.Errorf("config: %s: a second YAML document that does not parse (%v); OmegaConf reads a file of one document: %w", name, err, ErrConfig)
			}
			return nil, fmt.Errorf("config: %s:%d: a second YAML document (after ---); OmegaConf refuses a file of more than one (expected a single document in the stream): %w", name, line, ErrConfig)
		}
		if len(doc.Content) > 0 && !isNull(doc.Content[0]) { // "---" alone: no keys, as OmegaConf
			root := doc.Content[0]
			if root.Kind != yaml.MappingNode {
				return nil, fmt.Errorf("config: %s: the document is not a mapping of keys: %w", name, ErrConfig)
			}
			if err := flatten(name, "", root, values, where); err != nil {
				return nil, err
			}
			for k := range values {
				src[k] = File
			}
		}
	}
	for _, o := range overrides {
		k, v, _ := strings.Cut(o, "=")
		if !IsOverride(o) {
			if err := MalformedOverride(o, false); err != nil {
				return nil, err
			}
			return nil, fmt.Errorf("config: override %q: want key=value (such as validation.iou_threshold=0.5): %w", o, ErrConfig)
		}
		if sections[k] {
			return nil, fmt.Errorf("config: override %q: %s is a section; give one of its keys (%s.…): %w", o, k, k, ErrConfig)
		}
		if _, ok := schema[k]; !ok {
			at := "override " + o
			if len(at) > 100 {
				at = at[:100] + "…"
			}
			return nil, unknown(at, k)
		}
		var n yaml.Node
		if err := yaml.Unmarshal([]byte(v), &n); err != nil {
			return nil, fmt.Errorf("config: override %q: %v: %w", o, err, ErrConfig)
		}
		node := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Value: "null"}
		if len(n.Content) > 0 {
			node = n.Content[0]
		}
		values[k], src[k], where[k] = node, Override, "override "+o
	}
	c := &Config{}
	keys := make([]string, 0, len(values))
	for k := range values {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		n, l := values[k], schema[k]
		if err := check(n, l); err != nil {
			return nil, fmt.Errorf("config: %s: %s is %s, want %s: %w", where[k], k, describe(n), err, ErrConfig)
		}
		if !Used[command][k] {
			c.Ignored = append(c.Ignored, k)
			continue
		}
		if isNull(n) {
			continue
		}
		s := src[k]
		var err error
		switch k {
		case "score_thresh", "nms_thresh", "validation.iou_threshold":
			var f float64
			if err = n.Decode(&f); err == nil && !(f >= 0 && f <= 1) {
				err = fmt.Errorf("a number in [0, 1]")
			}
			fv := Float{V: f, Src: s}
			switch k {
			case "score_thresh":
				c.ScoreThresh = fv
			case "nms_thresh":
				c.NMSThresh = fv
			default:
				c.IoUThreshold = fv
			}
		case "patch_overlap": // range checked with the windows (exit 3), as --patch-overlap
			var f float64
			err = n.Decode(&f)
			c.PatchOverlap = Float{V: f, Src: s}
		case "detections_per_img", "topk_candidates", "batch_size", "num_classes", "patch_size":
			var v int
			if err = n.Decode(&v); err == nil && (v < 1 || v > 1<<30) {
				err = fmt.Errorf("a positive integer")
			}
			iv := Int{V: v, Src: s}
			switch k {
			case "detections_per_img":
				c.DetectionsPerImg = iv
			case "topk_candidates":
				c.TopkCandidates = iv
			case "batch_size":
				c.BatchSize = iv
			case "patch_size":
				c.PatchSize = iv
			default:
				c.NumClasses = iv
			}
		case "label_dict":
			var m map[string]int
			if err = n.Decode(&m); err != nil {
				err = fmt.Errorf("a mapping of label: class id, such as {Tree: 0}")
			} else if len(m) > 0 {
				c.LabelDict = Labels{V: m, Src: s}
			}
			for l, id := range m {
				if err == nil && (id < 0 || l == "") {
					err = fmt.Errorf("non-empty labels with ids >= 0 (%q: %d)", l, id)
				}
			}
		case "model.name", "model.revision", "validation.csv_file", "validation.root_dir":
			var v string
			err = n.Decode(&v)
			sv := Str{V: v, Src: s}
			switch k {
			case "model.name":
				c.ModelName = sv
			case "model.revision":
				c.ModelRevision = sv
			case "validation.csv_file":
				c.ValidationCSV = sv
			default:
				c.ValidationRoot = sv
			}
		}
		if err != nil {
			return nil, fmt.Errorf("config: %s: %s is %s, want %v: %w", where[k], k, describe(n), err, ErrConfig)
		}
	}
	return c, nil
}

// flatten walks a mapping into dotted keys, refusing unknown ones.
func flatten(name, prefix string, m *yaml.Node, out map[string]*yaml.Node, where map[string]string) error {
	for i := 0; i+1 < len(m.Content); i += 2 {
		kn, vn := m.Content[i], m.Content[i+1]
		key := kn.Value
		if prefix != "" {
			key = prefix + "." + key
		}
		at := fmt.Sprintf("%s:%d", name, kn.Line)
		if _, dup := out[key]; dup {
			return fmt.Errorf("config: %s: key %s given twice: %w", at, key, ErrConfig)
		}
		if key == "defaults" {
			// Hydra's defaults list: DeepForest's bird.yaml composes
			// [config, _self_], DeepForest's defaults under this file,
			// which is what canopy reads anyway.
			if err := checkDefaults(at, vn); err != nil {
				return err
			}
			continue
		}
		if sections[key] {
			if isNull(vn) {
				continue
			}
			if vn.Kind != yaml.MappingNode {
				return fmt.Errorf("config: %s: %s is %s, want a mapping of its keys: %w", at, key, describe(vn), ErrConfig)
			}
			if err := flatten(name, key, vn, out, where); err != nil {
				return err
			}
			continue
		}
		if _, ok := schema[key]; !ok {
			return unknown(at, key)
		}
		out[key], where[key] = vn, at
	}
	return nil
}

func checkDefaults(at string, n *yaml.Node) error {
	if n.Kind == yaml.SequenceNode {
		ok := true
		for _, e := range n.Content {
			ok = ok && e.Kind == yaml.ScalarNode && (e.Value == "config" || e.Value == "_self_")
		}
		if ok {
			return nil
		}
	}
	return fmt.Errorf("config: %s: a defaults list other than [config, _self_]: canopy reads one file over DeepForest's defaults, not a Hydra composition: %w", at, ErrConfig)
}

func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.Tag == "!!null" }

// check is OmegaConf's type rule for a leaf: numbers for floats (ints
// widen), integers for ints, scalars for strings, booleans for bools,
// null only where the schema allows it.
func check(n *yaml.Node, l leaf) error {
	want := fmt.Errorf("%s", kindName[l.k])
	if isNull(n) {
		if l.nullable {
			return nil
		}
		return want
	}
	switch l.k {
	case kAny:
		return nil
	case kList:
		if n.Kind != yaml.SequenceNode {
			return want
		}
		return nil
	case kMap:
		if n.Kind != yaml.MappingNode {
			return want
		}
		return nil
	}
	if n.Kind != yaml.ScalarNode {
		return want
	}
	switch l.k {
	case kFloat:
		var f float64
		if (n.Tag != "!!float" && n.Tag != "!!int") || n.Decode(&f) != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return fmt.Errorf("a finite number")
		}
	case kInt:
		if n.Tag != "!!int" {
			return want
		}
	case kBool:
		if n.Tag != "!!bool" {
			return want
		}
	}
	return nil
}

func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	v := n.Value
	if len(v) > 40 {
		v = v[:40] + "…"
	}
	return fmt.Sprintf("%q (%s)", v, strings.TrimPrefix(n.Tag, "!!"))
}

// unknown is the error for a key the schema lacks, naming the nearest.
func unknown(at, key string) error {
	if len(key) > maxKeyLen {
		return fmt.Errorf("config: %s: unknown key %q… (%d bytes, longer than any key of DeepForest's schema): %w", at, key[:40], len(key), ErrConfig)
	}
	return fmt.Errorf("config: %s: unknown key %s (did you mean %s?): %w", at, key, nearest(key), ErrConfig)
}

// maxKeyLen bounds the keys nearest compares (the schema's longest is 41
// bytes): a 1 MiB key would cost a minute of Levenshtein distances.
const maxKeyLen = 128

// nearest is the schema key nearest to key (Levenshtein; ties: the first
// in sorted order); "" for a key longer than maxKeyLen.
func nearest(key string) string {
	if len(key) > maxKeyLen {
		return ""
	}
	best, bd := "", math.MaxInt
	for k := range schema {
		if d := distance(key, k); d < bd || (d == bd && k < best) {
			best, bd = k, d
		}
	}
	return best
}

// distance is the Levenshtein distance of two keys.
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			c := prev[j-1]
			if a[i-1] != b[j-1] {
				c++
			}
			cur[j] = min(c, prev[j]+1, cur[j-1]+1)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
