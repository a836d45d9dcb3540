package metrics

import (
	"math"
	"sort"

	"github.com/canopy-hpc/canopy/box"
)

// COCO reproduces torchmetrics' MeanAveragePrecision(backend=
// "faster_coco_eval", iou_type="bbox") as DeepForest logs it: map, map_50,
// map_75, map_small/medium/large, mar_1/10/100, mar_small/medium/large and
// map_per_class / mar_100_per_class (arrays when classMetrics, else -1).
//
// Input images are the ones DeepForest passes (non-empty ground truth after
// its dataset filter); coordinates and scores are rounded to float32 as
// torchmetrics' tensors hold them. The algorithm is COCOeval's: stable
// score sorts, top-100 detections per image and class, greedy matching in
// score order with ties going to the later ground truth, inclusive area
// bounds, the precision envelope sampled at 101 recall thresholds, -1 for
// undefined, and numpy's pairwise mean in summarize.
func COCO(in Input, classMetrics bool) []Value {
	images := cocoImages(in)
	ev := newCOCOEval(images)
	vals := ev.summary()
	if classMetrics {
		mapPC := make([]float64, len(ev.cats))
		marPC := make([]float64, len(ev.cats))
		for k := range ev.cats {
			mapPC[k] = f32(ev.meanPrecision(-1, 0, k))
			marPC[k] = f32(ev.meanRecall(0, 2, k))
		}
		classes := make([]int, len(ev.cats))
		for k, c := range ev.cats {
			classes[k] = int(c)
		}
		vals = append(vals, Value{Key: "map_per_class", Array: mapPC}, Value{Key: "mar_100_per_class", Array: marPC},
			Value{Key: "classes", Ints: classes})
	} else {
		vals = append(vals, Value{Key: "map_per_class", V: -1}, Value{Key: "mar_100_per_class", V: -1})
	}
	return vals
}

func f32(v float64) float64 { return float64(float32(v)) }

// cocoIoUThresholds are torch.linspace(0.5, 0.95, 10) as float32 values.
var cocoIoUThresholds = [10]float64{0.5, 0.550000011920929, 0.6000000238418579, 0.6499999761581421,
	0.699999988079071, 0.75, 0.800000011920929, 0.8500000238418579, 0.8999999761581421, 0.949999988079071}

var (
	cocoMaxDets = [3]int{1, 10, 100}
	// area ranges all, small, medium, large (inclusive bounds)
	cocoAreas = [4][2]float64{{0, 1e10}, {0, 32 * 32}, {32 * 32, 96 * 96}, {96 * 96, 1e10}}
)

type cocoBox struct {
	x, y, w, h float64 // xywh from float32 arithmetic, as doubles
	area       float64
	score      float64
	label      int32
}

type cocoImage struct {
	gt, dt []cocoBox
}

// toCOCO converts xyxy to torchmetrics' xywh: float32 coordinates, w and h
// subtracted in float32, area w*h in double.
func toCOCO(b box.Box, label int32, score float64) cocoBox {
	x1, y1, x2, y2 := float32(b.Xmin), float32(b.Ymin), float32(b.Xmax), float32(b.Ymax)
	w, h := float32(x2-x1), float32(y2-y1)
	return cocoBox{x: float64(x1), y: float64(y1), w: float64(w), h: float64(h),
		area: float64(w) * float64(h), score: float64(float32(score)), label: label}
}

// cocoImages applies DeepForest's filter (only images whose target has a
// box after its dataset's filtering) and converts to COCO boxes.
func cocoImages(in Input) []cocoImage {
	images := validationTruth(in.Images)
	var out []cocoImage
	for i, im := range images {
		if im.Empty || len(im.Truth) == 0 {
			continue
		}
		ci := cocoImage{}
		for _, t := range im.Truth {
			ci.gt = append(ci.gt, toCOCO(t.Box, t.Label, 0))
		}
		for _, d := range in.Dets[i] {
			ci.dt = append(ci.dt, toCOCO(d.Box, d.Label, d.Score))
		}
		out = append(out, ci)
	}
	return out
}

// evalImg is COCOeval.evaluateImg's result for one (image, category, area).
type evalImg struct {
	scores   []float64 // detection scores in score order (≤ 100)
	matched  [10][]bool
	dtIgnore [10][]bool
	gtIgnore []bool
}

type cocoEval struct {
	cats []int32
	// precision[t][r][k][a][m], recall[t][k][a][m]; -1 when undefined
	precision []float64
	recall    []float64
	nImg      int
}

const nT, nR, nA, nM = 10, 101, 4, 3

