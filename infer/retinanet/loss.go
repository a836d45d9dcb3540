package retinanet

import (
	"math"

	"github.com/canopy-hpc/canopy/box"
)

// Target is one ground-truth box of the loss: original-image pixels, the
// model's class id.
type Target struct {
	Box   [4]float32
	Label int
}

// Targets turns an image's truth into the targets DeepForest's BoxDataset
// hands the model (datasets/training.py at 1bad4419): the boxes as float32;
// a frame whose boxes sum to 0 (the 0,0,0,0 row of an empty frame) has
// none; each box is clamped to the w×h image and dropped when it is
// narrower or shorter than 1 pixel. class maps a truth label id to the
// model's class; a label it refuses drops the box.
func Targets(truth []box.Truth, w, h int, class func(int32) (int, bool)) []Target {
	var sum float64
	for _, t := range truth {
		for _, v := range [4]float64{t.Box.Xmin, t.Box.Ymin, t.Box.Xmax, t.Box.Ymax} {
			sum += float64(float32(v))
		}
	}
	if sum == 0 {
		return nil
	}
	W, H := float32(w), float32(h)
	out := make([]Target, 0, len(truth))
	for _, t := range truth {
		b := [4]float32{
			min(max(float32(t.Box.Xmin), 0), W), min(max(float32(t.Box.Ymin), 0), H),
			min(max(float32(t.Box.Xmax), 0), W), min(max(float32(t.Box.Ymax), 0), H),
		}
		k, ok := class(t.Label)
		if !ok || b[2]-b[0] < 1 || b[3]-b[1] < 1 {
			continue
		}
		out = append(out, Target{Box: b, Label: k})
	}
	return out
}

// The matcher's thresholds and the focal loss's parameters (torchvision's
// RetinaNet defaults). torch compares a float32 tensor with a Python float
// in float32.
const (
	fgIoU      = float32(0.5)
	bgIoU      = float32(0.4)
	focalAlpha = 0.25
	matchBG    = -1 // below bgIoU: background
	matchSkip  = -2 // between the thresholds: left out of the loss
)

// lossAcc computes one image's losses while the head outputs of its levels
// go by (torchvision's RetinaNet.compute_loss, semantics.md §2).
//
// Matching runs before the head, on the anchors of the padded image
// (torchvision's anchor order: level P3..P7, location y·gw+x, anchor a):
// the float32 IoU of every truth box with every anchor, each anchor's
// best truth (the first on a tie), below 0.4 background, [0.4, 0.5)
// ignored, and the low-quality rule: every anchor whose IoU with a truth
// box equals that box's best IoU gets back its own best truth. Anchors
// that do not overlap a box have IoU 0 with it, so only the anchors in a
// box's reach are visited (all of them for a box that overlaps none).
//
// Summation order: the focal-loss terms and the L1 terms are added in
// float64, level by level (P3..P7), within a level channel by channel of
// the head output (a·K+k for the classification, a·4+j for the
// regression), within a channel location by location; the sums are
// rounded to float32 once and divided by float32(max(1, foreground)),
// as torch divides the float32 sum. Each term is computed in float64 from
// the float32 logit (focal) or as the float32 |delta − encoded target|
// (L1), the target encoded in float32 as BoxCoder.encode_single does.
type lossAcc struct {
	m      *Model
	gt     [][4]float32 // truth boxes on the resized image
	label  []int
	match  []int32 // per anchor: truth index, matchBG or matchSkip
	start  [6]int  // first anchor of each level
	grid   [5][2]int
	ph, pw int
	cls    float64
	reg    float64
	fg     int
}

