package imagesrun

import (
	"encoding/json"
	"testing"
)

// FuzzManifest: a manifest.json that parses survives a write and read back
// with no difference --resume would see.
func FuzzManifest(f *testing.F) {
	b, _ := json.MarshalIndent(EvalRun{CSV: []byte("x")}.Manifest(), "", " ")
	f.Add(b)
	f.Add([]byte(`{"canopy":"0.1.0","detector":"retinanet weights sha256 ab","detector_settings":{"nms_thresh_flag":"-1"}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var m Manifest
		if json.Unmarshal(b, &m) != nil {
			return
		}
		out, err := json.MarshalIndent(m, "", " ")
		if err != nil {
			t.Fatal(err)
		}
		var back Manifest
		if err := json.Unmarshal(out, &back); err != nil {
			t.Fatal(err)
		}
		if d := m.Diff(back); len(d) > 0 {
			t.Fatalf("round trip differs: %v", d)
		}
	})
}
