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
