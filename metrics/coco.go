package metrics

import (
	"cmp"
	"math"
	"runtime"
	"slices"
	"sort"
	"sync"

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
// undefined, and numpy's pairwise mean in summarize. With no image to
// score the family is absent, as in DeepForest.
func COCO(in Input, classMetrics bool) []Value {
	res, err := Compute(in, Options{}, COCOmAP, classMetrics)
	if err != nil {
		return nil // only a detection list per image is checked
	}
	return res.Values
}

// PRCurve is one class's COCO precision–recall curve at one IoU threshold
// (all areas, up to 100 detections per image): Precision[r] is COCOeval's
// precision array (the envelope) at recall RecallThresholds[r], the very
// numbers map_50 and map_75 average. A class without ground truth in the
// area has no curve.
type PRCurve struct {
	Label     int32
	IoU       float64   // 0.5 or 0.75 (as float32 values)
	Precision []float64 // 101 values, one per recall threshold
}

// RecallThresholds returns COCO's 101 recall thresholds, the x of every
// PRCurve point.
func RecallThresholds() []float64 { return append([]float64(nil), cocoRecallThresholds[:]...) }

// reduceCOCO is COCO plus the per-class PR curves at IoU 0.5 and 0.75
// from the same precision array, from the records.
func reduceCOCO(recs []ImageRecord, classMetrics bool) ([]Value, []PRCurve) {
	passed := false
	for i := range recs {
		passed = passed || recs[i].IoU.Passed || len(recs[i].COCO) > 0
	}
	if !passed {
		return nil, nil // DeepForest computes mAP only when some image has truth
	}
	ev := newCOCOEval(recs)
	curves := ev.curves()
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
	return vals, curves
}

// curves reads precision[t][:][k][all areas][100 dets] for t = 0.5, 0.75.
func (e *cocoEval) curves() []PRCurve {
	var out []PRCurve
	for _, t := range [2]int{0, 5} {
		for k, c := range e.cats {
			if e.slot[0][k] < 0 {
				continue // no ground truth of the class: undefined
			}
			p := make([]float64, nR)
			for r := range p {
				p[r] = e.precisionAt(t, r, k, 0)
			}
			out = append(out, PRCurve{Label: c, IoU: cocoIoUThresholds[t], Precision: p})
		}
	}
	return out
}

func f32(v float64) float64 { return float64(float32(v)) }

// cocoIoUThresholds are torch.linspace(0.5, 0.95, 10) as float32 values.
var cocoIoUThresholds = [10]float64{0.5, 0.550000011920929, 0.6000000238418579, 0.6499999761581421,
	0.699999988079071, 0.75, 0.800000011920929, 0.8500000238418579, 0.8999999761581421, 0.949999988079071}

// cocoRecallThresholds are torch.linspace(0, 1, 101) as the real torch
// returns them (float32 values widened to float64) on an AVX2 machine,
// copied from testdata/golden/coco/thresholds.json (tools/coco/golden.py,
// torch 2.15.0+cu132, CPU capability AVX2). torch's vectorised
// linspace kernel is not the scalar formula: 36 of the values lie above
// i/100 (e.g. i = 7, 53, 65), which decides whether a recall of exactly
// i/100 reaches threshold i. TestRecallThresholdsFromTorch checks the list
// against the fixture.
var cocoRecallThresholds = [101]float64{
	0.0, 0.009999999776482582, 0.019999999552965164, 0.029999999329447746,
	0.03999999910593033, 0.04999999701976776, 0.05999999865889549, 0.07000000029802322,
	0.07999999821186066, 0.08999999612569809, 0.09999999403953552, 0.10999999940395355,
	0.11999999731779099, 0.12999999523162842, 0.14000000059604645, 0.14999999105930328,
	0.1599999964237213, 0.17000000178813934, 0.17999999225139618, 0.1899999976158142,
	0.19999998807907104, 0.20999999344348907, 0.2199999988079071, 0.22999998927116394,
	0.23999999463558197, 0.25, 0.25999999046325684, 0.26999998092651367,
	0.2800000011920929, 0.28999999165534973, 0.29999998211860657, 0.3100000023841858,
	0.3199999928474426, 0.32999998331069946, 0.3400000035762787, 0.3499999940395355,
	0.35999998450279236, 0.3700000047683716, 0.3799999952316284, 0.38999998569488525,
	0.3999999761581421, 0.4099999964237213, 0.41999998688697815, 0.429999977350235,
	0.4399999976158142, 0.44999998807907104, 0.4599999785423279, 0.4699999988079071,
	0.47999998927116394, 0.4899999797344208, 0.5, 0.5099999904632568,
	0.5199999809265137, 0.5300000309944153, 0.5400000214576721, 0.550000011920929,
	0.5600000023841858, 0.5699999928474426, 0.5799999833106995, 0.5900000333786011,
	0.6000000238418579, 0.6100000143051147, 0.6200000047683716, 0.6299999952316284,
	0.6399999856948853, 0.6500000357627869, 0.6600000262260437, 0.6700000166893005,
	0.6800000071525574, 0.6899999976158142, 0.699999988079071, 0.7099999785423279,
	0.7200000286102295, 0.7300000190734863, 0.7400000095367432, 0.75,
	0.7599999904632568, 0.7699999809265137, 0.7800000309944153, 0.7900000214576721,
	0.800000011920929, 0.8100000023841858, 0.8199999928474426, 0.8299999833106995,
	0.8400000333786011, 0.8500000238418579, 0.8600000143051147, 0.8700000047683716,
	0.8799999952316284, 0.8899999856948853, 0.8999999761581421, 0.9100000262260437,
	0.9200000166893005, 0.9300000071525574, 0.9399999976158142, 0.949999988079071,
	0.9599999785423279, 0.9700000286102295, 0.9800000190734863, 0.9900000095367432,
	1.0,
}

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
	crowd      bool // ground truth only: iscrowd 1
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

// cocoMatchImage is COCOeval's evaluateImg of one image (its truth after
// DeepForest's dataset filter, not empty) for every category it holds a
// box of, in category order: each category's detections in stable
// descending score order truncated to maxDets[-1], its ground truth in
// annotation order, the IoU matrix computed once and shared by every area
// range, as COCOeval.computeIoU does.
func cocoMatchImage(truth []box.Truth, dets []box.Detection) []COCOCat {
	var labels []int32
	for _, t := range truth {
		labels = append(labels, t.Label)
	}
	for _, d := range dets {
		labels = append(labels, d.Label)
	}
	slices.Sort(labels)
	labels = slices.Compact(labels)
	out := make([]COCOCat, len(labels))
	var scratch []int32
	for k, l := range labels {
		var c catImg
		for _, t := range truth {
			if t.Label == l {
				g := toCOCO(t.Box, t.Label, 0)
				g.crowd = t.Crowd
				c.gts = append(c.gts, g)
			}
		}
		for _, d := range dets {
			if d.Label == l {
				c.dts = append(c.dts, toCOCO(d.Box, d.Label, d.Score))
			}
		}
		scratch = c.prepare(scratch)
		out[k] = c.evaluate(l)
	}
	return out
}

// evaluate is evaluateImg of a prepared (category, image) pair over every
// area range, as a COCOCat of label l.
func (c *catImg) evaluate(l int32) COCOCat {
	nd := len(c.dts)
	cat := COCOCat{Label: l, Scores: make([]float64, nd), Flags: make([]uint8, nA*nT*nd)}
	for d := range c.dts {
		cat.Scores[d] = c.dts[d].score
	}
	for a := range nA {
		cat.NPIG[a] = int32(evaluateImg(c, cocoAreas[a], cat.Flags[a*nT*nd:(a+1)*nT*nd], nd, 0))
	}
	return cat
}

// prepare sorts the detections by score (stable, descending), keeps the
// first maxDets[-1] and computes the IoU matrix.
func (c *catImg) prepare(scratch []int32) []int32 {
	maxDet := cocoMaxDets[nM-1]
	if len(c.dts) > 1 {
		scores := make([]float64, len(c.dts))
		for d := range c.dts {
			scores[d] = c.dts[d].score
		}
		scratch = scratch[:0]
		for d := range c.dts {
			scratch = append(scratch, int32(d))
		}
		byScore(scores, scratch)
		sorted := make([]cocoBox, len(c.dts))
		for j, d := range scratch {
			sorted[j] = c.dts[d]
		}
		c.dts = sorted
	}
	if len(c.dts) > maxDet {
		c.dts = c.dts[:maxDet]
	}
	c.cands = matchable(c.dts, c.gts)
	return scratch
}

// catImg is one (category, image) pair: its detections in stable
// descending score order truncated to maxDets[-1], its ground truth in
// annotation order, and per detection the ground truths it could ever match
// (IoU >= 0.5, the lowest threshold) in annotation order: COCOeval's IoU
// matrix without the entries that can never match, computed once and
// shared by every area range.
type catImg struct {
	dts, gts []cocoBox
	cands    [][]gtIoU
}

// gtIoU is a ground truth (annotation index) and its IoU with a detection.
type gtIoU struct {
	g   int32
	iou float64
}

type cocoEval struct {
	cats []int32
	// COCOeval's precision[t][r][k][a][m] is kept only where it is read
	// (maxDets 100) and defined (the category has ground truth in the
	// area; elsewhere it is -1): prec[a][(t*nR+r)*len(def[a])+slot[a][k]],
	// slot -1 for an undefined (k, a). Each area's values are then, in
	// order, exactly numpy's C-order selection of the entries > -1, so a
	// mean is one pass over a contiguous slice. recall[t][k][a][m] is kept
	// whole (-1 when undefined).
	prec   [nA][]float64
	slot   [nA][]int32
	nDef   [nA]int
	recall []float64
	// scratch holds one class's precision values for meanPrecision.
	scratch []float64
}

const nT, nR, nA, nM = 10, 101, 4, 3

// precisionAt is precision[t][r][k][a][maxDets 100], -1 when undefined.
func (e *cocoEval) precisionAt(t, r, k, a int) float64 {
	j := e.slot[a][k]
	if j < 0 {
		return -1
	}
	return e.prec[a][(t*nR+r)*e.nDef[a]+int(j)]
}

func (e *cocoEval) rIdx(t, k, a, m int) int { return ((t*len(e.cats)+k)*nA+a)*nM + m }

// byScore orders detection indices by descending score, ties by position:
// the order of a stable sort.
func byScore(scores []float64, idx []int32) {
	slices.SortFunc(idx, func(a, b int32) int {
		if sa, sb := scores[a], scores[b]; sa != sb {
			if sa > sb {
				return -1
			}
			return 1
		}
		return cmp.Compare(a, b)
	})
}

func newCOCOEval(recs []ImageRecord) *cocoEval {
	e := &cocoEval{}
	seen := map[int32]bool{}
	for i := range recs {
		for _, c := range recs[i].COCO {
			seen[c.Label] = true
		}
	}
	for c := range seen {
		e.cats = append(e.cats, c)
	}
	slices.Sort(e.cats)
	K := len(e.cats)
	e.recall = make([]float64, nT*K*nA*nM)
	for i := range e.recall {
		e.recall[i] = -1
	}
	catIdx := make(map[int32]int, K)
	for k, c := range e.cats {
		catIdx[c] = k
	}
	// Each category's (category, image) records, only for the images
	// holding a box of it, in image order: an image without one adds
	// nothing to the category's evaluation, so the pairs cost O(boxes),
	// not O(categories × images).
	per := make([][]*COCOCat, K)
	for i := range recs {
		for j := range recs[i].COCO {
			c := &recs[i].COCO[j]
			k := catIdx[c.Label]
			per[k] = append(per[k], c)
		}
	}
	for a := range nA {
		e.slot[a] = make([]int32, K)
		for k := range K {
			e.slot[a][k] = -1
			for _, c := range per[k] {
				if c.NPIG[a] > 0 {
					e.slot[a][k] = int32(e.nDef[a])
					e.nDef[a]++
					break
				}
			}
		}
		e.prec[a] = make([]float64, nT*nR*e.nDef[a])
	}
	// Categories are independent: accumulate them in parallel, each writing
	// only its own slots, so the result does not depend on scheduling.
	var wg sync.WaitGroup
	sem := make(chan struct{}, max(1, runtime.GOMAXPROCS(0)))
	for k := 0; k < K; k++ {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			e.accumulate(k, per[k])
			<-sem
		}()
	}
	wg.Wait()
	return e
}

