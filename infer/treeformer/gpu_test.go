package treeformer

import (
	"errors"
	"fmt"
	"math"
	"testing"

	"github.com/canopy-hpc/canopy/infer/cpu"
	"github.com/canopy-hpc/canopy/infer/cuda"
	"github.com/canopy-hpc/canopy/infer/cuda/kernels"
	"github.com/canopy-hpc/canopy/infer/gemm"
	"github.com/canopy-hpc/canopy/infer/gpu"
	"github.com/canopy-hpc/canopy/infer/tile"
	"github.com/canopy-hpc/canopy/internal/testsupport/approx"
	"github.com/canopy-hpc/canopy/internal/testsupport/gputest"
	"github.com/canopy-hpc/canopy/internal/testsupport/testfile"
	"github.com/canopy-hpc/canopy/internal/testsupport/testweights"
	"github.com/canopy-hpc/canopy/internal/testsupport/tftol"
)

// The GPU engine's TreeFormer (gpu.go) against the CPU engine: on the host
// shim (kernels.cu on the CPU) with the fake libcudnn.so.9 in CI, on GPU 0
// with the real cuDNN (CANOPY_CUDNN) in the cuda build (tools/gpu/check.sh).

// testDevice is the host shim (kernels.cu on the CPU) in the default
// build, GPU 0 with -tags cuda (gputest).
func testDevice(t testing.TB) cuda.Device { return gputest.Device(t) }

// gpuOptions are the runner's options at precision p: the fake cuDNN on
// the shim, CANOPY_CUDNN's on a GPU (skipped without it).
func gpuOptions(t testing.TB, dev cuda.Device, p cuda.Precision) gpu.Options {
	t.Helper()
	o := gpu.Options{Precision: p}
	if p.Cudnn() {
		o.CUDNN = gputest.CUDNN(t, dev)
	}
	return o
}

func newGPU(t testing.TB, m *Model, dev cuda.Device, p cuda.Precision) *GPURunner {
	t.Helper()
	r, err := NewGPURunner(m, dev, gpuOptions(t, dev, p))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func tinyModel(t testing.TB) *Model {
	t.Helper()
	m, err := New(seeded(t, Tiny), Tiny)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// transpose turns a rows×cols matrix into cols×rows (CHW ↔ token-major).
func transpose(x []float32, rows, cols int) []float32 {
	out := make([]float32, len(x))
	for r := 0; r < rows; r++ {
		for c := 0; c < cols; c++ {
			out[c*rows+r] = x[r*cols+c]
		}
	}
	return out
}

// upMap uploads a CHW map in the layout asked for.
func upMap(t testing.TB, g *gpu.Engine, c, h, w int, chw []float32, nhwc bool) gpu.Map {
	t.Helper()
	m := g.Alloc(1, c, h, w)
	v := chw
	if nhwc {
		m.NHWC = true
		v = transpose(chw, c, h*w)
	}
	if err := g.Dev.Upload(m.P, v); err != nil {
		t.Fatal(err)
	}
	return m
}

// sameBits fails on the first element whose bits differ.
func sameBits(t testing.TB, what string, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, the CPU's %d", what, len(got), len(want))
	}
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s: element %d is %g (%#x), the CPU kernel's %g (%#x)", what, i, got[i], math.Float32bits(got[i]), want[i], math.Float32bits(want[i]))
		}
	}
}

func layoutName(nhwc bool) string {
	if nhwc {
		return "nhwc"
	}
	return "nchw"
}

