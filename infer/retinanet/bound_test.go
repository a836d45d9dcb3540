package retinanet

import (
	"bytes"
	"fmt"
	"math"
	"testing"

	"github.com/canopy-hpc/canopy/infer/cpu"
	"github.com/canopy-hpc/canopy/infer/cuda"
	"github.com/canopy-hpc/canopy/infer/gpu"
	"github.com/canopy-hpc/canopy/infer/nn"
	"github.com/canopy-hpc/canopy/internal/testsupport/approx"
	"github.com/canopy-hpc/canopy/internal/testsupport/bound"
)

// The network parity tests (TestGPUEngineMatchesCPU,
// TestCUDNNEngineMatchesCPU) hold every layer to the one-layer bound of
// internal/testsupport/bound, derived from each side's arithmetic.
//
// The same bound carried through the whole network (|W|·e_in from each
// layer's input error) is rigorous but useless: |W| ignores the signs that
// make the errors cancel, and it grows by about Σ|w| ≈ 0.8·√K per layer,
// 10²⁶ times the activations at P3 on smallModel. A probabilistic bound
// (independent roundings, variances through W²) is 2–4% of the mean |x|
// at the pyramid levels: 2000 times the measured difference, and blind to
// a swapped pair of weights in layer1 or layer3 (measured: 0.35 and 0.06
// of that bound). So the tests compare the right quantity instead:
// pairRun runs the network on both engines at once, each on its own
// inputs, and holds every layer's output to the one-layer bound, given the
// inputs each side actually holds; then each runner's pyramid levels must
// be the bits of its side of pairRun. A swapped weight, a layout mistake,
// a missing ReLU or residual is then O(|y|) at one layer, against a bound
// of about γ_K of Σ|terms|.

// cpuTile is the CPU engine's Winograd tile of a layer (0: im2col).
func cpuTile(c *nn.Conv) int {
	if cpu.UseWinograd(c) {
		return cpu.WinoTile(c)
	}
	return 0
}

var (
	sideCPU  = bound.Side{Name: "cpu", Tile: cpuTile}
	sideFP32 = bound.Side{Name: "fp32"}                                     // GPU exact kernels, cuDNN FP32
	sideTF32 = bound.Side{Name: "tf32", UX: approx.UTF32, UW: approx.UTF32} // GPU kernel-tf32, cuDNN TF32
	// sideBF16 is cuDNN BF16: BF16 data (every output stored rounded) and
	// filters, products exact in FP32 (8+8 significand bits), FP32 sums.
	sideBF16 = bound.Side{Name: "bf16", UW: approx.UBF16, UStore: approx.UBF16}
)

// pmap is one feature map on both sides: the CPU engine's and the GPU
// engine's (with its host copy, downloaded once).
type pmap struct {
	c  cpu.Fmap
	g  gpu.Map
	gh []float32
}

// pairRun is an nn.Backend running every layer on both engines, each on its
// own inputs, and holding each output to the one-layer bound.
type pairRun struct {
	t     *testing.T
	name  string
	host  *cpu.Engine
	g     *gpu.Engine
	a, b  bound.Side
	worst float64 // the largest |Δ|/bound of a convolution
	layer string  // where
	fails int
	// plant, when set, gives side b another convolution (a planted bug:
	// the test of the tests).
	plant func(*nn.Conv) *nn.Conv
}

func (pr *pairRun) dev(p *pmap) []float32 {
	if p.gh == nil {
		p.gh = pr.g.Download(p.g)
		if pr.g.Err != nil {
			pr.t.Fatal(pr.g.Err)
		}
	}
	return p.gh
}

// check holds side b's y to side a's within bound; it returns the largest
// |Δ|/bound.
func (pr *pairRun) check(layer string, y *pmap, lim []float64) float64 {
	got, want := pr.dev(y), y.c.D
	worst, bad := bound.Within(got, want, lim)
	for _, i := range bad {
		if pr.fails++; pr.fails <= 5 && pr.plant == nil {
			pr.t.Errorf("%s %s: element %d is %v, %s gives %v: |Δ| %.3g > bound %.3g", pr.name, layer, i, got[i], pr.a.Name, want[i],
				math.Abs(float64(got[i])-float64(want[i])), lim[i])
		}
	}
	return worst
}

