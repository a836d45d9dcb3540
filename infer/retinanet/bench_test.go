package retinanet

import (
	"fmt"
	"testing"
)

// BenchmarkDetect times one image end to end (transform, network, decode,
// NMS) for the fixture networks on the fixture images: a 400×400 crop
// (resized to 800×800 by ResNet-50's default transform) and the large
// non-square 1500×900 image, on 1 and 2 threads. make bench-infer runs it
// next to torchvision (tools/retinanet/bench.py) with the same weights.
func BenchmarkDetect(b *testing.B) {
	imgs, _ := goldenImages(b)
	for _, model := range []string{"r50", "r18"} {
		_, m := goldenModel(b, model+".json")
		for _, i := range []int{0, 2} {
			for _, threads := range []int{1, 2} {
				img := imgs[i]
				b.Run(fmt.Sprintf("%s/%dx%d/threads=%d", model, img.W, img.H, threads), func(b *testing.B) {
					r := NewRunner(m, threads)
					r.Detect(img) // warm the buffers
					b.ResetTimer()
					for b.Loop() {
						r.Detect(img)
					}
					b.ReportMetric(float64(b.Elapsed().Seconds())/float64(b.N), "s/image")
				})
			}
		}
	}
}

// BenchmarkConv3x3 times one 3×3 stride-1 convolution both ways, at the
// shapes RetinaNet runs them: the heads and FPN (256→256 on P3 of an
// 800×800 input) and a ResNet-18 layer1 conv (64→64 at 200×200).
func BenchmarkConv3x3(b *testing.B) {
	for _, s := range [][3]int{{256, 100, 100}, {128, 100, 100}, {64, 200, 200}} {
		ch, h, w := s[0], s[1], s[2]
		c := &conv{name: "b", out: ch, in: ch, kh: 3, kw: 3, stride: 1, pad: 1, w: make([]float32, ch*ch*9), b: make([]float32, ch)}
		for i := range c.w {
			c.w[i] = float32(i%7) * 0.01
		}
		x := newFmap(ch, h, w)
		for i := range x.d {
			x.d[i] = float32(i%5) * 0.1
		}
		for _, direct := range []bool{true, false} {
			name := "winograd"
			if direct {
				name = "im2col"
			}
			b.Run(fmt.Sprintf("%s/%dch/%dx%d", name, ch, h, w), func(b *testing.B) {
				e := newEngine(1)
				e.direct = direct
				e.conv(c, x, true, nil)
				for b.Loop() {
					e.conv(c, x, true, nil)
				}
				b.ReportMetric(2*float64(ch*ch*9*h*w)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s(direct-equivalent)")
			})
		}
	}
}