// TestGPUKernelsMatchCPU: each tf_* kernel of kernels.cu against the CPU
// kernel it mirrors (kernels.go, forward.go), on the tiny model's own
// weights and seeded inputs, in both layouts: the same bits, for the same
// float and double operations run in the same order (the shim is compiled
// without contraction, nvcc with --fmad=false). The one exception is the
// channel attention's gate, a double exp that is Go's math.Exp on the CPU
// and the C library's (or CUDA's) on the device, each within an ulp of
// double: rounded to float32 the gate can differ by one ulp (2⁻²³
// relative) only when the double lands within an ulp of a rounding
// boundary, and the product g·x adds its own rounding (2⁻²⁴ each side), so
// the gated map is held to 2⁻²² relative, element by element.
func TestGPUKernelsMatchCPU(t *testing.T) {
	m := tinyModel(t)
	dev := testDevice(t)
	r := newGPU(t, m, dev, cuda.Exact)
	g := r.g
	down := func(x gpu.Map) []float32 {
		v := g.Download(x)
		if g.Err != nil {
			t.Fatal(g.Err)
		}
		return v
	}
	for _, nhwc := range []bool{false, true} {
		lay := layoutName(nhwc)
		s := &m.stages[1]
		c, h, w := s.width, 5, 7
		n := h * w
		x := seededF32("gpu-ln-"+lay, c*n, -3, 5)
		// LayerNorm (block 0's ln1), out of place and in place
		want := make([]float32, c*n)
		layerNormRows(serial, transpose(x, c, n), n, c, s.blocks[0].ln1, want)
		xm := upMap(t, g, c, h, w, x, nhwc)
		ym := r.like(xm, c, h, w)
		r.layerNorm(xm, ym, s.blocks[0].ln1)
		sameBits(t, "layernorm "+lay, transpose(down(ym), c, n), want)
		r.layerNorm(xm, xm, s.blocks[0].ln1)
		sameBits(t, "layernorm in place "+lay, transpose(down(xm), c, n), want)
		// depthwise 3×3 + GELU (block 0's, hidden channels)
		hid := s.hidden
		x = seededF32("gpu-dw-"+lay, hid*n, -4, 4)
		want = make([]float32, hid*n)
		dwconvGELU(serial, transpose(x, hid, n), h, w, hid, s.blocks[0].dwW, s.blocks[0].dwB, want)
		xm = upMap(t, g, hid, h, w, x, nhwc)
		ym = g.Alloc(1, hid, h, w)
		ym.NHWC = nhwc
		g.LaunchN(kernels.TFDWConvGELU, hid*n, xm.P, ym.P, r.vec(s.blocks[0].dwW), r.vec(s.blocks[0].dwB), h, w, hid, b2i(nhwc))
		sameBits(t, "dwconv+gelu "+lay, transpose(down(ym), hid, n), want)
		// bilinear ×2, align_corners
		x = seededF32("gpu-up-"+lay, c*n, -2, 2)
		want = make([]float32, 4*c*n)
		upsample2(serial, x, c, h, w, want)
		xm = upMap(t, g, c, h, w, x, nhwc)
		ym = g.Alloc(1, c, 2*h, 2*w)
		ym.NHWC = nhwc
		g.LaunchN(kernels.TFUpsample2, ym.Size(), xm.P, ym.P, c, h, w, b2i(nhwc))
		sameBits(t, "upsample2 "+lay, down(ym), want)
		// channel attention (ca1: 256 channels), then the decoder's add
		a := &m.ca[1]
		x = seededF32("gpu-ca-"+lay, a.c*n, -1, 3)
		cr := NewRunner(m, 1)
		gated := cr.channelAttention(a, cpu.Fmap{C: a.c, H: h, W: w, D: x})
		xm = upMap(t, g, a.c, h, w, x, nhwc)
		ym = r.channelAttention(a, xm)
		got := down(ym)
		for i, v := range gated.D {
			if d := approx.Diff(float64(got[i]), float64(v)); approx.Far(d, 0x1p-22*math.Abs(float64(v))) {
				t.Fatalf("channel attention %s: element %d is %g, the CPU's %g", lay, i, got[i], v)
			}
		}
		g.LaunchN(kernels.TFAdd, ym.Size(), ym.P, xm.P, int64(ym.Size()))
		sum := down(ym)
		for i := range x {
			got[i] += x[i]
		}
		sameBits(t, "add "+lay, sum, got)
		means := make([]float32, a.c)
		mm := g.Scratch(a.c)
		g.LaunchN(kernels.TFChanMean, a.c, xm.P, mm.P, a.c, int64(n), b2i(nhwc))
		if err := g.Dev.Download(means, mm.P); err != nil {
			t.Fatal(err)
		}
		sameBits(t, "channel means "+lay, means, channelMeans(cpu.Fmap{C: a.c, H: h, W: w, D: x}))
	}
	// softmax over rows of scores, scaled by √d first
	rows, cols := 9, 37
	x := seededF32("gpu-softmax", rows*cols, -30, 30)
	sm := g.Scratch(rows * cols)
	if err := g.Dev.Upload(sm.P, x); err != nil {
		t.Fatal(err)
	}
	scale := float32(math.Sqrt(64))
	g.LaunchN(kernels.TFSoftmax, rows, sm.P, int64(rows), cols, scale)
	for i := 0; i < rows; i++ {
		row := x[i*cols : (i+1)*cols]
		for k := range row {
			row[k] /= scale
		}
		softmaxRow(row)
	}
	sameBits(t, "softmax", down(sm)[:rows*cols], x)
}

