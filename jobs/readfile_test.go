package jobs

import (
	"bytes"
	"path/filepath"
	"testing"
)

// TestAnnotationFormatsSameMetrics: the truth of testdata/sets/three as a
// folder of Pascal VOC files, as a CSV of WKT polygons and as COCO polygon
// segmentations without bbox gives the
// metrics bytes of the CSV itself (replayed predictions, every family).
func TestAnnotationFormatsSameMetrics(t *testing.T) {
	set := filepath.Join("..", "testdata", "sets", "three")
	rf := filepath.Join("..", "internal", "dataset", "testdata", "readfile")
	var ref []byte
	for _, truth := range []string{filepath.Join(set, "truth.csv"), filepath.Join(rf, "three-voc"), filepath.Join(rf, "three-wkt.csv"), filepath.Join(rf, "three-coco-seg.json")} {
		out := t.TempDir()
		code, msg := cliRun(t, "eval", truth, "--predictions", filepath.Join(set, "predictions.csv"), "--out", out)
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", truth, code, msg)
		}
		m, _ := reportMetrics(t, out)
		if ref == nil {
			ref = m
			continue
		}
		if !bytes.Equal(m, ref) {
			t.Errorf("%s: metrics differ from the CSV's:\n%s\n%s", truth, m, ref)
		}
	}
	code, msg := cliRun(t, "eval", filepath.Join(rf, "missing-field.xml"), "--predictions", filepath.Join(set, "predictions.csv"), "--out", t.TempDir())
	if code != ExitInput || !bytes.Contains([]byte(msg), []byte("missing-field.xml: object 1: <bndbox> has no <ymax>")) {
		t.Errorf("VOC with a missing field: exit %d: %s", code, msg)
	}
}
