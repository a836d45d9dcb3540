package crop

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/canopy-hpc/canopy/infer/cuda"
	"github.com/canopy-hpc/canopy/infer/cuda/kernels"
	"github.com/canopy-hpc/canopy/infer/gpu"
	"github.com/canopy-hpc/canopy/infer/imagefile"
	"github.com/canopy-hpc/canopy/infer/resnet"
)

// The crop classifier on the GPU engine (issue 44, item 3): the crops of a
// batch are cut from their source images on the device, normalized and
// resized there (kernels.cu's crop_hpass and crop_vpass: Transform's
// float32 operations in its order, the taps aaAxis's, so the batch is the
// CPU's bits), the ResNet body runs through infer/gpu's engine as the
// detector's backbone does (canopy's exact kernels, or cuDNN's fused
// graphs at fp32, tf32, bf16), and the pool, fc, softmax and argmax run
// on the device in float64 as forward's (crop_pool, crop_fc,
// crop_softmax). Only the logits, probabilities and best class come back.

// GPUBatch is the crops per forward pass on a GPU: wide enough that
// layer4's 7×7 maps make 1,568-column products, small enough that
// ResNet-50's live maps of 224×224 crops stay near 1 GB.
const GPUBatch = 32

// GPURunner classifies crops on a gpu.Engine: its own, or a detector's
// (the same device, cuDNN handle, plans and workspace). On canopy's exact
// kernels a crop's bytes never depend on its batch (every value is reduced
// by one thread in a fixed order); on cuDNN every batch runs at exactly
// Batch crops (the last padded with zero crops), so a crop's batch shape,
// and with it the engines cuDNN runs, is always the same. Not safe for
// concurrent use.
type GPURunner struct {
	net *Net
	g   *gpu.Engine
	own bool
	fc  [2]cuda.Ptr // fc's weights and bias, uploaded on first use
	// Batch is the most crops a forward pass takes (GPUBatch).
	Batch int
}

// NewGPURunner runs n on g (the caller keeps g: Close frees only what the
// runner uploaded besides the body's weights, which g holds).
func NewGPURunner(n *Net, g *gpu.Engine) *GPURunner {
	return &GPURunner{net: n, g: g, Batch: GPUBatch}
}

// NewGPURunnerOn runs n on dev at the options' precision in an engine of
// its own (eval-crops, which has no detector): Close frees it, not dev.
func NewGPURunnerOn(n *Net, dev cuda.Device, o gpu.Options) (*GPURunner, error) {
	g := gpu.NewEngine(dev, o.Precision)
	if o.Precision.Cudnn() {
		d, err := gpu.NewDNN(dev, nil, o)
		if err != nil {
			return nil, fmt.Errorf("crop: %w", err)
		}
		g.DNN = d
	}
	r := NewGPURunner(n, g)
	r.own = true
	return r, nil
}

// Engine is the runner's engine.
func (r *GPURunner) Engine() *gpu.Engine { return r.g }

// Close frees fc's weights, and the engine when it is the runner's own.
func (r *GPURunner) Close() error {
	for i, p := range r.fc {
		if p != 0 {
			r.g.Dev.Free(p)
			r.fc[i] = 0
		}
	}
	if r.own {
		r.g.Close()
	}
	return r.g.Err
}

// Piece is one crop: the window R of source image Img; or, when Held is
// not nil, the window R of that image already on the device (a detector's
// window, gpu.Engine.HeldSource: its pixels are not uploaded again; the
// GPU runner alone takes such a piece).
type Piece struct {
	Img  int
	R    Rect
	Held *gpu.Source
}

// Classify transforms and classifies raw crops on the device (each its own
// source), as Runner.Classify does on the CPU.
func (r *GPURunner) Classify(ctx context.Context, tr Transform, crops []imagefile.Image) ([]Output, error) {
	wins := make([]Piece, len(crops))
	for i, c := range crops {
		wins[i] = Piece{Img: i, R: Rect{W: c.W, H: c.H}}
	}
	return r.ClassifyWindows(ctx, tr, crops, wins)
}

