package retinanet

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/canopy-hpc/canopy/infer/cpu"
	"github.com/canopy-hpc/canopy/infer/cuda"
	"github.com/canopy-hpc/canopy/infer/cuda/cudnn"
	"github.com/canopy-hpc/canopy/infer/cuda/hostkern"
	"github.com/canopy-hpc/canopy/infer/gpu"
	"github.com/canopy-hpc/canopy/internal/testsupport/approx"
	"github.com/canopy-hpc/canopy/internal/testsupport/bound"
)

// The cuDNN path of the GPU engine (infer/gpu/cudnn.go) against the CPU engine:
// on the host shim with the fake libcudnn.so.9 (built here with cc), or on
// a GPU with the real library named by CANOPY_CUDNN (tools/gpu/check.sh).

var cudnnModes = []cuda.Precision{cuda.FP32, cuda.TF32, cuda.BF16}

func newCUDNNEngine(t testing.TB, m *Model, p cuda.Precision) *gpu.Engine {
	dev := newTestDevice(t)
	r, err := NewGPURunnerWith(m, dev, gpu.Options{Precision: p, CUDNN: testCUDNN(t, dev)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r.g
}

// nhwcIn uploads an NCHW batch and turns it into the cuDNN path's layout.
func nhwcIn(t *testing.T, g *gpu.Engine, n, c, h, w int, data []float32) gpu.Map {
	return g.ToNHWC(upload(t, g, n, c, h, w, data))
}

// TestCUDNNLayersMatchCPU: every convolution shape RetinaNet uses, fused
// with residual and ReLU, and the NHWC max-pool, top-down add and ReLU, on
// a batch of two through the fake cuDNN, against the CPU engine image by
// image, every element within the bound derived from the two sides'
// arithmetic (bound_test.go; BF16 from the inputs as the device holds
// them, rounded). A layout mistake (NCHW read as NHWC, OIHW weights as
// KRSC) is far outside.
func TestCUDNNLayersMatchCPU(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	host := cpu.NewEngine(1)
	m := smallModel(t)
	sides := map[cuda.Precision]bound.Side{cuda.FP32: sideFP32, cuda.TF32: sideTF32, cuda.BF16: sideBF16}
	eng := func(t testing.TB, p cuda.Precision) *gpu.Engine { return newCUDNNEngine(t, m, p) }
	checkConvs(t, r, convShapes, cudnnModes, eng, nhwcIn, sides, func(c convResult) {
		if c.bad > 0 {
			t.Errorf("%s: %d elements outside the derived bound, |Δ|/bound up to %.3g", c.name, c.bad, c.worst)
		}
		// TF32 or BF16 operands move a K-term product by ~u/√K of its
		// size (u = 2⁻¹¹, 2⁻⁸), far above 1e-5 of the mean |y|
		if d := maxRel(c.got, c.want); c.prec != cuda.FP32 && d < 1e-5 {
			t.Errorf("%s: max error %.3g of the mean |y|: the operands were not rounded", c.name, d)
		}
		t.Logf("%s: |Δ|/bound up to %.3g, engine %s", c.name, c.worst, c.g.DNN.Layers[c.cv.Name].Engine)
	})
	// Max-pool, the FPN's top-down add and ReLU, NHWC.
	x0, x1 := randMap(r, 5, 13, 10), randMap(r, 5, 13, 10)
	top0, top1 := randMap(r, 5, 7, 5), randMap(r, 5, 7, 5)
	lat0, lat1 := randMap(r, 5, 14, 10), randMap(r, 5, 14, 10)
	for _, prec := range cudnnModes {
		g := newCUDNNEngine(t, m, prec)
		// Max and ReLU are exact; BF16 rounds the inputs (to nearest, a
		// monotone map: the max of the rounded is the rounded max), so
		// |Δ| ≤ u_bf16·|y| / (1 − u_bf16) of the device's y.
		u := sides[prec].UStore
		exactOf := func(got []float32) []float64 {
			b := make([]float64, len(got))
			for i, v := range got {
				b[i] = u / (1 - u) * math.Abs(float64(v))
			}
			return b
		}
		x := nhwcIn(t, g, 2, 5, 13, 10, batchOf(x0, x1))
		got := g.Download(g.MaxPool3s2(x))
		if worst, bad := bound.Within(got, batchOf(host.MaxPool3s2(x0), host.MaxPool3s2(x1)), exactOf(got)); len(bad) > 0 {
			t.Errorf("maxpool %s: %d elements outside, |Δ|/bound up to %.3g", prec, len(bad), worst)
		}
		got = g.Download(g.ReluCopy(x))
		if worst, bad := bound.Within(got, batchOf(host.ReluCopy(x0), host.ReluCopy(x1)), exactOf(got)); len(bad) > 0 {
			t.Errorf("relu %s: %d elements outside, |Δ|/bound up to %.3g", prec, len(bad), worst)
		}
		lat, top := nhwcIn(t, g, 2, 5, 14, 10, batchOf(lat0, lat1)), nhwcIn(t, g, 2, 5, 7, 5, batchOf(top0, top1))
		g.UpsampleAdd(lat, top)
		l0, l1 := cpu.NewFmap(5, 14, 10), cpu.NewFmap(5, 14, 10)
		copy(l0.D, lat0.D)
		copy(l1.D, lat1.D)
		host.UpsampleAdd(l0, top0)
		host.UpsampleAdd(l1, top1)
		// lat and top rounded on upload (u each), their sum rounded to
		// float32 and stored (1 + u)(1 + 2⁻²⁴) − 1 on the CPU's side
		// (float32 rounding: the same on both sides where u = 0, so exact).
		got = g.Download(lat)
		want := batchOf(l0, l1)
		lb, tb := batchOf(lat0, lat1), batchOf(top0, top1)
		iy, ix := cpu.NearestIndex(7, 14), cpu.NearestIndex(5, 10)
		lim := make([]float64, len(got))
		for i := range lim {
			img, ch, y, xx := i/(5*14*10), i/(14*10)%5, i/10%14, i%10
			tv := float64(tb[((img*5+ch)*7+iy[y])*5+ix[xx]])
			lim[i] = u*(math.Abs(float64(lb[i]))+math.Abs(tv)) + approx.Chain(u, approx.U32)*math.Abs(float64(got[i]))
			if u == 0 {
				lim[i] = 0
			}
		}
		if worst, bad := bound.Within(got, want, lim); len(bad) > 0 {
			t.Errorf("upsample-add %s: %d elements outside, |Δ|/bound up to %.3g", prec, len(bad), worst)
		}
		if g.Err != nil {
			t.Fatal(g.Err)
		}
	}
}

// TestCUDNNEngineMatchesCPU: the whole network on the cuDNN path against
// the CPU runner: every layer within the bound derived from the two sides'
// arithmetic (bound_test.go), the runners' pyramid levels the bits of
// those layers, top scores and detections within the bounds that follow.
func TestCUDNNEngineMatchesCPU(t *testing.T) {
	m := smallModel(t)
	imgs := smallImages(2, 90, 70, 1)
	host := NewRunner(m, 2)
	for _, prec := range cudnnModes {
		dev := newTestDevice(t)
		gr, err := NewGPURunnerWith(m, dev, gpu.Options{Precision: prec, CUDNN: testCUDNN(t, dev)})
		if err != nil {
			t.Fatal(err)
		}
		sd, minFrac := sideFP32, 1.0
		switch prec {
		case cuda.TF32:
			sd, minFrac = sideTF32, 0.7
		case cuda.BF16:
			sd, minFrac = sideBF16, 0 // 34–53 anchors within their bound of the threshold: the sets differ (6 of 11 match); the postprocess bits hold them
		}
		g := newCUDNNEngine(t, m, prec)
		for i, img := range imgs {
			want, wtr := host.DetectTrace(img)
			got, gtr, err := gr.DetectTrace(img)
			if err != nil {
				t.Fatal(err)
			}
			up := func(x cpu.Fmap) gpu.Map { return nhwcIn(t, g, 1, x.C, x.H, x.W, x.D) }
			checkParity(t, fmt.Sprintf("%s image %d", prec, i), m, img, g, sideCPU, sd, up, want, got, wtr, gtr, minFrac)
		}
		rep := gr.CUDNN()
		if rep == nil || rep.Plan != "heuristic" || len(rep.Layers) == 0 || rep.Version/10000 != 9 {
			t.Errorf("%s: report %+v", prec, rep)
		}
		if err := gr.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCUDNNPlanRoundTrip: gpu-plan's timing picks an eligible engine for
// every layer shape; a runner given those plans rebuilds exactly them
// (every layer "plan file", the same engines) and computes the same bytes.
func TestCUDNNPlanRoundTrip(t *testing.T) {
	m := smallModel(t)
	imgs := smallImages(2, 64, 48, 5)
	dev := newTestDevice(t)
	lib := testCUDNN(t, dev)
	timer, err := NewGPURunnerWith(m, dev, gpu.Options{Precision: cuda.TF32, CUDNN: lib, Timing: true, Repeat: 1})
	if err != nil {
		t.Fatal(err)
	}
	ref, err := timer.DetectBatch(imgs, 2)
	if err != nil {
		t.Fatal(err)
	}
	timed := timer.TimedPlans()
	if len(timed) == 0 {
		t.Fatal("no layer timed")
	}
	pf := &cudnn.PlanFile{Format: cudnn.PlanFormat, Batch: 2, Precision: "tf32", Plans: timed}
	for k, lp := range timed {
		if ok, why := cudnn.Eligible(cudnn.TF32, nil, lp.Engine.Knobs); !ok || lp.Tried < 1 {
			t.Errorf("%s: timed %s (%s), %d engines", k, lp.Engine, why, lp.Tried)
		}
	}
	back, err := cudnn.ParsePlanFile(pf.Marshal())
	if err != nil {
		t.Fatal(err)
	}
	timer.Close()
	r, err := NewGPURunnerWith(m, newTestDevice(t), gpu.Options{Precision: cuda.TF32, CUDNN: lib, Plans: back, PlanSHA: "abc"})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	got, err := r.DetectBatch(imgs, 2)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(detBytes(got), detBytes(ref)) {
		t.Error("the plan file's engines give other detections than the timed ones")
	}
	rep := r.CUDNN()
	if rep.Plan != "abc" {
		t.Errorf("plan %q", rep.Plan)
	}
	for name, le := range rep.Layers {
		if le.From != "plan file" || le.Engine != timed[le.Shape].Engine.String() {
			t.Errorf("layer %s: %+v, timed %s", name, le, timed[le.Shape].Engine)
		}
	}
}

// TestCUDNNSlotInvariance: each image in every slot of a batch of N with
// random batch-mates, its bits compared per pyramid level and head output.
// On a GPU (tools/gpu/check.sh, N = 8) it reports, per mode, whether
// cuDNN's chosen engines keep an image's bits whatever its slot: global
// batching does not need it, identity across --batch-size values would;
// only exact must be invariant there. On the host shim (N = 3) it must
// find what is known: exact and the fake's FP32 engine invariant, its
// tensor-core engine (tf32, bf16) not (its order depends on the slot), so
// the test can see a slot dependence.
func TestCUDNNSlotInvariance(t *testing.T) {
	m := smallModel(t)
	n := 3
	_, shim := newTestDevice(t).(*hostkern.Device)
	if !shim {
		n = 8
	}
	imgs := smallImages(2, 90, 70, 11)
	mates := smallImages(n, 90, 70, 12)
	r := rand.New(rand.NewPCG(5, 6))
	for _, prec := range append([]cuda.Precision{cuda.Exact}, cudnnModes...) {
		dev := newTestDevice(t)
		o := gpu.Options{Precision: prec}
		if prec.Cudnn() {
			o.CUDNN = testCUDNN(t, dev)
		}
		gr, err := NewGPURunnerWith(m, dev, o)
		if err != nil {
			t.Fatal(err)
		}
		var changed []string
		for i, img := range imgs {
			var ref [][]byte
			for slot := 0; slot < n; slot++ {
				batch := make([]Image, n)
				for j := range batch {
					batch[j] = mates[r.IntN(n)]
				}
				batch[slot] = img
				layers := slotLayers(t, gr, batch, slot)
				if ref == nil {
					ref = layers
					continue
				}
				for k := range layers {
					if !bytes.Equal(layers[k], ref[k]) {
						changed = append(changed, fmt.Sprintf("image %d slot %d: %s", i, slot, slotLayerName(k)))
						break
					}
				}
			}
		}
		gr.Close()
		invariant := len(changed) == 0
		t.Logf("%s, batch %d: slot-invariant %v %v", prec, n, invariant, changed)
		want := prec == cuda.Exact || prec == cuda.FP32
		if prec == cuda.Exact && !invariant || shim && invariant != want {
			t.Errorf("%s: slot-invariant %v, want %v (changed: %v)", prec, invariant, want, changed)
		}
	}
}

func slotLayerName(k int) string {
	return [...]string{"P3", "P4", "P5", "P6", "P7"}[k%5] + [...]string{" (FPN)", " cls", " reg"}[k/5]
}

// slotLayers runs batch and returns slot's bytes of the five levels and
// the heads' outputs, NCHW FP32 (levels, then cls, then reg).
func slotLayers(t *testing.T, gr *GPURunner, batch []Image, slot int) [][]byte {
	t.Helper()
	g := gr.g
	l := gr.launch(gr.prepare(batch, nil, nil))
	var out [][]byte
	for _, set := range [][5]gpu.Map{l.p, l.cls, l.reg} {
		for L := 0; L < 5; L++ {
			all := g.Download(set[L])
			per := len(all) / len(batch)
			var b bytes.Buffer
			for _, v := range all[slot*per : (slot+1)*per] {
				fmt.Fprintf(&b, "%08x", math.Float32bits(v))
			}
			out = append(out, b.Bytes())
		}
	}
	for _, set := range [][5]gpu.Map{l.p, l.cls, l.reg} {
		g.Put(set[:]...)
	}
	if g.Err != nil {
		t.Fatal(g.Err)
	}
	return out
}

// TestCUDNNDetectSlots: global batching keeps an image's bytes whatever
// else its detector call holds: with its whole batch, alone (a resumed or
// split batch), or beside an image of another resized size (a sub-batch of
// its own). The fake's TF32 engine changes an image's bits with its slot
// and the batch size, so a slot not taken from the global position, or a
// batch not padded to N, shows.
func TestCUDNNDetectSlots(t *testing.T) {
	m := smallModel(t)
	const n = 4
	imgs := smallImages(n, 90, 70, 21)
	odd := smallImages(1, 64, 100, 22)[0]
	dev := newTestDevice(t)
	gr, err := NewGPURunnerWith(m, dev, gpu.Options{Precision: cuda.TF32, CUDNN: testCUDNN(t, dev)})
	if err != nil {
		t.Fatal(err)
	}
	defer gr.Close()
	// global batch 5: positions 20..23
	pos := []int{20, 21, 22, 23}
	ref, _, err := gr.DetectSlots(imgs, pos, nil, n)
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, d := range ref {
		total += len(d)
	}
	if total == 0 {
		t.Fatal("no detections: the comparison would be empty")
	}
	for i := range imgs {
		alone, _, err := gr.DetectSlots(imgs[i:i+1], pos[i:i+1], nil, n)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(detBytes(alone), detBytes(ref[i:i+1])) {
			t.Errorf("image at position %d alone: other detections than in its whole batch", pos[i])
		}
	}
	mixed := []Image{imgs[0], odd, imgs[2], imgs[3]}
	got, _, err := gr.DetectSlots(mixed, pos, nil, n)
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{0, 2, 3} {
		if !bytes.Equal(detBytes(got[i:i+1]), detBytes(ref[i:i+1])) {
			t.Errorf("image at position %d beside another size: other detections", pos[i])
		}
	}
	if _, _, err := gr.DetectSlots(imgs[:2], []int{19, 20}, nil, n); err == nil {
		t.Error("positions of two global batches accepted")
	}

}
