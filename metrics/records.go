package metrics

import (
	"cmp"
	"fmt"
	"runtime"
	"slices"
	"sync"

	"github.com/canopy-hpc/canopy/box"
)

// The metrics are computed in two exported steps:
//
//   - Match (MatchImage, MatchImages) turns one image's truth and
//     detections into an ImageRecord: DeepForest's assignment, the
//     torchmetrics IoU family's candidate entries and COCOeval's
//     per-detection match flags. It looks at that image only, so each rank
//     can match its own share of the images.
//   - Reduce turns the records of every image, in global image order, into
//     the metric values. It never looks at a box, and it adds in the same
//     order whatever rank matched which image, so the values are the same
//     bits on every rank and for every rank count.
//
// Compute is MatchImages over every image followed by Reduce.

// ImageRecord is what matching one image hands the reduction. Only the
// families asked for are filled.
type ImageRecord struct {
	Image int // global image index
	DF    DFRecord
	IoU   IoURecord
	COCO  []COCOCat
}

// DFRecord is one image's DeepForest assignment.
type DFRecord struct {
	// Truth is the number of truth boxes the semantics counts (0: an empty
	// frame or no truth); Preds the number of detections.
	Truth, Preds int
	// Rows holds one row per counted truth box, in truth order, with the
	// assigned detection (PredID -1 when none). Match is false: the
	// reduction sets it from the threshold.
	Rows []Match
}

// IoURecord is one image's share of torchmetrics' IntersectionOverUnion,
// in memory linear in the image's boxes and overlapping pairs: zero
// entries are counted, never listed.
type IoURecord struct {
	// Passed: the image has truth after the dataset filter (it counts).
	Passed bool
	// NoDets: the image has no detections; its Pairs zeros (one per truth
	// box, Counts by label) count at every threshold.
	NoDets bool
	// Every: matched for a lowest threshold <= 0, where every same-label
	// entry of the matrix is valid, zeros included: Pairs is their number
	// and Counts, per label, the size of the label's column mat[:, gt == c];
	// Entries hold the non-zero ones with their positions.
	Every bool
	Pairs int64
	// Counts are per label (increasing), with NoDets or Every.
	Counts []IoUCount
	// Entries are the non-zero entries of the preds × truth float32
	// box_iou matrix between boxes of one label that are valid at the
	// lowest threshold matched for, in row-major order, with their label.
	Entries []IoUEntry
	// Labels are the sorted distinct labels of the image's truth and
	// detections (the classes the family reports).
	Labels []int32
}

// IoUEntry is one valid non-zero box_iou entry and its (common) label;
// with IoURecord.Every also its position among the image's valid entries
// (Pos) and in its label's column (ClassPos).
type IoUEntry struct {
	V             float32
	Label         int32
	Pos, ClassPos int64
}

// IoUCount is the number of valid entries of one label's column.
type IoUCount struct {
	Label int32
	N     int64
}

// COCOCat is COCOeval's evaluateImg of one (category, image) pair over the
// four area ranges and ten IoU thresholds.
type COCOCat struct {
	Label int32
	// NPIG is the number of non-ignored truth boxes per area range.
	NPIG [nA]int32
	// Scores are the kept detections' scores (float32 values) in stable
	// descending order, at most 100.
	Scores []float64
	// Flags[(a*10+t)*len(Scores)+d] is detection d's flag (matched,
	// ignored) at area range a and IoU threshold t.
	Flags []uint8
}

// COCOAreas and COCOThresholds are the dimensions of COCOCat.Flags.
const (
	COCOAreas      = nA
	COCOThresholds = nT
	COCOMaxDets    = 100
)

// MatchOptions are the settings matching depends on.
type MatchOptions struct {
	Semantics Semantics
	// MinIoU is the lowest IoU threshold the records will be reduced at:
	// the IoU family keeps the entries valid there.
	MinIoU float64
}