func (pr *pairRun) Conv(c *nn.Conv, x *pmap, relu bool, res **pmap) *pmap {
	y := &pmap{}
	var rc *cpu.Fmap
	var rg *gpu.Map
	var ra, rb []float32
	if res != nil {
		rc, rg = &(*res).c, &(*res).g
		ra, rb = (*res).c.D, pr.dev(*res)
	}
	y.c = pr.host.Conv(c, x.c, relu, rc)
	cb := c
	if pr.plant != nil {
		cb = pr.plant(c)
	}
	y.g = pr.g.Conv(cb, x.g, relu, rg)
	if w := pr.check(c.Name, y, bound.Conv(c, x.c.H, x.c.W, pr.a, pr.b, x.c.D, pr.dev(x), ra, rb, pr.dev(y))); !(w <= pr.worst) {
		pr.worst, pr.layer = w, c.Name
	}
	return y
}

func (pr *pairRun) MaxPool3s2(x *pmap) *pmap {
	y := &pmap{c: pr.host.MaxPool3s2(x.c), g: pr.g.MaxPool3s2(x.g)}
	lim := bound.MaxPool3s2(x.c.D, pr.dev(x), x.c.C, x.c.H, x.c.W) // exact on each side
	pr.check("maxpool", y, lim)
	return y
}

func (pr *pairRun) UpsampleAdd(lat, top *pmap) {
	la, lb := append([]float32(nil), lat.c.D...), append([]float32(nil), pr.dev(lat)...)
	ta, tb := top.c.D, pr.dev(top)
	pr.host.UpsampleAdd(lat.c, top.c)
	pr.g.UpsampleAdd(lat.g, top.g)
	lat.gh = nil
	// one rounding on each side: |Δ| ≤ |Δlat| + |Δtop| + u·(|sum_a| + |sum_b|) (+ BF16's store)
	iy, ix := cpu.NearestIndex(top.c.H, lat.c.H), cpu.NearestIndex(top.c.W, lat.c.W)
	sb := pr.dev(lat)
	lim := make([]float64, len(la))
	for ch := 0; ch < lat.c.C; ch++ {
		for y := 0; y < lat.c.H; y++ {
			for x := 0; x < lat.c.W; x++ {
				l, t := (ch*lat.c.H+y)*lat.c.W+x, (ch*top.c.H+iy[y])*top.c.W+ix[x]
				lim[l] = math.Abs(float64(la[l])-float64(lb[l])) + math.Abs(float64(ta[t])-float64(tb[t])) +
					approx.U32*(math.Abs(float64(lat.c.D[l]))+math.Abs(float64(sb[l]))) +
					approx.Chain(approx.U32, pr.b.UStore)*math.Abs(float64(sb[l]))
			}
		}
	}
	pr.check("upsample-add", lat, lim)
}

func (pr *pairRun) ReluCopy(x *pmap) *pmap {
	y := &pmap{c: pr.host.ReluCopy(x.c), g: pr.g.ReluCopy(x.g)}
	xd := pr.dev(x)
	lim := make([]float64, len(xd))
	for i := range xd {
		lim[i] = math.Abs(float64(xd[i]) - float64(x.c.D[i])) // 1-Lipschitz, exact
	}
	pr.check("relu", y, lim)
	return y
}

// Put keeps every map (pairRun reads inputs after the layer).
func (pr *pairRun) Put(...*pmap)         {}
func (pr *pairRun) Same(a, b *pmap) bool { return a != nil && a == b }

// pairNet is one image through pairRun: the five levels and their head
// outputs on both sides.
type pairNet struct {
	levels, cls, reg [5]*pmap
	worst            float64
	layer            string
	fails            int
}

