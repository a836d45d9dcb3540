package metrics

import (
	"fmt"
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
	var all []float32             // every valid entry, image by image (torch.cat order)
	clsSum := map[int32]float32{} // per class: float32 sum of per-image sums
	clsN := map[int32]int{}
	seen := map[int32]bool{}
	passed := 0
	var col []float32
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
			for _, t := range im.Truth {
				all = append(all, 0)
				clsN[t.Label]++
			}
			continue
		}
		// The matrix is preds × gt, row-major: valid entries in that order.
		for _, d := range dets {
			for _, t := range im.Truth {
				if d.Label != t.Label {
					continue
				}
				if v := boxIoU32(d.Box, t.Box); !(v < t32) {
					all = append(all, v)
				}
			}
		}
		// Per class c: mat[:, gt == c], the valid entries summed per image.
		done := map[int32]bool{}
		for _, t := range im.Truth {
			c := t.Label
			if done[c] {
				continue
			}
			done[c] = true
			col = col[:0]
			for _, d := range dets {
				for _, g := range im.Truth {
					if g.Label != c || d.Label != c {
						continue
					}
					if v := boxIoU32(d.Box, g.Box); !(v < t32) {
						col = append(col, v)
					}
				}
			}
			clsSum[c] = float32(clsSum[c] + torchSum32(col))
			clsN[c] += len(col)
		}
	}
	if passed == 0 {
		return nil
	}
	mean := func(s float32, c int) float64 {
		v := float32(s / float32(c))
		if c == 0 || v != v { // torchmetrics: no valid entry, or NaN, gives 0
			return 0
		}
		return float64(v)
	}
	vals := []Value{{Key: "iou", V: mean(torchSum32(all), len(all))}}
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
