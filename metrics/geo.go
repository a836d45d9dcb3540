package metrics

import (
	"fmt"
	"math"
	"sort"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/metrics/lsap"
)

// Points and polygons: DeepForest's evaluate_geometry (geometry_type
// "point" or "polygon") and, for points, the RecallPrecision(task="point")
// and MeanAbsoluteError of its point model's validation. Matching is per
// image (MatchGeoImage, run on the rank that owns the image) and gives a
// GeoRecord; the reduction (ReduceGeo) needs only the records, in image
// order, so ranks can gather records instead of geometries.

// GeoInput is what the point and polygon metrics see: the images in global
// order and, aligned with them, each image's predictions in file order.
type GeoInput struct {
	Kind   box.Kind // KindPoint or KindPolygon
	Images []box.GeoImage
	Preds  [][]box.Geo
	Labels box.LabelMap
	// LabelValues: as Input.LabelValues (numeric label columns).
	LabelValues []float64
}

// GeoOptions are the point and polygon settings.
type GeoOptions struct {
	Semantics Semantics
	// IoUThreshold: a polygon is matched when IoU > this.
	IoUThreshold float64
	// DistanceThreshold: a point is matched when its distance < this
	// (DeepForest's point.distance_threshold, 10 px).
	DistanceThreshold float64
}

// PairAreas gives the overlaps of one image's truth and predicted
// polygons, as GEOS computes them.
type PairAreas interface {
	// Overlap reports whether truth t and prediction p intersect (GEOS's
	// intersects predicate, which shapely's STRtree query applies) and, if
	// so, the areas of their intersection and of their union.
	Overlap(t, p int) (inter, union float64, ok bool, err error)
}

// AreasFunc opens the area oracle of one image's kept truth and its
// predictions; done frees it.
type AreasFunc func(truth, preds []box.Geo) (a PairAreas, done func(), err error)

// GeoMatch is one truth row of the match table: Match's fields (IoU for
// polygons) and, for points, the distance to the assigned prediction
// (+Inf when the truth is left unassigned, NaN when the image has no
// prediction at all, where DeepForest's row has no distance).
type GeoMatch struct {
	Match
	Distance float64
}

// GeoRecord is one image's outcome: what the reduction needs.
type GeoRecord struct {
	Image int
	// Counted: evaluate_geometry groups the image (it has truth left after
	// the empty markers are removed). Validation counts every image.
	Counted bool
	// EmptyFrame: validation's empty frame (no point left, or all at 0,0).
	EmptyFrame bool
	// NTruth and NPred: truth rows after this semantics' rules, and
	// predictions.
	NTruth, NPred int
	// Width and Height: the image's size as the matching rank read it (0:
	// unknown), so every rank can rebuild the truth it matched.
	Width, Height int
	Matches       []GeoMatch
}

// pointValidation reports whether opt asks for the point model's
// validation (the default semantics on points); polygons always follow
// evaluate_geometry, as DeepForest's polygon validation logs no recall.
func pointValidation(k box.Kind, opt GeoOptions) bool {
	return k == box.KindPoint && opt.Semantics == Validation
}

// MatchGeoImage matches image i; areas is needed for polygons only.
func MatchGeoImage(in GeoInput, i int, opt GeoOptions, areas AreasFunc) (GeoRecord, error) {
	im, preds := in.Images[i], in.Preds[i]
	rec := GeoRecord{Image: i, NPred: len(preds), Width: im.Width, Height: im.Height}
	truth := MatchedTruth(in, rec, opt)
	if pointValidation(in.Kind, opt) {
		preds = roundPoints(preds)
		rec.Counted = true
		rec.EmptyFrame = len(truth) == 0 || allZero(truth)
		rec.NTruth = len(truth)
		if rec.EmptyFrame || len(preds) == 0 {
			return rec, nil
		}
	} else {
		rec.NTruth = len(truth)
		rec.Counted = len(truth) > 0
		if !rec.Counted {
			return rec, nil
		}
	}
	var err error
	switch {
	case len(preds) == 0:
		rec.Matches = unassignedRows(i, truth, math.NaN())
	case in.Kind == box.KindPoint:
		rec.Matches, err = matchPoints(i, truth, preds, opt.DistanceThreshold)
	default:
		rec.Matches, err = matchPolygons(i, truth, preds, opt.IoUThreshold, areas)
	}
	if err != nil {
		return GeoRecord{}, fmt.Errorf("metrics: image %d (%s): %w", i, im.Path, err)
	}
	return rec, nil
}

// MatchedTruth is the truth of image rec.Image as its matching saw it (the
// rows results.csv's truth ids count): evaluate_geometry's kept rows, or
// the point validation's float32 points filtered to the image of rec's
// size.
func MatchedTruth(in GeoInput, rec GeoRecord, opt GeoOptions) []box.Geo {
	im := in.Images[rec.Image]
	if pointValidation(in.Kind, opt) {
		im.Width, im.Height = rec.Width, rec.Height
		return validationPoints(im)
	}
	return keptTruth(in.Kind, im.Truth)
}

