package modelfile

import (
	"math"
	"sort"
	"strings"
	"testing"
)

// FuzzParseConfig: whatever config.json parseConfig accepts gives options
// canopy can run: finite thresholds, positive sizes and counts, finite
// means and non-zero finite deviations, and Set lists only keys it applies,
// sorted.
func FuzzParseConfig(f *testing.F) {
	f.Add([]byte(`{"num_classes": 2, "label_dict": {"Tree": 0, "Dead": 1}, "score_thresh": 0.3, "nms_thresh": 0.05,
 "detections_per_img": 300, "topk_candidates": 1000, "min_size": [640, 800], "max_size": 1333,
 "image_mean": [0.485, 0.456, 0.406], "image_std": [0.229, 0.224, 0.225], "architecture": "retinanet"}`))
	f.Add([]byte(`{"min_size": null, "label_dict": {}}`))
	f.Add([]byte(`{"image_mean": [1e39, 0, 0]}`)) // past float32: refused
	f.Add([]byte(`{"score_thresh": -1e39}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := parseConfig("config.json", b)
		if err != nil {
			return
		}
		o := c.Options
		if !finite(float64(o.ScoreThresh)) || !finite(o.NMSThresh) {
			t.Fatalf("non-finite threshold accepted: %+v", o)
		}
		if o.MinSize < 1 || o.MaxSize < 1 || o.DetectionsPerImg < 1 || o.TopkCandidates < 1 || c.NumClasses < 0 {
			t.Fatalf("a size or count below 1 accepted: %+v, num_classes %d", o, c.NumClasses)
		}
		for i := 0; i < 3; i++ {
			if !finite(float64(o.ImageMean[i])) || !finite(float64(o.ImageStd[i])) || o.ImageStd[i] == 0 {
				t.Fatalf("mean %v, std %v accepted", o.ImageMean, o.ImageStd)
			}
		}
		if !sort.StringsAreSorted(c.Set) || !sort.StringsAreSorted(c.Extra) {
			t.Fatalf("Set %v or Extra %v not sorted", c.Set, c.Extra)
		}
		for _, k := range c.Set {
			if !configKeys[k] {
				t.Fatalf("Set lists %q", k)
			}
		}
	})
}

func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// FuzzParseRepo: an accepted hub spec names an owner and a name of the
// hub's characters and a revision with no empty, ".", ".." or backslash
// element (it becomes a path under the cache), and reassembles to the spec.
func FuzzParseRepo(f *testing.F) {
	for _, s := range []string{"weecology/deepforest-tree", "weecology/deepforest-bird@v1.2", "a/b@refs/pr/1", "a/b@../../etc", "/x", "a/b@"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, spec string) {
		owner, name, rev, ok := parseRepo(spec)
		if !ok {
			return
		}
		if !repoPart.MatchString(owner) || !repoPart.MatchString(name) || rev == "" {
			t.Fatalf("%q: owner %q, name %q, revision %q", spec, owner, name, rev)
		}
		for _, e := range strings.Split(rev, "/") {
			if e == "" || e == "." || e == ".." || strings.Contains(e, `\`) {
				t.Fatalf("%q: revision %q climbs or is empty", spec, rev)
			}
		}
		again := owner + "/" + name
		if strings.Contains(spec, "@") {
			again += "@" + rev
		}
		if again != spec {
			t.Fatalf("%q reassembles to %q", spec, again)
		}
	})
}
