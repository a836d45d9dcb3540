package cpu

import (
	"fmt"
	"os"
	"strconv"
	"testing"

	"github.com/canopy-hpc/canopy/infer/nn"
)

// BenchmarkConv3x3 times one 3×3 stride-1 convolution three ways (im2col,
// Winograd F(2×2,3×3) and F(4×4,3×3)), with the process's CPU time per op
// (steadier than wall time on a shared machine), at the
// shapes RetinaNet runs them: the heads and FPN (256→256 on P3 of an
// 800×800 input) and a ResNet-18 layer1 conv (64→64 at 200×200).
func BenchmarkConv3x3(b *testing.B) {

	for _, s := range [][3]int{{256, 100, 100}, {128, 100, 100}, {64, 200, 200}} {
		ch, h, w := s[0], s[1], s[2]
		c := &nn.Conv{Name: "b", Out: ch, In: ch, KH: 3, KW: 3, Stride: 1, Pad: 1, W: make([]float32, ch*ch*9), B: make([]float32, ch)}
		for i := range c.W {
			c.W[i] = float32(i%7) * 0.01
		}
		x := NewFmap(ch, h, w)
		for i := range x.D {
			x.D[i] = float32(i%5) * 0.1
		}
		for _, algo := range []string{"im2col", "F2x2", "F4x4"} {
			b.Run(fmt.Sprintf("%s/%dch/%dx%d", algo, ch, h, w), func(b *testing.B) {
				e := NewEngine(1)
				e.Direct = algo == "im2col"
				defer func(old bool) { Wino2Only = old }(Wino2Only)
				Wino2Only = algo == "F2x2"
				e.Conv(c, x, true, nil)
				c0 := nn.ProcessCPU()
				for b.Loop() {
					e.Conv(c, x, true, nil)
				}
				b.ReportMetric(2*float64(ch*ch*9*h*w)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s(direct-equivalent)")
				b.ReportMetric((nn.ProcessCPU()-c0).Seconds()*1e3/float64(b.N), "cpu-ms/op")
			})
		}
	}
}

// BenchmarkConv1x1 times the 1×1 convolutions (one SGEMM per column
// block, then the epilogue) at ResNet-50 shapes of an 800×800 input, in the
// process's CPU time per op.
func BenchmarkConv1x1(b *testing.B) {
	for _, s := range [][4]int{{64, 256, 200, 200}, {256, 64, 200, 200}, {512, 128, 100, 100}, {256, 1024, 50, 50}, {1024, 256, 50, 50}} {
		out, in, h, w := s[0], s[1], s[2], s[3]
		c := &nn.Conv{Name: "b", Out: out, In: in, KH: 1, KW: 1, Stride: 1, W: make([]float32, out*in), B: make([]float32, out)}
		for i := range c.W {
			c.W[i] = float32(i%7) * 0.01
		}
		x := NewFmap(in, h, w)
		for i := range x.D {
			x.D[i] = float32(i%5) * 0.1
		}
		b.Run(fmt.Sprintf("%dx%d/%dx%d", out, in, h, w), func(b *testing.B) {
			e := NewEngine(1)
			e.Put(e.Conv(c, x, true, nil))
			c0 := nn.ProcessCPU()
			for b.Loop() {
				e.Put(e.Conv(c, x, true, nil))
			}
			b.ReportMetric(2*float64(out*in*h*w)*float64(b.N)/(nn.ProcessCPU()-c0).Seconds()/1e9, "GFLOP/cpu-s")
		})
	}
}

// BenchmarkBatchConv times the BatchEngine's convolutions at the crop
// classifier's shapes (a 224×224 crop; 16 crops a batch, as
// crop.DefaultBatch; $CANOPY_BENCH_BATCH), on one worker, in CPU milliseconds per crop and
// GFLOP per CPU second (direct-convolution FLOPs): the 3×3 stride-1 ones
// of ResNet-18's four layers by Winograd F(4×4,3×3) and by im2col, the
// stem, a stride-2 3×3 and ResNet-50's 1×1s ("wino": the engine's
// choice, "unfused": Winograd without fused jobs). CANOPY_SIMD=avx2 times the
// AVX2 clones.
func BenchmarkBatchConv(b *testing.B) {
	type shape struct {
		name                  string
		out, in, k, stride, h int
		algo                  string
	}
	var shapes []shape
	for _, s := range [][2]int{{64, 56}, {128, 28}, {256, 14}, {512, 7}} {
		for _, algo := range []string{"wino", "unfused", "im2col"} {
			shapes = append(shapes, shape{fmt.Sprintf("3x3-%s", algo), s[0], s[0], 3, 1, s[1], algo})
		}
	}
	shapes = append(shapes, shape{"stem", 64, 3, 7, 2, 224, ""}, shape{"3x3s2", 256, 128, 3, 2, 28, ""},
		shape{"1x1", 256, 64, 1, 1, 56, ""}, shape{"1x1", 64, 256, 1, 1, 56, ""}, shape{"1x1", 2048, 512, 1, 1, 7, ""})
	n := benchBatch()
	for _, s := range shapes {
		benchBatchConv(b, s.name, s.out, s.in, s.k, s.stride, s.h, n, s.algo, 1)
	}
}

// benchBatch is $CANOPY_BENCH_BATCH, or 16 (crop.DefaultBatch).
func benchBatch() int {
	if v, err := strconv.Atoi(os.Getenv("CANOPY_BENCH_BATCH")); err == nil && v > 0 {
		return v
	}
	return 16
}

// benchThreads is $CANOPY_BENCH_THREADS, or def: the workers of the
// benchmarks' engines.
func benchThreads(def int) int {
	if v, err := strconv.Atoi(os.Getenv("CANOPY_BENCH_THREADS")); err == nil && v > 0 {
		return v
	}
	return def
}

// benchBatchConv times one convolution (out×in, k×k, stride, on h×h maps
// of n images; algo "im2col" or "unfused" forces those paths) on one
// worker ($CANOPY_BENCH_THREADS), reporting its CPU milliseconds per image (times mult, the
// times a network runs it) and GFLOP per CPU second (direct FLOPs).
func benchBatchConv(b *testing.B, name string, out, in, k, stride, h, n int, algo string, mult int) {
	c := &nn.Conv{Name: "b", Out: out, In: in, KH: k, KW: k, Stride: stride, Pad: k / 2,
		W: make([]float32, out*in*k*k), B: make([]float32, out)}
	for i := range c.W {
		c.W[i] = float32(i%7) * 0.01
	}
	x := Batch{in, n, h, h, make([]float32, in*n*h*h)}
	for i := range x.D {
		x.D[i] = float32(i%5) * 0.1
	}
	oh := (h+2*c.Pad-k)/stride + 1
	b.Run(fmt.Sprintf("%s/%d-%d/%dx%d", name, out, in, h, h), func(b *testing.B) {
		e := NewBatchEngine(benchThreads(1))
		e.direct, e.unfused = algo == "im2col", algo == "unfused"
		e.Put(e.Conv(c, x, true, nil))
		c0 := nn.ProcessCPU()
		for b.Loop() {
			e.Put(e.Conv(c, x, true, nil))
		}
		cpu := (nn.ProcessCPU() - c0).Seconds()
		b.ReportMetric(cpu*1e3*float64(mult)/float64(b.N*n), "cpu-ms/crop")
		b.ReportMetric(2*float64(out*in*k*k*oh*oh*n)*float64(b.N)/cpu/1e9, "GFLOP/cpu-s")
	})
}

// BenchmarkBatchResNet50 times every convolution of a ResNet-50 crop
// (224×224; torchvision's v1.5 blocks, the stride in the 3×3) as the
// BatchEngine runs it, one worker ($CANOPY_BENCH_THREADS=2: the crop
// step's two), 16 crops a batch: cpu-ms/crop is the
// layer's share of a crop (its time × the times the network runs it), so
// the column sums to the convolutions' CPU time per crop. Run it with
// CANOPY_SIMD=avx2 and avx512 side by side to see where a path loses.
func BenchmarkBatchResNet50(b *testing.B) {
	n := benchBatch()
	// out, in, k, stride, input size, times in the network
	for _, s := range [][6]int{{64, 3, 7, 2, 224, 1},
		{64, 64, 1, 1, 56, 1}, {64, 64, 3, 1, 56, 3}, {256, 64, 1, 1, 56, 4}, {64, 256, 1, 1, 56, 2},
		{128, 256, 1, 1, 56, 1}, {128, 128, 3, 2, 56, 1}, {512, 128, 1, 1, 28, 4}, {512, 256, 1, 2, 56, 1},
		{128, 512, 1, 1, 28, 3}, {128, 128, 3, 1, 28, 3},
		{256, 512, 1, 1, 28, 1}, {256, 256, 3, 2, 28, 1}, {1024, 256, 1, 1, 14, 6}, {1024, 512, 1, 2, 28, 1},
		{256, 1024, 1, 1, 14, 5}, {256, 256, 3, 1, 14, 5},
		{512, 1024, 1, 1, 14, 1}, {512, 512, 3, 2, 14, 1}, {2048, 512, 1, 1, 7, 3}, {2048, 1024, 1, 2, 14, 1},
		{512, 2048, 1, 1, 7, 2}, {512, 512, 3, 1, 7, 2}} {
		name := fmt.Sprintf("%dx%ds%d-x%d", s[2], s[2], s[3], s[5])
		benchBatchConv(b, name, s[0], s[1], s[2], s[3], s[4], n, "", s[5])
	}
}

// BenchmarkBatchPairs times each pair of ResNet-50 1×1 convolutions that
// ConvPair runs together (a block's last, with the residual, then the
// next block's first; 16 crops), "pair" against "alone" (Conv, Conv), on
// $CANOPY_BENCH_THREADS workers (default 2, the crop step's), in CPU
// milliseconds per crop for all of the network's pairs of that shape.
func BenchmarkBatchPairs(b *testing.B) {
	n, th := benchBatch(), benchThreads(2)
	// width, bottleneck width, map size, pairs in the network
	for _, s := range [][4]int{{256, 64, 56, 2}, {512, 128, 28, 3}, {1024, 256, 14, 5}} {
		wide, narrow, h, mult := s[0], s[1], s[2], s[3]
		c3, c1 := benchConv(wide, narrow), benchConv(narrow, wide)
		x, res := benchInput(narrow, n, h), benchInput(wide, n, h)
		for _, mode := range []string{"alone", "pair"} {
			b.Run(fmt.Sprintf("%s/%d-%d/%dx%d", mode, wide, narrow, h, h), func(b *testing.B) {
				e := NewBatchEngine(th)
				run := func() {
					if mode == "pair" {
						e.Put(e.ConvPair(c3, x, &res, c1))
						return
					}
					a := e.Conv(c3, x, true, &res)
					e.Put(a, e.Conv(c1, a, true, nil))
				}
				run()
				c0 := nn.ProcessCPU()
				for b.Loop() {
					run()
				}
				b.ReportMetric((nn.ProcessCPU()-c0).Seconds()*1e3*float64(mult)/float64(b.N*n), "cpu-ms/crop")
			})
		}
	}
}

// benchConv is a 1×1 convolution out←in of fixed weights.
func benchConv(out, in int) *nn.Conv {
	c := &nn.Conv{Name: "b", Out: out, In: in, KH: 1, KW: 1, Stride: 1, W: make([]float32, out*in), B: make([]float32, out)}
	for i := range c.W {
		c.W[i] = float32(i%7) * 0.01
	}
	return c
}

// benchInput is a batch of n h×h maps of c channels.
func benchInput(c, n, h int) Batch {
	x := Batch{c, n, h, h, nn.BigFloats(c * n * h * h)}
	for i := range x.D {
		x.D[i] = float32(i%5) * 0.1
	}
	return x
}
