package retinanet

import (
	"math"
	"sort"

	"github.com/canopy-hpc/canopy/box"
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
	cls    fmap // [A·K, gh, gw]
	reg    fmap // [A·4, gh, gw]
}

// Trace holds intermediate results for tests and profiling.
type Trace struct {
	ResizedH, ResizedW int
	PaddedH, PaddedW   int
	Levels             [5]fmap // P3..P7
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

// backend is what the network needs from a compute engine, over its
// tensor type T: the CPU engine (fmap) and the GPU engine (dmap, a batch on
// a cuda.Device) run the same features and head below.
type backend[T any] interface {
	// conv computes relu?(conv(x) + b [+ res]).
	conv(c *conv, x T, relu bool, res *T) T
	maxpool3s2(x T) T
	// upsampleAdd adds the nearest-upsampled top to lat in place.
	upsampleAdd(lat, top T)
	reluCopy(x T) T
	// put returns dead tensors for reuse.
	put(xs ...T)
	// same reports whether a and b are one tensor.
	same(a, b T) bool
}

var _ backend[fmap] = (*engine)(nil)

// features runs the body and the FPN: P3..P7. Every intermediate is put
// back as soon as it is dead (x included).
func features[T any](m *Model, e backend[T], x T) [5]T {
	h := e.conv(m.stem, x, true, nil)
	e.put(x)
	h2 := e.maxpool3s2(h)
	e.put(h)
	h = h2
	var c [3]T
	for L := 0; L < 4; L++ {
		for _, b := range m.layers[L] {
			id := h
			if b.down != nil {
				id = e.conv(b.down, h, false, nil)
			}
			var out T
			if b.c3 != nil {
				t1 := e.conv(b.c1, h, true, nil)
				t2 := e.conv(b.c2, t1, true, nil)
				e.put(t1)
				out = e.conv(b.c3, t2, true, &id)
				e.put(t2)
			} else {
				t1 := e.conv(b.c1, h, true, nil)
				out = e.conv(b.c2, t1, true, &id)
				e.put(t1)
			}
			if b.down != nil {
				e.put(id)
			}
			if !(L > 1 && (e.same(c[0], h) || e.same(c[1], h))) {
				e.put(h)
			}
			h = out
		}
		if L > 0 {
			c[L-1] = h
		}
	}
	var p [5]T
	last := e.conv(m.inner[2], c[2], false, nil)
	p[2] = e.conv(m.layer[2], last, false, nil)
	e.put(c[2])
	for i := 1; i >= 0; i-- {
		lat := e.conv(m.inner[i], c[i], false, nil)
		e.put(c[i])
		e.upsampleAdd(lat, last)
		e.put(last)
		last = lat
		p[i] = e.conv(m.layer[i], last, false, nil)
	}
	e.put(last)
	p[3] = e.conv(m.p6, p[2], false, nil)
	r := e.reluCopy(p[3])
	p[4] = e.conv(m.p7, r, false, nil)
	e.put(r)
	return p
}

// head runs the classification and regression subnets on one level.
func head[T any](m *Model, e backend[T], p T) (cls, reg T) {
	c, r := p, p
	for i := 0; i < 4; i++ {
		nc := e.conv(m.clsT[i], c, true, nil)
		nr := e.conv(m.regT[i], r, true, nil)
		if i > 0 {
			e.put(c, r)
		}
		c, r = nc, nr
	}
	cls, reg = e.conv(m.cls, c, false, nil), e.conv(m.reg, r, false, nil)
	e.put(c, r)
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
// computes the image's losses against targets (lossAcc).
func (m *Model) detect(e *engine, img Image, tr *Trace, targets []Target, want bool) ([]Detection, box.Loss) {
	e.reuseFor(img.H, img.W)
	e.keep = tr != nil
	t0 := e.times.now()
	x, rh, rw := normalizeResizePad(e, img, m.Opt)
	e.times.add("transform", t0)
	ph, pw := x.h, x.w
	p := features[fmap](m, e, x)
	var acc *lossAcc
	if want {
		t1 := e.times.now()
		acc = m.newLossAcc(targets, img.H, img.W, rh, rw, ph, pw, grids(p, func(f fmap) (int, int) { return f.h, f.w }))
		e.times.add("loss", t1)
	}
	var all []cand
	for L := 0; L < 5; L++ {
		cls, reg := head[fmap](m, e, p[L])
		t1 := e.times.now()
		lo := levelOut{gh: p[L].h, gw: p[L].w, cls: cls, reg: reg}
		if acc != nil {
			acc.addLevel(lo, L)
			e.times.add("loss", t1)
			t1 = e.times.now()
		}
		all = append(all, m.levelCandidates(lo, L, ph, pw, rh, rw, tr)...)
		if tr != nil {
			tr.Levels[L] = p[L]
		}
		e.put(cls, reg, p[L])
		e.times.add("postprocess", t1)
	}
	t2 := e.times.now()
	defer e.times.add("postprocess", t2)
	var loss box.Loss
	if acc != nil {
		loss = acc.result()
	}
	return m.finish(all, img.H, img.W, ph, pw, rh, rw, tr), loss
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
				v := lo.cls.d[(a*K+k)*hw+loc]
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
			d[j] = lo.reg.d[(a*4+j)*hw+loc]
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
				c := Candidate{Index: (loc*NumAnchors+a)*K + k, Score: sigmoid(lo.cls.d[(a*K+k)*hw+loc])}
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
			d[j] = lo.reg.d[(a*4+j)*hw+loc]
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
