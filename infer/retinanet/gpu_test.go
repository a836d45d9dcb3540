package retinanet

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"image"
	"image/png"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/canopy-hpc/canopy/infer"
	"github.com/canopy-hpc/canopy/internal/testsupport/approx"
	"github.com/canopy-hpc/canopy/internal/testsupport/bound"

	"github.com/canopy-hpc/canopy/infer/cpu"
	"github.com/canopy-hpc/canopy/infer/cuda"
	"github.com/canopy-hpc/canopy/infer/cuda/hostkern"
	"github.com/canopy-hpc/canopy/infer/gpu"
	"github.com/canopy-hpc/canopy/infer/nn"
)

// The GPU engine's kernels and orchestration, run on the host shim
// (infer/cuda/hostkern: kernels.cu compiled for the CPU, launched with the
// GPU's geometry), against the CPU backend.

func randMap(r *rand.Rand, c, h, w int) cpu.Fmap {
	f := cpu.NewFmap(c, h, w)
	for i := range f.D {
		f.D[i] = float32(r.NormFloat64())
	}
	return f
}

func randConv(r *rand.Rand, out, in, k, stride, pad int) *nn.Conv {
	c := &nn.Conv{Name: "backbone.body.layer1.0.conv1", Out: out, In: in, KH: k, KW: k, Stride: stride, Pad: pad,
		W: make([]float32, out*in*k*k), B: make([]float32, out)}
	s := 1 / math.Sqrt(float64(in*k*k))
	for i := range c.W {
		c.W[i] = float32(r.NormFloat64() * s)
	}
	for i := range c.B {
		c.B[i] = float32(r.NormFloat64() * 0.1)
	}
	return c
}

// batchOf stacks same-shaped maps into one host buffer.
func batchOf(fs ...cpu.Fmap) []float32 {
	var out []float32
	for _, f := range fs {
		out = append(out, f.D...)
	}
	return out
}

func upload(t *testing.T, g *gpu.Engine, n, c, h, w int, data []float32) gpu.Map {
	t.Helper()
	d := g.Alloc(n, c, h, w)
	if err := g.Dev.Upload(d.P, data); err != nil {
		t.Fatal(err)
	}
	return d
}

// maxRel is max |a−b| / (mean |b| + tiny).
func maxRel(a, b []float32) float64 {
	var abs, worst float64
	for _, v := range b {
		abs += math.Abs(float64(v))
	}
	scale := abs/float64(len(b)) + 1e-12
	for i := range a {
		worst = max(worst, math.Abs(float64(a[i])-float64(b[i]))/scale)
	}
	return worst
}

// convShape is one convolution: out and in channels, kernel, stride,
// padding, input height and width.
type convShape struct{ out, in, k, s, p, h, w int }

// convShapes are the convolution shapes RetinaNet uses: the stem 7×7/2,
// 3×3/1 and /2, 1×1/1 and /2.
var convShapes = []convShape{
	{16, 3, 7, 2, 3, 37, 30},
	{24, 16, 3, 1, 1, 19, 13},
	{24, 16, 3, 2, 1, 19, 13},
	{40, 24, 1, 1, 0, 9, 11},
	{40, 24, 1, 2, 0, 9, 11},
}

// convResult is one convolution of checkConvs: the GPU engine's output
// (got), the CPU engine's (want), and how many elements lie outside the
// bound derived from the two sides' arithmetic (worst: the largest
// |Δ|/bound).
type convResult struct {
	name      string
	prec      cuda.Precision
	g         *gpu.Engine
	cv        *nn.Conv
	got, want []float32
	worst     float64
	bad       int
}

