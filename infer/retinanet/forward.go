package retinanet

import (
	"math"
	"sort"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/infer/cpu"
	"github.com/canopy-hpc/canopy/infer/nn"
	"github.com/canopy-hpc/canopy/infer/resnet"
)

// Detection is one output box in original-image pixels (float32, as
// torchvision returns them).
type Detection struct {
	Box   [4]float32 // xmin, ymin, xmax, ymax
	Score float32
	Label int
}

// levelOut is the head output of one pyramid level.
type levelOut struct {
	gh, gw int
	cls    cpu.Fmap // [A·K, gh, gw]
	reg    cpu.Fmap // [A·4, gh, gw]
}

// Trace holds intermediate results for tests and profiling.
type Trace struct {
	ResizedH, ResizedW int
	PaddedH, PaddedW   int
	Levels             [5]cpu.Fmap // P3..P7
	AboveThresh        [5]int
	// Top holds each level's TraceTop highest scores, whatever the
	// threshold, with their level-local flat index (anchor·K + k) and the
	// decoded, clipped box in resized-image pixels.
	Top [5][]Candidate
}

// TraceTop is the number of scores per level a Trace keeps.
const TraceTop = 5

// Candidate is one scored anchor of a level.
type Candidate struct {
	Index int
	Score float32
	Box   [4]float32
}

// features runs the body and the FPN: P3..P7. Every intermediate is put
// back as soon as it is dead (x included).
func features[T any](m *Model, e nn.Backend[T], x T) [5]T {
	c := resnet.Features(m.body, e, x, 3)
	var p [5]T
	last := e.Conv(m.inner[2], c[2], false, nil)
	p[2] = e.Conv(m.layer[2], last, false, nil)
	e.Put(c[2])
	for i := 1; i >= 0; i-- {
		lat := e.Conv(m.inner[i], c[i], false, nil)
		e.Put(c[i])
		e.UpsampleAdd(lat, last)
		e.Put(last)
		last = lat
		p[i] = e.Conv(m.layer[i], last, false, nil)
	}
	e.Put(last)
	p[3] = e.Conv(m.p6, p[2], false, nil)
	r := e.ReluCopy(p[3])
	p[4] = e.Conv(m.p7, r, false, nil)
	e.Put(r)
	return p
}

// head runs the classification and regression subnets on one level.
func head[T any](m *Model, e nn.Backend[T], p T) (cls, reg T) {
	c, r := p, p
	for i := 0; i < 4; i++ {
		nc := e.Conv(m.clsT[i], c, true, nil)
		nr := e.Conv(m.regT[i], r, true, nil)
		if i > 0 {
			e.Put(c, r)
		}
		c, r = nc, nr
	}
	cls, reg = e.Conv(m.cls, c, false, nil), e.Conv(m.reg, r, false, nil)
	e.Put(c, r)
	return cls, reg
}

// cpuHeads is head on the CPU engine, over the five levels at once: each
// convolution of the towers runs on the five maps together
// (cpu.Engine.ConvLevels: the same bits as one level at a time), so that
// P5–P7's few tiles fill the products beside P3's and P4's.
func cpuHeads(m *Model, e *cpu.Engine, p [5]cpu.Fmap) (cls, reg [5]cpu.Fmap) {
	c, r := p[:], p[:]
	for i := 0; i < 4; i++ {
		nc := e.ConvLevels(m.clsT[i], c, true)
		nr := e.ConvLevels(m.regT[i], r, true)
		if i > 0 {
			e.Put(c...)
			e.Put(r...)
		}
		c, r = nc, nr
	}
	copy(cls[:], e.ConvLevels(m.cls, c, false))
	copy(reg[:], e.ConvLevels(m.reg, r, false))
	e.Put(c...)
	e.Put(r...)
	return cls, reg
}

// bboxClip is torchvision's BoxCoder clamp, log(1000/16), as float32.
var bboxClip = float32(math.Log(1000.0 / 16))

type cand struct {
	box   [4]float32
	score float32
	label int
	idx   int // level-local flat index (anchor·K + k), for the tie-break
	level int
}

