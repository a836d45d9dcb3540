package retinanet

import "sort"

// NMS is torchvision.ops.nms on the CPU, class-agnostic: the boxes in a
// stable descending sort of their scores, each kept box suppressing every
// later one whose float32 IoU with it is greater than thr. It returns the
// kept indices in that order. DeepForest's predict_tile merges the windows
// of a raster with it (predict.reduce_boxes, which skips it for 0 or 1
// rows; NMS itself keeps a lone box).
func NMS(boxes [][4]float32, scores []float32, thr float64) []int {
	order := make([]int, len(boxes))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(i, j int) bool { return scores[order[i]] > scores[order[j]] })
	return nms(boxes, order, thr, nil)
}

// NMSSparse returns NMS's result, visiting for each kept box only the boxes
// whose x-range can overlap it (a sort by xmin and the widest box bound the
// range). For a threshold ≥ 0 a pair without a positive intersection has
// IoU 0 (or NaN, for two empty boxes) and never suppresses, so skipping it
// changes nothing; the IoU of the pairs visited is NMS's float32 value.
// A raster's merge has about 10^5 boxes, which NMS's all-pairs loop takes
// minutes over. A negative or NaN threshold, a NaN coordinate or an
// inverted box falls back to NMS.
func NMSSparse(boxes [][4]float32, scores []float32, thr float64) []int {
	n := len(boxes)
	maxW := 0.0
	for _, b := range boxes {
		w, h := float64(b[2])-float64(b[0]), float64(b[3])-float64(b[1])
		if !(w >= 0 && h >= 0) {
			return NMS(boxes, scores, thr)
		}
		maxW = max(maxW, w)
	}
	if !(thr >= 0) || n < 2 {
		return NMS(boxes, scores, thr)
	}
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(i, j int) bool { return scores[order[i]] > scores[order[j]] })
	rank := make([]int, n)
	for k, i := range order {
		rank[i] = k
	}
	byX := make([]int, n)
	for i := range byX {
		byX[i] = i
	}
	sort.SliceStable(byX, func(i, j int) bool { return boxes[byX[i]][0] < boxes[byX[j]][0] })
	area := make([]float32, n)
	for i, x := range boxes {
		area[i] = (x[2] - x[0]) * (x[3] - x[1])
	}
	dead := make([]bool, n)
	var keep []int
	for _, i := range order {
		if dead[i] {
			continue
		}
		keep = append(keep, i)
		bi := boxes[i]
		from := float64(bi[0]) - maxW - 1 // a box overlapping bi starts after bi's xmin minus its width
		lo := sort.Search(n, func(k int) bool { return float64(boxes[byX[k]][0]) >= from })
		for _, j := range byX[lo:] {
			bj := boxes[j]
			if bj[0] >= bi[2] {
				break // starts at or after bi's right edge: no positive overlap, nor for the rest
			}
			if dead[j] || rank[j] <= rank[i] {
				continue
			}
			w := max(0, min(bi[2], bj[2])-max(bi[0], bj[0]))
			h := max(0, min(bi[3], bj[3])-max(bi[1], bj[1]))
			inter := w * h
			if iou := inter / (area[i] + area[j] - inter); float64(iou) > thr {
				dead[j] = true
			}
		}
	}
	return keep
}
