package metrics

import (
	"cmp"
	"fmt"
	"slices"
	"sort"

	"github.com/canopy-hpc/canopy/box"
)

// IntersectionOverUnion reproduces torchmetrics' IntersectionOverUnion(class_metrics=True,
// iou_threshold=thr) on the images DeepForest passes it: per image the
// float32 box_iou matrix of predictions × ground truth; entries below the
// float32 threshold or between different labels are invalid; an image
// without predictions contributes one valid 0 per ground-truth box. "iou" is
// the mean of all valid entries (no one-to-one matching), "iou/cl_<id>" the
// mean over the valid entries in the ground-truth columns of class id, for
// every class seen in ground truth or predictions; 0 when nothing is valid.
//
// torch sums float32 tensors with its own vectorised cascade; canopy sums
// in float32 in that same order (torchSum32: torch's AVX2 lanes and
// cascade), so the values equal torch's bit for bit (tested against the
// peer).
// DeepForest computes the metric only when some image passes; the keys are
// then absent otherwise.
func IntersectionOverUnion(in Input, thr float64) []Value {
	images := validationTruth(in.Images)
	t32 := float32(thr)
	// Above a positive threshold only overlapping pairs can be valid (a
	// float32 IoU > 0 needs a float64 overlap: rounding is monotone). At
	// or below 0 every same-label pair is valid, zeros included: they are
	// counted, and placed, but not stored.
	everyPair := !(t32 > 0)
	var all []sparseTerm // the non-zero valid entries at their torch.cat positions
	var nAll int64
	clsSum := map[int32]float32{} // per class: float32 sum of per-image sums
	clsN := map[int32]int64{}
	seen := map[int32]bool{}
	passed := 0
	var ps []iouPair
	perClass := map[int32]*classTerms{}
	for i, im := range images {
		if im.Empty || len(im.Truth) == 0 {
			continue
		}
		passed++
		dets := in.Dets[i]
		for _, t := range im.Truth {
			seen[t.Label] = true
		}
		for _, d := range dets {
			seen[d.Label] = true
		}
		if len(dets) == 0 {
			// zeros(M, M) with eye(M) as the label mask: M valid zeros
			nAll += int64(len(im.Truth))
			for _, t := range im.Truth {
				clsN[t.Label]++
			}
			continue
		}
		ps = iouPairs(im.Truth, dets, ps[:0])
		all = slices.Grow(all, len(ps))
		// The matrix is preds × gt, row-major: valid entries in that
		// order. With every pair valid, entry (d, t) of class c sits at
		// (same-label entries of the detections before d) + (truths of
		// class c before t), and at idx_c(d)·|truth of c| + that rank in
		// class c's own matrix mat[:, gt == c].
		var rank []int32
		var nTruth map[int32]int64
		if everyPair {
			rank = make([]int32, len(im.Truth))
			nTruth = map[int32]int64{}
			for t, g := range im.Truth {
				rank[t] = int32(nTruth[g.Label])
				nTruth[g.Label]++
			}
		}
		for _, c := range perClass {
			c.terms, c.n, c.nDet = c.terms[:0], 0, 0
		}
		classOf := func(l int32) *classTerms {
			c := perClass[l]
			if c == nil {
				c = &classTerms{}
				perClass[l] = c
			}
			return c
		}
		for k := 0; k < len(ps); { // size each class's terms once
			c, n := classOf(dets[ps[k].d].Label), 0
			for d := ps[k].d; k < len(ps) && ps[k].d == d; k++ {
				n++
			}
			c.want += n
		}
		for _, c := range perClass {
			c.terms, c.want = slices.Grow(c.terms, c.want), 0
		}
		k := 0
		var before int64 // valid entries of the detections before d (every-pair mode)
		for d := range dets {
			l := dets[d].Label
			c := classOf(l)
			for ; k < len(ps) && int(ps[k].d) == d; k++ {
				p := ps[k]
				switch {
				case everyPair:
					if p.v != 0 {
						all = append(all, sparseTerm{nAll + before + int64(rank[p.t]), p.v})
						c.terms = append(c.terms, sparseTerm{c.nDet*nTruth[l] + int64(rank[p.t]), p.v})
					}
				case !(p.v < t32):
					all = append(all, sparseTerm{nAll + before, p.v})
					c.terms = append(c.terms, sparseTerm{c.n, p.v})
					before++
					c.n++
				}
			}
			if everyPair {
				before += nTruth[l]
				c.nDet++
			}
		}
		nAll += before
		// Per class c of the image's truth: the valid entries of mat[:, gt == c]
		// summed per image.
		done := map[int32]bool{}
		for _, t := range im.Truth {
			l := t.Label
			if done[l] {
				continue
			}
			done[l] = true
			c := classOf(l)
			n := c.n
			if everyPair {
				n = c.nDet * nTruth[l]
			}
			clsSum[l] = float32(clsSum[l] + torchSum32Sparse(n, c.terms))
			clsN[l] += n
		}
	}
	if passed == 0 {
		return nil
	}
	mean := func(s float32, c int64) float64 {
		v := float32(s / float32(c))
		if c == 0 || v != v { // torchmetrics: no valid entry, or NaN, gives 0
			return 0
		}
		return float64(v)
	}
	vals := []Value{{Key: "iou", V: mean(torchSum32Sparse(nAll, all), nAll)}}
	ids := make([]int32, 0, len(seen))
	for id := range seen {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(a, b int) bool { return ids[a] < ids[b] })
	for _, id := range ids {
		vals = append(vals, Value{Key: fmt.Sprintf("iou/cl_%d", id), V: mean(clsSum[id], clsN[id])})
	}
	return vals
}