// accumulate is COCOeval.accumulate for category k from its records.
func (e *cocoEval) accumulate(k int, imgs []*COCOCat) {
	// Every kept detection of the category gets a global index off[i]+d;
	// the flags of area a are at flags[t*n + off[i] + d].
	off := make([]int, len(imgs)+1)
	for i := range imgs {
		off[i+1] = off[i] + len(imgs[i].Scores)
	}
	n := off[len(imgs)]
	flags := make([]uint8, nT*n)
	// Every kept detection (at most maxDets[-1] per image) in stable
	// descending score order, ties by image then position: the one order
	// read, since precision is read only at maxDets 100. At maxDets 1 and
	// 10 only the recall is read: the matched detections among each image's
	// first m over the non-ignored truths, a count that needs no order.
	scores := make([]float64, n)
	for i, c := range imgs {
		copy(scores[off[i]:], c.Scores)
	}
	order := make([]int32, n)
	for j := range order {
		order[j] = int32(j)
	}
	byScore(scores, order)
	tps := make([]int32, n)
	pr := make([]float64, n)
	for a := 0; a < nA; a++ {
		npig := 0
		for i, c := range imgs {
			npig += int(c.NPIG[a])
			nd := len(c.Scores)
			for t := range nT {
				copy(flags[t*n+off[i]:t*n+off[i]+nd], c.Flags[(a*nT+t)*nd:(a*nT+t+1)*nd])
			}
		}
		if npig == 0 {
			continue
		}
		for m, md := range cocoMaxDets[:nM-1] {
			for t := 0; t < nT; t++ {
				ft := flags[t*n : (t+1)*n]
				tp := 0
				for i, c := range imgs {
					for _, f := range ft[off[i] : off[i]+min(len(c.Scores), md)] {
						if f == flagMatched {
							tp++
						}
					}
				}
				e.recall[e.rIdx(t, k, a, m)] = float64(tp) / float64(npig) // 0 with no detection
			}
		}
		nd := n
		for t := 0; t < nT; t++ {
			ft := flags[t*n : (t+1)*n]
			tp, fp := 0, 0
			for j, gi := range order {
				switch ft[gi] {
				case flagMatched:
					tp++
				case 0:
					fp++
				}
				tps[j] = int32(tp)
				pr[j] = 0
				if tp+fp > 0 {
					pr[j] = float64(tp) / float64(tp+fp)
				}
			}
			// recall_j = tp_j/npig, computed only where it is compared
			rc := func(j int) float64 { return float64(tps[j]) / float64(npig) }
			e.recall[e.rIdx(t, k, a, nM-1)] = 0
			if nd > 0 {
				e.recall[e.rIdx(t, k, a, nM-1)] = rc(nd - 1)
			}
			if e.slot[a][k] < 0 {
				continue // precision is undefined without truth in the area
			}
			for j := nd - 1; j > 0; j-- {
				if pr[j] > pr[j-1] {
					pr[j-1] = pr[j]
				}
			}
			for r, thr := range cocoRecallThresholds {
				// first index with recall >= thr (numpy searchsorted, left)
				j := sort.Search(nd, func(j int) bool { return rc(j) >= thr })
				q := 0.0
				if j < nd {
					q = pr[j]
				}
				e.prec[a][(t*nR+r)*e.nDef[a]+int(e.slot[a][k])] = q
			}
		}
	}
}

