package tile

import (
	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/infer/retinanet"
)

// AcrossClassNMS is DeepForest 2.1.0's predict.across_class_nms as
// predict_image applies it to one image's detections (dets, in the
// detector's order: its per-class NMS, best first, top detections_per_img):
// when they carry more than one label, one class-agnostic NMS at iou (the
// config's nms_thresh) over the float32 boxes and scores (retinanet.NMS:
// stable descending sort of the scores, a later box suppressed when its
// float32 IoU with a kept one is greater than iou). The kept rows come in
// NMS order with their label and score, and their boxes cast to integers
// after the NMS (`.type(torch.int)`: each float32 coordinate truncated
// toward zero to an int32; DeepForest's frame then holds them as float64,
// so a row reads 28.0, not 28). Detections of one label, or none, are
// returned as they are: float boxes, as predict_image returns them.
func AcrossClassNMS(dets []box.Detection, iou float64) []box.Detection {
	if !severalLabels(dets) {
		return dets
	}
	boxes, scores := f32Rows(dets)
	keep := retinanet.NMS(boxes, scores, iou)
	out := make([]box.Detection, len(keep))
	for k, i := range keep {
		b := boxes[i]
		out[k] = box.Detection{Label: dets[i].Label, Score: float64(scores[i]), Box: box.Box{
			Xmin: toInt32(b[0]), Ymin: toInt32(b[1]), Xmax: toInt32(b[2]), Ymax: toInt32(b[3])}}
	}
	return out
}

// severalLabels is `df.label.nunique() > 1`.
func severalLabels(dets []box.Detection) bool {
	for _, d := range dets[min(1, len(dets)):] {
		if d.Label != dets[0].Label {
			return true
		}
	}
	return false
}

// toInt32 is a float32 cast to torch.int: truncated toward zero. Detector
// boxes are clipped to the resized image and scaled back, so they are
// finite and far inside int32's range.
func toInt32(v float32) float64 { return float64(int32(v)) }
