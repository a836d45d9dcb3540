package jobs

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/internal/dataset"
	"github.com/canopy-hpc/canopy/internal/output"
	"github.com/canopy-hpc/canopy/metrics"
)

// loadBenchSet reads a benchmark set written by cmd/synth -big (the
// same files the Python peers time, see docs/benchmarks.md).
func loadBenchSet(b *testing.B, dir string) metrics.Input {
	b.Helper()
	truthB, err := os.ReadFile(filepath.Join(dir, "truth.csv"))
	if err != nil {
		b.Skipf("%v: run `make bench-metrics` to generate the benchmark sets", err)
	}
	predB, err := os.ReadFile(filepath.Join(dir, "predictions.csv"))
	if err != nil {
		b.Fatal(err)
	}
	truth, err := dataset.ParseTruth("truth.csv", truthB)
	if err != nil {
		b.Fatal(err)
	}
	rows, err := dataset.ParsePredictions("predictions.csv", predB, dataset.Options{})
	if err != nil {
		b.Fatal(err)
	}
	cfg := EvalConfig{}
	labels, _ := chooseLabels(cfg, inputs{}, truth, rows)
	images, err := truth.Resolve("truth.csv", labels)
	if err != nil {
		b.Fatal(err)
	}
	byPath, _, err := joinPredictions("predictions.csv", truth, rows, labels)
	if err != nil {
		b.Fatal(err)
	}
	dets := make([][]box.Detection, len(images))
	for i, im := range images {
		dets[i] = byPath[im.Path]
	}
	return metrics.Input{Images: images, Dets: dets, Labels: labels}
}

// BenchmarkCOCO times canopy's COCO evaluation on 5,000 images × 30 truth
// × 50 detections, 3 classes (bin/bench-coco), the set tools/coco/bench.py
// times faster-coco-eval on.
func BenchmarkCOCO(b *testing.B) {
	in := loadBenchSet(b, filepath.Join("..", "bin", "bench-coco"))
	b.ReportAllocs()
	b.ResetTimer()
	var vals []metrics.Value
	for i := 0; i < b.N; i++ {
		vals = metrics.COCO(in, false)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(in.Images)), "ns/image")
	b.Logf("%s", output.MetricsJSON(vals))
}

// BenchmarkDeepForestSet times DeepForest's recall/precision on
// bin/bench-2000x30 (2,000 images × 30 truth × 31 predictions), the set
// tools/deepforest/bench_metrics.py times DeepForest itself on.
func BenchmarkDeepForestSet(b *testing.B) {
	in := loadBenchSet(b, filepath.Join("..", "bin", "bench-2000x30"))
	for _, sem := range []metrics.Semantics{metrics.Validation, metrics.EvaluateBoxes} {
		b.Run(sem.String(), func(b *testing.B) {
			b.ReportAllocs()
			var res metrics.Result
			for i := 0; i < b.N; i++ {
				var err error
				if res, err = metrics.DeepForest(in, metrics.Options{IoUThreshold: 0.4, Semantics: sem}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(in.Images)), "ns/image")
			b.Logf("%s", output.MetricsJSON(res.Values))
		})
	}
}
