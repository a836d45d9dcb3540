package metrics

import (
	"fmt"
	"sort"

	"github.com/canopy-hpc/canopy/box"
)

// recThresholds is torch.linspace(0, 1, 101) in float32 by torch's scalar
// formula (start + step·i below the halfway point, end − step·(n−1−i) from
// it), widened to float64.
func recThresholds() [101]float64 {
	var r [101]float64
	step := float32(1) / float32(100)
	for i := range r {
		if i < 101/2 {
			r[i] = float64(float32(0 + step*float32(i)))
		} else {
			r[i] = float64(float32(1 - step*float32(100-i)))
		}
	}
	return r
}

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
// in float64 in a fixed order and rounds once to float32, which agrees with
// torch to within an ulp or two of float32 (tested against the peer).
// DeepForest computes the metric only when some image passes; the keys are
// then absent otherwise.
func IntersectionOverUnion(in Input, thr float64) []Value {
	images := validationTruth(in.Images)
	t32 := float32(thr)
	var sum float64
	var n int
	clsSum := map[int32]float64{}
	clsN := map[int32]int{}
	seen := map[int32]bool{}
	passed := 0
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
			for _, t := range im.Truth {
				n++
				clsN[t.Label]++
			}
			continue
		}
		for _, d := range dets {
			for _, t := range im.Truth {
				if d.Label != t.Label {
					continue
				}
				v := boxIoU32(d.Box, t.Box)
				if v < t32 {
					continue
				}
				sum += float64(v)
				n++
				clsSum[t.Label] += float64(v)
				clsN[t.Label]++
			}
		}
	}
	if passed == 0 {
		return nil
	}
	mean := func(s float64, c int) float64 {
		v := float32(s / float64(c))
		if c == 0 || v != v { // torchmetrics: no valid entry, or NaN, gives 0
			return 0
		}
		return float64(v)
	}
	vals := []Value{{Key: "iou", V: mean(sum, n)}}
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
