package crop

import (
	"os"
	"strings"
	"testing"
)

// TestParseConfigDeepForest reads the config.json DeepForest's
// save_pretrained wrote for the parity crop model (its whole config, the
// cropmodel section holding label_dict, resize and expand).
func TestParseConfigDeepForest(t *testing.T) {
	b, err := os.ReadFile("testdata/deepforest/hub-config.json")
	if err != nil {
		t.Fatal(err)
	}
	s, err := ParseConfig(b)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(Names(s.LabelDict), ","); got != "Alive,Dead,Snag" {
		t.Errorf("labels %q, want Alive,Dead,Snag", got)
	}
	if s.Transform != DefaultTransform() {
		t.Errorf("transform %+v, want the default %+v", s.Transform, DefaultTransform())
	}
	if s.BatchSize != 4 {
		t.Errorf("batch_size %d, want DeepForest's 4", s.BatchSize)
	}
}

func TestParseConfigRules(t *testing.T) {
	ok := []struct {
		in    string
		check func(Settings) bool
	}{
		{`{}`, func(s Settings) bool { return s.LabelDict == nil && s.Transform == DefaultTransform() }},
		{`{"cropmodel": null}`, func(s Settings) bool { return s.LabelDict == nil }},
		{`{"cropmodel": {"resize": [100, 60], "expand": 5}}`, func(s Settings) bool {
			return s.Transform.Size == [2]int{100, 60} && s.Transform.Expand == 5
		}},
		{`{"cropmodel": {"normalize": false, "architecture": "resnet18", "resize_interpolation": "bilinear"}}`, func(s Settings) bool {
			return !s.Transform.Normalize && s.Architecture == "resnet18"
		}},
		{`{"cropmodel": {"batch_size": 16}}`, func(s Settings) bool { return s.BatchSize == 16 }},
		{`{"cropmodel": {"label_dict": {"b": 1, "a": 0}, "lr": "x"}}`, func(s Settings) bool {
			return strings.Join(Names(s.LabelDict), ",") == "a,b"
		}},
	}
	for _, c := range ok {
		s, err := ParseConfig([]byte(c.in))
		if err != nil || !c.check(s) {
			t.Errorf("%s: %+v, %v", c.in, s, err)
		}
	}
	bad := map[string]string{
		`[]`:                                                 "config.json",
		`{"cropmodel": 3}`:                                   "cropmodel",
		`{"cropmodel": {"resize": 224}}`:                     "resize",
		`{"cropmodel": {"resize": [224, 0]}}`:                "resize",
		`{"cropmodel": {"resize": [224, 100000]}}`:           "resize",
		`{"cropmodel": {"expand": -1}}`:                      "expand",
		`{"cropmodel": {"expand": 1.5}}`:                     "expand",
		`{"cropmodel": {"batch_size": 0}}`:                   "batch_size",
		`{"cropmodel": {"batch_size": "4"}}`:                 "batch_size",
		`{"cropmodel": {"architecture": "vit"}}`:             "architecture",
		`{"cropmodel": {"normalize": {"mean": [0, 0, 0]}}}`:  "normalize",
		`{"cropmodel": {"resize_interpolation": "nearest"}}`: "resize_interpolation",
		`{"cropmodel": {"label_dict": {"a": 0, "b": 0}}}`:    "share id 0",
		`{"cropmodel": {"label_dict": {"a": 0, "b": 2}}}`:    "must be 0..1",
		`{"cropmodel": {"label_dict": {}}}`:                  "no labels",
		`{"cropmodel": {"label_dict": {"a": "0"}}}`:          "label_dict",
		`{} {}`: "trailing",
	}
	for in, want := range bad {
		if _, err := ParseConfig([]byte(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want one naming %q", in, err, want)
		}
	}
	if _, err := ParseConfig(make([]byte, MaxConfigBytes+1)); err == nil {
		t.Error("a config over the size bound was read")
	}
}

// FuzzParseConfig: any bytes give settings or an error, never a panic;
// what is accepted obeys the bounds the transform and labels rely on.
func FuzzParseConfig(f *testing.F) {
	if b, err := os.ReadFile("testdata/deepforest/hub-config.json"); err == nil {
		f.Add(b)
	}
	f.Add([]byte(`{"cropmodel": {"label_dict": {"a": 0, "b": 1}, "resize": [7, 9], "expand": 3}}`))
	f.Add([]byte(`{"cropmodel": {"normalize": false}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := ParseConfig(b)
		if err != nil {
			return
		}
		if err := s.Transform.check(); err != nil {
			t.Fatalf("accepted %q: %v", b, err)
		}
		if s.LabelDict != nil {
			if err := CheckLabels(s.LabelDict); err != nil {
				t.Fatalf("accepted labels of %q: %v", b, err)
			}
		}
	})
}