// detect runs one image end to end on the CPU. With want, it also
// computes the image's losses against targets (lossAcc). Head outputs or
// losses that are not finite are a *NonFiniteError naming the first layer
// that overflowed (the detections are then nil).
func (m *Model) detect(e *cpu.Engine, img Image, tr *Trace, targets []Target, want bool) ([]Detection, box.Loss, error) {
	e.ReuseFor(img.H, img.W)
	e.Keep = tr != nil
	t0 := e.Times.Now()
	x, rh, rw := normalizeResizePad(e, img, m.Opt)
	e.Times.Add("transform", t0)
	ph, pw := x.H, x.W
	p := features[cpu.Fmap](m, e, x)
	var acc *lossAcc
	if want {
		t1 := e.Times.Now()
		acc = m.newLossAcc(targets, img.H, img.W, rh, rw, ph, pw, grids(p, func(f cpu.Fmap) (int, int) { return f.H, f.W }))
		e.Times.Add("loss", t1)
	}
	var all []cand
	var bad error
	cls, reg := cpuHeads(m, e, p)
	for L := 0; L < 5; L++ {
		t1 := e.Times.Now()
		lo := levelOut{gh: p[L].H, gw: p[L].W, cls: cls[L], reg: reg[L]}
		if bad == nil {
			bad = lo.check(L)
		}
		if acc != nil {
			acc.addLevel(lo, L)
			e.Times.Add("loss", t1)
			t1 = e.Times.Now()
		}
		all = append(all, m.levelCandidates(lo, L, ph, pw, rh, rw, tr)...)
		if tr != nil {
			tr.Levels[L] = p[L]
		}
		e.Put(cls[L], reg[L], p[L])
		e.Times.Add("postprocess", t1)
	}
	var loss box.Loss
	if acc != nil && bad == nil {
		loss = acc.result()
		bad = checkLoss(loss)
	}
	if ne, ok := bad.(*NonFiniteError); ok {
		if ne.Level >= 0 {
			ne.First = m.firstBadLayer(e, img)
		}
		return nil, box.Loss{}, ne
	}
	t2 := e.Times.Now()
	defer e.Times.Add("postprocess", t2)
	return m.finish(all, img.H, img.W, ph, pw, rh, rw, tr), loss, nil
}

// grids is the grid size of each pyramid level.
func grids[T any](p [5]T, size func(T) (int, int)) [5][2]int {
	var g [5][2]int
	for L := range p {
		g[L][0], g[L][1] = size(p[L])
	}
	return g
}

// levelCandidates is one level's postprocessing, as torchvision's
// postprocess_detections: the scores above the threshold, the best
// TopkCandidates of them (ties by index: torch's order is unspecified),
// their boxes decoded and clipped to the resized image.
func (m *Model) levelCandidates(lo levelOut, L, ph, pw, rh, rw int, tr *Trace) []cand {
	K := m.Classes
	hw := lo.gh * lo.gw
	cells := cellAnchors(L)
	var kept []cand
	for loc := 0; loc < hw; loc++ {
		for a := 0; a < NumAnchors; a++ {
			for k := 0; k < K; k++ {
				v := lo.cls.D[(a*K+k)*hw+loc]
				s := sigmoid(v)
				if s > m.Opt.ScoreThresh {
					kept = append(kept, cand{score: s, label: k, idx: (loc*NumAnchors+a)*K + k, level: L})
				}
			}
		}
	}
	if tr != nil {
		tr.AboveThresh[L] = len(kept)
		tr.Top[L] = levelTop(lo, K, &cells, ph, pw, rh, rw)
	}
	sort.Slice(kept, func(i, j int) bool {
		if kept[i].score != kept[j].score {
			return kept[i].score > kept[j].score
		}
		return kept[i].idx < kept[j].idx
	})
	if len(kept) > m.Opt.TopkCandidates {
		kept = kept[:m.Opt.TopkCandidates]
	}
	for i := range kept {
		ai := kept[i].idx / K
		an := anchor(&cells, ai, lo.gh, lo.gw, ph, pw)
		loc, a := ai/NumAnchors, ai%NumAnchors
		var d [4]float32
		for j := 0; j < 4; j++ {
			d[j] = lo.reg.D[(a*4+j)*hw+loc]
		}
		kept[i].box = decode(an, d, rh, rw)
	}
	return kept
}