// runPair runs img through m on the CPU engine (side a) and g (side b):
// upload puts the transformed image on g in the engine's layout.
func runPair(t *testing.T, name string, m *Model, img Image, g *gpu.Engine, a, b bound.Side, upload func(cpu.Fmap) gpu.Map,
	plant func(*nn.Conv) *nn.Conv) *pairNet {
	t.Helper()
	host := cpu.NewEngine(2)
	host.ReuseFor(img.H, img.W)
	x, _, _ := normalizeResizePad(host, img, m.Opt) // the same bits on the device (TestDeviceTransformBits)
	pr := &pairRun{t: t, name: name, host: cpu.NewEngine(2), g: g, a: a, b: b, plant: plant}
	pn := &pairNet{}
	pn.levels = features[*pmap](m, pr, &pmap{c: x, g: upload(x)})
	for L := range pn.levels {
		pn.cls[L], pn.reg[L] = head[*pmap](m, pr, pn.levels[L])
	}
	pn.worst, pn.layer, pn.fails = pr.worst, pr.layer, pr.fails
	t.Logf("%s: %d elements outside their bound; largest |Δ|/bound of a convolution %.3g (%s)", name, pr.fails, pr.worst, pr.layer)
	return pn
}

// detBound is how far apart the two sides' detections may be, from the
// head outputs' differences (each certified by its layer's bound).
type detBound struct {
	score     float64 // any score (and the k-th largest of a level's)
	levelTop  [5]float64
	box       float64 // any box coordinate, original pixels
	ambiguous int     // anchors whose score is within its bound of the threshold
}

// detections derives detBound for an image resized by scale
// (original/resized pixels) and padded to ph×pw:
//
//   - score: sigmoid is ¼-Lipschitz and each side rounds it to float32 once
//     (half an ulp of a value below 1: 2⁻²⁵ each), so |Δs| ≤ |Δlogit|/4 +
//     2⁻²⁴ per anchor. The k-th largest score of a level moves by at most
//     the largest of those (order statistics are 1-Lipschitz in the max
//     norm).
//   - box: decode is x₁ = d₀·w_a + c − ½·w_a·exp(min(d₂, clip)), so
//     |Δx₁| ≤ w_a·|Δd₀| + ½·w_a·exp(d₂max)·|Δd₂| with w_a the level's
//     largest anchor side and d₂max the largest clamped size delta either
//     side holds; each side's float32 decode rounds 5 times on values
//     below M = max(ph, pw) + w_a·(|d|max + ½·exp(d₂max)), the scale to
//     original pixels once more; the clip to the image is 1-Lipschitz.
func (pn *pairNet) detections(pr func(*pmap) []float32, m *Model, scale float64, ph, pw int) detBound {
	var db detBound
	thr := float64(m.Opt.ScoreThresh)
	for L := 0; L < 5; L++ {
		ca, cb := pn.cls[L].c.D, pr(pn.cls[L])
		for i := range ca {
			sb := math.Abs(float64(ca[i])-float64(cb[i]))/4 + approx.U32
			db.levelTop[L] = max(db.levelTop[L], sb)
			if s := 1 / (1 + math.Exp(-float64(ca[i]))); math.Abs(s-thr) <= sb {
				db.ambiguous++
			}
		}
		db.score = max(db.score, db.levelTop[L])
		ra, rb := pn.reg[L].c.D, pr(pn.reg[L])
		var dd, dmax, dabs float64
		for i := range ra {
			a, b := float64(ra[i]), float64(rb[i])
			dd = max(dd, math.Abs(a-b))
			dmax = max(dmax, a, b)
			dabs = max(dabs, math.Abs(a), math.Abs(b))
		}
		dmax = min(dmax, float64(bboxClip))
		var wa float64
		for _, an := range cellAnchors(L) {
			wa = max(wa, float64(an[2]-an[0]), float64(an[3]-an[1]))
		}
		M := float64(max(ph, pw)) + wa*(dabs+0.5*math.Exp(dmax))
		box := wa*dd*(1+0.5*math.Exp(dmax)) + 2*5*approx.U32*M
		db.box = max(db.box, box*scale+2*approx.U32*M*scale)
	}
	return db
}

