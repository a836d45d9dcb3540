package metrics

import (
	"math"
	"slices"

	"github.com/canopy-hpc/canopy/box"
)

// COCO segm mAP of polygons: COCOeval with iou_type "segm" as
// faster-coco-eval (and pycocotools) compute it from polygon
// segmentations: every ring rasterised at the image's size by the COCO
// mask API's polygon rule (five-fold upsampled boundary, pixel centres),
// the rings of one polygon or MultiPolygon merged by union (so holes are
// filled, as a COCO polygon segmentation cannot hold one), areas and IoUs
// counted on the run-length encoded masks. The matching, area ranges and
// accumulation are the COCO family's (coco.go).

// rle is a column-major run-length encoded h×w mask: alternating runs of
// 0s and 1s, starting with 0s.
type rle struct {
	h, w int
	cnts []uint32
}

// rleFromRing rasterises one ring (its vertices without the closing
// repeat) as the COCO mask API's rleFrPoly does.
func rleFromRing(ring box.Ring, h, w int) rle {
	pts := ring
	if len(pts) > 1 && pts[0] == pts[len(pts)-1] {
		pts = pts[:len(pts)-1]
	}
	k := len(pts)
	const scale = 5.0
	x, y := make([]int, k+1), make([]int, k+1)
	for j, p := range pts {
		x[j] = int(float64(scale*p.X) + .5)
		y[j] = int(float64(scale*p.Y) + .5)
	}
	if k > 0 {
		x[k], y[k] = x[0], y[0]
	}
	// boundary points, densely along every edge (in upsampled pixels)
	var u, v []int
	for j := 0; j < k; j++ {
		xs, xe, ys, ye := x[j], x[j+1], y[j], y[j+1]
		dx, dy := iabs(xe-xs), iabs(ys-ye)
		flip := (dx >= dy && xs > xe) || (dx < dy && ys > ye)
		if flip {
			xs, xe, ys, ye = xe, xs, ye, ys
		}
		// one point per upsampled pixel along the longer axis, the other
		// coordinate rounded from the edge's slope
		n, s := dx, float64(ye-ys)/float64(dx)
		if dx < dy {
			n, s = dy, float64(xe-xs)/float64(dy)
		}
		for d := 0; d <= n; d++ {
			t := d
			if flip {
				t = n - d
			}
			if dx >= dy {
				u = append(u, t+xs)
				v = append(v, int(float64(ys)+float64(s*float64(t))+.5))
			} else {
				v = append(v, t+ys)
				u = append(u, int(float64(xs)+float64(s*float64(t))+.5))
			}
		}
	}
	// the points where the boundary crosses a pixel column's centre,
	// downsampled: each starts a run of 1s (or of 0s) down that column
	var a []uint32
	for j := 1; j < len(u); j++ {
		if u[j] == u[j-1] {
			continue
		}
		xd := float64(u[j])
		if u[j] >= u[j-1] {
			xd = float64(u[j] - 1)
		}
		xd = (xd+.5)/scale - .5
		if math.Floor(xd) != xd || xd < 0 || xd > float64(w-1) {
			continue
		}
		yd := float64(min(v[j], v[j-1]))
		yd = (yd+.5)/scale - .5
		yd = math.Ceil(math.Min(math.Max(yd, 0), float64(h)))
		a = append(a, uint32(int(xd)*h+int(yd)))
	}
	a = append(a, uint32(h*w))
	slices.Sort(a)
	var p uint32
	for j := range a {
		a[j], p = a[j]-p, a[j]
	}
	cnts := []uint32{a[0]}
	for j := 1; j < len(a); {
		if a[j] > 0 {
			cnts = append(cnts, a[j])
			j++
			continue
		}
		j++
		if j < len(a) {
			cnts[len(cnts)-1] += a[j]
			j++
		}
	}
	return rle{h: h, w: w, cnts: cnts}
}

func iabs(a int) int {
	if a < 0 {
		return -a
	}
	return a
}

// walkRuns walks the runs of two masks of one size together, stretch by
// stretch (the mask API's merge and IoU loops): f gets each stretch's
// length, whether it is 1 in a and in b, whether the stretch after it is
// 1 in either, and whether it is the last.
func walkRuns(a, b []uint32, f func(c uint32, inA, inB, nextEither, last bool)) {
	ca, cb := a[0], b[0]
	va, vb := false, false
	ia, ib := 1, 1
	for ct := uint32(1); ct > 0; {
		c := min(ca, cb)
		curA, curB := va, vb
		ct = 0
		if ca -= c; ca == 0 && ia < len(a) {
			ca, va = a[ia], !va
			ia++
		}
		ct += ca
		if cb -= c; cb == 0 && ib < len(b) {
			cb, vb = b[ib], !vb
			ib++
		}
		ct += cb
		f(c, curA, curB, va || vb, ct == 0)
	}
}

// union merges masks of one size as the mask API's rleMerge (not
// intersect) does: a run ends where the union's value changes.
func union(rs []rle) rle {
	acc := rs[0].cnts
	for _, b := range rs[1:] {
		var out []uint32
		var cc uint32
		walkRuns(acc, b.cnts, func(c uint32, inA, inB, next, last bool) {
			cc += c
			if next != (inA || inB) || last {
				out = append(out, cc)
				cc = 0
			}
		})
		acc = out
	}
	return rle{h: rs[0].h, w: rs[0].w, cnts: acc}
}