// MatchImage matches image i (its truth as read, before any semantics'
// filter) against its detections for the families in fam.
func MatchImage(i int, im box.Image, dets []box.Detection, opt MatchOptions, fam Family) (ImageRecord, error) {
	rec := ImageRecord{Image: i}
	// The families read the image and write disjoint parts of the record:
	// on a big image (one large tile) they run side by side, which changes
	// nothing in what each computes.
	var wg sync.WaitGroup
	run := func(f func()) {
		if len(im.Truth)+len(dets) >= parallelFamilies && runtime.GOMAXPROCS(0) > 1 {
			wg.Add(1)
			go func() { defer wg.Done(); f() }()
			return
		}
		f()
	}
	var err error
	if fam&Recall != 0 {
		run(func() {
			dim := im
			if opt.Semantics == Validation {
				dim = validationImage(im)
			}
			rec.DF.Preds = len(dets)
			if !dim.Empty && len(dim.Truth) > 0 {
				rows, e := matchImage(i, dim.Truth, dets)
				if e != nil {
					err = fmt.Errorf("metrics: image %d (%s): %w", i, im.Path, e)
					return
				}
				rec.DF.Truth, rec.DF.Rows = len(dim.Truth), rows
			}
		})
	}
	if fam&(IoUMean|COCOmAP) != 0 {
		vim := validationImage(im)
		if !vim.Empty && len(vim.Truth) > 0 {
			if fam&IoUMean != 0 {
				run(func() { rec.IoU = iouRecord(vim.Truth, dets, float32(opt.MinIoU)) })
			}
			if fam&COCOmAP != 0 {
				run(func() { rec.COCO = cocoMatchImage(vim.Truth, dets) })
			}
		}
	}
	wg.Wait()
	if err != nil {
		return ImageRecord{}, err
	}
	return rec, nil
}

// parallelFamilies is the box count from which one image's families are
// matched concurrently.
const parallelFamilies = 4096