// checkParity runs img through pairRun (CPU engine against g), then holds
// the two runners' outputs to it: their pyramid levels must be the bits of
// their side of pairRun (the runners run the same layers in the same
// order), and their top scores within detBound. Side b's detections must
// be the bits of the CPU's postprocessing of side b's own head outputs
// (so they differ from side a's only through those, which every layer's
// bound certifies), and at least minFrac of side a's must match one of
// them within detBound; with minFrac 1 (FP32) every one, and as many as
// side a's, unless a score lies within its bound of the threshold, where
// either side may keep it. TF32 and BF16 move enough scores across the
// threshold, or boxes across the NMS's IoU, that the sets differ.
func checkParity(t *testing.T, name string, m *Model, img Image, g *gpu.Engine, a, b bound.Side, upload func(cpu.Fmap) gpu.Map,
	want, got []Detection, wtr, gtr *Trace, minFrac float64) {
	t.Helper()
	exact := minFrac == 1
	pn := runPair(t, name, m, img, g, a, b, upload, nil)
	dev := func(p *pmap) []float32 {
		if p.gh == nil {
			p.gh = g.Download(p.g)
		}
		return p.gh
	}
	for L := 0; L < 5; L++ {
		if !sameBits(wtr.Levels[L].D, pn.levels[L].c.D) {
			t.Errorf("%s level %d: the %s runner's bits differ from its layers run one by one", name, L, a.Name)
		}
		if !sameBits(gtr.Levels[L].D, dev(pn.levels[L])) {
			t.Errorf("%s level %d: the %s runner's bits differ from its engine's layers run one by one", name, L, b.Name)
		}
	}
	scale := max(float64(img.W)/float64(wtr.ResizedW), float64(img.H)/float64(wtr.ResizedH))
	db := pn.detections(dev, m, scale, wtr.PaddedH, wtr.PaddedW)
	for L := 0; L < 5; L++ {
		if len(gtr.Top[L]) != len(wtr.Top[L]) {
			t.Fatalf("%s level %d: %d top scores, want %d", name, L, len(gtr.Top[L]), len(wtr.Top[L]))
		}
		for k := range wtr.Top[L] {
			if d := approx.Diff(float64(gtr.Top[L][k].Score), float64(wtr.Top[L][k].Score)); approx.Far(d, db.levelTop[L]) {
				t.Errorf("%s level %d top %d: score %v, want %v ± %.3g", name, L, k, gtr.Top[L][k].Score, wtr.Top[L][k].Score, db.levelTop[L])
			}
		}
	}
	var cands []cand
	rh, rw, ph, pw := wtr.ResizedH, wtr.ResizedW, wtr.PaddedH, wtr.PaddedW
	for L := 0; L < 5; L++ {
		cls, reg := pn.cls[L].c, pn.reg[L].c
		cls.D, reg.D = dev(pn.cls[L]), dev(pn.reg[L])
		cands = append(cands, m.levelCandidates(levelOut{gh: cls.H, gw: cls.W, cls: cls, reg: reg}, L, ph, pw, rh, rw, nil)...)
	}
	if post := m.finish(cands, img.H, img.W, ph, pw, rh, rw, nil); !bytes.Equal(detBytes([][]Detection{post}), detBytes([][]Detection{got})) {
		t.Errorf("%s: the %s runner's %d detections are not the postprocessing of its head outputs (%d detections)", name, b.Name, len(got), len(post))
	}
	if exact && db.ambiguous == 0 && len(got) != len(want) {
		t.Fatalf("%s: %d detections, want %d", name, len(got), len(want))
	}
	matched := 0
	for _, d := range want {
		for _, e := range got {
			if e.Label == d.Label && !approx.Far(approx.Diff(float64(e.Score), float64(d.Score)), db.score) && boxClose(e.Box, d.Box, db.box) {
				matched++
				break
			}
		}
	}
	if len(want) == 0 || exact && db.ambiguous == 0 && matched != len(want) || float64(matched) < minFrac*float64(len(want)) {
		t.Errorf("%s: %d of the %d detections matched (score ± %.3g, box ± %.3g px)", name, matched, len(want), db.score, db.box)
	}
	t.Logf("%s: %d detections, %d match the %d wanted (score ± %.3g, box ± %.3g px, %d ambiguous)", name, len(got), matched, len(want), db.score, db.box, db.ambiguous)
}

