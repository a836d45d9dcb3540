package jobs

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/canopy-hpc/canopy/mpi"
	"github.com/canopy-hpc/canopy/mpi/local"
)

func cliRun(t *testing.T, args ...string) (int, string) {
	t.Helper()
	var code int
	var stdout, stderr bytes.Buffer
	local.Run(1, func(c mpi.Comm) error {
		code = MainWith(context.Background(), append([]string{"canopy"}, args...), &stdout, &stderr,
			func() (mpi.Comm, func() error, error) { return c, func() error { return nil }, nil })
		return nil
	})
	return code, stdout.String() + stderr.String()
}

type settingsReport struct {
	Run struct {
		IoUThreshold  float64            `json:"iou_threshold"`
		Config        string             `json:"config"`
		Settings      map[string]setting `json:"settings"`
		ConfigIgnored []string           `json:"config_ignored"`
		Inputs        map[string]struct {
			Path string `json:"path"`
		} `json:"inputs"`
	} `json:"run"`
	Metrics json.RawMessage `json:"metrics"`
}

func readSettings(t *testing.T, out string) settingsReport {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(out, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	var r settingsReport
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// TestConfigReplay: a DeepForest config gives eval its CSV, IoU threshold
// and batch size; an override beats the config, a flag beats both; the
// report records each setting's source and the ignored keys once; the
// metrics equal those of the same settings given as flags.
func TestConfigReplay(t *testing.T) {
	set := filepath.Join("..", "testdata", "sets", "three")
	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "c.yaml")
	yaml := "workers: 4\npatch_size: 400\nbatch_size: 2\nscore_thresh: 0.3\nvalidation:\n  csv_file: " + filepath.Join(set, "truth.csv") +
		"\n  iou_threshold: 0.3\n  size:\n"
	if err := os.WriteFile(cfgFile, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	preds := filepath.Join(set, "predictions.csv")
	run := func(name string, args ...string) settingsReport {
		out := filepath.Join(dir, name)
		code, msg := cliRun(t, append([]string{"eval", "--predictions", preds, "--out", out}, args...)...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, msg)
		}
		return readSettings(t, out)
	}
	a := run("a", "--config", cfgFile, "validation.iou_threshold=0.5")
	if a.Run.IoUThreshold != 0.5 || a.Run.Settings["validation.iou_threshold"] != (setting{Value: "0.5", Source: "override"}) ||
		a.Run.Settings["batch_size"] != (setting{Value: "2", Source: "config"}) || a.Run.Settings["validation.csv_file"].Source != "config" {
		t.Fatalf("settings %+v, iou %v", a.Run.Settings, a.Run.IoUThreshold)
	}
	want := []string{"patch_size", "score_thresh", "validation.size", "workers"}
	if strings.Join(a.Run.ConfigIgnored, ",") != strings.Join(want, ",") {
		t.Fatalf("config_ignored %v, want %v", a.Run.ConfigIgnored, want)
	}
	b := run("b", "--config", cfgFile, "validation.iou_threshold=0.5", "--iou-threshold", "0.4")
	if b.Run.IoUThreshold != 0.4 || b.Run.Settings["validation.iou_threshold"] != (setting{Value: "0.4", Source: "flag"}) {
		t.Fatalf("flag does not beat the override: %+v", b.Run.Settings)
	}
	c := run("c", filepath.Join(set, "truth.csv"), "--iou-threshold", "0.5", "--batch-size", "2")
	if !bytes.Equal(c.Metrics, a.Metrics) {
		t.Fatalf("config run's metrics differ from the flags':\n%s\n%s", a.Metrics, c.Metrics)
	}
	if !bytes.Equal(b.Metrics, run("d", filepath.Join(set, "truth.csv")).Metrics) {
		t.Fatal("--iou-threshold 0.4 over the config differs from the default run")
	}
	if c.Run.Settings != nil || c.Run.ConfigIgnored != nil {
		t.Fatalf("a run without --config records settings: %+v", c.Run)
	}
}

// TestConfigModel: with --model, the config's score_thresh and label_dict
// apply (source config) and the detections equal those of --score-thresh;
// without them the model's or the default's source is recorded.
func TestConfigModel(t *testing.T) {
	model, csv, _ := testModelSet(t)
	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "c.yaml")
	os.WriteFile(cfgFile, []byte("score_thresh: 0.3\nlabel_dict: {Tree: 0, Dead: 1}\nnum_classes: 2\n"), 0o644)
	run := func(name string, args ...string) (settingsReport, []byte) {
		out := filepath.Join(dir, name)
		code, msg := cliRun(t, append([]string{"eval", csv, "--model", model, "--threads", "1", "--device", "cpu", "--out", out}, args...)...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, msg)
		}
		p, _ := os.ReadFile(filepath.Join(out, "predictions.csv"))
		return readSettings(t, out), p
	}
	a, pa := run("a", "--config", cfgFile)
	b, pb := run("b", "--score-thresh", "0.3")
	if a.Run.Settings["score_thresh"] != (setting{Value: "0.3", Source: "config"}) || a.Run.Settings["nms_thresh"] != (setting{Value: "0.05", Source: "default"}) ||
		a.Run.Settings["num_classes"].Source != "config" || a.Run.Settings["label_dict"].Source != "config" {
		t.Fatalf("settings %+v", a.Run.Settings)
	}
	if !bytes.Equal(pa, pb) || !bytes.Equal(a.Metrics, b.Metrics) {
		t.Fatal("score_thresh 0.3 from the config differs from --score-thresh 0.3")
	}
	if _, pd := run("d"); bytes.Equal(pd, pa) {
		t.Fatal("the config's score_thresh changed nothing: the comparison cannot fail")
	}
	os.WriteFile(cfgFile, []byte("num_classes: 3\n"), 0o644)
	code, msg := cliRun(t, "eval", csv, "--model", model, "--config", cfgFile, "--out", filepath.Join(dir, "e"))
	if code != ExitModel || !strings.Contains(msg, "num_classes is 3") {
		t.Fatalf("num_classes 3 on a 2-class model: exit %d: %s", code, msg)
	}
}

