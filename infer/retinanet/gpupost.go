package retinanet

import (
	"unsafe"

	"github.com/canopy-hpc/canopy/infer/cuda"
	"github.com/canopy-hpc/canopy/infer/cuda/kernels"
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

// uploadAsync copies v to p through the device's double-buffered byte
// upload, which waits only for its staging buffer's previous copy (Upload
// drains the stream first: a wait inside a batch that the data do not
// need).
func (g *gpuEngine) uploadAsync(p cuda.Ptr, v []float32) {
	if g.err == nil && len(v) > 0 {
		g.fail(g.dev.UploadBytes(p, unsafe.Slice((*byte)(unsafe.Pointer(&v[0])), 4*len(v))))
	}
}

// launchN queues kernel name over count threads (elementwise geometry);
// nothing for none.
func (g *gpuEngine) launchN(name string, count int, args ...any) {
	if g.err == nil && count > 0 {
		g.fail(g.dev.Launch(name, kernels.Elem(count), args...))
	}
}

// scratch is a device buffer of n floats from the free list.
func (g *gpuEngine) scratch(n int) dmap { return g.alloc(1, 1, 1, max(n, 1)) }

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
	p, err := g.dev.Alloc(len(flat))
	g.fail(err)
	if err == nil {
		g.fail(g.dev.Upload(p, flat))
		r.cells = p
	}
	return r.cells
}

// imageSizes uploads each image's size and resized size (H, W, rh, rw)
// to ip, or to a new buffer when ip is the zero dmap.
func (r *GPURunner) imageSizes(l launched, ip dmap) dmap {
	g := r.g
	imgp := make([]float32, 0, 4*len(l.imgs))
	for i, img := range l.imgs {
		imgp = append(imgp, float32(img.H), float32(img.W), float32(l.rh[i]), float32(l.rw[i]))
	}
	if ip.p == 0 {
		ip = g.scratch(len(imgp))
	}
	g.uploadAsync(ip.p, imgp)
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
	ip := r.imageSizes(l, dmap{})
	out := r.postLaunch(l, ip)
	dets := r.postDownload(out, len(l.imgs))
	r.g.Put(ip, out)
	return dets
}

// postLaunch queues the postprocess kernels of a launched group (ip: its
// image sizes, imageSizes) and returns the buffer its detections land in:
// per image a count and DetectionsPerImg × PostCand floats.
func (r *GPURunner) postLaunch(l launched, ip dmap) dmap {
	g := r.g
	defer g.timed("postprocess")()
	o := r.m.Opt
	n, K := len(l.imgs), r.m.Classes
	AK := NumAnchors * K
	topk, dets := o.TopkCandidates, o.DetectionsPerImg
	S := 1
	for L := 0; L < 5; L++ {
		S = max(S, nextPow2(AK*l.cls[L].h*l.cls[L].w))
	}
	cells := r.cellBuffer()
	total := n * 5 * S
	keys := g.scratch(2 * total)
	for L := 0; L < 5; L++ {
		c := l.cls[L]
		g.launchN(kernels.PostKeys, n*S, c.p, keys.p, n, AK, K, c.h*c.w, S, L, o.ScoreThresh)
	}
	for k := 2; k <= S; k <<= 1 {
		for j := k >> 1; j > 0; j >>= 1 {
			g.launchN(kernels.BitonicStep, total, keys.p, int64(total), S, j, k)
		}
	}
	N := 5 * topk
	cand := g.scratch(n * N * kernels.PostCand)
	for L := 0; L < 5; L++ {
		c := l.reg[L]
		g.launchN(kernels.PostDecode, n*topk, keys.p, c.p, cells, ip.p, cand.p,
			n, topk, S, L, K, c.h, c.w, l.ph, l.pw, bboxClip)
	}
	sorted := g.scratch(n * N * kernels.PostCand)
	g.launchN(kernels.PostMerge, n*N, cand.p, sorted.p, n, topk)
	meta := g.scratch(3 * n)
	g.launchN(kernels.PostNMSPrep, n, cand.p, meta.p, n, topk)
	W := (N + 63) / 64
	mask := g.scratch(2 * n * N * W)
	g.launchN(kernels.PostNMSMask, n*N*W, sorted.p, meta.p, mask.p, n, N, W, o.NMSThresh)
	removed := g.scratch(2 * n * W)
	out := g.scratch(n * (1 + dets*kernels.PostCand))
	ord := g.scratch(n * N) // int32 each
	g.launchN(kernels.PostNMSScan, n, sorted.p, meta.p, mask.p, removed.p, ip.p, out.p, n, N, W, dets,
		cand.p, ord.p, topk)
	g.Put(keys, cand, sorted, meta, mask, removed, ord)
	return out
}

// postDownload brings n images' detections back from out (postLaunch).
func (r *GPURunner) postDownload(out dmap, n int) [][]Detection {
	g := r.g
	defer g.timed("download")()
	per := 1 + r.m.Opt.DetectionsPerImg*kernels.PostCand
	host := make([]float32, n*per)
	if g.err == nil {
		g.fail(g.dev.Download(host, out.p))
	}
	if g.err != nil {
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