// area is the number of 1s.
func (r rle) area() uint32 {
	var a uint32
	for j := 1; j < len(r.cnts); j += 2 {
		a += r.cnts[j]
	}
	return a
}

// bbox is the mask API's rleToBbox: x, y, w, h of the 1s.
func (r rle) bbox() [4]float64 {
	m := len(r.cnts) / 2 * 2
	if m == 0 {
		return [4]float64{}
	}
	h := uint32(r.h)
	xs, ys, xe, ye := uint32(r.w), h, uint32(0), uint32(0)
	var cc, xp uint32
	for j := 0; j < m; j++ {
		cc += r.cnts[j]
		t := cc - uint32(j%2)
		y := t % h
		x := (t - y) / h
		if j%2 == 0 {
			xp = x
		} else if xp < x {
			ys, ye = 0, h-1
		}
		xs, xe, ys, ye = min(xs, x), max(xe, x), min(ys, y), max(ye, y)
	}
	return [4]float64{float64(xs), float64(ys), float64(xe - xs + 1), float64(ye - ys + 1)}
}

// maskIoU is the mask API's rleIou of one detection and one (non-crowd)
// ground truth: 0 unless their boxes overlap, else intersection over
// union of the 1s.
func maskIoU(d, g rle, db, gb [4]float64) float64 {
	iw := math.Min(db[2]+db[0], gb[2]+gb[0]) - math.Max(db[0], gb[0])
	ih := math.Min(db[3]+db[1], gb[3]+gb[1]) - math.Max(db[1], gb[1])
	if iw <= 0 || ih <= 0 {
		return 0
	}
	var in, un uint32
	walkRuns(d.cnts, g.cnts, func(c uint32, inD, inG, _, _ bool) {
		if inD || inG {
			un += c
			if inD && inG {
				in += c
			}
		}
	})
	if in == 0 {
		return 0
	}
	return float64(in) / float64(un)
}

// shapeMask is a polygon's COCO mask: the union of every ring of every
// part.
func shapeMask(sh *box.Shape, h, w int) rle {
	var rs []rle
	for _, p := range sh.Parts {
		for _, r := range p {
			rs = append(rs, rleFromRing(r, h, w))
		}
	}
	if len(rs) == 0 {
		return rle{h: h, w: w, cnts: []uint32{uint32(h * w)}}
	}
	return union(rs)
}

type segmItem struct {
	m  rle
	bb [4]float64
	cb cocoBox
}

// segmMatchImage is cocoMatchImage with masks: one image of size w×h, its
// truth polygons and its predictions.
func segmMatchImage(truth, dets []box.Geo, w, h int) []COCOCat {
	item := func(g box.Geo) segmItem {
		m := shapeMask(g.Shape, h, w)
		return segmItem{m: m, bb: m.bbox(), cb: cocoBox{area: float64(m.area()), score: float64(float32(g.Score)), label: g.Label}}
	}
	var labels []int32
	for _, g := range slices.Concat(truth, dets) {
		labels = append(labels, g.Label)
	}
	slices.Sort(labels)
	labels = slices.Compact(labels)
	gts, dts := make([]segmItem, len(truth)), make([]segmItem, len(dets))
	for i, g := range truth {
		gts[i] = item(g)
	}
	for i, g := range dets {
		dts[i] = item(g)
	}
	out := make([]COCOCat, len(labels))
	var scratch []int32
	for k, l := range labels {
		var c catImg
		var gi, di []segmItem
		for _, g := range gts {
			if g.cb.label == l {
				gi = append(gi, g)
				c.gts = append(c.gts, g.cb)
			}
		}
		for _, d := range dets2(dts, l) {
			di = append(di, d)
		}
		// stable descending score, at most maxDets[-1]
		scores := make([]float64, len(di))
		scratch = scratch[:0]
		for d := range di {
			scores[d] = di[d].cb.score
			scratch = append(scratch, int32(d))
		}
		byScore(scores, scratch)
		if len(scratch) > cocoMaxDets[nM-1] {
			scratch = scratch[:cocoMaxDets[nM-1]]
		}
		sorted := make([]segmItem, len(scratch))
		for j, d := range scratch {
			sorted[j] = di[d]
			c.dts = append(c.dts, di[d].cb)
		}
		c.cands = make([][]gtIoU, len(sorted))
		for d, dt := range sorted {
			for g, gt := range gi {
				if v := maskIoU(dt.m, gt.m, dt.bb, gt.bb); v >= cocoIoUThresholds[0] {
					c.cands[d] = append(c.cands[d], gtIoU{int32(g), v})
				}
			}
		}
		out[k] = c.evaluate(l)
	}
	return out
}

func dets2(dts []segmItem, l int32) []segmItem {
	var out []segmItem
	for _, d := range dts {
		if d.cb.label == l {
			out = append(out, d)
		}
	}
	return out
}

// SegmCOCO is the COCO segm family of a polygon eval (every image counts,
// each at its size from recs): map, map_50, ... as the box family names
// them. ok is false when some image's size is unknown (the family is then
// skipped).
func SegmCOCO(in GeoInput, recs []GeoRecord) (vals []Value, ok bool) {
	images := make([]ImageRecord, len(recs))
	for i, r := range recs {
		if r.Width <= 0 || r.Height <= 0 {
			return nil, false
		}
		truth := keptTruth(box.KindPolygon, in.Images[i].Truth)
		images[i] = ImageRecord{Image: i, COCO: segmMatchImage(truth, in.Preds[i], r.Width, r.Height)}
	}
	v, _ := reduceCOCO(images, false)
	return v, true
}