// TestConfigErrors: a misspelt key (with the nearest name), a wrong type,
// an unknown override key: exit 2 naming the file and the key.
func TestConfigErrors(t *testing.T) {
	set := filepath.Join("..", "testdata", "sets", "three")
	dir := t.TempDir()
	w := func(name, s string) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(s), 0o644)
		return p
	}
	typo := w("typo.yaml", "validation:\n  iou_treshold: 0.5\n")
	wrong := w("wrong.yaml", "batch_size: many\n")
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"--config", typo}, []string{"typo.yaml:2", "unknown key validation.iou_treshold", "did you mean validation.iou_threshold"}},
		{[]string{"--config", wrong}, []string{"wrong.yaml:1", `batch_size is "many" (str), want an integer`}},
		{[]string{"scor_thresh=0.2"}, []string{"override scor_thresh=0.2", "did you mean score_thresh"}},
		{[]string{"--config", filepath.Join(dir, "absent.yaml")}, []string{"absent.yaml"}},
		// issue 35, item 11: a second document; odd override keys name the
		// nearest key (they were taken for a second CSV)
		{[]string{"--config", w("two.yaml", "score_thresh: 0.3\n---\nscore_thresh: 0.5\n")}, []string{"two.yaml:2", "a second YAML document"}},
		{[]string{"scöre_thresh=0.3"}, []string{"did you mean score_thresh?"}},
		{[]string{"score-thresh=0.3"}, []string{"did you mean score_thresh?"}},
		{[]string{"+score_thresh=0.3"}, []string{"give score_thresh="}},
		{[]string{"=0.3"}, []string{"has no key"}},
		{[]string{"score_thresh"}, []string{"a key without a value: give score_thresh=VALUE"}},
	} {
		code, msg := cliRun(t, append([]string{"eval", filepath.Join(set, "truth.csv"), "--predictions", filepath.Join(set, "predictions.csv"), "--out", filepath.Join(dir, "o")}, c.args...)...)
		if code != ExitUsage {
			t.Errorf("%v: exit %d, want %d: %s", c.args, code, ExitUsage, msg)
		}
		for _, s := range c.want {
			if !strings.Contains(msg, s) {
				t.Errorf("%v: %q lacks %q", c.args, msg, s)
			}
		}
	}
}