// newLossAcc matches targets (original pixels of an imgH×imgW image)
// against the anchors of a ph×pw padded image with level grids grid, the
// image resized to rh×rw. The boxes are scaled as torchvision's
// resize_boxes scales them: by float32(rw)/float32(imgW) and
// float32(rh)/float32(imgH), a float32 multiply.
func (m *Model) newLossAcc(targets []Target, imgH, imgW, rh, rw, ph, pw int, grid [5][2]int) *lossAcc {
	a := &lossAcc{m: m, grid: grid, ph: ph, pw: pw}
	for L := 0; L < 5; L++ {
		a.start[L+1] = a.start[L] + grid[L][0]*grid[L][1]*NumAnchors
	}
	n := a.start[5]
	a.match = make([]int32, n)
	for i := range a.match {
		a.match[i] = matchBG
	}
	if len(targets) == 0 {
		return a
	}
	rx := float32(rw) / float32(imgW)
	ry := float32(rh) / float32(imgH)
	for _, t := range targets {
		b := t.Box
		a.gt = append(a.gt, [4]float32{b[0] * rx, b[1] * ry, b[2] * rx, b[3] * ry})
		a.label = append(a.label, t.Label)
	}
	best := make([]float32, n) // each anchor's best IoU, 0 when it overlaps no box
	arg := make([]int32, n)    // and its truth (0 when all are 0, as torch's max)
	gtBest := make([]float32, len(a.gt))
	ties := make([][]int, len(a.gt)) // the anchors at each box's best IoU
	for g := range a.gt {
		a.visit(g, func(i int, iou float32) {
			if iou > best[i] {
				best[i], arg[i] = iou, int32(g)
			}
			switch {
			case iou > gtBest[g]:
				gtBest[g] = iou
				ties[g] = append(ties[g][:0], i)
			case iou == gtBest[g] && iou > 0:
				ties[g] = append(ties[g], i)
			}
		})
	}
	for i, v := range best {
		switch {
		case v < bgIoU:
		case v < fgIoU:
			a.match[i] = matchSkip
		default:
			a.match[i] = arg[i]
		}
	}
	for g, top := range gtBest {
		if top == 0 {
			// A box that overlaps no anchor: every anchor ties at 0.
			for i := range a.match {
				if a.iouAt(g, i) == 0 {
					a.match[i] = arg[i]
				}
			}
			continue
		}
		for _, i := range ties[g] {
			a.match[i] = arg[i]
		}
	}
	return a
}

// anchorAt is anchor i of the concatenation.
func (a *lossAcc) anchorAt(i int) [4]float32 {
	L := 0
	for i >= a.start[L+1] {
		L++
	}
	cells := cellAnchors(L)
	return anchor(&cells, i-a.start[L], a.grid[L][0], a.grid[L][1], a.ph, a.pw)
}

func (a *lossAcc) iouAt(g, i int) float32 { return iou(a.gt[g], a.anchorAt(i)) }

// visit calls f with every anchor that may overlap truth box g (a superset:
// the others have IoU 0 with it) and its IoU: level by level, cell anchor
// by cell anchor, location by location. The anchors are anchor()'s:
// shift (x·stride_w, y·stride_h) plus the cell anchor, in float32.
func (a *lossAcc) visit(g int, f func(i int, iou float32)) {
	b := a.gt[g]
	for L := 0; L < 5; L++ {
		cells := cellAnchors(L)
		gh, gw := a.grid[L][0], a.grid[L][1]
		sy, sx := a.ph/gh, a.pw/gw
		for k, c := range cells {
			// x·sx + c[0] < b[2] and x·sx + c[2] > b[0] (likewise in y).
			x0 := max(int(math.Floor(float64(b[0]-c[2])/float64(sx))), 0)
			x1 := min(int(math.Ceil(float64(b[2]-c[0])/float64(sx))), gw-1)
			y0 := max(int(math.Floor(float64(b[1]-c[3])/float64(sy))), 0)
			y1 := min(int(math.Ceil(float64(b[3]-c[1])/float64(sy))), gh-1)
			for y := y0; y <= y1; y++ {
				ty := float32(y * sy)
				for x := x0; x <= x1; x++ {
					tx := float32(x * sx)
					an := [4]float32{tx + c[0], ty + c[1], tx + c[2], ty + c[3]}
					f(a.start[L]+(y*gw+x)*NumAnchors+k, iou(b, an))
				}
			}
		}
	}
}

