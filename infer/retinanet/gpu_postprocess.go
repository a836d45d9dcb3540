package retinanet

import (
	"github.com/canopy-hpc/canopy/infer/cuda"
	"github.com/canopy-hpc/canopy/infer/cuda/kernels"
	"github.com/canopy-hpc/canopy/infer/gpu"
)

// The postprocess on the device: kernels.cu's post_* kernels compute
// levelCandidates and finish for a whole batch (sigmoid and threshold,
// each level's best TopkCandidates by score and then index, the boxes
// decoded and clipped, the levels merged in batchedNMS's stable order, the
// NMS, in the per-label mode the survivors put in batchedNMS's final order
// (index order, then torch's unstable sort: torchSortDesc), the best
// DetectionsPerImg scaled back to the image) with the CPU
// code's float32 operations, so the detections and their order are the
// CPU postprocess's, bit for bit (TestDevicePostprocessBits). Only the
// final detections come back.

// cellBuffer uploads the levels' cell anchors, [5][A][4] (once per
// runner).
func (r *GPURunner) cellBuffer() cuda.Ptr {
	g := r.g
	if r.cells != 0 {
		return r.cells
	}
	flat := make([]float32, 0, 5*4*NumAnchors)
	for L := 0; L < 5; L++ {
		for _, a := range cellAnchors(L) {
			flat = append(flat, a[:]...)
		}
	}
	p, err := g.Dev.Alloc(len(flat))
	g.Fail(err)
	if err == nil {
		g.Fail(g.Dev.Upload(p, flat))
		r.cells = p
	}
	return r.cells
}

// imageSizes uploads each image's size and resized size (H, W, rh, rw)
// to ip, or to a new buffer when ip is the zero gpu.Map.
func (r *GPURunner) imageSizes(l launched, ip gpu.Map) gpu.Map {
	g := r.g
	imgp := make([]float32, 0, 4*len(l.imgs))
	for i, img := range l.imgs {
		imgp = append(imgp, float32(img.H), float32(img.W), float32(l.rh[i]), float32(l.rw[i]))
	}
	if ip.P == 0 {
		ip = g.Scratch(len(imgp))
	}
	g.UploadAsync(ip.P, imgp)
	return ip
}

// nextPow2 is the least power of two ≥ n (1 for n ≤ 1).
func nextPow2(n int) int {
	p := 1
	for p < n {
		p <<= 1
	}
	return p
}

// postprocess runs a launched group's postprocess on the device and
// downloads its detections.
func (r *GPURunner) postprocess(l launched) [][]Detection {
	ip := r.imageSizes(l, gpu.Map{})
	out := r.postLaunch(l, ip)
	dets := r.postDownload(out, len(l.imgs))
	r.g.Put(ip, out)
	return dets
}

// postLaunch queues the postprocess kernels of a launched group (ip: its
// image sizes, imageSizes) and returns the buffer its detections land in:
// per image a count and DetectionsPerImg × PostCand floats.
func (r *GPURunner) postLaunch(l launched, ip gpu.Map) gpu.Map {
	g := r.g
	defer g.Timed("postprocess")()
	o := r.m.Opt
	n, K := len(l.imgs), r.m.Classes
	AK := NumAnchors * K
	topk, dets := o.TopkCandidates, o.DetectionsPerImg
	S := 1
	for L := 0; L < 5; L++ {
		S = max(S, nextPow2(AK*l.cls[L].H*l.cls[L].W))
	}
	cells := r.cellBuffer()
	total := n * 5 * S
	keys := g.Scratch(2 * total)
	for L := 0; L < 5; L++ {
		c := l.cls[L]
		g.LaunchN(kernels.PostKeys, n*S, c.P, keys.P, n, AK, K, c.H*c.W, S, L, o.ScoreThresh)
	}
	for k := 2; k <= S; k <<= 1 {
		for j := k >> 1; j > 0; j >>= 1 {
			g.LaunchN(kernels.BitonicStep, total, keys.P, int64(total), S, j, k)
		}
	}
	N := 5 * topk
	cand := g.Scratch(n * N * kernels.PostCand)
	for L := 0; L < 5; L++ {
		c := l.reg[L]
		g.LaunchN(kernels.PostDecode, n*topk, keys.P, c.P, cells, ip.P, cand.P,
			n, topk, S, L, K, c.H, c.W, l.ph, l.pw, bboxClip)
	}
	sorted := g.Scratch(n * N * kernels.PostCand)
	g.LaunchN(kernels.PostMerge, n*N, cand.P, sorted.P, n, topk)
	meta := g.Scratch(3 * n)
	g.LaunchN(kernels.PostNMSPrep, n, cand.P, meta.P, n, topk)
	W := (N + 63) / 64
	mask := g.Scratch(2 * n * N * W)
	g.LaunchN(kernels.PostNMSMask, n*N*W, sorted.P, meta.P, mask.P, n, N, W, o.NMSThresh)
	removed := g.Scratch(2 * n * W)
	out := g.Scratch(n * (1 + dets*kernels.PostCand))
	ord := g.Scratch(n * N) // int32 each
	g.LaunchN(kernels.PostNMSScan, n, sorted.P, meta.P, mask.P, removed.P, ip.P, out.P, n, N, W, dets,
		cand.P, ord.P, topk)
	g.Put(keys, cand, sorted, meta, mask, removed, ord)
	return out
}

// postDownload brings n images' detections back from out (postLaunch).
func (r *GPURunner) postDownload(out gpu.Map, n int) [][]Detection {
	g := r.g
	defer g.Timed("download")()
	per := 1 + r.m.Opt.DetectionsPerImg*kernels.PostCand
	host := make([]float32, n*per)
	if g.Err == nil {
		g.Fail(g.Dev.Download(host, out.P))
	}
	if g.Err != nil {
		return nil
	}
	res := make([][]Detection, n)
	for i := range res {
		h := host[i*per : (i+1)*per]
		k := int(h[0])
		res[i] = make([]Detection, k)
		for j := range res[i] {
			d := h[1+j*kernels.PostCand:]
			res[i][j] = Detection{Box: [4]float32{d[0], d[1], d[2], d[3]}, Score: d[4], Label: int(d[5])}
		}
	}
	return res
}
