package crop

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/canopy-hpc/canopy/infer/gemm"
	"github.com/canopy-hpc/canopy/infer/imagefile"
	"github.com/canopy-hpc/canopy/infer/nn"
	"github.com/canopy-hpc/canopy/internal/testsupport/torchckpt"
)

// BenchmarkCropsR50 is canopy's crop step as tools/cropmodel/bench.py
// times DeepForest's: the parity ResNet-50 CropModel (its Lightning
// checkpoint), the parity fixture's predict_tile boxes repeated to
// $CANOPY_BENCH_CROPS (default 128), $CANOPY_BENCH_THREADS workers
// (default 2); each iteration decodes the raster, cuts, transforms and
// classifies every crop. It reports crops/s and the process's CPU
// seconds (user+sys) per crop, which other load on the machine disturbs
// far less than wall time, over all iterations and for the fastest and
// the cheapest one (best-crops/s, best-cpu-s/crop).
// tools/cropmodel/bench.sh alternates it with DeepForest's.
func BenchmarkCropsR50(b *testing.B) {
	benchCrops(b, func(pf torchckpt.CropFiles) (string, Options) { return pf.Ckpt, Options{} })
}

// BenchmarkCropsR18 is BenchmarkCropsR50 with the parity ResNet-18
// classifier (1bad4419's create_crop_backbone, a bare state dict).
func BenchmarkCropsR18(b *testing.B) {
	benchCrops(b, func(pf torchckpt.CropFiles) (string, Options) {
		return pf.R18, Options{LabelDict: map[string]int{"a": 0, "b": 1}}
	})
}

func benchCrops(b *testing.B, model func(torchckpt.CropFiles) (string, Options)) {
	n, threads := 128, 2
	if v, err := strconv.Atoi(os.Getenv("CANOPY_BENCH_CROPS")); err == nil && v > 0 {
		n = v
	}
	if v, err := strconv.Atoi(os.Getenv("CANOPY_BENCH_THREADS")); err == nil && v > 0 {
		threads = v
	}
	fx, pf := parity(b)
	path, opts := model(pf)
	m, err := Load(path, opts)
	if err != nil {
		b.Fatal(err)
	}
	r := NewRunner(m.Net(), threads)
	if b.N == 1 {
		fmt.Fprintf(os.Stderr, "canopy %s: kernels %s (gemm.Chain; no OpenBLAS in the crop step), %d workers, batch %d\n", m.Arch(), gemm.Kernels(), threads, r.Batch)
	}
	ctx := context.Background()
	b.ResetTimer()
	cpu0 := nn.ProcessCPU()
	// The fastest and the cheapest iteration as well as the means: the
	// same statistics tools/cropmodel/bench.py takes of DeepForest's
	// repeats (its fastest and its cheapest), so bench.sh compares like
	// with like.
	bestWall, bestCPU := time.Duration(1<<62), time.Duration(1<<62)
	for it := 0; it < b.N; it++ {
		t0, c0 := time.Now(), nn.ProcessCPU()
		img, err := imagefile.Read(pf.Tile)
		if err != nil {
			b.Fatal(err)
		}
		crops := make([]imagefile.Image, 0, n)
		for i := 0; i < n; i++ {
			row := fx.Tile.Rows[i%len(fx.Tile.Rows)]
			w, err := Window(row[0].(float64), row[1].(float64), row[2].(float64), row[3].(float64), 0, img.W, img.H)
			if err != nil {
				b.Fatal(err)
			}
			crops = append(crops, Cut(img, w))
		}
		if _, err := r.Classify(ctx, m.Transform, crops); err != nil {
			b.Fatal(err)
		}
		bestWall, bestCPU = min(bestWall, time.Since(t0)), min(bestCPU, nn.ProcessCPU()-c0)
	}
	b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "crops/s")
	b.ReportMetric((nn.ProcessCPU()-cpu0).Seconds()/float64(n*b.N), "cpu-s/crop")
	b.ReportMetric(float64(n)/bestWall.Seconds(), "best-crops/s")
	b.ReportMetric(bestCPU.Seconds()/float64(n), "best-cpu-s/crop")
}

// BenchmarkForwardR50 times the network alone: the parity ResNet-50
// CropModel on one batch of DefaultBatch (16) transformed 224×224 crops
// (random values), on $CANOPY_BENCH_THREADS workers (default 2), in CPU
// seconds per crop: BenchmarkCropsR50 without the raster's decoding, the
// cutting and the transform, so that the network's changes stand out of
// the noise of a loaded machine.
func BenchmarkForwardR50(b *testing.B) {
	threads := 2
	if v, err := strconv.Atoi(os.Getenv("CANOPY_BENCH_THREADS")); err == nil && v > 0 {
		threads = v
	}
	_, pf := parity(b)
	m, err := Load(pf.Ckpt, Options{})
	if err != nil {
		b.Fatal(err)
	}
	r := NewRunner(m.Net(), threads)
	rng := rand.New(rand.NewPCG(5, 6))
	xs := make([][]float32, DefaultBatch)
	for i := range xs {
		xs[i] = make([]float32, 3*224*224)
		for j := range xs[i] {
			xs[i][j] = float32(rng.NormFloat64())
		}
	}
	ctx := context.Background()
	if _, err := r.Run(ctx, xs, [2]int{224, 224}); err != nil {
		b.Fatal(err)
	}
	cpu0 := nn.ProcessCPU()
	for b.Loop() {
		if _, err := r.Run(ctx, xs, [2]int{224, 224}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric((nn.ProcessCPU()-cpu0).Seconds()/float64(len(xs)*b.N), "cpu-s/crop")
}
