package imagesrun

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/canopy-hpc/canopy/internal/output"
	"github.com/canopy-hpc/canopy/internal/runkind"
)

func sha(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// TestEvalManifestBytes: eval's manifest.json, field for field and in its
// written form (a --resume of a folder written by the previous canopy
// reads it): a replay records "replay" and no settings; a model its
// weights and settings; the label dict's sha256 only when one was given
// (an empty file is given); the root folder made absolute.
func TestEvalManifestBytes(t *testing.T) {
	root := t.TempDir()
	m := EvalRun{CSV: []byte("x"), RootDir: root + "/a/.."}.Manifest()
	want := `{"canopy":"` + output.Version + `","csv_sha256":"` + sha("x") + `","predictions_sha256":"` + sha("") +
		`","label_dict_sha256":"","detector":"replay","detector_settings":{},"root_dir":"` + root + `"}`
	if b, _ := json.Marshal(m); string(b) != want {
		t.Fatalf("replay manifest\n got %s\nwant %s", b, want)
	}
	if m.Kind() != runkind.Eval {
		t.Errorf("eval manifest's kind %q", m.Kind())
	}
	m = EvalRun{CSV: []byte("x"), Predictions: []byte("p"), LabelDict: []byte{}, RootDir: root,
		Detector: Detector{WeightsSHA256: "ab", Settings: map[string]string{"nms_thresh_flag": "0.1"}}}.Manifest()
	if m.Predictions != sha("p") || m.LabelDict != sha("") || m.Detector != "retinanet weights sha256 ab" || m.DetectorSettings["nms_thresh_flag"] != "0.1" {
		t.Errorf("model manifest %+v", m)
	}
}

// TestPredictManifest: plain predict's manifest records the job, the
// image list (its order too) and no CSV; its kind is predict's.
func TestPredictManifest(t *testing.T) {
	root := t.TempDir()
	det := Detector{WeightsSHA256: "ab", Settings: map[string]string{"resize": "r"}}
	m := PredictRun{Paths: []string{"a.png", "b.png"}, RootDir: root, Detector: det}.Manifest()
	b, _ := json.Marshal(m)
	for _, s := range []string{`{"job":"predict",`, `"csv_sha256":"","predictions_sha256":"","label_dict_sha256":"","images_sha256":"`,
		`"detector":"retinanet weights sha256 ab","detector_settings":{"resize":"r"},"root_dir":"` + root + `"}`} {
		if !strings.Contains(string(b), s) {
			t.Errorf("predict manifest %s lacks %s", b, s)
		}
	}
	if m.Kind() != runkind.Predict {
		t.Errorf("predict manifest's kind %q", m.Kind())
	}
	swapped := PredictRun{Paths: []string{"b.png", "a.png"}, RootDir: root, Detector: det}.Manifest()
	joined := PredictRun{Paths: []string{"a.pngb.png"}, RootDir: root, Detector: det}.Manifest()
	if d := m.Diff(swapped); len(d) != 1 || !strings.HasPrefix(d[0], "image list sha256") {
		t.Errorf("the image list in another order: %q", d)
	}
	if d := m.Diff(joined); len(d) != 1 || !strings.HasPrefix(d[0], "image list sha256") {
		t.Errorf("the image list's paths joined: %q", d)
	}
}

// TestDiff names each field that differs, and nothing when none does; a
// manifest of a canopy that kept no root folder is named as such.
func TestDiff(t *testing.T) {
	root, _ := filepath.Abs(".")
	a := EvalRun{CSV: []byte("x"), RootDir: root}.Manifest()
	if d := a.Diff(a); len(d) != 0 {
		t.Fatalf("a manifest differs from itself: %q", d)
	}
	for name, change := range map[string]func(m *Manifest){
		"job":                func(m *Manifest) { m.Job = "predict" },
		"canopy version":     func(m *Manifest) { m.Canopy = "0.0.1" },
		"csv sha256":         func(m *Manifest) { m.CSV = "c" },
		"predictions sha256": func(m *Manifest) { m.Predictions = "p" },
		"label dict sha256":  func(m *Manifest) { m.LabelDict = "l" },
		"image list sha256":  func(m *Manifest) { m.Images = "i" },
		"detector":           func(m *Manifest) { m.Detector = "d" },
		"root folder":        func(m *Manifest) { m.RootDir = "/elsewhere" },
		"detector settings":  func(m *Manifest) { m.DetectorSettings = map[string]string{"k": "v"} },
	} {
		b := a
		change(&b)
		d := a.Diff(b)
		if len(d) != 1 || !strings.HasPrefix(d[0], name+": ") || !strings.HasSuffix(d[0], " now") {
			t.Errorf("%s changed: %q", name, d)
		}
	}
	old := a
	old.RootDir = ""
	if d := old.Diff(a); len(d) != 1 || !strings.Contains(d[0], "not recorded in the run to resume (an older canopy)") {
		t.Errorf("no root folder recorded: %q", d)
	}
}
