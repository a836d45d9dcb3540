package jobs

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/canopy-hpc/canopy/infer/replay"
	"github.com/canopy-hpc/canopy/internal/collective"
	"github.com/canopy-hpc/canopy/internal/output"
	"github.com/canopy-hpc/canopy/internal/testhook"
	"github.com/canopy-hpc/canopy/internal/testsupport/testfile"
	"github.com/canopy-hpc/canopy/metrics"
	"github.com/canopy-hpc/canopy/report"
)

// The metrics bytes must not depend on the rank count, including runs with
// more ranks than images (idle ranks still join every collective).
func TestMetricsIdenticalAcrossRankCounts(t *testing.T) {
	for _, set := range []string{"multi", "single", "three"} {
		var ref []byte
		for _, n := range []int{1, 2, 3, 4, 5, 8} {
			out := t.TempDir()
			if codes := runLocal(t, n, setCfg(set, out)); codes[0] != 0 {
				t.Fatalf("%s np%d: codes %v", set, n, codes)
			}
			got, _ := reportMetrics(t, out)
			if ref == nil {
				ref = got
			} else if !bytes.Equal(got, ref) {
				t.Fatalf("%s: np%d metrics\n%s\ndiffer from np1\n%s", set, n, got, ref)
			}
			for _, f := range []string{"predictions.csv", "results.csv"} {
				b1, _ := os.ReadFile(filepath.Join(out, f))
				if len(b1) == 0 {
					t.Fatalf("%s np%d: %s empty", set, n, f)
				}
			}
		}
	}
}

func TestInjectedFailureOnOneRankAbortsAll(t *testing.T) {
	t.Setenv(replay.FailEnv, "1")
	start := time.Now()
	codes := runLocal(t, 3, setCfg("multi", t.TempDir()))
	for r, c := range codes {
		if c != ExitModel {
			t.Errorf("rank %d exit %d, want %d", r, c, ExitModel)
		}
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("took %v", d)
	}
}

func TestDisagreementExits6(t *testing.T) {
	t.Setenv(testhook.PerturbEnv, "2")
	out := t.TempDir()
	codes := runLocal(t, 3, setCfg("multi", out))
	for r, c := range codes {
		if c != ExitDisagree {
			t.Errorf("rank %d exit %d, want %d", r, c, ExitDisagree)
		}
	}
	if _, err := os.Stat(filepath.Join(out, "report.json")); err == nil {
		t.Error("a report was written although the ranks disagree")
	}
}

func TestBadInputsExit3WithoutReport(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.csv")
	os.WriteFile(bad, []byte("image_path,xmin,ymin,xmax,ymax,label\na.png,1,2,3,4,Tree\na.png,1,2,oops,4,Tree\n"), 0o644)
	preds := filepath.Join("..", "testdata", "sets", "three", "predictions.csv")
	for name, cfg := range map[string]EvalConfig{
		"bad truth":     {CSV: bad, Predictions: preds},
		"missing truth": {CSV: filepath.Join(dir, "nope.csv"), Predictions: preds},
		"bad preds":     {CSV: filepath.Join("..", "testdata", "sets", "three", "truth.csv"), Predictions: bad},
		"unknown label": {CSV: filepath.Join("..", "testdata", "sets", "three", "truth.csv"), Predictions: preds, LabelDict: writeFile(t, dir, "l.csv", "label,id\nBird,0\n")},
	} {
		cfg.Out = filepath.Join(dir, "out-"+strings.ReplaceAll(name, " ", "-"))
		cfg.IoUThreshold = 0.4
		codes := runLocal(t, 2, cfg)
		for r, c := range codes {
			if c != ExitInput {
				t.Errorf("%s: rank %d exit %d, want %d", name, r, c, ExitInput)
			}
		}
		if _, err := os.Stat(filepath.Join(cfg.Out, "report.json")); err == nil {
			t.Errorf("%s: report written", name)
		}
	}
}