// checkConvs runs each shape, with and without a residual (and ReLU), on
// a batch of two on the engine eng gives for each precision, the inputs
// placed on it by put, against the CPU engine image by image, and hands
// each result to check. The random inputs are drawn in the same order for
// every caller: per shape the weights, two inputs, two residuals.
func checkConvs(t *testing.T, r *rand.Rand, shapes []convShape, precs []cuda.Precision,
	eng func(testing.TB, cuda.Precision) *gpu.Engine, put func(*testing.T, *gpu.Engine, int, int, int, int, []float32) gpu.Map,
	sides map[cuda.Precision]bound.Side, check func(convResult)) {
	t.Helper()
	host := cpu.NewEngine(1)
	for _, c := range shapes {
		cv := randConv(r, c.out, c.in, c.k, c.s, c.p)
		x0, x1 := randMap(r, c.in, c.h, c.w), randMap(r, c.in, c.h, c.w)
		y0 := host.Conv(cv, x0, false, nil)
		res0, res1 := randMap(r, y0.C, y0.H, y0.W), randMap(r, y0.C, y0.H, y0.W)
		for _, withRes := range []bool{false, true} {
			var rp0, rp1 *cpu.Fmap
			if withRes {
				rp0, rp1 = &res0, &res1
			}
			want := batchOf(host.Conv(cv, x0, withRes, rp0), host.Conv(cv, x1, withRes, rp1))
			for _, prec := range precs {
				g := eng(t, prec)
				x := put(t, g, 2, c.in, c.h, c.w, batchOf(x0, x1))
				var rd *gpu.Map
				var ra, rb []float32
				if withRes {
					d := put(t, g, 2, y0.C, y0.H, y0.W, batchOf(res0, res1))
					rd = &d
				}
				got := g.Download(g.Conv(cv, x, withRes, rd))
				if withRes {
					ra, rb = batchOf(res0, res1), g.Download(*rd)
				}
				lim := bound.Batch(cv, c.h, c.w, sideCPU, sides[prec], batchOf(x0, x1), g.Download(x), ra, rb, got)
				if g.Err != nil {
					t.Fatal(g.Err)
				}
				worst, bad := bound.Within(got, want, lim)
				check(convResult{name: fmt.Sprintf("conv %dx%d/%d %d->%d res=%v %s", c.k, c.k, c.s, c.in, c.out, withRes, prec),
					prec: prec, g: g, cv: cv, got: got, want: want, worst: worst, bad: len(bad)})
			}
		}
	}
}

// newTestEngine is a GPU engine on the test device: the host shim, or the
// GPU in the cuda build.
func newTestEngine(t testing.TB, p cuda.Precision) *gpu.Engine {
	return gpu.NewEngine(newTestDevice(t), p)
}

// TestKernelsMatchCPU: every convolution shape RetinaNet uses (stem 7×7/2,
// 3×3/1 and /2, 1×1/1 and /2, with and without residual and ReLU) and the
// pooling, upsampling and ReLU kernels, on a batch of two, against the CPU
// engine image by image, every element within the bound derived from the
// two sides' arithmetic (bound_test.go: γ_{K+2} of Σ|terms| for a direct
// convolution in any order, γ_{in+15} of the absolute Winograd product for
// the CPU's F(4×4,3×3), TF32 operand rounding on the GPU side); the
// others exactly.
func TestKernelsMatchCPU(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	host := cpu.NewEngine(1)
	sides := map[cuda.Precision]bound.Side{cuda.Exact: sideFP32, cuda.KernelTF32: sideTF32}
	shapes := append(convShapes, convShape{70, 33, 3, 1, 1, 5, 4})
	checkConvs(t, r, shapes, []cuda.Precision{cuda.Exact, cuda.KernelTF32}, newTestEngine, upload, sides, func(c convResult) {
		if c.bad > 0 {
			t.Errorf("%s: %d elements outside the derived bound (bound_test.go), |Δ|/bound up to %.3g", c.name, c.bad, c.worst)
		} else {
			t.Logf("%s: |Δ|/bound up to %.3g", c.name, c.worst)
		}
		// TF32 operands move a K-term product by ~2⁻¹¹/√K of its
		// size, far above 1e-7 of the mean |y|: bit agreement means
		// the operands were not rounded.
		if c.prec == cuda.KernelTF32 && maxRel(c.got, c.want) < 1e-7 {
			t.Errorf("%s: TF32 agrees with FP32 to the bit: the TF32 rounding is not applied", c.name)
		}
	})

	g := newTestEngine(t, cuda.Exact)
	a, b := randMap(r, 5, 17, 12), randMap(r, 5, 17, 12)
	a.D[7] = float32(math.NaN())
	x := upload(t, g, 2, 5, 17, 12, batchOf(a, b))
	if got, want := g.Download(g.MaxPool3s2(x)), batchOf(host.MaxPool3s2(a), host.MaxPool3s2(b)); !sameBits(got, want) {
		t.Error("maxpool3s2 differs from the CPU engine")
	}
	if got, want := g.Download(g.ReluCopy(x)), batchOf(host.ReluCopy(a), host.ReluCopy(b)); !sameBits(got, want) {
		t.Error("relu_copy differs from the CPU engine")
	}
	for _, sz := range [][4]int{{4, 3, 8, 6}, {5, 4, 9, 7}, {3, 2, 7, 5}} {
		top0, top1 := randMap(r, 3, sz[0], sz[1]), randMap(r, 3, sz[0], sz[1])
		lat0, lat1 := randMap(r, 3, sz[2], sz[3]), randMap(r, 3, sz[2], sz[3])
		lat := upload(t, g, 2, 3, sz[2], sz[3], batchOf(lat0, lat1))
		top := upload(t, g, 2, 3, sz[0], sz[1], batchOf(top0, top1))
		g.UpsampleAdd(lat, top)
		cpu.AddUpsampled(lat0, top0, cpu.NewEngine(1).Parallel)
		cpu.AddUpsampled(lat1, top1, cpu.NewEngine(3).Parallel)
		if !sameBits(g.Download(lat), batchOf(lat0, lat1)) {
			t.Errorf("upsample_add %dx%d -> %dx%d differs from the CPU engine", sz[0], sz[1], sz[2], sz[3])
		}
	}
	if g.Err != nil {
		t.Fatal(g.Err)
	}
}

