// Package box is canopy's shared vocabulary: boxes, ground truth,
// detections and the label map. It is a leaf: it imports nothing of
// canopy's, and infer, metrics and jobs all speak it.
package box

import (
	"fmt"
	"sort"
)

// Box is an axis-aligned box in pixel coordinates, xmin <= xmax, ymin <= ymax.
type Box struct {
	Xmin, Ymin, Xmax, Ymax float64
}

// Area is (xmax-xmin)·(ymax-ymin).
func (b Box) Area() float64 { return (b.Xmax - b.Xmin) * (b.Ymax - b.Ymin) }

// IsZero reports the 0,0,0,0 box DeepForest uses to mark an empty frame.
func (b Box) IsZero() bool { return b.Xmin == 0 && b.Ymin == 0 && b.Xmax == 0 && b.Ymax == 0 }

// Truth is one ground-truth box with its label id. Crowd marks a COCO
// crowd region (iscrowd 1): the COCO family ignores it as pycocotools
// does; DeepForest's recall/precision and torchmetrics' IoU, which have no
// such notion, count it as an ordinary box.
type Truth struct {
	Box   Box
	Label int32
	Crowd bool
}

// Detection is one predicted box with its label id and score. Replayed CSV
// values keep float64; model outputs are float32 widened to float64.
type Detection struct {
	Box   Box
	Label int32
	Score float64
}

// Image is one validation image: its path as written in the annotation CSV,
// its ground truth (zero-box rows removed) and whether it is an empty frame
// (every row was 0,0,0,0).
type Image struct {
	Path  string
	Truth []Truth
	Empty bool
}

// LabelMap maps label strings to dense ids 0..n-1 and back.
type LabelMap struct {
	names []string
	ids   map[string]int32
}

// NewLabelMap builds a map from names in id order (names[i] has id i).
func NewLabelMap(names []string) (LabelMap, error) {
	m := LabelMap{names: append([]string(nil), names...), ids: make(map[string]int32, len(names))}
	for i, n := range names {
		if _, dup := m.ids[n]; dup {
			return LabelMap{}, fmt.Errorf("box: label %q listed twice", n)
		}
		m.ids[n] = int32(i)
	}
	return m, nil
}

// SortedLabelMap gives ids 0.. to the sorted unique names.
func SortedLabelMap(names []string) LabelMap {
	set := make(map[string]bool, len(names))
	var u []string
	for _, n := range names {
		if !set[n] {
			set[n] = true
			u = append(u, n)
		}
	}
	sort.Strings(u)
	m, _ := NewLabelMap(u) // unique by construction
	return m
}

// Len is the number of labels.
func (m LabelMap) Len() int { return len(m.names) }

// ID returns the id of name.
func (m LabelMap) ID(name string) (int32, bool) {
	id, ok := m.ids[name]
	return id, ok
}

// Name returns the label string of id, or the decimal id when unknown.
func (m LabelMap) Name(id int32) string {
	if id >= 0 && int(id) < len(m.names) {
		return m.names[id]
	}
	return fmt.Sprint(id)
}

// Names returns the labels in id order.
func (m LabelMap) Names() []string { return append([]string(nil), m.names...) }

// Loss is one image's validation losses as torchvision's RetinaNet computes
// them in train mode (DeepForest's validation_step): the sigmoid focal loss
// and the L1 box regression loss, each divided by max(1, foreground
// anchors), in float32 as torch returns them.
type Loss struct {
	Classification, BoxRegression float32
}