// Detection flags per IoU threshold: matched (to a regular or an ignored
// ground truth) and ignored; 0 is a false positive.
const (
	flagMatched uint8 = 1
	flagIgnored uint8 = 2
)

// matchable lists, per detection, the ground truths of IoU >= 0.5 in
// annotation order, found through the overlap index (an IoU > 0 needs an
// overlap of the very xywh sums bbIoU subtracts), so no pair that can
// never match is stored.
func matchable(dts, gts []cocoBox) [][]gtIoU {
	out := make([][]gtIoU, len(dts))
	if len(gts) == 0 {
		return out
	}
	xyxy := func(b cocoBox) box.Box { return box.Box{Xmin: b.x, Ymin: b.y, Xmax: b.x + b.w, Ymax: b.y + b.h} }
	gb := make([]box.Box, len(gts))
	for g, b := range gts {
		gb[g] = xyxy(b)
	}
	ix := newOverlapIndex(gb)
	for d := range dts {
		ix.each(gb, xyxy(dts[d]), func(g int, _ float64) {
			if v := bbIoU(dts[d], gts[g]); v >= cocoIoUThresholds[0] {
				out[d] = append(out[d], gtIoU{int32(g), v})
			}
		})
		slices.SortFunc(out[d], func(a, b gtIoU) int { return cmp.Compare(a.g, b.g) })
	}
	return out
}

