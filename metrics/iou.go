package metrics

import "github.com/canopy-hpc/canopy/box"

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
	res, err := Compute(in, Options{IoUThreshold: thr}, IoUMean, false)
	if err != nil {
		return nil // only a detection list per image is checked, and DeepForest checks it first
	}
	return res.Values
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
