package config

import (
	"errors"
	"os"
	"testing"
)

// FuzzLoad: Load never panics; it refuses with ErrConfig or returns
// settings within their ranges, and every ignored key is a schema key the
// command does not use.
func FuzzLoad(f *testing.F) {
	for _, n := range []string{"testdata/full.yaml", "testdata/eval.yaml"} {
		b, err := os.ReadFile(n)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, "validation.iou_threshold=0.5")
	}
	f.Add([]byte("score_thresh: 0.2\n"), "label_dict={a: 1}")
	f.Fuzz(func(t *testing.T, b []byte, o string) {
		c, err := Load("f.yaml", b, []string{o}, "eval")
		if err != nil {
			if !errors.Is(err, ErrConfig) {
				t.Fatalf("error without ErrConfig: %v", err)
			}
			return
		}
		for _, v := range []Float{c.ScoreThresh, c.NMSThresh, c.IoUThreshold} {
			if v.Src != "" && !(v.V >= 0 && v.V <= 1) {
				t.Fatalf("threshold %v", v)
			}
		}
		for _, v := range []Int{c.BatchSize, c.DetectionsPerImg, c.TopkCandidates, c.NumClasses} {
			if v.Src != "" && v.V < 1 {
				t.Fatalf("count %v", v)
			}
		}
		for _, k := range c.Ignored {
			if _, ok := schema[k]; !ok || Used["eval"][k] {
				t.Fatalf("ignored %q", k)
			}
		}
	})
}