// TestGPUGemmWithinBound: the attention's strided batched GEMM (tf_gemm),
// as the runner calls it for the scores in both layouts, against
// infer/gemm's SGEMM head by head. Each side is a float32 dot product of
// K terms in its own order, so each is within γ_K·Σ|a||b| of the exact
// value (Higham 3.5) and the two within 2·γ_K·Σ|a||b|, element by element.
func TestGPUGemmWithinBound(t *testing.T) {
	dev := testDevice(t)
	g := gpu.NewEngine(dev, cuda.Exact)
	t.Cleanup(g.Close)
	heads, n, m, d := 3, 29, 11, 16
	c := heads * d
	for _, nhwc := range []bool{false, true} {
		lay := layoutName(nhwc)
		qv := seededF32("gpu-gemm-q-"+lay, c*n, -2, 2) // CHW: c × n
		kv := seededF32("gpu-gemm-k-"+lay, c*m, -2, 2) // CHW: c × m
		q, k := upMap(t, g, c, 1, n, qv, nhwc), upMap(t, g, c, 1, m, kv, nhwc)
		qc, qp := strides(q)
		kc, kp := strides(k)
		sc := g.Scratch(heads * n * m)
		g.LaunchN(kernels.TFGemm, heads*n*m, q.P, k.P, sc.P, heads, n, m, d,
			int64(0), int64(d)*qc, qp, qc, int64(0), int64(d)*kc, kc, kp, int64(0), int64(n*m), int64(m), int64(1))
		got := g.Download(sc)[:heads*n*m]
		if g.Err != nil {
			t.Fatal(g.Err)
		}
		qt, kt := transpose(qv, c, n), kv // token-major queries, channel-major keys
		gam := approx.Gamma32(d)
		for hd := 0; hd < heads; hd++ {
			want := make([]float32, n*m)
			gemm.Mul(n, m, d, qt[hd*d:], c, kt[hd*d*m:], m, want, m)
			for i := 0; i < n; i++ {
				for j := 0; j < m; j++ {
					var abs float64
					for e := 0; e < d; e++ {
						abs += math.Abs(float64(qt[i*c+hd*d+e]) * float64(kt[(hd*d+e)*m+j]))
					}
					gv, wv := got[(hd*n+i)*m+j], want[i*m+j]
					if dd := approx.Diff(float64(gv), float64(wv)); approx.Far(dd, 2*gam*abs) {
						t.Fatalf("gemm %s head %d (%d,%d): %g, SGEMM %g, bound %g", lay, hd, i, j, gv, wv, 2*gam*abs)
					}
				}
			}
		}
	}
}

// stageRun is one engine's traced stages, in trace order, and its density.
type stageRun struct {
	names []string
	v     map[string][]float32
	d     Density
}

func (s *stageRun) record(name string, _ []int, v []float32) {
	if s.v == nil {
		s.v = map[string][]float32{}
	}
	s.names = append(s.names, name)
	s.v[name] = append([]float32(nil), v...)
}

func runCPUStages(t testing.TB, m *Model, im Image, win tile.Window) stageRun {
	t.Helper()
	var s stageRun
	r := NewRunner(m, 2)
	r.Trace = s.record
	d, err := r.Forward(im, win)
	if err != nil {
		t.Fatal(err)
	}
	s.d = d
	return s
}

func runGPUStages(t testing.TB, r *GPURunner, im Image, win tile.Window) stageRun {
	t.Helper()
	var s stageRun
	r.Trace = s.record
	defer func() { r.Trace = nil }()
	d, err := r.Forward(im, win)
	if err != nil {
		t.Fatal(err)
	}
	s.d = d
	return s
}

