package tile

import (
	"math"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/infer/retinanet"
)

// DefaultIoU is predict_tile's iou_threshold (DeepForest's CLI passes
// config.nms_thresh, 0.05, instead).
const DefaultIoU = 0.15

// Shift is predict.translate_predictions for one window's detection: the
// box moved by the window's origin (in float64, as shapely's translate
// adds the offset), then each coordinate truncated toward zero, as
// bounds.astype(int) does.
func Shift(w Window, d box.Detection) box.Detection {
	dx, dy := float64(w.X), float64(w.Y)
	d.Box = box.Box{
		Xmin: math.Trunc(d.Box.Xmin + dx), Ymin: math.Trunc(d.Box.Ymin + dy),
		Xmax: math.Trunc(d.Box.Xmax + dx), Ymax: math.Trunc(d.Box.Ymax + dy),
	}
	return d
}

// Merge is predict_tile's mosaic of one raster's windows: dets[k] are the
// detections of wins[k] in window coordinates, in the detector's order.
// The rows are taken in canonical order (window index, then detection
// index), shifted and truncated (Shift), and reduced by one class-agnostic
// NMS (retinanet.NMS, float32 boxes and scores, labels ignored) at iou;
// 0 or 1 rows are returned as they are, as predict.reduce_boxes does. The
// result is in NMS order with each row's original score and label.
func Merge(wins []Window, dets [][]box.Detection, iou float64) []box.Detection {
	var rows []box.Detection
	for k, ds := range dets {
		for _, d := range ds {
			rows = append(rows, Shift(wins[k], d))
		}
	}
	if len(rows) <= 1 {
		return rows
	}
	boxes, scores := f32Rows(rows)
	keep := retinanet.NMSSparse(boxes, scores, iou)
	out := make([]box.Detection, len(keep))
	for i, k := range keep {
		out[i] = rows[k]
	}
	return out
}

// f32Rows are the rows' boxes and scores as float32, as DeepForest's frames
// hand them to torchvision's nms.
func f32Rows(rows []box.Detection) ([][4]float32, []float32) {
	boxes := make([][4]float32, len(rows))
	scores := make([]float32, len(rows))
	for i, r := range rows {
		boxes[i] = [4]float32{float32(r.Box.Xmin), float32(r.Box.Ymin), float32(r.Box.Xmax), float32(r.Box.Ymax)}
		scores[i] = float32(r.Score)
	}
	return boxes, scores
}
