package output

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/canopy-hpc/canopy/internal/config"
	"github.com/canopy-hpc/canopy/internal/modelsel"
)

// A setting left to the model or the default is settled from the loaded
// model: "model" when the model's stored config set it, else "default";
// without a model it is left out.
func TestRunConfigFinish(t *testing.T) {
	rc := &RunConfig{File: "c.yml", C: &config.Config{Ignored: []string{"workers"}}, Settings: map[string]Setting{
		"score_thresh": {},
		"nms_thresh":   {},
		"batch_size":   {Value: "2", Source: config.Flag},
	}}
	m := &modelsel.Info{Thresholds: map[string]string{"score_thresh": "0.1", "nms_thresh": "0.05"}, ConfigSet: []string{"score_thresh=0.1"}}
	got := rc.Finish(m)
	want := map[string]Setting{"score_thresh": {Value: "0.1", Source: config.Model}, "nms_thresh": {Value: "0.05", Source: config.Default},
		"batch_size": {Value: "2", Source: config.Flag}}
	if len(got) != len(want) {
		t.Fatalf("Finish: %v, want %v", got, want)
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s: %+v, want %+v", k, got[k], w)
		}
	}
	if got := rc.Finish(nil); len(got) != 1 || got["batch_size"].Source != config.Flag {
		t.Errorf("without a model: %v", got)
	}
	if (*RunConfig)(nil).Finish(m) != nil {
		t.Error("a nil RunConfig records settings")
	}
	var r SettingsRecord
	r.SetConfig(rc, m)
	if r.Config != "c.yml" || len(r.ConfigIgnored) != 1 || r.Settings["nms_thresh"].Source != config.Default {
		t.Errorf("SetConfig: %+v", r)
	}
}

// The settings record sits in report.json where its fields stood before
// it was shared: after allow_outside_root, before geometry (eval), and at
// the end of predict's report.
func TestSettingsRecordPlace(t *testing.T) {
	rec := SettingsRecord{Config: "c.yml", ConfigIgnored: []string{"x"}}
	b, err := json.Marshal(RunInfo{AllowOutsideRoot: true, SettingsRecord: rec, Geometry: "point"})
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	a, c, i, g := strings.Index(s, `"allow_outside_root"`), strings.Index(s, `"config":"c.yml"`), strings.Index(s, `"config_ignored"`), strings.Index(s, `"geometry"`)
	if a < 0 || !(a < c && c < i && i < g) {
		t.Fatalf("run record order: %s", s)
	}
	b, err = json.Marshal(PredictReport{AllowOutsideRoot: true, SettingsRecord: rec})
	if err != nil {
		t.Fatal(err)
	}
	if s := string(b); !strings.HasSuffix(s, `"allow_outside_root":true,"config":"c.yml","config_ignored":["x"]}`) {
		t.Fatalf("predict report: %s", s)
	}
}