// finish is the batched NMS over all levels, the DetectionsPerImg best, and
// the boxes scaled back to the original image.
func (m *Model) finish(all []cand, imgH, imgW, ph, pw, rh, rw int, tr *Trace) []Detection {
	if tr != nil {
		tr.ResizedH, tr.ResizedW, tr.PaddedH, tr.PaddedW = rh, rw, ph, pw
	}
	keep := batchedNMS(all, m.Opt.NMSThresh)
	if len(keep) > m.Opt.DetectionsPerImg {
		keep = keep[:m.Opt.DetectionsPerImg]
	}
	ry := float32(imgH) / float32(rh)
	rx := float32(imgW) / float32(rw)
	out := make([]Detection, len(keep))
	for i, k := range keep {
		c := all[k]
		out[i] = Detection{Box: [4]float32{c.box[0] * rx, c.box[1] * ry, c.box[2] * rx, c.box[3] * ry}, Score: c.score, Label: c.label}
	}
	return out
}

// levelTop is the TraceTop highest scores of a level (ties by index).
func levelTop(lo levelOut, K int, cells *[NumAnchors][4]float32, ph, pw, rh, rw int) []Candidate {
	hw := lo.gh * lo.gw
	var top []Candidate
	for loc := 0; loc < hw; loc++ {
		for a := 0; a < NumAnchors; a++ {
			for k := 0; k < K; k++ {
				c := Candidate{Index: (loc*NumAnchors+a)*K + k, Score: sigmoid(lo.cls.D[(a*K+k)*hw+loc])}
				if len(top) == TraceTop && c.Score <= top[TraceTop-1].Score {
					continue
				}
				i := len(top)
				if i < TraceTop {
					top = append(top, c)
				} else {
					i--
				}
				for ; i > 0 && top[i-1].Score < c.Score; i-- {
					top[i] = top[i-1]
				}
				top[i] = c
			}
		}
	}
	for i := range top {
		ai := top[i].Index / K
		loc, a := ai/NumAnchors, ai%NumAnchors
		var d [4]float32
		for j := 0; j < 4; j++ {
			d[j] = lo.reg.D[(a*4+j)*hw+loc]
		}
		top[i].Box = decode(anchor(cells, ai, lo.gh, lo.gw, ph, pw), d, rh, rw)
	}
	return top
}

// sigmoid is 1/(1+e^−v) in float64 (expd: the device postprocess computes
// the same bits), rounded to float32.
func sigmoid(v float32) float32 {
	return float32(1 / (1 + expd(-float64(v))))
}

// decode is BoxCoder.decode_single with weights (1,1,1,1) in float32,
// followed by clip_boxes_to_image on the resized, unpadded size.
func decode(a [4]float32, d [4]float32, h, w int) [4]float32 {
	aw := a[2] - a[0]
	ah := a[3] - a[1]
	cx := a[0] + float32(0.5*aw)
	cy := a[1] + float32(0.5*ah)
	dw, dh := min(d[2], bboxClip), min(d[3], bboxClip)
	pcx := float32(d[0]*aw) + cx
	pcy := float32(d[1]*ah) + cy
	pw := float32(float32(expd(float64(dw))) * aw)
	ph := float32(float32(expd(float64(dh))) * ah)
	hw, hh := float32(0.5*pw), float32(0.5*ph)
	b := [4]float32{pcx - hw, pcy - hh, pcx + hw, pcy + hh}
	W, H := float32(w), float32(h)
	b[0] = min(max(b[0], 0), W)
	b[2] = min(max(b[2], 0), W)
	b[1] = min(max(b[1], 0), H)
	b[3] = min(max(b[3], 0), H)
	return b
}