func sameBits(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

// smallModel is a ResNet-18-FPN32, 2-class RetinaNet from the test weight
// generator, at min_size 64 (so the host shim runs it in seconds).
func smallModel(t testing.TB) *Model {
	return smallModelOf(t, generatedWeights(t, "resnet18", 2, 32, 7))
}

// smallModelOf is smallModel's network with the weights w.
func smallModelOf(t testing.TB, w nn.Weights) *Model {
	opt := DefaultOptions()
	opt.MinSize, opt.MaxSize = 64, 96
	opt.ScoreThresh = 0.05
	m, err := New(w, opt)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func smallImages(n, w, h int, seed uint64) []Image {
	r := rand.New(rand.NewPCG(seed, 9))
	out := make([]Image, n)
	for i := range out {
		img := Image{W: w, H: h, Pix: make([]float32, 3*w*h)}
		for j := range img.Pix {
			img.Pix[j] = float32(r.Float64())
		}
		out[i] = img
	}
	return out
}

// TestGPUEngineMatchesCPU: the whole network through the GPU engine on the
// host shim against the CPU runner, FP32 and TF32: every layer within the
// bound derived from the two engines' arithmetic (bound_test.go: the CPU's
// Winograd and blocked SGEMM of any ISA against the shim's fmaf chains,
// TF32 operands for kernel-tf32), the runners' pyramid levels the bits of
// those layers, top scores and detections within the bounds that follow.
func TestGPUEngineMatchesCPU(t *testing.T) {
	m := smallModel(t)
	imgs := smallImages(2, 90, 70, 1)
	host := NewRunner(m, 2)
	for pi, prec := range []cuda.Precision{cuda.Exact, cuda.KernelTF32} {
		gr := NewGPURunner(m, newTestDevice(t), prec)
		g := newTestEngine(t, prec)
		for i, img := range imgs {
			want, wtr := host.DetectTrace(img)
			got, gtr, err := gr.DetectTrace(img)
			if err != nil {
				t.Fatal(err)
			}
			up := func(x cpu.Fmap) gpu.Map { return upload(t, g, 1, x.C, x.H, x.W, x.D) }
			checkParity(t, fmt.Sprintf("%s image %d", prec, i), m, img, g, sideCPU, []bound.Side{sideFP32, sideTF32}[pi], up,
				want, got, wtr, gtr, []float64{1, 0.9}[pi])
		}
		if err := gr.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

func boxClose(a, b [4]float32, tol float64) bool {
	for j := range a {
		if approx.Far(math.Abs(float64(a[j]-b[j])), tol) {
			return false
		}
	}
	return true
}

// detBytes is every detection's bytes: box, score, label (binary.Write
// on a Detection would write nothing: Label is an int).
func detBytes(dets [][]Detection) []byte {
	var b bytes.Buffer
	for _, ds := range dets {
		binary.Write(&b, binary.LittleEndian, int32(len(ds)))
		for _, d := range ds {
			binary.Write(&b, binary.LittleEndian, d.Box)
			binary.Write(&b, binary.LittleEndian, d.Score)
			binary.Write(&b, binary.LittleEndian, int64(d.Label))
		}
	}
	return b.Bytes()
}

// TestGPUBatchInvariance: the same images give byte-identical detections in
// batches of 1, 2 and 4 and with a different-size image cutting a run, FP32
// and TF32 (every output element is reduced by one thread in one order,
// wherever it sits in the batch).
func TestGPUBatchInvariance(t *testing.T) {
	m := smallModel(t)
	imgs := smallImages(4, 90, 70, 3)
	odd := smallImages(1, 64, 100, 4)[0]
	mixed := []Image{imgs[0], imgs[1], odd, imgs[2], imgs[3]}
	for _, prec := range []cuda.Precision{cuda.Exact, cuda.KernelTF32} {
		var ref []byte
		for _, bs := range []int{1, 2, 4} {
			gr := NewGPURunner(m, newTestDevice(t), prec)
			dets, err := gr.DetectBatch(mixed, bs)
			if err != nil {
				t.Fatal(err)
			}
			b := detBytes(dets)
			if ref == nil {
				ref = b
				n := 0
				for _, d := range dets {
					n += len(d)
				}
				if n == 0 {
					t.Fatalf("%s: no detections at all: the comparison would be empty", prec)
				}
			} else if !bytes.Equal(b, ref) {
				t.Errorf("%s: batch size %d gives other detections than batch size 1", prec, bs)
			}
		}
	}
}

// gpuTracer lets the golden tests drive a GPURunner.
type gpuTracer struct {
	t *testing.T
	*GPURunner
}

func (g gpuTracer) DetectTrace(img Image) ([]Detection, *Trace) {
	d, tr, err := g.GPURunner.DetectTrace(img)
	if err != nil {
		g.t.Fatal(err)
	}
	return d, tr
}

// TestGoldenHostShim: the GPU engine's FP32 kernels, on the host shim, meet
// torchvision's fixture (ResNet-18-FPN64, the golden images) with the
// CPU backend's tolerances. On a GPU, conv_f32 computes the same bits as the
// shim (fmaf in the same k order, no contraction: gen.sh), which the GPU
// check (tools/gpu) confirms with this same test built with -tags cuda.
func TestGoldenHostShim(t *testing.T) {
	g, m := goldenModel(t, "r18.json")
	gr := NewGPURunner(m, newTestDevice(t), cuda.Exact)
	defer gr.Close()
	if _, ok := gr.Device().(*hostkern.Device); ok {
		// The shim is slow: the first four images in CI (1500×900 among
		// them, which the two resize rules size differently); all on a GPU.
		short := *g
		short.Images = g.Images[:4]
		g = &short
	}
	checkRuleExercised(t, g, m.Opt)
	checkGoldenWith(t, g, m, gpuTracer{t, gr}, forestSet)
}

// BenchmarkGPUDetect times the GPU engine (the GPU in the cuda build; the
// host shim otherwise, which is slow and only shows the benchmark runs) on
// the ResNet-50-FPN of the r50.json fixture, 400×400 images (padded to
// 416×416), batch 1, 8 and 32, in every --precision: exact (canopy's
// kernels) and fp32, tf32, bf16 (cuDNN: the library CANOPY_CUDNN names on
// a GPU, the fake on the host shim; heuristic engines). One op is one
// batch; the images/s metric is what tools/gpu/check.sh compares with
// torchvision.
func BenchmarkGPUDetect(b *testing.B) {
	_, m := goldenModel(b, "r50.json")
	imgs, _ := goldenImages(b)
	dev := newTestDevice(b)
	for _, prec := range []cuda.Precision{cuda.Exact, cuda.FP32, cuda.TF32, cuda.BF16} {
		for _, bs := range []int{1, 8, 32} {
			batch := make([]Image, bs)
			for i := range batch {
				batch[i] = imgs[i%2] // the two 400×400 images
			}
			b.Run(fmt.Sprintf("r50/%s/batch=%d", prec, bs), func(b *testing.B) {
				o := gpu.Options{Precision: prec}
				if prec.Cudnn() {
					o.CUDNN = testCUDNN(b, dev)
				}
				gr, err := NewGPURunnerWith(m, dev, o)
				if err != nil {
					b.Fatal(err)
				}
				defer gr.Close()
				if _, err := gr.DetectBatch(batch, bs); err != nil { // warm-up: weights, buffers, plans
					b.Fatal(err)
				}
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if _, err := gr.DetectBatch(batch, bs); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(bs*b.N)/b.Elapsed().Seconds(), "images/s")
			})
		}
	}
}

// TestGPULayerTimes prints the time per layer group on the device (the
// GPU check's kernel time split; on the host shim it only shows that
// every group is timed).
func TestGPULayerTimes(t *testing.T) {
	var m *Model
	var imgs []Image
	if _, ok := newTestDevice(t).(*hostkern.Device); ok {
		m, imgs = smallModel(t), smallImages(2, 90, 70, 5) // the shim is slow
	} else {
		_, m = goldenModel(t, "r50.json")
		imgs, _ = goldenImages(t)
	}
	for _, prec := range []cuda.Precision{cuda.Exact, cuda.KernelTF32} {
		gr := NewGPURunner(m, newTestDevice(t), prec)
		if _, err := gr.DetectBatch(imgs[:1], 1); err != nil { // warm-up
			t.Fatal(err)
		}
		gr.EnableLayerTimes()
		if _, err := gr.DetectBatch(imgs[:2], 1); err != nil {
			t.Fatal(err)
		}
		lt := gr.LayerTimes()
		groups := map[string]bool{}
		var total float64
		for _, l := range lt {
			groups[l.Group] = true
			total += l.Seconds
		}
		for _, g := range []string{"stem", "layer1", "layer4", "fpn", "head.cls", "head.reg", "maxpool", "transform", "postprocess"} {
			if !groups[g] {
				t.Errorf("%s: no time for %s", prec, g)
			}
		}
		for _, l := range lt {
			t.Logf("%s %s: %-12s %8.2f ms/image %5.1f%%", m.Arch, prec, l.Group, 1e3*l.Seconds/2, 100*l.Seconds/total)
		}
		gr.Close()
	}
}

// TestFP32BitsMatchShim: conv_f32 on the test device gives the host shim's
// bits (the same fmaf chain in the same k order). In CI the test device is
// the shim itself; built with -tags cuda it is the GPU, and this is the
// claim that CI's shim results stand for the GPU's.
func TestFP32BitsMatchShim(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, c := range []struct{ out, in, k, s, p, h, w int }{
		{64, 3, 7, 2, 3, 41, 37}, {72, 40, 3, 1, 1, 13, 11}, {33, 64, 1, 2, 0, 15, 9},
	} {
		cv := randConv(r, c.out, c.in, c.k, c.s, c.p)
		x := batchOf(randMap(r, c.in, c.h, c.w), randMap(r, c.in, c.h, c.w))
		var outs [2][]float32
		for i, g := range []*gpu.Engine{newTestEngine(t, cuda.Exact), gpu.NewEngine(hostkern.New(), cuda.Exact)} {
			outs[i] = g.Download(g.Conv(cv, upload(t, g, 2, c.in, c.h, c.w, x), true, nil))
			if g.Err != nil {
				t.Fatal(g.Err)
			}
		}
		if !sameBits(outs[0], outs[1]) {
			t.Errorf("conv %dx%d/%d %d->%d: %s gives other bits than the host shim (max error %.3g)",
				c.k, c.k, c.s, c.in, c.out, newTestDevice(t).Info().Backend, maxRel(outs[0], outs[1]))
		}
	}
}

// TestGoldenTF32: TF32 on the test device against torchvision's FP32
// fixture (ResNet-18-FPN64): TF32 rounds the operands to 10 mantissa bits,
// so this is a measure, with bounds: at least 90% of the fixture's
// detections matched within 0.02 in score and 1 px, and the worst case
// logged (the GPU check records it).
func TestGoldenTF32(t *testing.T) {
	g, m := goldenModel(t, "r18.json")
	imgs, _ := goldenImages(t)
	gr := NewGPURunner(m, newTestDevice(t), cuda.KernelTF32)
	defer gr.Close()
	for i, gi := range g.Images {
		if _, ok := gr.Device().(*hostkern.Device); ok && i != 2 {
			continue // the shim is slow: one image in CI
		}
		dets, _, err := gr.DetectTrace(imgs[i])
		if err != nil {
			t.Fatal(err)
		}
		matched, worstS, worstB := 0, 0.0, 0.0
		for k := range gi.Scores {
			bestB, bestS := math.Inf(1), 0.0
			for _, d := range dets {
				ds := math.Abs(float64(d.Score) - gi.Scores[k])
				if d.Label != gi.Labels[k] || approx.Far(ds, 0.02) {
					continue
				}
				var db float64
				for q := 0; q < 4; q++ {
					db = max(db, math.Abs(float64(d.Box[q])-gi.Boxes[k][q]))
				}
				if db < bestB {
					bestB, bestS = db, ds
				}
			}
			if bestB <= 1 {
				matched++
				worstB, worstS = max(worstB, bestB), max(worstS, bestS)
			}
		}
		t.Logf("%s tf32: %d of torchvision's %d detections matched (canopy %d); worst |Δscore| %.3g, |Δbox| %.3g px",
			gi.Path, matched, len(gi.Scores), len(dets), worstS, worstB)
		if matched*10 < len(gi.Scores)*9 {
			t.Errorf("%s: only %d of %d matched in TF32", gi.Path, matched, len(gi.Scores))
		}
	}
}

// The GPU detector gives the same detections whether the job announced the
// next batch (Prefetch) or not, whatever was announced.
func TestGPUDetectorPrefetch(t *testing.T) {
	m := smallModel(t)
	dir := t.TempDir()
	var in []infer.Input
	for i, img := range smallImages(5, 90, 70, 11) {
		rgba := image.NewRGBA(image.Rect(0, 0, img.W, img.H))
		for y := 0; y < img.H; y++ {
			for x := 0; x < img.W; x++ {
				o := rgba.PixOffset(x, y)
				for c := 0; c < 3; c++ {
					rgba.Pix[o+c] = uint8(img.Pix[c*img.W*img.H+y*img.W+x] * 255)
				}
				rgba.Pix[o+3] = 255
			}
		}
		f := filepath.Join(dir, fmt.Sprintf("p%d.png", i))
		w, err := os.Create(f)
		if err != nil {
			t.Fatal(err)
		}
		png.Encode(w, rgba)
		w.Close()
		in = append(in, infer.Input{Index: i, Path: f, File: f})
	}
	batches := [][]infer.Input{in[:2], in[2:4], in[4:]}
	run := func(prefetch func(d *GPUDetector, k int)) string {
		d, err := NewGPUDetector(m, newTestDevice(t), cuda.Exact, []int32{0, 1})
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		var out strings.Builder
		for k, b := range batches {
			prefetch(d, k)
			got, err := d.Detect(context.Background(), b)
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprint(&out, got)
		}
		return out.String()
	}
	ref := run(func(*GPUDetector, int) {})
	if strings.Count(ref, "{") < 5 {
		t.Fatalf("too few detections to compare: %s", ref)
	}
	for name, pf := range map[string]func(d *GPUDetector, k int){
		"next batch": func(d *GPUDetector, k int) {
			if k+1 < len(batches) {
				d.Prefetch(batches[k+1])
			}
		},
		"this batch": func(d *GPUDetector, k int) { d.Prefetch(batches[k]) },
		"wrong batches": func(d *GPUDetector, k int) {
			d.Prefetch(batches[(k+2)%3])
			d.Prefetch(in[:1])
			d.Prefetch(batches[(k+2)%3])
		},
	} {
		if got := run(pf); got != ref {
			t.Errorf("prefetching %s changed the detections", name)
		}
	}
}
