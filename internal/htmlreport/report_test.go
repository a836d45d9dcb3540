package htmlreport

import (
	"bytes"
	"fmt"
	"image/png"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/internal/testsupport/forest"
	"github.com/canopy-hpc/canopy/metrics"
)

func TestOrderedMetricsKeepOrderAndText(t *testing.T) {
	r, err := parseReport([]byte(`{"metrics": {"z": 1.0, "a": null, "val_loss": 0.25, "classes": [0, 1], "map_per_class": [0.5, -1.0]},
 "run": {"ranks": 2, "model": {"thresholds": {"score_thresh": "0.1"}}}}`))
	if err != nil {
		t.Fatal(err)
	}
	want := []metricRow{{"z", "1.0"}, {"a", "null"}, {"val_loss", "0.25"}, {"classes", "[0, 1]"}, {"map_per_class", "[0.5, -1.0]"}}
	if fmt.Sprint(r.metrics) != fmt.Sprint(want) {
		t.Fatalf("%v, want %v", r.metrics, want)
	}
	if r.scoreThreshold() != 0.1 || r.Run.Ranks != 2 {
		t.Fatalf("run: %v %v", r.scoreThreshold(), r.Run.Ranks)
	}
	if _, err := parseReport([]byte(`{"metrics": [1]}`)); err == nil {
		t.Fatal("a metrics list is accepted")
	}
}

func TestWorstPicksLowRecallThenFalsePositives(t *testing.T) {
	st := []imageStat{
		{truth: 4, tp: 4, dets: 4},          // 0: perfect
		{truth: 4, tp: 0, dets: 1, fp: 1},   // 1: recall 0
		{truth: 4, tp: 2, dets: 9, fp: 7},   // 2: recall .5, many fp
		{truth: 0, dets: 5, fp: 5},          // 3: empty frame, 5 fp
		{truth: 4, tp: 3, dets: 3},          // 4: recall .75
		{truth: 4, tp: 0, dets: 3, fp: 3},   // 5: recall 0, more fp than 1
		{truth: 2, tp: 2, dets: 12, fp: 10}, // 6: perfect recall, most fp
	}
	got := fmt.Sprint(worst(st, 4))
	if want := "[5 1 6 2]"; got != want {
		t.Fatalf("worst 4: %s, want %s", got, want)
	}
	if got := fmt.Sprint(worst(st, 7)); got != "[5 1 2 4 6 3 0]" {
		t.Fatalf("worst 7: %s", got)
	}
}

// benchSet is 2,000 images of 30 truth boxes and 31 detections in memory,
// their files all links to one 400×400 generated forest PNG.
func benchSet(b testing.TB) (Eval, string) {
	dir := b.TempDir()
	img, _ := forest.Generate(3, 0, 400, 400)
	var buf bytes.Buffer
	png.Encode(&buf, img)
	src := filepath.Join(dir, "forest.png")
	os.WriteFile(src, buf.Bytes(), 0o644)
	rng := rand.New(rand.NewPCG(1, 2))
	in := metrics.Input{Labels: box.SortedLabelMap([]string{"Tree"})}
	for i := 0; i < 2000; i++ {
		name := fmt.Sprintf("img_%05d.png", i)
		os.Symlink(src, filepath.Join(dir, name))
		im := box.Image{Path: name}
		var dets []box.Detection
		for k := 0; k < 30; k++ {
			x, y, s := rng.Float64()*360, rng.Float64()*360, 8+rng.Float64()*40
			bx := box.Box{Xmin: x, Ymin: y, Xmax: x + s, Ymax: y + s}
			im.Truth = append(im.Truth, box.Truth{Box: bx})
			j := s * 0.4 * (rng.Float64() - 0.5)
			dets = append(dets, box.Detection{Box: box.Box{Xmin: x + j, Ymin: y + j, Xmax: bx.Xmax + j, Ymax: bx.Ymax}, Score: rng.Float64()})
		}
		dets = append(dets, box.Detection{Box: box.Box{Xmin: 5, Ymin: 5, Xmax: 30, Ymax: 30}, Score: 0.2})
		in.Images = append(in.Images, im)
		in.Dets = append(in.Dets, dets)
	}
	res, err := metrics.Compute(in, metrics.Options{IoUThreshold: 0.4}, metrics.All, false)
	if err != nil {
		b.Fatal(err)
	}
	rj := []byte(`{"metrics": {"box_recall": 0.5}, "run": {"ranks": 2, "per_rank": [{"rank": 0, "host": "a", "seconds": {"load": 1, "detect": 2}}, {"rank": 1, "host": "a", "seconds": {"load": 1, "detect": 2.5}}]}}`)
	return Eval{ReportJSON: rj, Images: in.Images, Dets: in.Dets, Labels: in.Labels, Matches: res.Matches, PR: res.PR, RootDir: dir}, dir
}

// BenchmarkReportHTML: the page of a 2,000-image run (60,000 truth boxes,
// 62,000 detections) with the default 12 worst images drawn.
func BenchmarkReportHTML(b *testing.B) {
	e, _ := benchSet(b)
	var n countWriter
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		n = 0
		if err := WriteEval(&n, e, DefaultOptions); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(n), "bytes")
}

type countWriter int

func (c *countWriter) Write(p []byte) (int, error) { *c += countWriter(len(p)); return len(p), nil }

var _ io.Writer = (*countWriter)(nil)

// TestSweepTable: metrics_by_iou_threshold becomes a table of a row per
// metric and a column per threshold, on the page; a malformed entry is an
// error.
func TestSweepTable(t *testing.T) {
	rj := []byte(`{"metrics": {"box_recall": 0.5},
 "metrics_by_iou_threshold": [
  {"iou_threshold": 0.5, "metrics": {"box_recall": 0.25, "iou": 0.75}},
  {"iou_threshold": 0.75, "metrics": {"box_recall": 0.125}}
 ], "run": {"ranks": 1}}`)
	r, err := parseReport(rj)
	if err != nil {
		t.Fatal(err)
	}
	want := &sweepTable{Thresholds: []string{"0.5", "0.75"}, Rows: []sweepRow{{"box_recall", []string{"0.25", "0.125"}}, {"iou", []string{"0.75", ""}}}}
	if fmt.Sprint(r.sweep) != fmt.Sprint(want) {
		t.Fatalf("%v, want %v", r.sweep, want)
	}
	var page bytes.Buffer
	if err := WriteEval(&page, Eval{ReportJSON: rj, Labels: box.SortedLabelMap([]string{"Tree"})}, Options{}); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"IoU-threshold sweep", "<th>0.75</th>", `<td class="num">0.125</td>`} {
		if !bytes.Contains(page.Bytes(), []byte(s)) {
			t.Fatalf("the page lacks %q", s)
		}
	}
	if _, err := parseReport([]byte(`{"metrics": {}, "metrics_by_iou_threshold": [{"iou_threshold": 0.5, "metrics": [1]}]}`)); err == nil {
		t.Fatal("a sweep entry whose metrics are a list is accepted")
	}
}
