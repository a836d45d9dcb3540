package retinanet

import (
	"fmt"
	"runtime"
	"sort"
	"syscall"
	"testing"
	"time"

	"github.com/canopy-hpc/canopy/infer/cpu"
	"github.com/canopy-hpc/canopy/internal/testsupport/forest"
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
					// As a job runs its CPU detector (jobs: raiseProcs).
					if p := cpu.Procs(threads); runtime.GOMAXPROCS(0) < p {
						defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(p))
					}
					r := NewRunner(m, threads)
					r.Detect(img) // warm the buffers
					b.ResetTimer()
					c0 := cpuTime()
					for b.Loop() {
						r.Detect(img)
					}
					b.ReportMetric(float64(b.Elapsed().Seconds())/float64(b.N), "s/image")
					b.ReportMetric((cpuTime()-c0).Seconds()/float64(b.N), "cpu-s/image")
				})
			}
		}
	}
}

// BenchmarkLoss is the cost of the validation losses at 800×800 on the CPU:
// the ResNet-50 fixture network on an 800×800 forest image (internal/testsupport/forest
// seed 7, its own crowns as truth; 800×800 is also the network input of a
// 400×400 crop). "interleaved" runs Detect and DetectLoss back to back in
// every iteration (in alternating order), so that a load that drifts on a
// shared machine hits both alike, and reports each one's mean seconds and
// the median over the iterations of the pair's overhead in percent, in wall
// time and in the process's CPU time (steadier on a loaded machine);
// "loss-only" times the loss path alone (matching and the loss sums over
// the head outputs of one forward).
func BenchmarkLoss(b *testing.B) {
	_, m := goldenModel(b, "r50.json")
	rgba, crowns := forest.Generate(7, 0, 800, 800)
	img := toImage(rgba)
	var tg []Target
	for _, c := range crowns {
		tg = append(tg, Target{Box: [4]float32{float32(c.XMin), float32(c.YMin), float32(c.XMax), float32(c.YMax)}})
	}
	for _, threads := range []int{1, 2} {
		b.Run(fmt.Sprintf("interleaved/threads=%d", threads), func(b *testing.B) {
			r := NewRunner(m, threads)
			r.DetectLoss(img, tg) // warm the buffers
			var plain, loss, cpuPlain, cpuLoss time.Duration
			var ratios, cpuRatios []float64
			for i := 0; b.Loop(); i++ {
				var dp, dl, cp, cl time.Duration
				for k := 0; k < 2; k++ {
					t0, c0 := time.Now(), cpuTime()
					if (i+k)%2 == 0 {
						r.Detect(img)
						dp, cp = time.Since(t0), cpuTime()-c0
					} else {
						r.DetectLoss(img, tg)
						dl, cl = time.Since(t0), cpuTime()-c0
					}
				}
				plain, loss, cpuPlain, cpuLoss = plain+dp, loss+dl, cpuPlain+cp, cpuLoss+cl
				ratios = append(ratios, dl.Seconds()/dp.Seconds())
				cpuRatios = append(cpuRatios, cl.Seconds()/cp.Seconds())
			}
			n := float64(b.N)
			b.ReportMetric(plain.Seconds()/n, "s/detect")
			b.ReportMetric(loss.Seconds()/n, "s/detect+loss")
			b.ReportMetric(100*(median(ratios)-1), "%overhead(median)")
			b.ReportMetric(cpuPlain.Seconds()/n, "cpu-s/detect")
			b.ReportMetric(cpuLoss.Seconds()/n, "cpu-s/detect+loss")
			b.ReportMetric(100*(median(cpuRatios)-1), "%cpu-overhead(median)")
		})
	}
	// The loss path alone, on kept head outputs.
	e := cpu.NewEngine(1)
	x, rh, rw := normalizeResizePad(e, img, m.Opt)
	ph, pw := x.H, x.W
	p := features[cpu.Fmap](m, e, x)
	var levels [5]levelOut
	for L := range p {
		cls, reg := head[cpu.Fmap](m, e, p[L])
		levels[L] = levelOut{gh: p[L].H, gw: p[L].W, cls: cls, reg: reg}
	}
	gr := grids(p, func(f cpu.Fmap) (int, int) { return f.H, f.W })
	b.Run(fmt.Sprintf("loss-only/truth=%d", len(tg)), func(b *testing.B) {
		for b.Loop() {
			a := m.newLossAcc(tg, img.H, img.W, rh, rw, ph, pw, gr)
			for L := range levels {
				a.addLevel(levels[L], L)
			}
			a.result()
		}
	})
}

func median(x []float64) float64 {
	sort.Float64s(x)
	return x[len(x)/2]
}

// cpuTime is the process's user+system CPU time: unlike wall time, it does
// not count the time other jobs on a shared machine hold the cores.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
