package tile

import (
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/canopy-hpc/canopy/infer/gdal"
	"github.com/canopy-hpc/canopy/infer/modelfile"
	"github.com/canopy-hpc/canopy/infer/retinanet"
	"github.com/canopy-hpc/canopy/internal/testsupport/forest"
)

// What --skip-empty costs and saves, per window (scripts/bench-skip-empty.sh
// runs these with -count and benchstat; docs/benchmarks.md).

func cpuNow() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// cpuMetric reports the process's CPU seconds per op beside ns/op.
func cpuMetric(b *testing.B, c0 time.Duration) {
	b.ReportMetric((cpuNow()-c0).Seconds()/float64(b.N), "cpu-s/op")
}

// benchRaster writes a 2000×2000 forest raster (RGBA, alpha 255) as a
// tiled, deflated GeoTIFF, as orthomosaics are stored.
func benchRaster(b *testing.B) string {
	b.Helper()
	dir := b.TempDir()
	img, _ := forest.Generate(27, 0, 2000, 2000)
	p := filepath.Join(dir, "forest.png")
	f, err := os.Create(p)
	if err != nil {
		b.Fatal(err)
	}
	if err := png.Encode(f, img); err != nil {
		b.Fatal(err)
	}
	f.Close()
	t := filepath.Join(dir, "forest.tif")
	if out, err := exec.Command("gdal_translate", "-q", "-co", "TILED=YES", "-co", "COMPRESS=DEFLATE", p, t).CombinedOutput(); err != nil {
		b.Skipf("gdal_translate: %v %s", err, out)
	}
	return t
}

// BenchmarkWindowCost: one 400×400 window. check/* is EmptyWindow on a
// window of imagery (the common case: decided within its first pixels),
// on an empty one (nodata throughout: read through once) and on a
// transparent one (alpha 0: each pixel and its alpha read once); read/* is
// GDAL's read of a window of a tiled, deflated RGBA GeoTIFF with a 1 MiB
// block cache (so every read decodes): Read (8-bit RGB, what predict --tile reads) and
// ReadSamples (the samples and the alpha plane, what --skip-empty needs);
// detect is the demo model (canopy-demo-r18) on the imagery window on one
// thread. With -count N the sub-benchmarks run in turn N times (paired).
func BenchmarkWindowCost(b *testing.B) {
	const side = 400
	n := side * side
	img, _ := forest.Generate(27, 0, side, side)
	pix := make([]uint8, 3*n)
	for i := range n {
		for c := range 3 {
			pix[c*n+i] = img.Pix[4*i+c]
		}
	}
	empty := make([]uint8, 3*n)
	opaque, clear := make([]uint8, n), make([]uint8, n)
	for i := range opaque {
		opaque[i] = 255
	}
	nd := NoData{Has: [3]bool{true, true, true}}
	for _, c := range []struct {
		name       string
		pix, alpha []uint8
		want       bool
	}{{"imagery", pix, opaque, false}, {"nodata", empty, nil, true}, {"alpha0", pix, clear, true}} {
		b.Run("check/"+c.name, func(b *testing.B) {
			c0 := cpuNow()
			for b.Loop() {
				if EmptyWindow(side, side, c.pix, c.alpha, nd) != c.want {
					b.Fatal("wrong verdict")
				}
			}
			cpuMetric(b, c0)
		})
	}
	if gdal.Available {
		r, err := gdal.Open(benchRaster(b))
		if err != nil {
			b.Fatal(err)
		}
		defer r.Close()
		gdal.SetCacheMax(1 << 20)
		defer gdal.SetCacheMax(gdal.DefaultCacheMax)
		for _, samples := range []bool{false, true} {
			name := "read/Read"
			if samples {
				name = "read/ReadSamples"
			}
			b.Run(name, func(b *testing.B) {
				c0 := cpuNow()
				for i := 0; b.Loop(); i++ {
					x, y := 380*(i%4), 380*((i/4)%4)
					var err error
					if samples {
						_, err = r.ReadSamples(x, y, side, side)
					} else {
						_, err = r.Read(x, y, side, side)
					}
					if err != nil {
						b.Fatal(err)
					}
				}
				cpuMetric(b, c0)
			})
		}
	}
	m, _, _, err := modelfile.LoadFolder("../../testdata/models/canopy-demo-r18")
	if err != nil {
		b.Fatal(err)
	}
	run := retinanet.NewRunner(m, 1)
	in := retinanet.Image{W: side, H: side, Pix: make([]float32, 3*n)}
	for i, v := range pix {
		in.Pix[i] = float32(v) / 255
	}
	run.Detect(in) // warm the buffers
	b.Run("detect/demo-r18/threads=1", func(b *testing.B) {
		c0 := cpuNow()
		for b.Loop() {
			run.Detect(in)
		}
		cpuMetric(b, c0)
	})
}

// BenchmarkOrthoScan reads every window of the raster named by
// CANOPY_BENCH_RASTER (scripts/bench-skip-empty.sh makes one with an
// orthomosaic's nodata border) as --skip-empty would: ReadSamples and
// EmptyWindow on each, and reports the windows and the empty ones; with
// the per-window detection time of BenchmarkWindowCost this gives the gain
// before a run (the end-to-end run measures it).
func BenchmarkOrthoScan(b *testing.B) {
	path := os.Getenv("CANOPY_BENCH_RASTER")
	if path == "" || !gdal.Available {
		b.Skip("CANOPY_BENCH_RASTER names no raster (scripts/bench-skip-empty.sh sets it), or a build without GDAL")
	}
	r, err := gdal.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	in := r.Info()
	wins, err := Windows(in.Width, in.Height, Settings{Patch: 400, Overlap: 0.05})
	if err != nil {
		b.Fatal(err)
	}
	nd := NoData{Has: in.HasNoData, Value: in.NoData}
	empty := 0
	c0 := cpuNow()
	for b.Loop() {
		empty = 0
		for _, w := range wins {
			s, err := r.ReadSamples(w.X, w.Y, w.W, w.H)
			if err != nil {
				b.Fatal(err)
			}
			var e bool
			if s.Pix16 != nil {
				e = EmptyWindow(s.W, s.H, s.Pix16, s.Alpha, nd)
			} else {
				e = EmptyWindow(s.W, s.H, s.Pix8, s.Alpha, nd)
			}
			if e {
				empty++
			}
		}
	}
	cpuMetric(b, c0)
	b.ReportMetric(float64(len(wins)), "windows")
	b.ReportMetric(float64(empty), "empty-windows")
	b.ReportMetric(float64(b.Elapsed().Seconds())/float64(b.N)/float64(len(wins)), "s/window")
}
