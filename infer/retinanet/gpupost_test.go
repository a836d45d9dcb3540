package retinanet

import (
	"bytes"
	"fmt"
	"image"
	"image/png"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/infer/cpu"
	"github.com/canopy-hpc/canopy/infer/cuda"
	"github.com/canopy-hpc/canopy/infer/cuda/hostkern"
	"github.com/canopy-hpc/canopy/infer/cuda/kernels"
	"github.com/canopy-hpc/canopy/infer/gpu"
	"github.com/canopy-hpc/canopy/infer/imagefile"
)

// bytesImages are n w×h images of 8-bit samples (imagefile's values).
func bytesImages(n, w, h int, seed uint64) []Image {
	r := rand.New(rand.NewPCG(seed, 11))
	out := make([]Image, n)
	for i := range out {
		img := Image{W: w, H: h, Pix: make([]float32, 3*w*h)}
		for j := range img.Pix {
			img.Pix[j] = unit8[r.IntN(256)]
		}
		out[i] = img
	}
	return out
}

// firstDiff is the first index where a and b differ in bits, or -1.
func firstDiff(a, b []float32) int {
	if len(a) != len(b) {
		return 0
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return i
		}
	}
	return -1
}

// TestDeviceTransformBits: the device transform (transform_img on the
// test device) gives normalizeResizePad's float32 bits, padding included,
// for every --blend rule and both size rules, over down- and upscales,
// odd sizes, an unchanged size, 8-bit and float32 sources, and a batch
// whose images have different sizes but one padded size.
func TestDeviceTransformBits(t *testing.T) {
	dev := newTestDevice(t)
	cases := []struct {
		w, h, min, max int
	}{
		{90, 70, 64, 96},    // down
		{37, 23, 64, 200},   // up, odd sizes
		{64, 64, 64, 64},    // unchanged: normalize and pad only
		{101, 57, 45, 333},  // down to odd sizes
		{13, 31, 50, 121},   // up, taller than wide
		{150, 90, 40, 1333}, // the two size rules differ (torchvision-0.15: 66×39)
	}
	for _, blend := range []BlendRule{BlendFMA, BlendNoFMA, BlendFMA1T} {
		for _, rule := range []ResizeRule{ResizeTorchvision, ResizeTorchvision015} {
			for ci, c := range cases {
				opt := DefaultOptions()
				opt.MinSize, opt.MaxSize, opt.Blend, opt.Resize = c.min, c.max, blend, rule
				m := &Model{Opt: opt}
				imgs := bytesImages(2, c.w, c.h, uint64(ci+1))
				imgs = append(imgs, smallImages(1, c.w, c.h, uint64(ci+7))...) // float32 values
				name := fmt.Sprintf("%s/%s/%dx%d", blend, rule, c.w, c.h)
				r := NewGPURunner(m, dev, 0)
				p := r.prepare(imgs, nil, nil)
				if p.u8[0] == nil || p.u8[2] != nil {
					t.Fatalf("%s: 8-bit images not sent as bytes, or float32 ones as bytes", name)
				}
				x := r.transform(p)
				got := r.g.Download(x)
				r.g.Put(x)
				if err := r.Close(); err != nil {
					t.Fatal(err)
				}
				e := cpu.NewEngine(1)
				plane := 3 * x.H * x.W
				for i, img := range imgs {
					want, rh, rw := normalizeResizePad(e, img, opt)
					if want.H != x.H || want.W != x.W || rh != p.rh[i] || rw != p.rw[i] {
						t.Fatalf("%s: sizes %dx%d (%dx%d), CPU %dx%d (%dx%d)", name, x.H, x.W, p.rh[i], p.rw[i], want.H, want.W, rh, rw)
					}
					if d := firstDiff(got[i*plane:(i+1)*plane], want.D); d >= 0 {
						t.Errorf("%s image %d: element %d is %v, CPU %v", name, i, d, got[i*plane+d], want.D[d])
					}
				}
			}
		}
	}
}