// keptTruth is evaluate_geometry's ground truth: points at x = 0 and y = 0
// and empty polygons removed.
func keptTruth(k box.Kind, rows []box.Geo) []box.Geo {
	var kept []box.Geo
	for _, g := range rows {
		if k == box.KindPoint && g.Point.X == 0 && g.Point.Y == 0 {
			continue
		}
		if k == box.KindPolygon && (g.Shape == nil || g.Shape.Empty()) {
			continue
		}
		kept = append(kept, g)
	}
	return kept
}

// validationPoints is what DeepForest's PointDataset gives the metric: the
// points in float32; none when their float32 sum (numpy's pairwise order
// over x0,y0,x1,y1,...) is 0; then only those inside the image, 0 <= x <=
// width and 0 <= y <= height (filter_points), when the size is known.
func validationPoints(im box.GeoImage) []box.Geo {
	pts := roundPoints(im.Truth)
	flat := make([]float32, 0, 2*len(pts))
	for _, g := range pts {
		flat = append(flat, float32(g.Point.X), float32(g.Point.Y))
	}
	if pairwise(flat) == 0 {
		return nil
	}
	if im.Width <= 0 || im.Height <= 0 {
		return pts
	}
	w, h := float32(im.Width), float32(im.Height)
	kept := pts[:0]
	for _, g := range pts {
		x, y := float32(g.Point.X), float32(g.Point.Y)
		if x >= 0 && x <= w && y >= 0 && y <= h {
			kept = append(kept, g)
		}
	}
	return kept
}

// roundPoints rounds coordinates to float32, as the validation tensors
// hold them.
func roundPoints(rows []box.Geo) []box.Geo {
	out := make([]box.Geo, len(rows))
	for i, g := range rows {
		g.Point = box.Point{X: float64(float32(g.Point.X)), Y: float64(float32(g.Point.Y))}
		out[i] = g
	}
	return out
}

func allZero(rows []box.Geo) bool {
	for _, g := range rows {
		if g.Point.X != 0 || g.Point.Y != 0 {
			return false
		}
	}
	return true
}

// unassignedRows is one row per truth, no prediction assigned.
func unassignedRows(img int, truth []box.Geo, dist float64) []GeoMatch {
	rows := make([]GeoMatch, len(truth))
	for t, g := range truth {
		rows[t] = GeoMatch{Match: Match{Image: img, TruthID: t, PredID: -1, TrueLabel: g.Label, PredLabel: -1}, Distance: dist}
	}
	return rows
}

// PointDistance is shapely's Point.distance (GEOS): sqrt(dx² + dy²), each
// product rounded (no fused multiply-add).
func PointDistance(a, b box.Point) float64 {
	dx, dy := a.X-b.X, a.Y-b.Y
	return math.Sqrt(float64(dx*dx) + float64(dy*dy))
}

// matchPoints is DeepForest's match_points: scipy's dense assignment
// minimising the total distance over every truth × prediction pair, the
// distances computed when the solver reads them (O(n + m) memory).
func matchPoints(img int, truth, preds []box.Geo, thr float64) ([]GeoMatch, error) {
	dist := func(t, p int) float64 { return PointDistance(truth[t].Point, preds[p].Point) }
	col, err := lsap.AssignFunc(len(truth), len(preds), dist, false)
	if err != nil {
		return nil, err
	}
	rows := unassignedRows(img, truth, math.Inf(1))
	for t, p := range col {
		if p >= 0 {
			r := &rows[t]
			r.PredID, r.Score, r.PredLabel = p, preds[p].Score, preds[p].Label
			r.Distance = dist(t, p)
			r.Match.Match = r.Distance < thr
		}
	}
	return rows, nil
}

// matchPolygons is DeepForest's match_polygons: the assignment that
// maximises the total intersection area over every truth × prediction pair
// (0 where they do not intersect: the sparse solver assigns as scipy does
// on the dense matrix, zero pairs included, in O(n + m + overlapping
// pairs) memory), IoU = intersection / union of the pair assigned (0 when
// they do not intersect). Pairs whose envelopes do not touch are not asked
// of GEOS: they cannot intersect.
func matchPolygons(img int, truth, preds []box.Geo, thr float64, areas AreasFunc) ([]GeoMatch, error) {
	if areas == nil {
		return nil, fmt.Errorf("no polygon area backend (built with -tags nogeos?)")
	}
	a, done, err := areas(truth, preds)
	if err != nil {
		return nil, err
	}
	defer done()
	tb, pb := shapeBounds(truth), shapeBounds(preds)
	var entries []lsap.Entry
	for t := range truth {
		for p := range preds {
			if !envelopesMeet(tb[t], pb[p]) {
				continue
			}
			v, _, ok, err := a.Overlap(t, p)
			if err != nil {
				return nil, err
			}
			if ok && v > 0 {
				entries = append(entries, lsap.Entry{Row: t, Col: p, Value: v})
			}
		}
	}
	col, err := lsap.AssignSparseMax(len(truth), len(preds), entries)
	if err != nil {
		return nil, err
	}
	rows := unassignedRows(img, truth, math.NaN())
	for t, p := range col {
		if p < 0 {
			continue
		}
		r := &rows[t]
		r.PredID, r.Score, r.PredLabel = p, preds[p].Score, preds[p].Label
		if envelopesMeet(tb[t], pb[p]) {
			in, un, ok, err := a.Overlap(t, p)
			if err != nil {
				return nil, err
			}
			if ok && un > 0 {
				r.IoU = in / un
			}
		}
		r.Match.Match = r.IoU > thr
	}
	return rows, nil
}