func (e *cocoEval) pIdx(t, r, k, a, m int) int {
	return (((t*nR+r)*len(e.cats)+k)*nA+a)*nM + m
}
func (e *cocoEval) rIdx(t, k, a, m int) int { return ((t*len(e.cats)+k)*nA+a)*nM + m }

func newCOCOEval(images []cocoImage) *cocoEval {
	e := &cocoEval{nImg: len(images)}
	seen := map[int32]bool{}
	for _, im := range images {
		for _, b := range im.gt {
			seen[b.label] = true
		}
		for _, b := range im.dt {
			seen[b.label] = true
		}
	}
	for c := range seen {
		e.cats = append(e.cats, c)
	}
	sort.Slice(e.cats, func(a, b int) bool { return e.cats[a] < e.cats[b] })
	K := len(e.cats)
	e.precision = make([]float64, nT*nR*K*nA*nM)
	e.recall = make([]float64, nT*K*nA*nM)
	for i := range e.precision {
		e.precision[i] = -1
	}
	for i := range e.recall {
		e.recall[i] = -1
	}
	if len(images) == 0 {
		return e
	}
	catIdx := map[int32]int{}
	for k, c := range e.cats {
		catIdx[c] = k
	}
	// per category: per image, its gt and dt (annotation order)
	type pair struct{ gt, dt []cocoBox }
	per := make([][]pair, K)
	for k := range per {
		per[k] = make([]pair, len(images))
	}
	for i, im := range images {
		for _, b := range im.gt {
			k := catIdx[b.label]
			per[k][i].gt = append(per[k][i].gt, b)
		}
		for _, b := range im.dt {
			k := catIdx[b.label]
			per[k][i].dt = append(per[k][i].dt, b)
		}
	}
	evals := make([]*evalImg, len(images))
	for k := 0; k < K; k++ {
		for a := 0; a < nA; a++ {
			for i := range images {
				p := per[k][i]
				if len(p.gt) == 0 && len(p.dt) == 0 {
					evals[i] = nil
					continue
				}
				evals[i] = evaluateImg(p.gt, p.dt, cocoAreas[a])
			}
			for m := 0; m < nM; m++ {
				e.accumulate(evals, k, a, m)
			}
		}
	}
	return e
}

func bbIoU(d, g cocoBox) float64 {
	iw := math.Min(d.x+d.w, g.x+g.w) - math.Max(d.x, g.x)
	if iw <= 0 {
		return 0
	}
	ih := math.Min(d.y+d.h, g.y+g.h) - math.Max(d.y, g.y)
	if ih <= 0 {
		return 0
	}
	inter := float64(iw * ih)
	return inter / (float64(d.w*d.h) + float64(g.w*g.h) - inter)
}

// evaluateImg is COCOeval's per-image matching for one category and area
// range, over all IoU thresholds, with maxDets[-1] = 100 detections.
func evaluateImg(gt, dt []cocoBox, area [2]float64) *evalImg {
	// detections: stable sort by descending score, keep 100
	dts := append([]cocoBox(nil), dt...)
	sort.SliceStable(dts, func(a, b int) bool { return dts[a].score > dts[b].score })
	if len(dts) > cocoMaxDets[nM-1] {
		dts = dts[:cocoMaxDets[nM-1]]
	}
	// ground truth: stable sort, non-ignored first
	ign := func(b cocoBox) bool { return b.area < area[0] || b.area > area[1] }
	gts := append([]cocoBox(nil), gt...)
	sort.SliceStable(gts, func(a, b int) bool { return !ign(gts[a]) && ign(gts[b]) })
	e := &evalImg{scores: make([]float64, len(dts)), gtIgnore: make([]bool, len(gts))}
	for g := range gts {
		e.gtIgnore[g] = ign(gts[g])
	}
	ious := make([]float64, len(dts)*len(gts))
	for d := range dts {
		e.scores[d] = dts[d].score
		for g := range gts {
			ious[d*len(gts)+g] = bbIoU(dts[d], gts[g])
		}
	}
	gtm := make([]bool, len(gts))
	for t, thr := range cocoIoUThresholds {
		e.matched[t] = make([]bool, len(dts))
		e.dtIgnore[t] = make([]bool, len(dts))
		for g := range gtm {
			gtm[g] = false
		}
		for d := range dts {
			best := math.Min(thr, 1-1e-10)
			m := -1
			for g := range gts {
				if gtm[g] {
					continue
				}
				if m > -1 && !e.gtIgnore[m] && e.gtIgnore[g] {
					break
				}
				if ious[d*len(gts)+g] < best {
					continue
				}
				best = ious[d*len(gts)+g]
				m = g
			}
			if m == -1 {
				e.dtIgnore[t][d] = ign(dts[d])
				continue
			}
			e.dtIgnore[t][d] = e.gtIgnore[m]
			e.matched[t][d] = true
			gtm[m] = true
		}
	}
	return e
}

