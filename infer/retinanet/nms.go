package retinanet

import "sort"

// batchedNMS is torchvision's batched_nms: NMS per class, result in
// descending score. Like torchvision's CPU path it uses the coordinate-offset
// trick (boxes + label·(max+1)) for up to 1,000 boxes and the per-class loop
// above, so float32 rounding follows the same route. The order of exact
// score ties is torchvision's too (testdata/golden/retinanet/nms_ties.json,
// tools/retinanet/nms_ties.py): its nms kernel sorts with a stable sort, so
// tied candidates keep their order; the per-class loop orders its
// survivors, taken in index order, with torch's sort, which is not stable
// (torchSortDesc).
func batchedNMS(c []cand, thr float64) []int {
	if len(c) == 0 {
		return nil
	}
	scores := make([]float32, len(c))
	for i := range c {
		scores[i] = c[i].score
	}
	order := scoreOrder(scores)
	boxes := make([][4]float32, len(c))
	if len(c)*4 <= 4000 {
		var mx float32
		for i := range c {
			for _, v := range c[i].box {
				mx = max(mx, v)
			}
		}
		for i := range c {
			off := float32(c[i].label) * (mx + 1)
			b := c[i].box
			boxes[i] = [4]float32{b[0] + off, b[1] + off, b[2] + off, b[3] + off}
		}
		return nms(boxes, order, thr, nil)
	}
	for i := range c {
		boxes[i] = c[i].box
	}
	labels := make([]int, len(c))
	for i := range c {
		labels[i] = c[i].label
	}
	keep := nms(boxes, order, thr, labels)
	// keep_indices = where(keep_mask): the survivors in index order, then
	// keep_indices[scores[keep_indices].sort(descending=True)[1]].
	sort.Ints(keep)
	ks := make([]float32, len(keep))
	for i, k := range keep {
		ks[i] = scores[k]
	}
	out := make([]int, len(keep))
	for i, j := range torchSortDesc(ks) {
		out[i] = keep[j]
	}
	return out
}

// scoreOrder is the order in which torchvision's nms kernel visits the
// boxes: descending score, ties in index order (a stable sort).
func scoreOrder(scores []float32) []int {
	order := make([]int, len(scores))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(i, j int) bool { return scores[order[i]] > scores[order[j]] })
	return order
}

// nms is torchvision's CPU nms kernel over boxes in the given score order;
// with labels, only boxes of the same label suppress each other (the
// per-class loop, merged back in score order).
func nms(b [][4]float32, order []int, thr float64, labels []int) []int {
	area := make([]float32, len(b))
	for i, x := range b {
		area[i] = (x[2] - x[0]) * (x[3] - x[1])
	}
	dead := make([]bool, len(b))
	var keep []int
	for oi, i := range order {
		if dead[i] {
			continue
		}
		keep = append(keep, i)
		bi := b[i]
		for _, j := range order[oi+1:] {
			if dead[j] || (labels != nil && labels[j] != labels[i]) {
				continue
			}
			bj := b[j]
			w := max(0, min(bi[2], bj[2])-max(bi[0], bj[0]))
			h := max(0, min(bi[3], bj[3])-max(bi[1], bj[1]))
			inter := w * h
			iou := inter / (area[i] + area[j] - inter)
			if float64(iou) > thr {
				dead[j] = true
			}
		}
	}
	return keep
}
