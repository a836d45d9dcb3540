package config

import (
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"
)

func load(t *testing.T, name string, overrides []string, cmd string) (*Config, error) {
	t.Helper()
	var b []byte
	if name != "" {
		var err error
		if b, err = os.ReadFile(name); err != nil {
			t.Fatal(err)
		}
	}
	return Load(name, b, overrides, cmd)
}

// TestDeepForestDefaultConfig: a copy of DeepForest's default config (every
// section of the schema) reads without error; every key is known.
func TestDeepForestDefaultConfig(t *testing.T) {
	c, err := load(t, "testdata/full.yaml", nil, "eval")
	if err != nil {
		t.Fatal(err)
	}
	if c.ScoreThresh != (Float{0.1, File}) || c.NMSThresh != (Float{0.05, File}) || c.IoUThreshold != (Float{0.4, File}) ||
		c.ModelName != (Str{"weecology/deepforest-tree", File}) || c.BatchSize != (Int{1, File}) {
		t.Fatalf("%+v", c)
	}
	if c.LabelDict.Src != "" || c.NumClasses.Src != "" || c.ValidationCSV.Src != "" {
		t.Fatalf("null keys given: %+v", c)
	}
	for _, k := range []string{"workers", "patch_size", "train.lr", "cropmodel.resize", "point.distance_threshold"} {
		if !contains(c.Ignored, k) {
			t.Errorf("%s not in Ignored %v", k, c.Ignored)
		}
	}
	for _, k := range c.Ignored {
		if Used["eval"][k] {
			t.Errorf("used key %s listed as ignored", k)
		}
	}
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

// TestValuesAndOverrides: the file's values, replaced by key=value
// overrides, each with its source; predict ignores validation.*.
func TestValuesAndOverrides(t *testing.T) {
	c, err := load(t, "testdata/eval.yaml", []string{"validation.iou_threshold=0.6", "score_thresh=0.3", "label_dict={A: 0}"}, "eval")
	if err != nil {
		t.Fatal(err)
	}
	want := Config{
		ScoreThresh: Float{0.3, Override}, NMSThresh: Float{0.1, File}, IoUThreshold: Float{0.6, Override},
		BatchSize: Int{8, File}, NumClasses: Int{2, File}, LabelDict: Labels{map[string]int{"A": 0}, Override},
		ModelRevision: Str{"main", File}, ValidationCSV: Str{"val/annotations.csv", File}, ValidationRoot: Str{"val", File},
		Ignored: []string{"patch_overlap", "patch_size", "train.lr", "train.scheduler.params.milestones", "validation.size", "workers"},
	}
	if !reflect.DeepEqual(*c, want) {
		t.Fatalf("got  %+v\nwant %+v", *c, want)
	}
	p, err := load(t, "testdata/eval.yaml", nil, "predict")
	if err != nil {
		t.Fatal(err)
	}
	if p.ValidationCSV.Src != "" || !contains(p.Ignored, "validation.iou_threshold") || p.LabelDict.V["Dead"] != 1 {
		t.Fatalf("predict: %+v", p)
	}
	o, err := Load("", nil, []string{"nms_thresh=0.2"}, "eval")
	if err != nil || o.NMSThresh != (Float{0.2, Override}) || o.ScoreThresh.Src != "" {
		t.Fatalf("overrides alone: %+v %v", o, err)
	}
}

// TestErrors: misspelt keys name the nearest, wrong types name key, file and
// line; malformed overrides are refused.
func TestErrors(t *testing.T) {
	for _, c := range []struct {
		yaml      string
		overrides []string
		want      []string
	}{
		{"score_tresh: 0.2\n", nil, []string{"c.yaml:1", "unknown key score_tresh", "did you mean score_thresh"}},
		{"validation:\n  iou_treshold: 0.2\n", nil, []string{"c.yaml:2", "validation.iou_treshold", "did you mean validation.iou_threshold"}},
		{"score_thresh: high\n", nil, []string{"c.yaml:1", `score_thresh is "high" (str), want a finite number`}},
		{"batch_size: 2.5\n", nil, []string{"batch_size is \"2.5\" (float), want an integer"}},
		{"score_thresh: 1.5\n", nil, []string{"want a number in [0, 1]"}},
		{"validation: 3\n", nil, []string{"validation is \"3\" (int), want a mapping"}},
		{"label_dict: [Tree]\n", nil, []string{"label_dict is a list, want a mapping"}},
		{"model:\n  name: a\nmodel:\n  name: b\n", nil, []string{"given twice"}},
		{"- a\n", nil, []string{"not a mapping"}},
		{"defaults:\n  - bird\n", nil, []string{"c.yaml:1", "defaults list"}},
		{"a: [\n", nil, []string{"c.yaml"}},
		{"", []string{"validation.iou_treshold=0.5"}, []string{"override validation.iou_treshold=0.5", "did you mean validation.iou_threshold"}},
		{"", []string{"+score_thresh=0.5"}, []string{"+key", "give score_thresh="}},
		{"score_thresh: 0.3\n---\nscore_thresh: 0.5\n", nil, []string{"c.yaml:2", "a second YAML document", "single document"}},
		{"score_thresh: 0.3\n---\n", nil, []string{"c.yaml:2", "a second YAML document"}},
		{"score_thresh: 0.3\n...\n---\nx: 1\n", nil, []string{"c.yaml:3", "a second YAML document"}},
		{"score_thresh: 0.3\n---\n: [\n", nil, []string{"a second YAML document that does not parse"}},
		{"", []string{"validation=3"}, []string{"is a section"}},
		{"", []string{"batch_size=two"}, []string{"batch_size is \"two\" (str), want an integer"}},
		{"", []string{"score_thresh=nan"}, []string{"want a finite number"}},
	} {
		_, err := Load("c.yaml", []byte(c.yaml), c.overrides, "eval")
		if err == nil || !errors.Is(err, ErrConfig) {
			t.Fatalf("%q %v: error %v, want an ErrConfig", c.yaml, c.overrides, err)
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%q %v: error %q lacks %q", c.yaml, c.overrides, err, w)
			}
		}
	}
}

