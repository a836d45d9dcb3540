package dataset

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/canopy-hpc/canopy/box"
)

// ParseTruthFile parses the truth file by its extension: a COCO dataset
// (.json: images, annotations, categories) or a DeepForest CSV.
func ParseTruthFile(name string, data []byte) (*Truth, error) {
	if strings.EqualFold(filepath.Ext(name), ".json") {
		return ParseCOCOTruth(name, data)
	}
	return ParseTruth(name, data)
}

// COCODataset is the part of a COCO dataset file canopy reads and writes.
type COCODataset struct {
	Images      []COCOImage      `json:"images"`
	Annotations []COCOAnnotation `json:"annotations"`
	Categories  []COCOCategory   `json:"categories"`
}

// COCOImage is one entry of "images".
type COCOImage struct {
	ID       int64  `json:"id"`
	FileName string `json:"file_name"`
}

// COCOAnnotation is one truth box: bbox is [x, y, width, height].
type COCOAnnotation struct {
	ID         int64      `json:"id"`
	ImageID    int64      `json:"image_id"`
	CategoryID int64      `json:"category_id"`
	BBox       [4]float64 `json:"bbox"`
	Area       float64    `json:"area"`
	IsCrowd    int        `json:"iscrowd"`
}

// COCOCategory is one entry of "categories".
type COCOCategory struct {
	ID   int64  `json:"id"`
	Name string `json:"name"`
}

// ParseCOCOTruth reads a COCO dataset as truth: each image's file_name is
// its image_path, each annotation the box [x, y, x+width, y+height] with
// its category's name as label; an image without annotations is an empty
// frame. Images keep the file's order, boxes the annotations' order. It
// goes through the CSV reader, so every rule of ParseTruth applies.
func ParseCOCOTruth(name string, data []byte) (*Truth, error) {
	var d cocoInput
	if err := json.Unmarshal(data, &d); err != nil {
		return nil, fmt.Errorf("dataset: %s: not a COCO dataset: %v: %w", name, err, ErrInput)
	}
	cats := map[int64]string{}
	for _, c := range d.Categories {
		if c.Name == "" {
			return nil, fmt.Errorf("dataset: %s: category %d has no name: %w", name, c.ID, ErrInput)
		}
		cats[c.ID] = c.Name
	}
	ids := make([]int64, 0, len(cats))
	for id := range cats {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(a, b int) bool { return ids[a] < ids[b] })
	emptyLabel := "Tree"
	if len(ids) > 0 {
		emptyLabel = cats[ids[0]]
	}
	byImage := map[int64][]COCOAnnotation{}
	for _, in := range d.Annotations {
		a, err := in.annotation()
		if err != nil {
			return nil, fmt.Errorf("dataset: %s: annotation %d: %w: %w", name, in.ID, err, ErrInput)
		}
		if _, ok := cats[a.CategoryID]; !ok {
			return nil, fmt.Errorf("dataset: %s: annotation %d: unknown category_id %d: %w", name, a.ID, a.CategoryID, ErrInput)
		}
		byImage[a.ImageID] = append(byImage[a.ImageID], a)
	}
	seen := map[int64]bool{}
	var b bytes.Buffer
	b.WriteString("image_path,xmin,ymin,xmax,ymax,label\n")
	f := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	for _, im := range d.Images {
		if im.FileName == "" || seen[im.ID] {
			return nil, fmt.Errorf("dataset: %s: image %d: empty file_name or repeated id: %w", name, im.ID, ErrInput)
		}
		seen[im.ID] = true
		p := csvQuote(im.FileName)
		anns := byImage[im.ID]
		if len(anns) == 0 {
			fmt.Fprintf(&b, "%s,0,0,0,0,%s\n", p, csvQuote(emptyLabel))
		}
		for _, a := range anns {
			x, y, w, h := a.BBox[0], a.BBox[1], a.BBox[2], a.BBox[3]
			fmt.Fprintf(&b, "%s,%s,%s,%s,%s,%s\n", p, f(x), f(y), f(x+w), f(y+h), csvQuote(cats[a.CategoryID]))
		}
	}
	for id := range byImage {
		if !seen[id] {
			return nil, fmt.Errorf("dataset: %s: annotations of image_id %d, which is not in images: %w", name, id, ErrInput)
		}
	}
	return ParseTruth(name, b.Bytes())
}

// cocoInput is a COCO dataset as read: an annotation's bbox is checked
// (present, four numbers, finite, its corners and area finite) before it
// becomes a box, so a missing or short one is an error naming the
// annotation, never an empty frame.
type cocoInput struct {
	Images      []COCOImage           `json:"images"`
	Annotations []cocoInputAnnotation `json:"annotations"`
	Categories  []COCOCategory        `json:"categories"`
}

type cocoInputAnnotation struct {
	ID         int64     `json:"id"`
	ImageID    int64     `json:"image_id"`
	CategoryID int64     `json:"category_id"`
	BBox       []float64 `json:"bbox"`
	Area       float64   `json:"area"`
	IsCrowd    int       `json:"iscrowd"`
}

// annotation checks the bbox under the CSV's rules (finite numbers,
// xmax ≥ xmin, ymax ≥ ymin) plus what COCO's form adds: exactly four
// numbers, and x+width, y+height and width×height finite.
func (a cocoInputAnnotation) annotation() (COCOAnnotation, error) {
	out := COCOAnnotation{ID: a.ID, ImageID: a.ImageID, CategoryID: a.CategoryID, Area: a.Area, IsCrowd: a.IsCrowd}
	switch {
	case a.BBox == nil:
		return out, fmt.Errorf("no bbox")
	case len(a.BBox) != 4:
		return out, fmt.Errorf("bbox %v has %d numbers, want 4 (x, y, width, height)", a.BBox, len(a.BBox))
	}
	copy(out.BBox[:], a.BBox)
	x, y, w, h := a.BBox[0], a.BBox[1], a.BBox[2], a.BBox[3]
	for _, v := range []float64{x, y, w, h, x + w, y + h} {
		if math.IsInf(v, 0) || math.IsNaN(v) {
			return out, fmt.Errorf("bbox %v: its corners are not finite numbers", a.BBox)
		}
	}
	if w < 0 || h < 0 {
		return out, fmt.Errorf("bbox %v: a negative width or height", a.BBox)
	}
	if why := outOfRange(box.Box{Xmin: x, Ymin: y, Xmax: x + w, Ymax: y + h}); why != "" {
		return out, fmt.Errorf("bbox %v: %s", a.BBox, why)
	}
	if a.IsCrowd != 0 && a.IsCrowd != 1 {
		return out, fmt.Errorf("iscrowd %d, want 0 or 1", a.IsCrowd)
	}
	return out, nil
}

func csvQuote(s string) string {
	if strings.ContainsAny(s, ",\"\r\n") {
		return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
	}
	return s
}