func shapeBounds(rows []box.Geo) []box.Box {
	out := make([]box.Box, len(rows))
	for i, g := range rows {
		if g.Shape != nil {
			out[i] = g.Shape.Bounds()
		}
	}
	return out
}

// envelopesMeet: closed envelopes that share at least a point.
func envelopesMeet(a, b box.Box) bool {
	return a.Xmin <= b.Xmax && b.Xmin <= a.Xmax && a.Ymin <= b.Ymax && b.Ymin <= a.Ymax
}

// ReduceGeo turns the records of every image (recs[i] is image i's) into
// DeepForest's values: <kind>_precision, <kind>_recall and the class table
// (evaluate_geometry), or, for points under the validation semantics,
// val_mae, point_precision, point_recall and empty_frame_accuracy.
func ReduceGeo(in GeoInput, recs []GeoRecord, opt GeoOptions) []Value {
	if pointValidation(in.Kind, opt) {
		return pointValidationValues(recs)
	}
	prefix := in.Kind.String()
	anyPred, anyGT := false, false
	var order []int
	for i, r := range recs {
		anyPred = anyPred || len(in.Preds[i]) > 0
		if r.Counted {
			anyGT = true
			order = append(order, i)
		}
	}
	switch {
	case !anyPred:
		return []Value{{Key: prefix + "_precision", Null: true}, {Key: prefix + "_recall", V: 0}}
	case !anyGT:
		return []Value{{Key: prefix + "_precision", V: 0}, {Key: prefix + "_recall", Null: true}}
	}
	// ground_df.groupby("image_path") visits images in sorted path order.
	sort.SliceStable(order, func(a, b int) bool { return in.Images[order[a]].Path < in.Images[order[b]].Path })
	var recalls, precisions []float64
	var matched []Match
	for _, i := range order {
		r := recs[i]
		tp := 0
		for _, m := range r.Matches {
			if m.Match.Match {
				tp++
				matched = append(matched, m.Match)
			}
		}
		if r.NPred == 0 {
			recalls = append(recalls, 0)
			continue
		}
		recalls = append(recalls, float64(tp)/float64(r.NTruth))
		precisions = append(precisions, float64(tp)/float64(r.NPred))
	}
	vals := []Value{npMean(prefix+"_precision", precisions), npMean(prefix+"_recall", recalls)}
	if in.LabelValues != nil {
		return append(vals, numericClassValues(in.LabelValues, matched)...)
	}
	return append(vals, classValues(in.Labels, matched)...)
}

// pointValidationValues is the point model's validation: torchmetrics'
// MeanAbsoluteError of per-image counts (val_mae) and RecallPrecision's
// float32 sums of per-image rates, without a class table (DeepForest
// builds none for points; with more than one label its compute() fails,
// and canopy gives the same keys instead).
func pointValidationValues(recs []GeoRecord) []Value {
	var absErr, recall, precision float32
	var withPred, withGT, empty, correctEmpty int
	for _, r := range recs {
		absErr += float32(math.Abs(float64(r.NPred - r.NTruth)))
		if r.EmptyFrame {
			empty++
			if r.NPred == 0 {
				correctEmpty++
			} else {
				withPred++
			}
			continue
		}
		withGT++
		if r.NPred == 0 {
			continue
		}
		withPred++
		tp := 0
		for _, m := range r.Matches {
			if m.Match.Match {
				tp++
			}
		}
		recall = float32(recall + float32(float64(tp)/float64(r.NTruth)))
		precision = float32(precision + float32(float64(tp)/float64(r.NPred)))
	}
	vals := []Value{{Key: "val_mae", Null: true}}
	if len(recs) > 0 {
		vals[0] = f32Value("val_mae", absErr/float32(len(recs)))
	}
	rate := func(key string, sum float32, n int) Value {
		if n == 0 {
			return Value{Key: key, Null: true}
		}
		return f32Value(key, sum/float32(n))
	}
	vals = append(vals, rate("point_precision", precision, withPred), rate("point_recall", recall, withGT))
	if empty > 0 {
		vals = append(vals, f32Value("empty_frame_accuracy", float32(correctEmpty)/float32(empty)))
	}
	return vals
}