// ClassifyWindows classifies the crops wins of the source images imgs:
// each batch uploads the sources its crops come from (8-bit samples when
// every value is one, else float32) and cuts the windows on the device.
// Outputs are in window order.
func (r *GPURunner) ClassifyWindows(ctx context.Context, tr Transform, imgs []imagefile.Image, wins []Piece) ([]Output, error) {
	if err := tr.check(); err != nil {
		return nil, err
	}
	if err := checkPieces(imgs, wins); err != nil {
		return nil, err
	}
	out := make([]Output, 0, len(wins))
	bs := max(r.Batch, 1)
	for lo := 0; lo < len(wins); lo += bs {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		hi := min(lo+bs, len(wins))
		res := r.batch(tr, imgs, wins[lo:hi])
		if r.g.Err != nil {
			return nil, fmt.Errorf("crop: %s: %w", r.g.Dev.Info().Backend, r.g.Err)
		}
		out = append(out, res...)
	}
	if err := checkFinite(out); err != nil {
		return nil, err
	}
	return out, nil
}

// checkPieces refuses a piece whose source or window is not there.
func checkPieces(imgs []imagefile.Image, ps []Piece) error {
	for i, p := range ps {
		if h := p.Held; h != nil {
			if r := p.R; r.W < 1 || r.H < 1 || r.X < 0 || r.Y < 0 || r.X > h.W-r.W || r.Y > h.H-r.H {
				return fmt.Errorf("crop %d: window %+v of a %d×%d image on the device", i, r, h.W, h.H)
			}
			continue
		}
		if p.Img < 0 || p.Img >= len(imgs) {
			return fmt.Errorf("crop %d: source %d of %d", i, p.Img, len(imgs))
		}
		if im := imgs[p.Img]; !p.R.in(im) {
			return fmt.Errorf("crop %d: window %+v of a %d×%d image with %d values", i, p.R, im.W, im.H, len(im.Pix))
		}
	}
	return nil
}

// taps are one axis's resize taps as the kernels read them: ints [min,
// size] and the weights, stride apart. An axis that keeps its size gets
// one tap of weight 1 per output (the value itself: the CPU skips it).
func taps(in, out int) (ints []int32, w []float32, stride int) {
	if in == out {
		ints, w = make([]int32, 2*out), make([]float32, out)
		for i := 0; i < out; i++ {
			ints[i], ints[out+i], w[i] = int32(i), 1, 1
		}
		return ints, w, 1
	}
	a := aaAxis(in, out)
	ints = make([]int32, 2*out)
	for i := 0; i < out; i++ {
		ints[i], ints[out+i] = int32(a.min[i]), int32(a.size[i])
	}
	return ints, a.w, a.stride
}

// batch queues one batch's transform, network and head, and downloads
// its outputs (nil on a device error: r.g.Err).
func (r *GPURunner) batch(tr Transform, imgs []imagefile.Image, wins []Piece) []Output {
	g := r.g
	n := len(wins)
	nb := n
	if g.DNN != nil {
		nb = max(r.Batch, n) // cuDNN: always the same batch shape
	}
	oh, ow := tr.Size[0], tr.Size[1]
	g.ReuseFor(nb, oh, ow)
	x := g.Alloc(nb, 3, oh, ow)
	if nb > n { // the padding crops: zeros (the crops overwrite their slots)
		g.LaunchN(kernels.FillU32, x.Size(), x.P, int64(x.Size()), 0)
	}
	r.transform(tr, imgs, wins, x)
	if g.DNN != nil {
		x = g.ToNHWC(x)
	}
	c5 := resnet.Features[gpu.Map](r.net.Body, g, x, 5)[2]
	if g.DNN != nil {
		c5 = g.ToNCHW(c5)
	}
	return r.head(c5, n)
}

