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
