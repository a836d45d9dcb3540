package retinanet

import (
	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/infer/cuda/kernels"
	"github.com/canopy-hpc/canopy/infer/gpu"
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
	defer g.Timed("loss")()
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
		lv = append(lv, float32(c.H), float32(c.W), float32(NA))
		NA += c.H * c.W * NumAnchors
	}
	up := func(v []float32) gpu.Map {
		d := g.Scratch(len(v))
		g.UploadAsync(d.P, v)
		return d
	}
	gd, gn, lvd := up(gt), up(gtn), up(lv)
	cells := r.cellBuffer()
	match, arg := g.Scratch(n*NA), g.Scratch(n*NA)
	gtbest, fg := g.Scratch(n*G), g.Scratch(n)
	g.LaunchN(kernels.FillU32, n*G, gtbest.P, int64(n*G), 0)
	g.LaunchN(kernels.FillU32, n, fg.P, int64(n), 0)
	g.LaunchN(kernels.LossMatch, n*NA, gd.P, gn.P, cells, lvd.P, match.P, arg.P, gtbest.P, n, NA, G, l.ph, l.pw)
	g.LaunchN(kernels.LossLowQ, n*NA, gd.P, gn.P, cells, lvd.P, match.P, arg.P, gtbest.P, fg.P, n, NA, G, l.ph, l.pw)
	CH := NumAnchors*K + NumAnchors*4
	sums := g.Scratch(2 * n * 5 * CH)
	for L := 0; L < 5; L++ {
		g.LaunchN(kernels.LossSums, n*CH, l.cls[L].P, l.reg[L].P, gd.P, cells, lvd.P, match.P, sums.P,
			n, NA, G, K, L, l.ph, l.pw)
	}
	out := g.Scratch(3 * n)
	g.LaunchN(kernels.LossFinal, n, sums.P, fg.P, out.P, n, K)
	host := make([]float32, 3*n)
	if g.Err == nil {
		g.Fail(g.Dev.Download(host, out.P))
	}
	g.Put(gd, gn, lvd, match, arg, gtbest, fg, sums, out)
	if g.Err != nil {
		return nil
	}
	res := make([]box.Loss, n)
	for i := range res {
		res[i] = box.Loss{Classification: host[3*i], BoxRegression: host[3*i+1]}
	}
	return res
}