// TestExpd: expd is within two ulps of math.Exp (each within an ulp of e^x) over the range the sigmoid
// and the box decoding use, and handles the special values as math.Exp.
func TestExpd(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 200000; i++ {
		x := (r.Float64()*2 - 1) * 700
		if i%2 == 0 {
			x = (r.Float64()*2 - 1) * 20
		}
		got, want := expd(x), math.Exp(x)
		if want == 0 || math.IsInf(want, 0) {
			if got != want {
				t.Fatalf("expd(%v) = %v, math.Exp %v", x, got, want)
			}
			continue
		}
		if u := math.Abs(got-want) / (math.Nextafter(want, math.Inf(1)) - want); u > 2 {
			t.Fatalf("expd(%v) = %v, math.Exp %v: %.2f ulp", x, got, want, u)
		}
	}
	for _, c := range [][2]float64{{0, 1}, {math.Inf(1), math.Inf(1)}, {math.Inf(-1), 0}, {1e-300, 1}, {800, math.Inf(1)}, {-800, 0}} {
		if got := expd(c[0]); got != c[1] {
			t.Errorf("expd(%v) = %v, want %v", c[0], got, c[1])
		}
	}
	if !math.IsNaN(expd(math.NaN())) {
		t.Error("expd(NaN) is not NaN")
	}
}

// hostAndDevice postprocesses a launched group on the device and then, from
// the same head outputs, on the host.
func hostAndDevice(t *testing.T, r *GPURunner, l launched) (dev, host [][]Detection) {
	t.Helper()
	dev = r.postprocess(l)
	host, _, _ = r.collectHost(l, nil) // constructed outputs may hold what checkHeads refuses
	if r.g.Err != nil {
		t.Fatal(r.g.Err)
	}
	return dev, host
}

// TestDevicePostprocessBits: the device postprocess gives the host
// postprocess's detections, in its order, bit for bit: on the network's
// head outputs (small model, three images of two sizes in one padded
// size), and on constructed head outputs full of exact ties (equal scores
// within and across levels, at the top-k cut and at the detections cut,
// identical boxes), in both of batchedNMS's modes (coordinate offset for
// up to 1000 candidates, per label above).
func TestDevicePostprocessBits(t *testing.T) {
	dev := newTestDevice(t)
	t.Run("network", func(t *testing.T) {
		m := smallModel(t)
		imgs := append(bytesImages(2, 90, 70, 21), bytesImages(1, 88, 66, 22)...)
		r := NewGPURunner(m, dev, 0)
		defer r.Close()
		d, h := hostAndDevice(t, r, r.launch(r.prepare(imgs, nil, nil)))
		if len(h[0]) == 0 {
			t.Fatal("no detections: the comparison would be empty")
		}
		if !bytes.Equal(detBytes(d), detBytes(h)) {
			t.Errorf("device detections differ from the host's:\n%v\n%v", d, h)
		}
	})
	for _, c := range []struct {
		name       string
		topk, dets int
		nms        float64
		thresh     float32
	}{
		{"offset", 7, 5, 0.5, 0.1},
		{"offset-wide", 40, 300, 0.3, 0.05},
		{"per-label", 1000, 300, 0.5, 0.05},
		{"per-label-cut", 400, 9, 0.05, 0.05},
	} {
		t.Run(c.name, func(t *testing.T) {
			opt := DefaultOptions()
			opt.TopkCandidates, opt.DetectionsPerImg, opt.NMSThresh, opt.ScoreThresh = c.topk, c.dets, c.nms, c.thresh
			m := &Model{Classes: 2, Opt: opt}
			r := NewGPURunner(m, dev, 0)
			defer r.Close()
			l := tiedHeads(t, r, 2)
			d, h := hostAndDevice(t, r, l)
			ties := 0
			for _, ds := range h {
				for j := 1; j < len(ds); j++ {
					if ds[j].Score == ds[j-1].Score {
						ties++
					}
				}
			}
			if len(h[0]) == 0 || ties == 0 {
				t.Fatalf("%d detections, %d tied scores: the test would not test ties", len(h[0]), ties)
			}
			if !bytes.Equal(detBytes(d), detBytes(h)) {
				for i := range h {
					for j := range h[i] {
						if j >= len(d[i]) || d[i][j] != h[i][j] {
							t.Fatalf("image %d: %d detections (host %d); first difference at %d: %+v, host %+v", i, len(d[i]), len(h[i]), j, d[i][min(j, len(d[i])-1)], h[i][j])
						}
					}
				}
				t.Fatalf("image counts differ")
			}
			t.Logf("%d and %d detections, %d tied scores", len(h[0]), len(h[1]), ties)
		})
	}
}