// TestLongKeys: a key longer than any of the schema's is refused at once,
// shortened in the message, without a nearest-key search (a 1 MiB key took
// a minute of Levenshtein distances and was printed whole).
func TestLongKeys(t *testing.T) {
	k := strings.Repeat("a", 200000)
	for _, c := range []struct {
		yaml      string
		overrides []string
	}{{"? " + k + "\n: 1\n", nil}, {"", []string{k + "=1"}}, {"", []string{"-" + k + "=1"}}} {
		t0 := time.Now()
		_, err := Load("c.yaml", []byte(c.yaml), c.overrides, "eval")
		if err == nil || !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "longer than any key") || len(err.Error()) > 400 {
			t.Errorf("%.20q %.20q: %.500v", c.yaml, c.overrides, err)
		}
		if d := time.Since(t0); d > 2*time.Second {
			t.Errorf("%.20q %.20q: %v", c.yaml, c.overrides, d)
		}
	}
	if nearest(strings.Repeat("b", maxKeyLen)) == "" || nearest(strings.Repeat("b", maxKeyLen+1)) != "" {
		t.Error("nearest's bound")
	}
}

// TestOneDocument: a single document, with or without its "---" or "..."
// markers, reads as OmegaConf.load reads it (a second one is refused in
// TestErrors); "---" alone is an empty config, as OmegaConf's {}.
func TestOneDocument(t *testing.T) {
	for _, y := range []string{"---\nscore_thresh: 0.3\n", "score_thresh: 0.3\n...\n", "score_thresh: 0.3\n"} {
		c, err := Load("c.yaml", []byte(y), nil, "eval")
		if err != nil || c.ScoreThresh != (Float{0.3, File}) {
			t.Errorf("%q: %+v %v", y, c, err)
		}
	}
	for _, y := range []string{"---\n", ""} {
		c, err := Load("c.yaml", []byte(y), nil, "eval")
		if err != nil || c.ScoreThresh.Src != "" {
			t.Errorf("%q: %+v %v", y, c, err)
		}
	}
}

// TestMalformedOverride: an argument meant as an override but not one
// names the nearest key; paths and other arguments are left alone.
func TestMalformedOverride(t *testing.T) {
	for arg, want := range map[string]string{
		"scöre_thresh=0.3":             "did you mean score_thresh?",
		"score-thresh=0.3":             "did you mean score_thresh?",
		"validation.iou-threshold=0.3": "did you mean validation.iou_threshold?",
		"+score_thresh=0.3":            "give score_thresh=",
		"++score_thresh=0.3":           "give score_thresh=",
		"~nms_thresh=0.3":              "give nms_thresh=",
		"=0.3":                         "has no key",
		" =0.3":                        "has no key",
		"score_thresh":                 "a key without a value: give score_thresh=VALUE",
		"validation":                   "give validation=VALUE",
	} {
		err := MalformedOverride(arg, false)
		if err == nil || !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want an ErrConfig with %q", arg, err, want)
		}
		if IsOverride(arg) {
			t.Errorf("%q is an override", arg)
		}
	}
	for _, arg := range []string{"truth.csv", "dir/a=b.csv", `dir\a=b.csv`, "score_thresh.csv", "scor_thresh"} {
		if err := MalformedOverride(arg, false); err != nil {
			t.Errorf("%q: %v", arg, err)
		}
	}
	if err := MalformedOverride("score_thresh", true); err != nil {
		t.Errorf("an existing file named score_thresh: %v", err)
	}
}

func TestIsOverride(t *testing.T) {
	for arg, want := range map[string]bool{"a=1": true, "validation.iou_threshold=0.5": true, "x.csv": false, "dir/a=b.csv": false, "=1": false, "+a=1": false} {
		if IsOverride(arg) != want {
			t.Errorf("IsOverride(%q) = %v", arg, !want)
		}
	}
}