func writeFile(t *testing.T, dir, name, s string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestOutFolderHoldingARunIsRefused(t *testing.T) {
	out := t.TempDir()
	if codes := runLocal(t, 2, setCfg("three", out)); codes[0] != 0 {
		t.Fatal(codes)
	}
	before, _ := os.ReadFile(filepath.Join(out, "report.json"))
	if codes := runLocal(t, 2, setCfg("three", out)); codes[0] != ExitUsage || codes[1] != ExitUsage {
		t.Fatalf("second run into the same folder: codes %v, want %d", codes, ExitUsage)
	}
	after, _ := os.ReadFile(filepath.Join(out, "report.json"))
	if !bytes.Equal(before, after) {
		t.Fatal("the refused run changed the previous report")
	}
	cfg := setCfg("three", out)
	cfg.Force = true
	if codes := runLocal(t, 2, cfg); codes[0] != 0 {
		t.Fatalf("--force: %v", codes)
	}
	left, _ := filepath.Glob(filepath.Join(out, ".*tmp*"))
	if len(left) > 0 {
		t.Fatalf("temporary files left: %v", left)
	}
}

func TestReportCoverageAndLabelMap(t *testing.T) {
	out := t.TempDir()
	cfg := setCfg("multi", out)
	cfg.LabelDict = filepath.Join("..", "testdata", "sets", "multi", "label_dict.csv")
	if codes := runLocal(t, 3, cfg); codes[0] != 0 {
		t.Fatal(codes)
	}
	var rep struct {
		Run struct {
			Ranks    int
			PerRank  []collective.RankStats `json:"per_rank"`
			LabelMap map[string]int         `json:"label_map"`
			Coverage output.Coverage
			Ignored  int `json:"ignored_predictions"`
		}
	}
	testfile.ReadJSON(t, filepath.Join(out, "report.json"), &rep)
	r := rep.Run
	if r.Ranks != 3 || len(r.PerRank) != 3 || r.Coverage.Images != 300 || r.Coverage.Processed != 300 {
		t.Fatalf("%+v", r)
	}
	if r.LabelMap["Dead"] != 0 || r.LabelMap["Alive"] != 1 || r.LabelMap["Snag"] != 2 {
		t.Fatalf("label map %v", r.LabelMap)
	}
	if r.Ignored != 5 { // the generator writes 5 rows for images not in the truth
		t.Fatalf("ignored %d", r.Ignored)
	}
	for _, s := range r.PerRank {
		if s.Images == 0 || s.BytesSent == 0 {
			t.Fatalf("rank stats %+v", s)
		}
	}
}

// TestShardedMatchingByteIdentical: each rank matches its own images and
// the ranks gather match records; report.json's metrics, results.csv and
// predictions.csv are np 1's bytes at np 2 and 3 under both semantics, and
// every rank reports its share of the stage (images matched, record bytes
// sent, match/gather/reduce seconds), the shares covering every image once.
func TestShardedMatchingByteIdentical(t *testing.T) {
	for _, set := range []string{"multi", "coco", "edge"} {
		for _, sem := range []metrics.Semantics{metrics.Validation, metrics.EvaluateBoxes} {
			var ref [3][]byte
			for n := 1; n <= 3; n++ {
				out := t.TempDir()
				cfg := setCfg(set, out)
				cfg.Semantics = sem
				if codes := runLocal(t, n, cfg); codes[0] != 0 {
					t.Fatalf("%s %s np%d: codes %v", set, sem, n, codes)
				}
				got, _ := reportMetrics(t, out)
				files := [3][]byte{got, readOut(t, out, "results.csv"), readOut(t, out, "predictions.csv")}
				if n == 1 {
					ref = files
				}
				for k, name := range []string{"report.json metrics", "results.csv", "predictions.csv"} {
					if !bytes.Equal(files[k], ref[k]) {
						t.Fatalf("%s %s np%d: %s differs from np 1", set, sem, n, name)
					}
				}
				checkMetricStages(t, out, n)
			}
		}
	}
}

func readOut(t *testing.T, out, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(out, name))
	if err != nil || len(b) == 0 {
		t.Fatalf("%s: %v (%d bytes)", name, err, len(b))
	}
	return b
}

