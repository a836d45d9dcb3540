package jobs

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/canopy-hpc/canopy/internal/testsupport/testfile"
	"github.com/canopy-hpc/canopy/metrics"
)

// cocoGolden is a file written by tools/coco/golden.py: torchmetrics
// MeanAveragePrecision(backend="faster_coco_eval") and IntersectionOverUnion
// fed as DeepForest's validation feeds them (versions in the file).
type cocoGolden struct {
	Truth, Predictions string
	IoUThreshold       float64                    `json:"iou_threshold"`
	Map                map[string]json.RawMessage `json:"map"`
	MapClassMetrics    map[string]json.RawMessage `json:"map_class_metrics"`
	IoU                map[string]float64         `json:"iou"`
	// Filtered holds the values with DeepForest's BoxDataset rule applied
	// (truth boxes under 1 px dropped), present when a set has such boxes;
	// canopy follows DeepForest there (docs/design.md).
	Filtered *cocoGolden `json:"with_deepforest_truth_min_size_filter"`
}

func readCOCOGolden(t *testing.T, f string) cocoGolden {
	var g cocoGolden
	testfile.ReadJSON(t, f, &g)
	if g.Filtered != nil {
		g.Map, g.MapClassMetrics, g.IoU = g.Filtered.Map, g.Filtered.MapClassMetrics, g.Filtered.IoU
	}
	return g
}

// labelDictFor returns the set's label_dict.csv when it has one (the
// fixture tools use it then, as canopy does with --label-dict).
func labelDictFor(truth string) string {
	p := filepath.Join(filepath.Dir(truth), "label_dict.csv")
	if _, err := os.Stat(p); err == nil {
		return p
	}
	return ""
}

func cocoGoldenFiles(t *testing.T) []string {
	files, _ := filepath.Glob("../testdata/golden/coco/*.json")
	var out []string
	for _, f := range files {
		if filepath.Base(f) != "thresholds.json" {
			out = append(out, f)
		}
	}
	if len(out) == 0 {
		t.Fatal("no COCO golden files")
	}
	return out
}

// TestGoldenCOCO compares canopy's COCO family bit for bit with
// torchmetrics (its float32 results are rounded from faster_coco_eval's
// doubles, and canopy rounds its doubles the same way), with and without
// --class-metrics, on 1 and 3 in-process ranks.
func TestGoldenCOCO(t *testing.T) {
	for _, f := range cocoGoldenFiles(t) {
		g := readCOCOGolden(t, f)
		for _, cm := range []bool{false, true} {
			for _, n := range []int{1, 3} {
				t.Run(fmt.Sprintf("%s/class=%v/np%d", filepath.Base(f), cm, n), func(t *testing.T) {
					out := t.TempDir()
					cfg := EvalConfig{CSV: repoPath(g.Truth), Predictions: repoPath(g.Predictions), Out: out,
						IoUThreshold: g.IoUThreshold, Families: metrics.COCOmAP, ClassMetrics: cm, LabelDict: labelDictFor(repoPath(g.Truth))}
					if codes := runLocal(t, n, cfg); codes[0] != 0 {
						t.Fatalf("codes %v", codes)
					}
					_, got := reportMetrics(t, out)
					want := g.Map
					if cm {
						want = g.MapClassMetrics
					}
					for k, raw := range want {
						if k == "classes" && !cm {
							continue // DeepForest drops it; canopy reports it only with --class-metrics
						}
						var w any
						json.Unmarshal(raw, &w)
						if !cm && (k == "map_per_class" || k == "mar_100_per_class") {
							w = -1.0 // torchmetrics gives [-1]; DeepForest logs the number -1
						}
						gb, _ := json.Marshal(got[k])
						wb, _ := json.Marshal(w)
						if string(gb) != string(wb) {
							t.Errorf("%s: canopy %s, torchmetrics %s", k, gb, wb)
						}
					}
					if len(got) != len(want)-map[bool]int{false: 1, true: 0}[cm] {
						t.Errorf("keys: canopy %v, torchmetrics %v", got, want)
					}
				})
			}
		}
	}
}

// TestGoldenIoU compares iou and iou/cl_<id> bit for bit with torchmetrics:
// canopy adds the float32 entries in the order of torch's vectorised CPU
// sum kernel (AVX2 lanes, the fixture machine's capability).
func TestGoldenIoU(t *testing.T) {
	for _, f := range cocoGoldenFiles(t) {
		g := readCOCOGolden(t, f)
		t.Run(filepath.Base(f), func(t *testing.T) {
			out := t.TempDir()
			cfg := EvalConfig{CSV: repoPath(g.Truth), Predictions: repoPath(g.Predictions), Out: out,
				IoUThreshold: g.IoUThreshold, Families: metrics.IoUMean, LabelDict: labelDictFor(repoPath(g.Truth))}
			if codes := runLocal(t, 2, cfg); codes[0] != 0 {
				t.Fatalf("codes %v", codes)
			}
			_, got := reportMetrics(t, out)
			if len(got) != len(g.IoU) {
				t.Errorf("keys: canopy %v, torchmetrics %v", got, g.IoU)
			}
			for k, w := range g.IoU {
				v, ok := got[k].(float64)
				if !ok {
					t.Errorf("%s: missing (torchmetrics %v)", k, w)
					continue
				}
				if v != w {
					ulps := math.Abs(float64(math.Float32bits(float32(v))) - float64(math.Float32bits(float32(w))))
					t.Errorf("%s: canopy %v, torchmetrics %v (%v float32 ulps)", k, v, w, ulps)
				}
			}
		})
	}
}