// bbIoU is maskUtils.iou of two boxes: intersection over union, or over
// the detection's area alone when g is a crowd region.
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
	if g.crowd {
		return inter / float64(d.w*d.h)
	}
	return inter / (float64(d.w*d.h) + float64(g.w*g.h) - inter)
}

// evaluateImg is COCOeval's per-image matching of one category for one
// area range over all IoU thresholds: ground truth stable-sorted with the
// non-ignored first; each detection, in score order, takes the unmatched
// ground truth of highest IoU >= min(t, 1-1e-10), ties to the later one,
// never an ignored one once a regular one is held; a detection matched to
// an ignored ground truth, or unmatched and outside the area range, is
// ignored. It writes detection d's flags for threshold t at
// flags[t*n+off+d] and returns the number of non-ignored ground truths.
func evaluateImg(c *catImg, area [2]float64, flags []uint8, n, off int) int {
	nd, ng := len(c.dts), len(c.gts)
	ign := func(b cocoBox) bool { return b.crowd || b.area < area[0] || b.area > area[1] }
	npig := regularCount(c.gts, area)
	if nd == 0 {
		return npig
	}
	// ground-truth order: non-ignored first, stable
	order := make([]int, 0, ng)
	for g := range c.gts {
		if !ign(c.gts[g]) {
			order = append(order, g)
		}
	}
	for g := range c.gts {
		if ign(c.gts[g]) {
			order = append(order, g)
		}
	}
	// Only pairs with IoU >= 0.5, the lowest threshold, can ever match:
	// scan just those, in ground-truth order (the break rule depends only on
	// positions, so skipping the others changes nothing).
	pos := make([]int, ng)
	for j, g := range order {
		pos[g] = j
	}
	type cand struct {
		j   int
		iou float64
	}
	cands := make([][]cand, nd)
	for d := 0; d < nd; d++ {
		for _, x := range c.cands[d] {
			cands[d] = append(cands[d], cand{pos[x.g], x.iou})
		}
		slices.SortFunc(cands[d], func(a, b cand) int { return cmp.Compare(a.j, b.j) })
	}
	gtm := make([]bool, ng)
	for t, thr := range cocoIoUThresholds {
		clear(gtm)
		for d := 0; d < nd; d++ {
			best := math.Min(thr, 1-1e-10)
			m := -1
			for _, x := range cands[d] {
				if gtm[x.j] && !c.gts[order[x.j]].crowd {
					continue // a crowd region takes any number of detections
				}
				if m > -1 && m < npig && x.j >= npig {
					break
				}
				if x.iou >= best {
					best, m = x.iou, x.j
				}
			}
			var f uint8
			switch {
			case m == -1 && ign(c.dts[d]):
				f = flagIgnored
			case m >= npig:
				f = flagMatched | flagIgnored
				gtm[m] = true
			case m >= 0:
				f = flagMatched
				gtm[m] = true
			}
			flags[t*n+off+d] = f
		}
	}
	return npig
}

