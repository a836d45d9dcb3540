package shardmetrics

import (
	"math/rand/v2"
	"testing"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/internal/records"
	"github.com/canopy-hpc/canopy/metrics"
)

// benchInput is cmd/synth -big's shape: n images of k truth boxes (8 to 48
// pixels in 400²) and d predictions (the first k jittered truths, the rest
// spurious 20² boxes), 3 classes.
func benchInput(n, k, d int) metrics.Input {
	rng := rand.New(rand.NewPCG(uint64(n), uint64(k)))
	in := metrics.Input{Labels: box.SortedLabelMap([]string{"Dead", "Snag", "Tree"})}
	for i := range n {
		im := box.Image{Path: string(rune('a'+i%26)) + string(rune('a'+i/26%26)) + string(rune('a'+i/676))}
		for j := range k {
			w, h := 8+rng.Float64()*40, 8+rng.Float64()*40
			x, y := float64(int(rng.Float64()*(400-w))), float64(int(rng.Float64()*(400-h)))
			im.Truth = append(im.Truth, box.Truth{Box: box.Box{Xmin: x, Ymin: y, Xmax: float64(int(x + w)), Ymax: float64(int(y + h))}, Label: int32((i + j) % 3)})
		}
		var dets []box.Detection
		for j := range d {
			if j < k {
				t := im.Truth[j]
				jit := func(v float64) float64 { return float64(float32(v + rng.NormFloat64()*3)) }
				b := box.Box{Xmin: jit(t.Box.Xmin), Ymin: jit(t.Box.Ymin)}
				b.Xmax, b.Ymax = max(b.Xmin, jit(t.Box.Xmax)), max(b.Ymin, jit(t.Box.Ymax))
				dets = append(dets, box.Detection{Box: b, Label: t.Label, Score: float64(float32(rng.Float64()))})
				continue
			}
			x, y := float64(float32(rng.Float64()*360)), float64(float32(rng.Float64()*360))
			dets = append(dets, box.Detection{Box: box.Box{Xmin: x, Ymin: y, Xmax: x + 20, Ymax: y + 20}, Label: int32(j % 3), Score: rng.Float64() * 0.3})
		}
		in.Images = append(in.Images, im)
		in.Dets = append(in.Dets, dets)
	}
	return in
}

// BenchmarkStage times the metric stage's steps on 1,000 images of 72
// truth boxes and 30 predictions (a fifth of bench-metrics-scale's set):
// match (all images), encode, merge (decode) and reduce, per family; the
// records' size is logged.
func BenchmarkStage(b *testing.B) {
	in := benchInput(1000, 72, 30)
	idx := make([]int, len(in.Images))
	for i := range idx {
		idx[i] = i
	}
	opt := metrics.Options{IoUThreshold: 0.4}
	lim := records.Limits{Images: len(in.Images), Labels: in.Labels.Len()}
	recs, err := metrics.MatchImages(in, idx, metrics.MatchOptions{MinIoU: 0.4}, metrics.All)
	if err != nil {
		b.Fatal(err)
	}
	buf := records.Encode(nil, recs, metrics.All)
	b.Logf("%d images, %d bytes of records", len(in.Images), len(buf))
	f := metrics.Frame{Images: in.Images, Labels: in.Labels}
	// cpu-ns/op: the process's CPU time per op, the figure to compare on
	// a loaded machine (run with GOMAXPROCS=1).
	run := func(name string, op func(b *testing.B)) {
		b.Run(name, func(b *testing.B) {
			c0 := cpuSeconds()
			for range b.N {
				op(b)
			}
			b.ReportMetric((cpuSeconds()-c0)*1e9/float64(b.N), "cpu-ns/op")
		})
	}
	run("match", func(b *testing.B) { metrics.MatchImages(in, idx, metrics.MatchOptions{MinIoU: 0.4}, metrics.All) })
	run("encode", func(b *testing.B) { records.Encode(nil, recs, metrics.All) })
	run("merge", func(b *testing.B) {
		if _, err := records.Merge([][]byte{buf}, lim); err != nil {
			b.Fatal(err)
		}
	})
	for _, fam := range []struct {
		name string
		f    metrics.Family
	}{{"reduce-recall", metrics.Recall}, {"reduce-iou", metrics.IoUMean}, {"reduce-coco", metrics.COCOmAP}} {
		run(fam.name, func(b *testing.B) {
			if _, err := metrics.Reduce(f, recs, opt, fam.f, false); err != nil {
				b.Fatal(err)
			}
		})
	}
}