// checkMetricStages reads run.per_rank: n ranks, their matched images
// summing to run.coverage.images, and the metric stage's parts present.
func checkMetricStages(t *testing.T, out string, n int) {
	t.Helper()
	var rep struct {
		Run struct {
			Coverage struct {
				Images int `json:"images"`
			} `json:"coverage"`
			PerRank []collective.RankStats `json:"per_rank"`
		} `json:"run"`
	}
	if err := json.Unmarshal(readOut(t, out, "report.json"), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Run.PerRank) != n {
		t.Fatalf("np%d: %d per_rank entries", n, len(rep.Run.PerRank))
	}
	sum := 0
	for _, s := range rep.Run.PerRank {
		sum += s.MetricsImages
		if s.MetricsImages > 0 && s.MetricsBytesSent <= 0 {
			t.Fatalf("np%d rank %d matched %d images and sent %d bytes", n, s.Rank, s.MetricsImages, s.MetricsBytesSent)
		}
		for _, k := range []string{"metrics", "metrics_match", "metrics_gather", "metrics_reduce"} {
			if _, ok := s.Seconds[k]; !ok {
				t.Fatalf("np%d rank %d: no seconds.%s", n, s.Rank, k)
			}
		}
		if s.MetricsCPU == nil {
			t.Fatalf("np%d rank %d: no metrics_cpu_seconds", n, s.Rank)
		}
	}
	if sum != rep.Run.Coverage.Images || (n > 1 && rep.Run.PerRank[1].MetricsImages == 0) {
		t.Fatalf("np%d: the ranks matched %d images of %d (rank 1: %d)", n, sum, rep.Run.Coverage.Images, rep.Run.PerRank[1%n].MetricsImages)
	}
}

// TestIoUSweepEqualsSeparateRuns: --iou-sweep reduces the one matching at
// each further threshold; every entry of metrics_by_iou_threshold is the
// metrics object of a separate run at that threshold (recall and iou
// families) byte for byte, at np 1 and 3 under both semantics; the main
// metrics and results.csv stay those of --iou-threshold.
func TestIoUSweepEqualsSeparateRuns(t *testing.T) {
	sweep := []float64{0.5, 0, 0.75}
	for _, sem := range []metrics.Semantics{metrics.Validation, metrics.EvaluateBoxes} {
		plainOut := t.TempDir()
		plain := setCfg("multi", plainOut)
		plain.Semantics = sem
		if codes := runLocal(t, 1, plain); codes[0] != 0 {
			t.Fatalf("codes %v", codes)
		}
		refMetrics, _ := reportMetrics(t, plainOut)
		separate := make([][]byte, len(sweep))
		for k, thr := range sweep {
			out := t.TempDir()
			cfg := setCfg("multi", out)
			cfg.Semantics, cfg.IoUThreshold, cfg.Families = sem, thr, metrics.Recall|metrics.IoUMean
			if codes := runLocal(t, 1, cfg); codes[0] != 0 {
				t.Fatalf("codes %v", codes)
			}
			separate[k], _ = reportMetrics(t, out)
		}
		for _, n := range []int{1, 3} {
			out := t.TempDir()
			cfg := setCfg("multi", out)
			cfg.Semantics, cfg.IoUSweep = sem, sweep
			if codes := runLocal(t, n, cfg); codes[0] != 0 {
				t.Fatalf("np%d: codes %v", n, codes)
			}
			var rep map[string]json.RawMessage
			var entries []map[string]json.RawMessage
			if err := json.Unmarshal(readOut(t, out, "report.json"), &rep); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(rep["metrics_by_iou_threshold"], &entries); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(rep["metrics"], refMetrics) || !bytes.Equal(readOut(t, out, "results.csv"), readOut(t, plainOut, "results.csv")) {
				t.Fatalf("%s np%d: the sweep changed the first threshold's metrics or results.csv", sem, n)
			}
			if len(entries) != len(sweep) {
				t.Fatalf("%s np%d: %d sweep entries", sem, n, len(entries))
			}
			for k, e := range entries {
				if thr := string(e["iou_threshold"]); thr != report.FormatFloat(sweep[k]) || !bytes.Equal(e["metrics"], separate[k]) {
					t.Fatalf("%s np%d: entry %d (IoU %s)\n%s\ndiffers from a separate run at %v\n%s", sem, n, k, thr, e["metrics"], sweep[k], separate[k])
				}
			}
			if bytes.Equal(separate[0], separate[2]) {
				t.Fatal("thresholds 0.5 and 0.75 give the same metrics: the test does not discriminate")
			}
		}
	}
}