// MatchImages matches the images idx (global indices into in) on up to
// GOMAXPROCS goroutines; the records come in the order of idx.
func MatchImages(in Input, idx []int, opt MatchOptions, fam Family) ([]ImageRecord, error) {
	if len(in.Dets) != len(in.Images) {
		return nil, fmt.Errorf("metrics: %d detection lists for %d images", len(in.Dets), len(in.Images))
	}
	recs := make([]ImageRecord, len(idx))
	errs := make([]error, len(idx))
	workers := min(max(1, runtime.GOMAXPROCS(0)), len(idx))
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := w; k < len(idx); k += workers {
				i := idx[k]
				recs[k], errs[k] = MatchImage(i, in.Images[i], in.Dets[i], opt, fam)
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return recs, nil
}

// Frame is what the reduction needs besides the records: the images (for
// their paths and count; their boxes are not read) and the labels.
type Frame struct {
	Images      []box.Image
	Labels      box.LabelMap
	LabelValues []float64 // as Input.LabelValues
}

// Reduce computes the families in fam from one record per image, indexed
// by global image index (recs[i].Image == i), in a fixed order (recall,
// iou, coco), as Compute does.
func Reduce(f Frame, recs []ImageRecord, opt Options, fam Family, classMetrics bool) (Result, error) {
	if len(recs) != len(f.Images) {
		return Result{}, fmt.Errorf("metrics: %d records for %d images", len(recs), len(f.Images))
	}
	for i := range recs {
		if recs[i].Image != i {
			return Result{}, fmt.Errorf("metrics: record %d is for image %d", i, recs[i].Image)
		}
	}
	var res Result
	if fam&Recall != 0 {
		r, err := reduceDeepForest(f, recs, opt)
		if err != nil {
			return Result{}, err
		}
		res = r
	}
	if fam&IoUMean != 0 {
		res.Values = append(res.Values, reduceIoU(recs, opt.IoUThreshold)...)
	}
	if fam&COCOmAP != 0 {
		vals, curves := reduceCOCO(recs, classMetrics)
		res.Values = append(res.Values, vals...)
		res.PR = curves
	}
	return res, nil
}

// ReduceSweep reduces the same records at each further IoU threshold: the
// families that depend on it (recall, iou; COCO uses its own ten) with the
// match table left out. Each element equals Reduce's values at that
// threshold.
func ReduceSweep(f Frame, recs []ImageRecord, opt Options, fam Family, thresholds []float64) ([][]Value, error) {
	out := make([][]Value, len(thresholds))
	for k, thr := range thresholds {
		o := opt
		o.IoUThreshold = thr
		r, err := Reduce(f, recs, o, fam&(Recall|IoUMean), false)
		if err != nil {
			return nil, err
		}
		out[k] = r.Values
	}
	return out, nil
}

func reduceDeepForest(f Frame, recs []ImageRecord, opt Options) (Result, error) {
	var res Result
	per := make([]imageScore, len(recs))
	rows := 0
	for i := range recs {
		rows += len(recs[i].DF.Rows)
	}
	res.Matches = make([]Match, 0, rows)
	for i := range recs {
		d := &recs[i].DF
		per[i] = imageScore{nTruth: d.Truth, nPred: d.Preds}
		for _, r := range d.Rows {
			r.Match = r.IoU > opt.IoUThreshold
			if r.Match {
				per[i].tp++
			}
			res.Matches = append(res.Matches, r)
		}
	}
	switch opt.Semantics {
	case Validation:
		res.Values = validation(f, per, res.Matches)
	case EvaluateBoxes:
		res.Values = evaluateBoxes(f, per, res.Matches)
	default:
		return Result{}, fmt.Errorf("metrics: unknown semantics %d", opt.Semantics)
	}
	return res, nil
}

// iouRecord keeps the image's entries valid at threshold t32 (and, with no
// detections, counts the zeros that are always valid). Above a positive
// threshold only overlapping pairs can be valid (a float32 IoU > 0 needs a
// float64 overlap: rounding is monotone), found through the overlap grid.
// At or below 0 every same-label pair is valid: the zeros are counted and
// the non-zero entries placed where the full matrix has them.
func iouRecord(truth []box.Truth, dets []box.Detection, t32 float32) IoURecord {
	r := IoURecord{Passed: true, NoDets: len(dets) == 0}
	for _, t := range truth {
		r.Labels = append(r.Labels, t.Label)
	}
	for _, d := range dets {
		r.Labels = append(r.Labels, d.Label)
	}
	slices.Sort(r.Labels)
	r.Labels = slices.Compact(r.Labels)
	nTruth := map[int32]int64{}
	rank := make([]int64, len(truth)) // among the truths of its label
	for t, g := range truth {
		rank[t] = nTruth[g.Label]
		nTruth[g.Label]++
	}
	if r.NoDets {
		// zeros(M, M) with eye(M) as the label mask: M valid zeros
		r.Pairs = int64(len(truth))
		r.Counts = iouCounts(nTruth, func(l int32) int64 { return nTruth[l] })
		return r
	}
	ps := iouPairs(truth, dets)
	r.Entries = make([]IoUEntry, 0, len(ps))
	if t32 > 0 {
		for _, p := range ps {
			if !(p.v < t32) {
				r.Entries = append(r.Entries, IoUEntry{V: p.v, Label: truth[p.t].Label})
			}
		}
		return r
	}
	// Entry (d, t) of label c sits at (entries of the detections before d)
	// + rank(t), and in c's column at idx_c(d)·|truth of c| + rank(t).
	r.Every = true
	nDet := map[int32]int64{}
	k := 0
	for d := range dets {
		l := dets[d].Label
		for ; k < len(ps) && int(ps[k].d) == d; k++ {
			if p := ps[k]; p.v != 0 {
				r.Entries = append(r.Entries, IoUEntry{V: p.v, Label: l,
					Pos: r.Pairs + rank[p.t], ClassPos: nDet[l]*nTruth[l] + rank[p.t]})
			}
		}
		r.Pairs += nTruth[l]
		nDet[l]++
	}
	r.Counts = iouCounts(nTruth, func(l int32) int64 { return nDet[l] * nTruth[l] })
	return r
}

// iouCounts lists n(l) for the labels of the truth with n(l) > 0, in
// increasing label order.
func iouCounts(nTruth map[int32]int64, n func(int32) int64) []IoUCount {
	var out []IoUCount
	for l := range nTruth {
		if c := n(l); c > 0 {
			out = append(out, IoUCount{l, c})
		}
	}
	slices.SortFunc(out, func(a, b IoUCount) int { return cmp.Compare(a.Label, b.Label) })
	return out
}

// iouPair is a detection × truth pair of one label that overlaps, with its
// float32 box_iou.
type iouPair struct {
	d, t int32
	v    float32
}

// iouPairs lists the overlapping same-label pairs in the matrix's
// row-major order (detection, then truth), the detections split over
// threads on a big image (enumerate).
func iouPairs(truth []box.Truth, dets []box.Detection) []iouPair {
	tb := make([]box.Box, len(truth))
	for k, t := range truth {
		tb[k] = t.Box
	}
	ix := newOverlapIndex(tb)
	return enumerate(len(dets), func(d int, yield func(iouPair)) {
		var row [16]iouPair
		ts := row[:0]
		ix.each(tb, dets[d].Box, func(t int, _ float64) {
			if truth[t].Label == dets[d].Label {
				ts = append(ts, iouPair{int32(d), int32(t), 0})
			}
		})
		slices.SortFunc(ts, func(a, b iouPair) int { return cmp.Compare(a.t, b.t) })
		for _, p := range ts {
			p.v = boxIoU32(dets[d].Box, truth[p.t].Box)
			yield(p)
		}
	})
}

// reduceIoU is IntersectionOverUnion from the records: "iou" is the
// float32 torch sum of every valid entry in image order; a class's value
// the float32 sum of its per-image torch sums over its count. An entry of
// class c is valid in c's column exactly when it is valid in the matrix
// (its truth and prediction share label c), so each image's column of c
// is its valid entries of label c, in matrix order. Zero entries change no
// float32 partial sum, so they are counted and placed (torchSum32Sparse),
// not listed.
func reduceIoU(recs []ImageRecord, thr float64) []Value {
	t32 := float32(thr)
	var all []sparseTerm
	var nAll int64
	clsSum := map[int32]float32{}
	clsN := map[int32]int64{}
	seen := map[int32]bool{}
	passed := 0
	var terms []sparseTerm
	var col []float32
	var order []int32
	n := 0
	for i := range recs {
		n += len(recs[i].IoU.Entries)
	}
	all = make([]sparseTerm, 0, n)
	for i := range recs {
		r := &recs[i].IoU
		if !r.Passed {
			continue
		}
		passed++
		for _, l := range r.Labels {
			seen[l] = true
		}
		switch {
		case r.NoDets: // zeros, valid at every threshold
			nAll += r.Pairs
			for _, c := range r.Counts {
				clsN[c.Label] += c.N
			}
		case r.Every && !(t32 > 0): // every same-label entry is valid
			for _, e := range r.Entries {
				all = append(all, sparseTerm{nAll + e.Pos, e.V})
			}
			nAll += r.Pairs
			for _, c := range r.Counts {
				terms = terms[:0]
				for _, e := range r.Entries {
					if e.Label == c.Label {
						terms = append(terms, sparseTerm{e.ClassPos, e.V})
					}
				}
				clsSum[c.Label] = float32(clsSum[c.Label] + torchSum32Sparse(c.N, terms))
				clsN[c.Label] += c.N
			}
		default: // the valid entries are the non-zero ones at or above t32
			order = order[:0]
			for _, e := range r.Entries {
				if !(e.V < t32) {
					all = append(all, sparseTerm{nAll, e.V})
					nAll++
					if !slices.Contains(order, e.Label) {
						order = append(order, e.Label)
					}
				}
			}
			for _, c := range order {
				col = col[:0]
				for _, e := range r.Entries {
					if e.Label == c && !(e.V < t32) {
						col = append(col, e.V)
					}
				}
				clsSum[c] = float32(clsSum[c] + torchSum32(col))
				clsN[c] += int64(len(col))
			}
		}
	}
	if passed == 0 {
		return nil
	}
	return iouValues(torchSum32Sparse(nAll, all), nAll, clsSum, clsN, seen)
}

func iouValues(sum float32, n int64, clsSum map[int32]float32, clsN map[int32]int64, seen map[int32]bool) []Value {
	mean := func(s float32, c int64) float64 {
		v := float32(s / float32(c))
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
	slices.Sort(ids)
	for _, id := range ids {
		vals = append(vals, Value{Key: fmt.Sprintf("iou/cl_%d", id), V: mean(clsSum[id], clsN[id])})
	}
	return vals
}

// validationImage is validationTruth of one image.
func validationImage(im box.Image) box.Image {
	return validationTruth([]box.Image{im})[0]
}