// iou is torchvision's box_iou of one pair in float32: inter/union with
// union = (area1 + area2) − inter.
func iou(b, an [4]float32) float32 {
	w := max(min(b[2], an[2])-max(b[0], an[0]), 0)
	h := max(min(b[3], an[3])-max(b[1], an[1]), 0)
	inter := float32(w * h)
	a1 := float32((b[2] - b[0]) * (b[3] - b[1]))
	a2 := float32((an[2] - an[0]) * (an[3] - an[1]))
	return inter / (a1 + a2 - inter)
}

// addLevel adds level L's head outputs to the sums.
func (a *lossAcc) addLevel(lo levelOut, L int) {
	K := a.m.Classes
	hw := lo.gh * lo.gw
	match := a.match[a.start[L]:a.start[L+1]]
	for an := 0; an < NumAnchors; an++ {
		for k := 0; k < K; k++ {
			ch := lo.cls.D[(an*K+k)*hw : (an*K+k+1)*hw]
			var s float64
			for loc, x := range ch {
				mt := match[loc*NumAnchors+an]
				if mt == matchSkip {
					continue
				}
				s += focal(x, mt >= 0 && a.label[mt] == k)
			}
			a.cls += s
		}
	}
	cells := cellAnchors(L)
	for loc := 0; loc < hw; loc++ {
		for an := 0; an < NumAnchors; an++ {
			if match[loc*NumAnchors+an] >= 0 {
				a.fg++
			}
		}
	}
	for an := 0; an < NumAnchors; an++ {
		for j := 0; j < 4; j++ {
			ch := lo.reg.D[(an*4+j)*hw : (an*4+j+1)*hw]
			var s float64
			for loc, d := range ch {
				mt := match[loc*NumAnchors+an]
				if mt < 0 {
					continue
				}
				t := encode(a.gt[mt], anchor(&cells, loc*NumAnchors+an, lo.gh, lo.gw, a.ph, a.pw))
				s += float64(abs32(d - t[j]))
			}
			a.reg += s
		}
	}
}

func abs32(x float32) float32 { return math.Float32frombits(math.Float32bits(x) &^ (1 << 31)) }

// focal is sigmoid_focal_loss of one logit (α 0.25, γ 2) in float64:
// α_t·ce·(1−p_t)², ce the binary cross-entropy with logits.
func focal(x32 float32, pos bool) float64 {
	x := float64(x32)
	e := math.Exp(-math.Abs(x))
	l := math.Log1p(e)
	// p = σ(x), q = 1 − p = σ(−x), without cancellation.
	p, q := 1/(1+e), e/(1+e)
	if x < 0 {
		p, q = q, p
	}
	if pos {
		ce := max(-x, 0) + l // −log p
		return focalAlpha * ce * q * q
	}
	ce := max(x, 0) + l // −log(1−p)
	return (1 - focalAlpha) * ce * p * p
}

// encode is BoxCoder.encode_single with weights (1,1,1,1) in float32: the
// deltas that take anchor an to box g.
func encode(g, an [4]float32) [4]float32 {
	ew, eh := an[2]-an[0], an[3]-an[1]
	ecx, ecy := an[0]+float32(0.5*ew), an[1]+float32(0.5*eh)
	gw, gh := g[2]-g[0], g[3]-g[1]
	gcx, gcy := g[0]+float32(0.5*gw), g[1]+float32(0.5*gh)
	return [4]float32{
		(gcx - ecx) / ew,
		(gcy - ecy) / eh,
		float32(math.Log(float64(gw / ew))),
		float32(math.Log(float64(gh / eh))),
	}
}

// result is the image's losses.
func (a *lossAcc) result() box.Loss {
	n := float32(max(1, a.fg))
	return box.Loss{Classification: float32(a.cls) / n, BoxRegression: float32(a.reg) / n}
}