// regularCount is the number of ground truths inside the area range that
// are not crowd regions (COCOeval's non-ignored ones).
func regularCount(gts []cocoBox, area [2]float64) int {
	n := 0
	for _, g := range gts {
		if !g.crowd && !(g.area < area[0] || g.area > area[1]) {
			n++
		}
	}
	return n
}

// meanPrecision averages precision[t?, :, k?, a, maxDet=100] over entries
// > -1 in C order (t, r, k), as numpy does; t < 0 means all thresholds,
// k < 0 all categories. -1 when nothing is defined. Over all categories
// the entries are a contiguous run of prec[a]: no copy.
func (e *cocoEval) meanPrecision(t, a, k int) float64 {
	if k < 0 {
		p := e.prec[a]
		if t >= 0 {
			p = p[t*nR*e.nDef[a] : (t+1)*nR*e.nDef[a]]
		}
		return meanOrMinus1(p)
	}
	if e.slot[a][k] < 0 {
		return -1
	}
	s := e.scratch[:0] // one class's values, reused from class to class
	defer func() { e.scratch = s }()
	for ti := 0; ti < nT; ti++ {
		if t >= 0 && ti != t {
			continue
		}
		for r := 0; r < nR; r++ {
			s = append(s, e.precisionAt(ti, r, k, a))
		}
	}
	return meanOrMinus1(s)
}

