package metrics

import (
	"fmt"
	"strings"
)

// Family selects a group of metrics.
type Family uint8

// The metric families; All is the default.
const (
	Recall  Family = 1 << iota // DeepForest box_recall, box_precision, empty_frame_accuracy, per-class
	COCOmAP                    // torchmetrics MeanAveragePrecision (faster_coco_eval backend)
	IoUMean                    // torchmetrics IntersectionOverUnion
	All     = Recall | COCOmAP | IoUMean
)

// ParseFamilies parses the --metrics flag: a comma-separated subset of
// recall, coco, iou (or all).
func ParseFamilies(s string) (Family, error) {
	var f Family
	for _, p := range strings.Split(s, ",") {
		switch strings.TrimSpace(p) {
		case "recall":
			f |= Recall
		case "coco":
			f |= COCOmAP
		case "iou":
			f |= IoUMean
		case "all":
			f |= All
		case "":
		default:
			return 0, fmt.Errorf("metrics: unknown family %q (want recall, coco, iou or all)", p)
		}
	}
	if f == 0 {
		return 0, fmt.Errorf("metrics: no metric family selected in %q", s)
	}
	return f, nil
}

// Compute runs the selected families in a fixed order (recall, iou, coco)
// and returns their values and DeepForest's match table: MatchImages over
// every image, then Reduce.
func Compute(in Input, opt Options, fam Family, classMetrics bool) (Result, error) {
	idx := make([]int, len(in.Images))
	for i := range idx {
		idx[i] = i
	}
	recs, err := MatchImages(in, idx, MatchOptions{Semantics: opt.Semantics, MinIoU: opt.IoUThreshold}, fam)
	if err != nil {
		return Result{}, err
	}
	return Reduce(Frame{Images: in.Images, Labels: in.Labels, LabelValues: in.LabelValues}, recs, opt, fam, classMetrics)
}
