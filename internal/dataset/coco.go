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
// (.json: images, annotations, categories), a Pascal VOC annotation (.xml),
// or a DeepForest CSV (also what ReadVOCFolder makes of a folder).
func ParseTruthFile(name string, data []byte) (*Truth, error) {
	if strings.EqualFold(filepath.Ext(name), ".json") {
		return ParseCOCOTruth(name, data)
	}
	if strings.EqualFold(filepath.Ext(name), ".xml") {
		rows, err := ParseVOC(name, data)
		if err != nil {
			return nil, err
		}
		return truthFromRows(name, rows)
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
	bounds, err := segmentationBounds(name, data, len(d.Annotations))
	if err != nil {
		return nil, err
	}
	byImage := map[int64][]int{}
	anns := make([]COCOAnnotation, len(d.Annotations))
	for i, in := range d.Annotations {
		bd, poly := bounds[i]
		a, err := in.annotation(poly, bd)
		if err != nil {
			return nil, fmt.Errorf("dataset: %s: annotation %d: %w: %w", name, in.ID, err, ErrInput)
		}
		anns[i] = a
		if _, ok := cats[a.CategoryID]; !ok {
			return nil, fmt.Errorf("dataset: %s: annotation %d: unknown category_id %d: %w", name, a.ID, a.CategoryID, ErrInput)
		}
		byImage[a.ImageID] = append(byImage[a.ImageID], i)
	}
	seen := map[int64]bool{}
	var b bytes.Buffer
	b.WriteString("image_path,xmin,ymin,xmax,ymax,label,iscrowd\n")
	f := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	for _, im := range d.Images {
		if im.FileName == "" || seen[im.ID] {
			return nil, fmt.Errorf("dataset: %s: image %d: empty file_name or repeated id: %w", name, im.ID, ErrInput)
		}
		seen[im.ID] = true
		p := csvQuote(im.FileName)
		idx := byImage[im.ID]
		if len(idx) == 0 {
			fmt.Fprintf(&b, "%s,0,0,0,0,%s,0\n", p, csvQuote(emptyLabel))
		}
		for _, i := range idx {
			a := anns[i]
			x, y, w, h := a.BBox[0], a.BBox[1], a.BBox[2], a.BBox[3]
			if bd, ok := bounds[i]; ok { // no bbox: the polygons' bounds
				fmt.Fprintf(&b, "%s,%s,%s,%s,%s,%s,%d\n", p, f(bd[0]), f(bd[1]), f(bd[2]), f(bd[3]), csvQuote(cats[a.CategoryID]), a.IsCrowd)
				continue
			}
			fmt.Fprintf(&b, "%s,%s,%s,%s,%s,%s,%d\n", p, f(x), f(y), f(x+w), f(y+h), csvQuote(cats[a.CategoryID]), a.IsCrowd)
		}
	}
	for id := range byImage {
		if !seen[id] {
			return nil, fmt.Errorf("dataset: %s: annotations of image_id %d, which is not in images: %w", name, id, ErrInput)
		}
	}
	t, err := ParseTruth(name, b.Bytes())
	if err != nil {
		return nil, err
	}
	t.NumericLabels = false // read_coco keeps category names as text
	return t, nil
}

// cocoInput is a COCO dataset as read: an annotation's bbox is checked
// (four numbers, finite, its corners and area finite and within float32's
// range) before it becomes a box, so a short one is an error naming the
// annotation, never a zero-filled box. One without a bbox takes its
// polygon segmentation's bounds (segmentationBounds), checked alike.
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
// numbers, and x+width, y+height and width×height finite. poly: the
// annotation has no bbox and bd, its polygons' bounds (xyxy), stands in.
func (a cocoInputAnnotation) annotation(poly bool, bd [4]float64) (COCOAnnotation, error) {
	out := COCOAnnotation{ID: a.ID, ImageID: a.ImageID, CategoryID: a.CategoryID, Area: a.Area, IsCrowd: a.IsCrowd}
	if a.IsCrowd != 0 && a.IsCrowd != 1 {
		return out, fmt.Errorf("iscrowd %d, want 0 or 1", a.IsCrowd)
	}
	if poly {
		if why := outOfRange(box.Box{Xmin: bd[0], Ymin: bd[1], Xmax: bd[2], Ymax: bd[3]}); why != "" {
			return out, fmt.Errorf("segmentation bounds %v: %s", bd, why)
		}
		return out, nil
	}
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
	return out, nil
}

func csvQuote(s string) string {
	if strings.ContainsAny(s, ",\"\r\n") {
		return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
	}
	return s
}

// segmentationBounds finds the annotations without a bbox (absent or
// null) and gives each the bounds of its polygon segmentation, as
// DeepForest's read_coco and BoxDataset do (polygons of at least 3 points;
// all of them, as their union's bounds). One with neither is an error.
func segmentationBounds(name string, data []byte, n int) (map[int][4]float64, error) {
	var raw struct {
		Annotations []struct {
			ID   json.RawMessage `json:"id"`
			BBox json.RawMessage `json:"bbox"`
			Seg  json.RawMessage `json:"segmentation"`
		} `json:"annotations"`
	}
	if err := json.Unmarshal(data, &raw); err != nil || len(raw.Annotations) != n {
		return nil, fmt.Errorf("dataset: %s: not a COCO dataset: %w", name, ErrInput)
	}
	out := map[int][4]float64{}
	for i, a := range raw.Annotations {
		if len(a.BBox) > 0 && string(a.BBox) != "null" {
			continue
		}
		var polys [][]float64
		if err := json.Unmarshal(a.Seg, &polys); err != nil || len(a.Seg) == 0 {
			return nil, fmt.Errorf("dataset: %s: annotation %s has no bbox and no polygon segmentation (a list of [x1, y1, x2, y2, ...]): %w", name, a.ID, ErrInput)
		}
		bd := [4]float64{math.Inf(1), math.Inf(1), math.Inf(-1), math.Inf(-1)}
		used := 0
		for _, p := range polys {
			if len(p)%2 != 0 {
				return nil, fmt.Errorf("dataset: %s: annotation %s: a segmentation polygon of %d numbers, want x, y pairs: %w", name, a.ID, len(p), ErrInput)
			}
			if len(p) < 6 {
				continue // DeepForest skips polygons of fewer than 3 points
			}
			for k := 0; k < len(p); k += 2 {
				bd[0], bd[2] = math.Min(bd[0], p[k]), math.Max(bd[2], p[k])
				bd[1], bd[3] = math.Min(bd[1], p[k+1]), math.Max(bd[3], p[k+1])
			}
			used++
		}
		if used == 0 {
			return nil, fmt.Errorf("dataset: %s: annotation %s has no bbox and no polygon of at least 3 points: %w", name, a.ID, ErrInput)
		}
		out[i] = bd
	}
	return out, nil
}