// compareStages holds every stage of got to want within tol relative to
// the stage's largest value (relErr); it returns the first stage outside
// ("" when none) and the worst ratio err/tol.
func compareStages(want, got stageRun, tol float64) (first string, worst float64, err error) {
	for _, name := range want.names {
		g, ok := got.v[name]
		if !ok || len(g) != len(want.v[name]) {
			return "", 0, fmt.Errorf("stage %s: the GPU traced %d values, the CPU %d", name, len(g), len(want.v[name]))
		}
		e := relErr(g, want.v[name], 1)
		if first == "" && approx.Far(e, tol) {
			first = name
		}
		worst = max(worst, e/tol)
	}
	if e := relErr(got.d.Map, want.d.Map, 1); approx.Far(e, tol) && first == "" {
		first = "density"
	}
	return first, worst, nil
}

// gpuStageTol is the stage tolerance of precision p against the CPU: two
// FP32 sides in different orders (stageTol), plus TF32's operands
// (tftol.TF32StageTol).
func gpuStageTol(a Arch, p cuda.Precision) float64 {
	if p == cuda.TF32 || p == cuda.KernelTF32 {
		return tftol.TF32StageTol(tftol.Arch(a))
	}
	return stageTol(a)
}

// gpuScoreTol bounds |a score of the GPU engine at precision p − DeepForest's
// for the same point| (testdata/small.json: torch, float32 on the CPU).
// The two maps are two independent float32 computations of the same
// network, each off the exact map by its own random walk of roundings
// (u·√ΣK of the magnitude, its own summation order: canopy's kernels or
// cuDNN's on the GPU, torch's on the other side); their difference, four
// standard deviations of two such walks, is stageTol's τ relative to the
// map's maximum, and at tf32 the GPU's TF32 operands add tftol.TF32StageTol's
// part: the map bound is gpuStageTol(a, p) itself. (Chaining the GPU to
// the CPU engine and the CPU engine to DeepForest, τ + τ, would count a
// third computation's roundings, the CPU engine's, which neither side of
// this comparison has.) A score is the cell's value over the map's
// maximum, so as tftol.ScoreTol: 2τ/(1 − τ) + 2u. Tiny: τ ≈ 7.5·10⁻⁵, the bound
// ≈ 1.5·10⁻⁴ (exact, fp32; measured 1.3·10⁻⁶); tf32 ≈ 2.9·10⁻² (measured
// 9.4·10⁻⁴).
func gpuScoreTol(a Arch, p cuda.Precision) float64 { return tftol.ScoreTol(gpuStageTol(a, p)) }

// gpuTestImage is the seeded input of the small fixture (150×200), the
// image DeepForest's forward gave testdata/small.json's points for.
func gpuTestImage() Image {
	h, w := 150, 200
	return imageOf(testweights.Bytes("treeformer-small-input", h*w*3, 46), h, w)
}

// TestGPUStagesMatchCPU: the one-block model on the small fixture's image,
// every traced stage (embeddings, first blocks, stages, projections, the
// decoder's channel attentions and upsampled convs, res0, the count head)
// and the density map of the GPU engine within the derived tolerance of
// the CPU engine's, per precision: exact (canopy's kernels), fp32 and tf32
// (cuDNN: the fake on the shim); and the same points as DeepForest's
// forward (testdata/small.json), scores within gpuScoreTol.
func TestGPUStagesMatchCPU(t *testing.T) {
	m := tinyModel(t)
	im := gpuTestImage()
	want := runCPUStages(t, m, im, whole(im))
	var fx smallFixture
	testfile.ReadJSON(t, "testdata/small.json", &fx)
	dfPoints := xyPoints(fx.Points.XY, fx.Points.Scores)
	dev := testDevice(t)
	for _, p := range []cuda.Precision{cuda.Exact, cuda.FP32, cuda.TF32} {
		t.Run(p.String(), func(t *testing.T) {
			r := newGPU(t, m, dev, p)
			got := runGPUStages(t, r, im, whole(im))
			tol := gpuStageTol(Tiny, p)
			first, worst, err := compareStages(want, got, tol)
			if err != nil {
				t.Fatal(err)
			}
			if first != "" {
				t.Fatalf("stage %s outside the tolerance %.3g (worst err/tol %.3g)", first, tol, worst)
			}
			t.Logf("%s: %d stages and the density map, worst error %.3g of the tolerance %.3g", p, len(want.names), worst, tol)
			if got.d.H != want.d.H || got.d.W != want.d.W || got.d.PadH != want.d.PadH || got.d.PadW != want.d.PadW {
				t.Fatalf("density %+v, the CPU's %+v", got.d, want.d)
			}
			pts := WindowPoints(got.d, DefaultPeaks)
			if n, extra, ds := matchPoints(pts, dfPoints, gpuScoreTol(Tiny, p)); n != len(dfPoints) || extra != 0 || len(dfPoints) == 0 {
				t.Fatalf("%d of DeepForest's %d points matched, %d extra: %v vs %v", n, len(dfPoints), extra, pts, dfPoints)
			} else {
				t.Logf("%s: all %d of DeepForest's points, largest score difference %.3g of the bound %.3g", p, n, ds, gpuScoreTol(Tiny, p))
			}
		})
	}
}

