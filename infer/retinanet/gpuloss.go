package retinanet

import (
	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/infer/cuda/kernels"
)

// The validation losses on the device: kernels.cu's loss_* kernels match
// the anchors of a whole batch against its truth boxes and sum the focal
// and L1 terms in lossAcc's order (per channel, location by location, in
// float64; the channels level by level), so an image's losses are the
// host's within rounding of exp and log (TestDeviceLosses). Only three
// numbers per image come back.

// losses computes a launched group's losses against its targets.
func (r *GPURunner) losses(l launched) []box.Loss {
	g := r.g
	defer g.timed("loss")()
	n, K := len(l.imgs), r.m.Classes
	G := 1
	for _, ts := range l.targets {
		G = max(G, len(ts))
	}
	gt := make([]float32, n*G*5)
	gtn := make([]float32, n)
	for i, ts := range l.targets {
		rx := float32(l.rw[i]) / float32(l.imgs[i].W)
		ry := float32(l.rh[i]) / float32(l.imgs[i].H)
		for j, t := range ts {
			b := t.Box
			copy(gt[(i*G+j)*5:], []float32{b[0] * rx, b[1] * ry, b[2] * rx, b[3] * ry, float32(t.Label)})
		}
		gtn[i] = float32(len(ts))
	}
	var lv []float32
	NA := 0
	for L := 0; L < 5; L++ {
		c := l.cls[L]
		lv = append(lv, float32(c.h), float32(c.w), float32(NA))
		NA += c.h * c.w * NumAnchors
	}
	up := func(v []float32) dmap {
		d := g.scratch(len(v))
		g.uploadAsync(d.p, v)
		return d
	}
	gd, gn, lvd := up(gt), up(gtn), up(lv)
	cells := r.cellBuffer()
	match, arg := g.scratch(n*NA), g.scratch(n*NA)
	gtbest, fg := g.scratch(n*G), g.scratch(n)
	g.launchN(kernels.FillU32, n*G, gtbest.p, int64(n*G), 0)
	g.launchN(kernels.FillU32, n, fg.p, int64(n), 0)
	g.launchN(kernels.LossMatch, n*NA, gd.p, gn.p, cells, lvd.p, match.p, arg.p, gtbest.p, n, NA, G, l.ph, l.pw)
	g.launchN(kernels.LossLowQ, n*NA, gd.p, gn.p, cells, lvd.p, match.p, arg.p, gtbest.p, fg.p, n, NA, G, l.ph, l.pw)
	CH := NumAnchors*K + NumAnchors*4
	sums := g.scratch(2 * n * 5 * CH)
	for L := 0; L < 5; L++ {
		g.launchN(kernels.LossSums, n*CH, l.cls[L].p, l.reg[L].p, gd.p, cells, lvd.p, match.p, sums.p,
			n, NA, G, K, L, l.ph, l.pw)
	}
	out := g.scratch(3 * n)
	g.launchN(kernels.LossFinal, n, sums.p, fg.p, out.p, n, K)
	host := make([]float32, 3*n)
	if g.err == nil {
		g.fail(g.dev.Download(host, out.p))
	}
	g.Put(gd, gn, lvd, match, arg, gtbest, fg, sums, out)
	if g.err != nil {
		return nil
	}
	res := make([]box.Loss, n)
	for i := range res {
		res[i] = box.Loss{Classification: host[3*i], BoxRegression: host[3*i+1]}
	}
	return res
}