// transform uploads the batch's sources and tap tables and queues each
// crop's two passes into its slot of x.
func (r *GPURunner) transform(tr Transform, imgs []imagefile.Image, wins []Piece, x gpu.Map) {
	g := r.g
	defer g.Timed("transform")()
	oh, ow := tr.Size[0], tr.Size[1]
	// The sources, each once, 8-bit where every value is a sample; a
	// held one is on the device already.
	srcs := make([]gpu.Source, len(wins))
	up := map[int]gpu.Source{}
	var dead []gpu.Map
	for i, w := range wins {
		if w.Held != nil {
			srcs[i] = *w.Held
			continue
		}
		s, ok := up[w.Img]
		if !ok && g.Err == nil {
			s = g.UploadSource(imgs[w.Img], nil)
			dead = append(dead, s.Map)
			up[w.Img] = s
		}
		srcs[i] = s
	}
	// The tap tables, one upload each, and the width passes' outputs.
	var ints []int32
	var wts []float32
	type plan struct {
		hInt, hW, vInt, vW int64
		hs, vs             int
		tmp                int64
	}
	plans := make([]plan, len(wins))
	var tmpN int64
	for i, w := range wins {
		p := &plans[i]
		hi, hw, hs := taps(w.R.W, ow)
		vi, vw, vs := taps(w.R.H, oh)
		p.hInt, p.hW, p.hs = int64(len(ints)), int64(len(wts)), hs
		ints, wts = append(ints, hi...), append(wts, hw...)
		p.vInt, p.vW, p.vs = int64(len(ints)), int64(len(wts)), vs
		ints, wts = append(ints, vi...), append(wts, vw...)
		p.tmp = tmpN
		tmpN += int64(3 * w.R.H * ow)
	}
	ib := make([]byte, 4*len(ints))
	for i, v := range ints {
		binary.LittleEndian.PutUint32(ib[4*i:], uint32(v))
	}
	ti, tw, tmp := g.Scratch(len(ints)), g.Scratch(len(wts)), g.Scratch(int(tmpN))
	dead = append(dead, ti, tw, tmp)
	if g.Err == nil {
		g.Fail(g.Dev.UploadBytes(ti.P, ib))
	}
	g.UploadAsync(tw.P, wts)
	norm, fma := 0, 0
	if tr.Normalize {
		norm = 1
	}
	if tr.FMA {
		fma = 1
	}
	for i, w := range wins {
		if g.Err != nil {
			break
		}
		s, p := srcs[i], plans[i]
		s8, s32 := s.Pointers()
		g.LaunchN(kernels.CropHPass, 3*w.R.H*ow, s8, s32, int64(0), s.W, s.H, w.R.X, w.R.Y, w.R.W, w.R.H, ow,
			ti.P, p.hInt, tw.P, p.hW, p.hs, tmp.P, p.tmp,
			tr.Mean[0], tr.Mean[1], tr.Mean[2], tr.Std[0], tr.Std[1], tr.Std[2], norm, fma)
		g.LaunchN(kernels.CropVPass, 3*oh*ow, tmp.P, p.tmp, w.R.H, ow, oh, ti.P, p.vInt, tw.P, p.vW, p.vs,
			x.P, int64(i*3*oh*ow), fma)
	}
	// Reused only by later work in the same stream, after these kernels.
	g.Put(dead...)
}

// head queues the pool, fc and softmax of c5 (NCHW FP32) and downloads the
// first n crops' logits, probabilities and best classes.
func (r *GPURunner) head(c5 gpu.Map, n int) []Output {
	g := r.g
	defer g.Timed("head")()
	k, ch := r.net.Classes, c5.C
	if r.fc[0] == 0 {
		for i, v := range [][]float32{r.net.fcW, r.net.fcB} {
			p, err := g.Dev.Alloc(len(v))
			g.Fail(err)
			if err == nil {
				g.Fail(g.Dev.Upload(p, v))
				r.fc[i] = p
			}
		}
	}
	nb := c5.N
	pooled, logits, probs, best := g.Scratch(nb*ch), g.Scratch(nb*k), g.Scratch(nb*k), g.Scratch(nb*2)
	g.LaunchN(kernels.CropPool, nb*ch, c5.P, pooled.P, nb, ch, c5.H*c5.W)
	g.LaunchN(kernels.CropFC, nb*k, pooled.P, r.fc[0], r.fc[1], logits.P, nb, ch, k)
	g.LaunchN(kernels.CropSoftmax, nb, logits.P, probs.P, best.P, nb, k)
	lg, pr, bs := make([]float32, n*k), make([]float32, n*k), make([]float32, n*2)
	for _, d := range []struct {
		dst []float32
		src cuda.Ptr
	}{{lg, logits.P}, {pr, probs.P}, {bs, best.P}} {
		if g.Err == nil {
			g.Fail(g.Dev.Download(d.dst, d.src))
		}
	}
	g.Put(c5, pooled, logits, probs, best)
	if g.Err != nil {
		return nil
	}
	out := make([]Output, n)
	for i := range out {
		out[i] = Output{Logits: lg[i*k : (i+1)*k], Probs: pr[i*k : (i+1)*k], dev: true, label: int(bs[2*i]), score: bs[2*i+1]}
	}
	return out
}