// TestGPUStagesCatchPlantedBugs: the stage comparison fails, at the stage
// where the bug enters, when the GPU runs a model with one weight wrong
// by a little more than the tolerance allows: a LayerNorm gain of stage 2,
// the depthwise bias of stage 3, a key weight of stage 4, a channel
// attention weight of the decoder.
func TestGPUStagesCatchPlantedBugs(t *testing.T) {
	good := tinyModel(t)
	im := gpuTestImage()
	win := tile.Window{W: 96, H: 64}
	want := runCPUStages(t, good, im, win)
	dev := testDevice(t)
	tol := gpuStageTol(Tiny, cuda.Exact)
	for _, c := range []struct {
		stage string
		plant func(m *Model)
	}{
		{"embed1", func(m *Model) { m.stages[1].embedLN.G[3] *= 1 + 64*float32(tol) }},
		{"block2_0", func(m *Model) { m.stages[2].blocks[0].dwB[7] += 0.5 }},
		{"block3_0", func(m *Model) { m.stages[3].blocks[0].kv.Wt[5*1024+2] += 0.5 }},
		{"ca1", func(m *Model) { m.ca[1].fc2[11] += 2 }},
	} {
		m := tinyModel(t)
		c.plant(m)
		got := runGPUStages(t, newGPU(t, m, dev, cuda.Exact), im, win)
		first, _, err := compareStages(want, got, tol)
		if err != nil {
			t.Fatal(err)
		}
		if first != c.stage {
			t.Errorf("planted at %s: the comparison first failed at %q", c.stage, first)
		}
	}
}

// TestGPUDeterministic: a window's density map is the same bytes run
// again, after another window of another size, and on a new runner
// (exact: canopy's kernels; fp32: the cuDNN path with its heuristic's
// first eligible engine).
func TestGPUDeterministic(t *testing.T) {
	m := tinyModel(t)
	im := gpuTestImage()
	a, b := tile.Window{X: 10, Y: 20, W: 96, H: 64}, tile.Window{X: 0, Y: 0, W: 70, H: 50}
	dev := testDevice(t)
	for _, p := range []cuda.Precision{cuda.Exact, cuda.FP32} {
		r := newGPU(t, m, dev, p)
		first, err := r.Forward(im, a)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.Forward(im, b); err != nil {
			t.Fatal(err)
		}
		again, err := r.Forward(im, a)
		if err != nil {
			t.Fatal(err)
		}
		fresh, err := newGPU(t, m, dev, p).Forward(im, a)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range []Density{again, fresh} {
			sameBits(t, p.String()+" density", d.Map, first.Map)
			if d.Count != first.Count {
				t.Fatalf("%s: count %g then %g", p, first.Count, d.Count)
			}
		}
	}
}

// TestGPURefusesBF16: BF16 is the box detectors' precision.
func TestGPURefusesBF16(t *testing.T) {
	if _, err := NewGPURunner(tinyModel(t), testDevice(t), gpu.Options{Precision: cuda.BF16}); !errors.Is(err, ErrGPUPrecision) {
		t.Fatalf("bf16: %v", err)
	}
}