// meanRecall averages recall[:, k?, a, m] over entries > -1.
func (e *cocoEval) meanRecall(a, m, k int) float64 {
	var s []float64
	for t := 0; t < nT; t++ {
		for ki := range e.cats {
			if k >= 0 {
				ki = k
			}
			if v := e.recall[e.rIdx(t, ki, a, m)]; v > -1 {
				s = append(s, v)
			}
			if k >= 0 {
				break
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

// COCOCost is what the COCO stage will hold, counted before it allocates.
type COCOCost struct {
	Classes, Images, Boxes int
	// Bytes is the estimated peak of the stage's own allocations.
	Bytes int64
}

// Bytes per unit of the COCO stage's estimate (measured with /usr/bin/time
// -v at 10 to 100,000 classes, docs/benchmarks.md, and rounded up):
// per class, the precision kept at maxDets 100 for 4 areas × 10 IoU × 101
// recall thresholds, the recall array, two PR curves and the bookkeeping;
// per box, its COCO copies, its (category, image) pair share and the
// matching's per-detection arrays (flags, orders, candidates); per pair
// that could match (a kept detection, at most 100 per image and category,
// × a ground truth of its category: an upper bound of the pairs of IoU
// >= 0.5 that are stored), a gtIoU and evaluateImg's cand.
const (
	cocoBytesPerClass = nA*nT*nR*8 + nT*nA*nM*8 + 2*(nR*8+64) + 256
	cocoBytesPerBox   = 768
	cocoBytesPerIoU   = 16 + 16
)

// COCOMemory estimates the COCO stage's memory from the class, image and
// box counts, without allocating: what a caller compares with its budget
// before calling Compute with the COCO family.
func COCOMemory(in Input) COCOCost {
	var c COCOCost
	seen := map[int32]struct{}{}
	var ious int64
	for i, im := range in.Images {
		if im.Empty || len(im.Truth) == 0 {
			continue // validationTruth only removes more
		}
		c.Images++
		for _, t := range im.Truth {
			seen[t.Label] = struct{}{}
		}
		var dets []box.Detection
		if i < len(in.Dets) {
			dets = in.Dets[i]
		}
		for _, d := range dets {
			seen[d.Label] = struct{}{}
		}
		c.Boxes += len(im.Truth) + len(dets)
		ious += cocoPairBound(im.Truth, dets)
	}
	c.Classes = len(seen)
	c.Bytes = int64(c.Classes)*cocoBytesPerClass + int64(c.Boxes)*cocoBytesPerBox + ious*cocoBytesPerIoU
	return c
}

// cocoPairBound bounds the (detection, ground truth) pairs COCO may store
// for one image: per category, min(detections, maxDets) × ground truths.
func cocoPairBound(truth []box.Truth, dets []box.Detection) int64 {
	type count struct{ d, g int64 }
	per := map[int32]*count{}
	get := func(l int32) *count {
		c := per[l]
		if c == nil {
			c = &count{}
			per[l] = c
		}
		return c
	}
	for _, t := range truth {
		get(t.Label).g++
	}
	for _, d := range dets {
		get(d.Label).d++
	}
	var n int64
	for _, c := range per {
		n += min(c.d, int64(cocoMaxDets[nM-1])) * c.g
	}
	return n
}
