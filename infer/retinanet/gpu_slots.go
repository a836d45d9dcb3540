package retinanet

import (
	"fmt"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/infer/cuda"
	"github.com/canopy-hpc/canopy/infer/cuda/cudnn"
	"github.com/canopy-hpc/canopy/infer/gpu"
	"github.com/canopy-hpc/canopy/infer/nn"
)

// CUDNN reports the runner's cuDNN use (nil for exact and kernel-tf32).
func (r *GPURunner) CUDNN() *gpu.CUDNNReport { return r.g.CUDNN() }

// TimedPlans returns what Timing chose per layer shape (gpu-plan), in
// key order.
func (r *GPURunner) TimedPlans() map[string]cudnn.LayerPlan { return r.g.TimedPlans() }

// NewGPURunnerWith runs m on dev as o says: canopy's kernels (exact,
// kernel-tf32) or cuDNN (fp32, tf32, bf16; o.CUDNN must be loaded).
func NewGPURunnerWith(m *Model, dev cuda.Device, o gpu.Options) (*GPURunner, error) {
	if m.Released() {
		return nil, errReleased
	}
	r := NewGPURunner(m, dev, o.Precision)
	if o.Precision.Cudnn() {
		d, err := gpu.NewDNN(dev, []*nn.Conv{m.cls, m.reg}, o)
		if err != nil {
			return nil, err
		}
		r.g.DNN = d
	}
	return r, nil
}

// DetectSlots runs the images of one global batch k of size n: idx[i] is
// image i's global position (all in [kN, kN+N)), and it runs in slot
// idx[i] mod n of a batch of exactly n, the other slots black images of
// the same size. Images of different padded sizes run as separate
// sub-batches (in order of first appearance), each padded to n, each image
// in its own slot. So an image's batch-mates are fixed by the input order
// and n alone: the same for any rank count, whatever cuDNN's engine does
// with its batch. targets as DetectBatchLoss (nil: no losses).
func (r *GPURunner) DetectSlots(imgs []Image, idx []int, targets [][]Target, n int) ([][]Detection, []box.Loss, error) {
	if len(imgs) != len(idx) || n < 1 {
		return nil, nil, fmt.Errorf("retinanet: %d images, %d positions, batch %d", len(imgs), len(idx), n)
	}
	if len(imgs) == 0 {
		return nil, nil, nil
	}
	k := idx[0] / n
	used := map[int]bool{}
	for _, i := range idx {
		if i/n != k || used[i%n] {
			return nil, nil, fmt.Errorf("retinanet: positions %v are not one global batch of %d", idx, n)
		}
		used[i%n] = true
	}
	var keys [][2]int
	byKey := map[[2]int][]int{}
	for i, img := range imgs {
		oh, ow := resizeSize(img.H, img.W, r.m.Opt)
		key := [2]int{(oh + 31) / 32 * 32, (ow + 31) / 32 * 32}
		if _, ok := byKey[key]; !ok {
			keys = append(keys, key)
		}
		byKey[key] = append(byKey[key], i)
	}
	dets := make([][]Detection, len(imgs))
	var losses []box.Loss
	if targets != nil {
		losses = make([]box.Loss, len(imgs))
	}
	for _, key := range keys {
		members := byKey[key]
		first := imgs[members[0]]
		pad := Image{W: first.W, H: first.H, Pix: make([]float32, len(first.Pix))}
		batch := make([]Image, n)
		var tg [][]Target
		if targets != nil {
			tg = make([][]Target, n)
		}
		at := make([]int, n) // slot → image, -1 for a pad
		for s := range batch {
			batch[s], at[s] = pad, -1
		}
		for _, i := range members {
			s := idx[i] % n
			batch[s], at[s] = imgs[i], i
			if tg != nil {
				tg[s] = targets[i]
			}
		}
		var out [][]Detection
		var ls []box.Loss
		var err error
		if tg != nil {
			out, ls, err = r.DetectBatchLoss(batch, tg, n)
		} else {
			out, err = r.DetectBatch(batch, n)
		}
		if err != nil {
			return nil, nil, err
		}
		for s, i := range at {
			if i >= 0 {
				dets[i] = out[s]
				if losses != nil {
					losses[i] = ls[s]
				}
			}
		}
	}
	return dets, losses, nil
}