// TestGivenLabelsAgainstModel (issue 35, item 4): a label map given by
// --label-dict, a config's label_dict or a label_dict= override that
// contradicts the model's own (other names, or the same names with other
// ids) is refused with exit 4 naming both maps and where the given one came
// from, before anything is published; one equal to the model's is used and
// recorded. (It was ignored and still recorded in report.json.)
func TestGivenLabelsAgainstModel(t *testing.T) {
	model, _, imgDir := testModelSet(t)
	dir := t.TempDir()
	w := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	csv := filepath.Join(imgDir, "labels-one.csv")
	if err := os.WriteFile(csv, []byte("image_path,xmin,ymin,xmax,ymax,label\nf0.png,10,10,60,60,Tree\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bird := w("bird.csv", "label,id\nBird,0\nDead,1\n")
	swap := w("swap.csv", "label,id\nDead,0\nTree,1\n")
	same := w("same.csv", "label,id\nTree,0\nDead,1\n")
	cfgBird := w("bird.yaml", "label_dict: {Bird: 0, Dead: 1}\n")
	model2 := []string{"--model", model, "--threads", "1", "--device", "cpu"}
	for i, c := range []struct {
		cmd  string
		args []string
		from string
	}{
		{"eval", []string{"--label-dict", bird}, "bird.csv"},
		{"eval", []string{"--label-dict", swap}, "swap.csv"},
		{"eval", []string{"--config", cfgBird}, "bird.yaml: label_dict"},
		{"eval", []string{"label_dict={Bird: 0, Dead: 1}"}, "override label_dict"},
		{"predict", []string{"--label-dict", bird}, "bird.csv"},
		{"predict", []string{"--config", cfgBird}, "bird.yaml: label_dict"},
	} {
		out := filepath.Join(dir, fmt.Sprintf("o%d", i))
		args := append([]string{c.cmd, "--out", out}, model2...)
		if c.cmd == "eval" {
			args = append(args, "--csv", csv)
		} else {
			args = append(args, "--images", imgDir)
		}
		code, msg := cliRun(t, append(args, c.args...)...)
		if code != ExitModel || !strings.Contains(msg, c.from) || !strings.Contains(msg, `contradicts the model's own label_dict, {"Tree": 0, "Dead": 1}`) {
			t.Errorf("%s %v: exit %d, want %d naming %q and both maps: %s", c.cmd, c.args, code, ExitModel, c.from, msg)
		}
		if _, err := os.Stat(filepath.Join(out, "report.json")); err == nil {
			t.Errorf("%s %v: a report.json was published", c.cmd, c.args)
		}
	}
	out := filepath.Join(dir, "same")
	code, msg := cliRun(t, append([]string{"eval", "--csv", csv, "--out", out, "--label-dict", same, "--html=false"}, model2...)...)
	if code != 0 {
		t.Fatalf("the model's own map: exit %d: %s", code, msg)
	}
	var rep struct {
		Run struct {
			Inputs map[string]struct{ Path string } `json:"inputs"`
		} `json:"run"`
	}
	b, _ := os.ReadFile(filepath.Join(out, "report.json"))
	if err := json.Unmarshal(b, &rep); err != nil || rep.Run.Inputs["label_dict"].Path != same {
		t.Fatalf("report inputs %+v %v", rep.Run.Inputs, err)
	}
}