// classTerms is one class's valid entries in one image: the non-zero
// ones at their positions, the count of valid entries (positive
// threshold), and the class's detections so far (every-pair mode).
type classTerms struct {
	terms   []sparseTerm
	n, nDet int64
	want    int // pairs of the class in the image, to size terms
}

// iouPair is a detection × truth pair of one label that overlaps, with its
// float32 box_iou.
type iouPair struct {
	d, t int32
	v    float32
}

// iouPairs lists the overlapping same-label pairs in the matrix's
// row-major order (detection, then truth), appending to ps.
func iouPairs(truth []box.Truth, dets []box.Detection, ps []iouPair) []iouPair {
	tb := make([]box.Box, len(truth))
	for k, t := range truth {
		tb[k] = t.Box
	}
	ix := newOverlapIndex(tb)
	n := 0 // count first: the pairs are allocated once, at their size
	for d := range dets {
		ix.each(tb, dets[d].Box, func(t int, _ float64) {
			if truth[t].Label == dets[d].Label {
				n++
			}
		})
	}
	ps = slices.Grow(ps, n)
	for d := range dets {
		from := len(ps)
		ix.each(tb, dets[d].Box, func(t int, _ float64) {
			if truth[t].Label == dets[d].Label {
				ps = append(ps, iouPair{int32(d), int32(t), boxIoU32(dets[d].Box, truth[t].Box)})
			}
		})
		row := ps[from:]
		slices.SortFunc(row, func(a, b iouPair) int { return cmp.Compare(a.t, b.t) })
	}
	return ps
}

// boxIoU32 is torchvision's box_iou in float32.
func boxIoU32(a, b box.Box) float32 {
	ax1, ay1, ax2, ay2 := float32(a.Xmin), float32(a.Ymin), float32(a.Xmax), float32(a.Ymax)
	bx1, by1, bx2, by2 := float32(b.Xmin), float32(b.Ymin), float32(b.Xmax), float32(b.Ymax)
	areaA := float32(float32(ax2-ax1) * float32(ay2-ay1))
	areaB := float32(float32(bx2-bx1) * float32(by2-by1))
	w := float32(min(ax2, bx2) - max(ax1, bx1))
	h := float32(min(ay2, by2) - max(ay1, by1))
	w, h = max(w, 0), max(h, 0)
	inter := float32(w * h)
	union := float32(float32(areaA+areaB) - inter)
	return float32(inter / union)
}
