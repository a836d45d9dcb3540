package output

import (
	"encoding/json"
	"io"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/internal/dataset"
	"github.com/canopy-hpc/canopy/internal/outdir"
)

// The --coco-out files: the truth as a COCO dataset and the predictions in
// COCO's results format, for pycocotools (tools/coco/verify_coco_out.py).
const (
	COCOTruthFile = "coco_truth.json"
	COCOPredFile  = "coco_predictions.json"
)

// cocoResult is one detection in COCO's results format.
type cocoResult struct {
	ImageID    int64      `json:"image_id"`
	CategoryID int64      `json:"category_id"`
	BBox       [4]float64 `json:"bbox"`
	Score      float64    `json:"score"`
}

// StageCOCO stages both files in the output folder out (the caller
// publishes them): image ids are 1.. in the truth's order, annotation ids
// 1.. (pycocotools counts id 0 as unmatched), category ids the label
// map's ids; bbox is [xmin, ymin, xmax-xmin, ymax-ymin]. On an error it
// returns what it staged.
func StageCOCO(out string, images []box.Image, dets [][]box.Detection, labels box.LabelMap) ([]outdir.Staged, error) {
	var ds dataset.COCODataset
	for id, n := range labels.Names() {
		ds.Categories = append(ds.Categories, dataset.COCOCategory{ID: int64(id), Name: n})
	}
	xywh := func(b box.Box) [4]float64 { return [4]float64{b.Xmin, b.Ymin, b.Xmax - b.Xmin, b.Ymax - b.Ymin} }
	ds.Images = make([]dataset.COCOImage, 0, len(images))
	ds.Annotations = []dataset.COCOAnnotation{}
	res := []cocoResult{}
	for i, im := range images {
		imgID := int64(i + 1)
		ds.Images = append(ds.Images, dataset.COCOImage{ID: imgID, FileName: im.Path})
		for _, t := range im.Truth {
			ds.Annotations = append(ds.Annotations, dataset.COCOAnnotation{ID: int64(len(ds.Annotations) + 1), ImageID: imgID,
				CategoryID: int64(t.Label), BBox: xywh(t.Box), Area: t.Box.Area(), IsCrowd: crowd(t)})
		}
		for _, d := range dets[i] {
			res = append(res, cocoResult{ImageID: imgID, CategoryID: int64(d.Label), BBox: xywh(d.Box), Score: d.Score})
		}
	}
	t, err := outdir.Stage(out, COCOTruthFile, func(w io.Writer) error { return json.NewEncoder(w).Encode(ds) })
	if err != nil {
		return nil, err
	}
	p, err := outdir.Stage(out, COCOPredFile, func(w io.Writer) error { return json.NewEncoder(w).Encode(res) })
	if err != nil {
		return []outdir.Staged{t}, err
	}
	return []outdir.Staged{t, p}, nil
}

func crowd(t box.Truth) int {
	if t.Crowd {
		return 1
	}
	return 0
}
