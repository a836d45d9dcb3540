package crop

import (
	"context"
	"os"
	"strconv"
	"testing"

	"github.com/canopy-hpc/canopy/infer/imagefile"
)

// BenchmarkCropsR50 is canopy's crop step as tools/cropmodel/bench.py
// times DeepForest's: the parity ResNet-50 CropModel (its Lightning
// checkpoint), the parity fixture's predict_tile boxes repeated to
// $CANOPY_BENCH_CROPS (default 128), $CANOPY_BENCH_THREADS workers
// (default 2); each iteration decodes the raster, cuts, transforms and
// classifies every crop. It reports crops/s. tools/cropmodel/bench.sh
// alternates it with DeepForest's.
func BenchmarkCropsR50(b *testing.B) {
	n, threads := 128, 2
	if v, err := strconv.Atoi(os.Getenv("CANOPY_BENCH_CROPS")); err == nil && v > 0 {
		n = v
	}
	if v, err := strconv.Atoi(os.Getenv("CANOPY_BENCH_THREADS")); err == nil && v > 0 {
		threads = v
	}
	fx, pf := parity(b)
	m, err := Load(pf.Ckpt, Options{})
	if err != nil {
		b.Fatal(err)
	}
	r := NewRunner(m.Net(), threads)
	ctx := context.Background()
	b.ResetTimer()
	for it := 0; it < b.N; it++ {
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
	}
	b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "crops/s")
}