// TestDeviceTorchSort: the per-label mode's final sort in post_nms_scan
// (torch_sort_desc) orders the survivors as torchSortDesc, that is as
// torch's unstable sort in the peer's fixture (nms_ties.json's sorts, one
// of which reaches the heap-sort fallback: TestTorchSortDesc). The kernel
// is fed directly: one level of distinct descending candidate scores, so
// that the survivors' index order is their sorted position, nothing
// suppressed, and the sorted list holding the fixture's values with each
// position in its box.
func TestDeviceTorchSort(t *testing.T) {
	dev := newTestDevice(t)
	r := NewGPURunner(&Model{Classes: 1, Opt: DefaultOptions()}, dev, 0)
	defer r.Close()
	g := r.g
	f := readNMSTies(t)
	for i, s := range f.Sorts {
		m := len(s.Values)
		W := (m + 63) / 64
		cand := make([]float32, kernels.PostLevels*m*kernels.PostCand)
		for j := range cand {
			cand[j] = float32(math.Inf(-1))
		}
		sorted := make([]float32, m*kernels.PostCand)
		for j := 0; j < m; j++ {
			cand[j*kernels.PostCand+4] = float32(m - j)
			sorted[j*kernels.PostCand] = float32(j)
			sorted[j*kernels.PostCand+4] = s.Values[j]
		}
		bufs := []gpu.Map{
			upload(t, g, 1, 1, 1, len(sorted), sorted),
			upload(t, g, 1, 1, 1, 3, []float32{float32(m), 0, 0}),
			upload(t, g, 1, 1, 1, 2*m*W, make([]float32, 2*m*W)),
			g.Scratch(2 * W),
			upload(t, g, 1, 1, 1, 4, []float32{1, 1, 1, 1}),
			g.Scratch(1 + m*kernels.PostCand),
			upload(t, g, 1, 1, 1, len(cand), cand),
			g.Scratch(m),
		}
		g.LaunchN(kernels.PostNMSScan, 1, bufs[0].P, bufs[1].P, bufs[2].P, bufs[3].P, bufs[4].P, bufs[5].P,
			1, m, W, m, bufs[6].P, bufs[7].P, m)
		out := make([]float32, 1+m*kernels.PostCand)
		if g.Err == nil {
			g.Fail(g.Dev.Download(out, bufs[5].P))
		}
		if g.Err != nil {
			t.Fatal(g.Err)
		}
		got := make([]int, int(out[0]))
		for j := range got {
			got[j] = int(out[1+j*kernels.PostCand])
		}
		if fmt.Sprint(got) != fmt.Sprint(s.Indices) {
			t.Errorf("sort %d (n=%d): %v, torch %v", i, m, first20(got), first20(s.Indices))
		}
		g.Put(bufs...)
	}
}

// tiedHeads is a launched group of n images (128×96 padded; 125×90 and
// 100×77 resized, from 250×180 and 200×154) whose head outputs are drawn
// from a few values: many exact ties in score, boxes that coincide, and
// deltas beyond the decoder's clamp.
func tiedHeads(t *testing.T, r *GPURunner, n int) launched {
	rnd := rand.New(rand.NewPCG(7, 8))
	logits := []float32{-4, -1.5, 0.25, 0.25, 1, 2, 2, 3}
	deltas := []float32{0, 0, 0.1, -0.2, 0.5, 5}
	l := launched{prepared: prepared{ph: 128, pw: 96}}
	for i := 0; i < n; i++ {
		w, h := 250-50*(i%2), 180-26*(i%2)
		l.imgs = append(l.imgs, Image{W: w, H: h})
		rh, rw := 125-25*(i%2), 90-13*(i%2)
		l.rh, l.rw = append(l.rh, rh), append(l.rw, rw)
	}
	K := r.m.Classes
	for L := 0; L < 5; L++ {
		gh, gw := 128>>(3+L), 96>>(3+L)
		gh, gw = max(gh, 1), max(gw, 1)
		cls := make([]float32, n*NumAnchors*K*gh*gw)
		for i := range cls {
			cls[i] = logits[rnd.IntN(len(logits))]
		}
		reg := make([]float32, n*NumAnchors*4*gh*gw)
		for i := range reg {
			reg[i] = deltas[rnd.IntN(len(deltas))]
		}
		l.cls[L] = upload(t, r.g, n, NumAnchors*K, gh, gw, cls)
		l.reg[L] = upload(t, r.g, n, NumAnchors*4, gh, gw, reg)
		l.p[L] = gpu.Map{N: n, C: 1, H: gh, W: gw}
	}
	return l
}

