package retinanet

import "sort"

// batchedNMS is torchvision's batched_nms: NMS per class, result in
// descending score. Like torchvision's CPU path it uses the coordinate-offset
// trick (boxes + label·(max+1)) for up to 1,000 boxes and the per-class loop
// above, so float32 rounding follows the same route. Ties in score keep the
// candidates' order (torch's sort is not stable: the order of exact ties is
// unspecified there).
func batchedNMS(c []cand, thr float64) []int {
	if len(c) == 0 {
		return nil
	}
	order := make([]int, len(c))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(i, j int) bool { return c[order[i]].score > c[order[j]].score })
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
	return nms(boxes, order, thr, labels)
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