var cocoRecallThresholds = recThresholds()

// accumulate is COCOeval.accumulate for one category, area and maxDet.
func (e *cocoEval) accumulate(evals []*evalImg, k, a, m int) {
	maxDet := cocoMaxDets[m]
	type det struct {
		score   float64
		img, ix int
	}
	var dets []det
	npig := 0
	for i, ev := range evals {
		if ev == nil {
			continue
		}
		for d := 0; d < len(ev.scores) && d < maxDet; d++ {
			dets = append(dets, det{ev.scores[d], i, d})
		}
		for _, ig := range ev.gtIgnore {
			if !ig {
				npig++
			}
		}
	}
	if npig == 0 {
		return
	}
	sort.SliceStable(dets, func(x, y int) bool { return dets[x].score > dets[y].score })
	nd := len(dets)
	rc := make([]float64, nd)
	pr := make([]float64, nd)
	for t := 0; t < nT; t++ {
		tp, fp := 0, 0
		for i, d := range dets {
			ev := evals[d.img]
			if !ev.dtIgnore[t][d.ix] {
				if ev.matched[t][d.ix] {
					tp++
				} else {
					fp++
				}
			}
			rc[i] = float64(tp) / float64(npig)
			if tp+fp > 0 {
				pr[i] = float64(tp) / float64(tp+fp)
			} else {
				pr[i] = 0
			}
		}
		if nd > 0 {
			e.recall[e.rIdx(t, k, a, m)] = rc[nd-1]
		} else {
			e.recall[e.rIdx(t, k, a, m)] = 0
		}
		for i := nd - 1; i > 0; i-- {
			if pr[i] > pr[i-1] {
				pr[i-1] = pr[i]
			}
		}
		for r, thr := range cocoRecallThresholds {
			j := sort.SearchFloat64s(rc, thr) // first index with rc >= thr
			q := 0.0
			if j < nd {
				q = pr[j]
			}
			e.precision[e.pIdx(t, r, k, a, m)] = q
		}
	}
}

// meanPrecision averages precision[t?, :, k?, a, maxDet=100] over entries
// > -1 in C order (t, r, k), as numpy does; t < 0 means all thresholds,
// k < 0 all categories. -1 when nothing is defined.
func (e *cocoEval) meanPrecision(t, a, k int) float64 {
	var s []float64
	for ti := 0; ti < nT; ti++ {
		if t >= 0 && ti != t {
			continue
		}
		for r := 0; r < nR; r++ {
			for ki := range e.cats {
				if k >= 0 && ki != k {
					continue
				}
				if v := e.precision[e.pIdx(ti, r, ki, a, nM-1)]; v > -1 {
					s = append(s, v)
				}
			}
		}
	}
	return meanOrMinus1(s)
}

// meanRecall averages recall[:, k?, a, m] over entries > -1.
func (e *cocoEval) meanRecall(a, m, k int) float64 {
	var s []float64
	for t := 0; t < nT; t++ {
		for ki := range e.cats {
			if k >= 0 && ki != k {
				continue
			}
			if v := e.recall[e.rIdx(t, ki, a, m)]; v > -1 {
				s = append(s, v)
			}
		}
	}
	return meanOrMinus1(s)
}

func meanOrMinus1(s []float64) float64 {
	if len(s) == 0 {
		return -1
	}
	return pairwiseSum(s) / float64(len(s))
}

// summary is COCOeval.summarize's 12 stats under torchmetrics' names, as
// float32 values (torchmetrics returns float32 tensors).
func (e *cocoEval) summary() []Value {
	if e.nImg == 0 {
		var vals []Value
		for _, k := range cocoKeys {
			vals = append(vals, Value{Key: k, V: -1})
		}
		return vals
	}
	stats := []float64{
		e.meanPrecision(-1, 0, -1), e.meanPrecision(0, 0, -1), e.meanPrecision(5, 0, -1),
		e.meanPrecision(-1, 1, -1), e.meanPrecision(-1, 2, -1), e.meanPrecision(-1, 3, -1),
		e.meanRecall(0, 0, -1), e.meanRecall(0, 1, -1), e.meanRecall(0, 2, -1),
		e.meanRecall(1, 2, -1), e.meanRecall(2, 2, -1), e.meanRecall(3, 2, -1),
	}
	vals := make([]Value, len(stats))
	for i, s := range stats {
		vals[i] = Value{Key: cocoKeys[i], V: f32(s)}
	}
	return vals
}

var cocoKeys = []string{"map", "map_50", "map_75", "map_small", "map_medium", "map_large",
	"mar_1", "mar_10", "mar_100", "mar_small", "mar_medium", "mar_large"}