// TestDeviceLosses: the device losses (loss_* kernels) equal the host's
// lossAcc on the same head outputs within lossULPs (in practice exactly,
// or an ulp where exp or log round differently): truth boxes of both
// classes, one overlapping no anchor well (the low-quality rule), one
// tiny, an image without truth, in one batch.
func TestDeviceLosses(t *testing.T) {
	dev := newTestDevice(t)
	m := smallModel(t)
	imgs := append(bytesImages(2, 90, 70, 31), bytesImages(1, 88, 66, 32)...)
	targets := [][]Target{
		{{Box: [4]float32{5, 6, 40, 50}, Label: 0}, {Box: [4]float32{30, 10, 88, 33}, Label: 1}, {Box: [4]float32{60, 60, 62, 62.5}, Label: 1}},
		nil,
		{{Box: [4]float32{0, 0, 87, 65}, Label: 1}, {Box: [4]float32{10, 10, 20, 20}, Label: 0}},
	}
	r := NewGPURunner(m, dev, 0)
	defer r.Close()
	l := r.launch(r.prepare(imgs, nil, targets))
	got := r.losses(l)
	_, want, _ := r.collectHost(l, nil)
	if r.g.Err != nil {
		t.Fatal(r.g.Err)
	}
	for i := range want {
		for _, c := range [][2]float32{{got[i].Classification, want[i].Classification}, {got[i].BoxRegression, want[i].BoxRegression}} {
			u := ulps(c[0], c[1])
			if !(u <= lossULPs) || c[1] == 0 && len(targets[i]) > 0 {
				t.Errorf("image %d: device %.9g, host %.9g: %.1f ulp", i, c[0], c[1], u)
			}
			t.Logf("image %d: device %.9g, host %.9g: %.1f ulp", i, c[0], c[1], u)
		}
	}
}

// TestGraphsMatchEager: with CUDA graphs (captured on a batch shape's
// second batch, replayed after; the host shim records and replays its
// launches) the detections and losses are byte-identical to the path
// without graphs, over batches of one shape whose images differ in size
// (the transform and the image sizes are refilled before each replay) and
// a batch of another shape in between.
func TestGraphsMatchEager(t *testing.T) {
	m := smallModel(t)
	a := bytesImages(4, 90, 70, 41)
	b := bytesImages(2, 88, 66, 42) // the same padded size, another resize
	odd := bytesImages(1, 64, 100, 43)
	imgs := []Image{a[0], a[1], b[0], a[2], odd[0], b[1], a[3]}
	targets := make([][]Target, len(imgs))
	for i := range targets {
		targets[i] = []Target{{Box: [4]float32{float32(5 + i), 6, 40, 50}, Label: i % 2}}
	}
	run := func(graphs bool) ([]byte, []box.Loss, int) {
		r := NewGPURunner(m, newTestDevice(t), 0)
		defer r.Close()
		if !graphs {
			r.DisableGraphs()
		}
		var out [][]Detection
		var losses []box.Loss
		// Batches of 2: shapes (2, a), (2, a), (1, odd), then (2, a) again.
		for _, grp := range [][]int{{0, 1}, {2, 3}, {4}, {5, 6}} {
			var gi []Image
			var gt [][]Target
			for _, i := range grp {
				gi, gt = append(gi, imgs[i]), append(gt, targets[i])
			}
			d, l, err := r.DetectBatchLoss(gi, gt, 2)
			if err != nil {
				t.Fatal(err)
			}
			out, losses = append(out, d...), append(losses, l...)
		}
		if err := r.GraphError(); err != nil {
			t.Fatalf("graph capture failed: %v", err)
		}
		return detBytes(out), losses, r.replays
	}
	gb, gl, replays := run(true)
	eb, el, none := run(false)
	if replays != 2 || none != 0 {
		t.Fatalf("%d replays with graphs (want 2: the shape's second and third batch), %d without", replays, none)
	}
	if !bytes.Equal(gb, eb) {
		t.Error("detections with graphs differ from those without")
	}
	for i := range el {
		if gl[i] != el[i] {
			t.Errorf("image %d: losses %v with graphs, %v without", i, gl[i], el[i])
		}
	}
}