// TestParityCatchesPlantedBugs: the derived bounds are tight enough to
// fail on real bugs in the GPU engine's side of pairRun: two weights of
// one filter swapped, one filter's weights scaled, a bias moved, in early,
// middle and head layers. The worst-case bound is γ_K of Σ|terms| (about
// K^1.5·u of |y| for K-term products of random sign), so a layer's
// relative error must exceed about 1e-3 (FP32, K = 576) or 2⁻¹⁰·√K (TF32)
// to show: measured, one filter ×(1+2⁻¹⁰) or a bias +1% in layer1 is
// missed (|Δ|/bound 0.56, 0.34), ×(1+2⁻⁶) is caught; a one-ulp change per
// weight is float32 rounding and is, rightly, not caught.
func TestParityCatchesPlantedBugs(t *testing.T) {
	m := smallModel(t)
	img := smallImages(1, 90, 70, 1)[0]
	swap := func(c *nn.Conv) { c.W[0], c.W[1] = c.W[1], c.W[0] }
	scale := func(f float32) func(c *nn.Conv) {
		return func(c *nn.Conv) {
			for i := range c.W[:c.In*c.KH*c.KW] {
				c.W[i] *= f
			}
		}
	}
	for _, b := range []struct {
		prec  cuda.Precision
		layer string
		name  string
		bug   func(c *nn.Conv)
	}{
		{cuda.Exact, "backbone.body.layer1.0.conv1", "swapped weights", swap},
		{cuda.Exact, "backbone.body.layer3.1.conv2", "swapped weights", swap},
		{cuda.Exact, "head.regression_head.conv.2.0", "swapped weights", swap},
		{cuda.Exact, "backbone.body.layer3.1.conv2", "filter ×(1+2⁻⁶)", scale(1 + 0x1p-6)},
		{cuda.Exact, "backbone.body.layer1.0.conv1", "bias +0.1", func(c *nn.Conv) { c.B[0] += 0.1 }},
		{cuda.KernelTF32, "backbone.body.layer1.0.conv1", "swapped weights", swap},
		{cuda.KernelTF32, "head.regression_head.conv.2.0", "filter ×(1+2⁻⁴)", scale(1 + 0x1p-4)},
	} {
		g := newTestEngine(t, b.prec)
		up := func(x cpu.Fmap) gpu.Map { return upload(t, g, 1, x.C, x.H, x.W, x.D) }
		sd := sideFP32
		if b.prec == cuda.KernelTF32 {
			sd = sideTF32
		}
		name := fmt.Sprintf("%s %s in %s", b.prec, b.name, b.layer)
		var hit bool
		plant := func(c *nn.Conv) *nn.Conv {
			if c.Name != b.layer {
				return c
			}
			hit = true
			bad := &nn.Conv{Name: c.Name + " (planted)", Out: c.Out, In: c.In, KH: c.KH, KW: c.KW, Stride: c.Stride, Pad: c.Pad,
				W: append([]float32(nil), c.W...), B: append([]float32(nil), c.B...)}
			b.bug(bad)
			return bad
		}
		pn := runPair(t, name, m, img, g, sideCPU, sd, up, plant)
		if !hit {
			t.Fatalf("%s: no layer %s in the network", name, b.layer)
		}
		if pn.fails == 0 {
			t.Errorf("%s: every layer within its bound (largest |Δ|/bound %.3g): the bound would miss this bug", name, pn.worst)
		}
	}
}