// stageGroups maps layer-time groups to the stages of the GPU check's
// table.
var stageGroups = map[string]string{
	"prepare": "decode", "upload": "upload", "transform": "transform",
	"stem": "backbone", "maxpool": "backbone", "layer1": "backbone", "layer2": "backbone", "layer3": "backbone", "layer4": "backbone",
	"fpn": "fpn", "head.cls": "heads", "head.reg": "heads",
	"postprocess": "postprocess", "loss": "losses", "download": "download",
}

// stages are the GPU check's stages in pipeline order.
var stages = []string{"decode", "upload", "transform", "backbone", "fpn", "heads", "postprocess", "losses", "download"}

// TestGPUStageTimes prints the time per stage and image on the device at
// batch 1 and 8 (on a GPU: R50, the 400×400 fixture images, tools/gpu/check.sh;
// on the host shim: the small model at batch 1 and 2, where it only shows
// that every stage is timed): decoding (PNG files through imagefile and
// the 8-bit samples; on the host, overlapped with the device in a run),
// upload, transform, backbone, FPN, heads, postprocess, losses (eval) and
// download. Layer times synchronize around every group, so the sum is
// above a run's time per image.
func TestGPUStageTimes(t *testing.T) {
	var m *Model
	var imgs []Image
	batches := []int{1, 8}
	if _, ok := newTestDevice(t).(*hostkern.Device); ok {
		m, imgs, batches = smallModel(t), bytesImages(2, 90, 70, 51), []int{1, 2}
	} else {
		_, m = goldenModel(t, "r50.json")
		imgs, _ = goldenImages(t)
	}
	dir := t.TempDir()
	var files []string
	for i := 0; i < batches[1]; i++ {
		img := imgs[i%len(imgs)]
		f := filepath.Join(dir, fmt.Sprintf("img_%d.png", i))
		if err := writePNG(f, img); err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	for _, prec := range []cuda.Precision{cuda.Exact, cuda.KernelTF32} {
		for _, bs := range batches {
			gr := NewGPURunner(m, newTestDevice(t), prec)
			batch := make([]Image, bs)
			tg := make([][]Target, bs)
			for i := range batch {
				batch[i] = imgs[i%len(imgs)]
				tg[i] = []Target{{Box: [4]float32{10, 12, 60, 50}, Label: 0}}
			}
			if _, _, err := gr.DetectBatchLoss(batch, tg, bs); err != nil { // warm-up
				t.Fatal(err)
			}
			gr.EnableLayerTimes()
			const rounds = 2
			var decode time.Duration
			for k := 0; k < rounds; k++ {
				t0 := time.Now()
				u8 := make([][]byte, bs)
				for i := range batch {
					im, err := imagefile.Read(files[i])
					if err != nil {
						t.Fatal(err)
					}
					u8[i] = make([]byte, len(im.Pix))
					pixBytes(im.Pix, u8[i])
				}
				decode += time.Since(t0)
				if _, _, err := gr.detectBatch(batch, u8, tg, bs); err != nil {
					t.Fatal(err)
				}
			}
			per := map[string]float64{"decode": decode.Seconds()}
			for _, l := range gr.LayerTimes() {
				s, ok := stageGroups[l.Group]
				if !ok {
					t.Errorf("layer group %q belongs to no stage", l.Group)
				}
				per[s] += l.Seconds
			}
			n := float64(rounds * bs)
			var total float64
			for _, s := range stages {
				if per[s] == 0 {
					t.Errorf("%s batch %d: no time for %s", prec, bs, s)
				}
				total += per[s] / n
			}
			for _, s := range stages {
				t.Logf("stage %s batch %d %-12s %8.3f ms/image %5.1f%%", prec, bs, s, 1e3*per[s]/n, 100*per[s]/n/total)
			}
			gr.Close()
		}
	}
}

// writePNG writes an image of 8-bit samples as an RGB PNG.
func writePNG(path string, img Image) error {
	m := image.NewNRGBA(image.Rect(0, 0, img.W, img.H))
	n := img.W * img.H
	for i := 0; i < n; i++ {
		for c := 0; c < 3; c++ {
			m.Pix[4*i+c] = uint8(math.Round(float64(img.Pix[c*n+i]) * 255))
		}
		m.Pix[4*i+3] = 255
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := png.Encode(f, m); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
