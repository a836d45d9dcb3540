package retinanet

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/infer"
	"github.com/canopy-hpc/canopy/infer/cuda"
	"github.com/canopy-hpc/canopy/infer/gpu"
	"github.com/canopy-hpc/canopy/infer/nn"
)

// GPUDetector is the infer.Detector of a Model on a cuda.Device: it reads a
// batch's images concurrently (as DeepForest reads them; the next batch's
// while this one computes, when the job announces it with Prefetch), then
// runs them through GPURunner.DetectBatch, which batches images of one
// padded size and transforms the next group while the device computes.
type GPUDetector struct {
	r       *GPURunner
	slots   int // the global batch N (cuDNN path), 0: batches as they come
	labels  []int32
	name    string
	pending []*reading // batches Prefetch started, oldest first
	workers int        // decoding goroutines per batch (the rank's cores)
}

var (
	_ infer.LossDetector = (*GPUDetector)(nil)
	_ infer.Prefetcher   = (*GPUDetector)(nil)
)

// reading is a batch being decoded in the background: each image and its
// 8-bit samples (the device transform's input; nil when not 8-bit).
type reading struct {
	files []string
	done  chan struct{}
	imgs  []Image
	u8    [][]byte
	errs  []error
}

// read decodes files on at most workers goroutines (the rank's core
// budget); done closes when all are read.
func read(batch []infer.Input, workers int) *reading {
	r := &reading{done: make(chan struct{}), imgs: make([]Image, len(batch)), u8: make([][]byte, len(batch)), errs: make([]error, len(batch))}
	for _, in := range batch {
		r.files = append(r.files, in.File)
	}
	slots := make(chan struct{}, max(workers, 1))
	go func() {
		defer close(r.done)
		var wg sync.WaitGroup
		for i := range batch {
			wg.Add(1)
			slots <- struct{}{}
			go func() {
				defer func() { <-slots; wg.Done() }()
				im, err := batch[i].Read()
				r.imgs[i], r.errs[i] = Image(im), err
				if err == nil {
					b := make([]byte, len(im.Pix))
					if pixBytes(im.Pix, b) {
						r.u8[i] = b
					}
				}
			}()
		}
		wg.Wait()
	}()
	return r
}

// SetDecodeWorkers sets how many goroutines decode a batch (the rank's
// cores; at least 1, the default).
func (d *GPUDetector) SetDecodeWorkers(n int) { d.workers = max(n, 1) }

// Prefetch implements infer.Prefetcher: it starts decoding batch. At most
// two batches wait (the job announces one ahead); an older one is dropped.
func (d *GPUDetector) Prefetch(batch []infer.Input) {
	if len(d.pending) == 2 {
		<-d.pending[0].done
		d.pending = d.pending[1:]
	}
	d.pending = append(d.pending, read(batch, d.workers))
}

// take returns the prefetched reading of batch, dropping older ones, or
// starts reading it.
func (d *GPUDetector) take(batch []infer.Input) *reading {
	for i, r := range d.pending {
		if sameFiles(r.files, batch) {
			for _, old := range d.pending[:i] {
				<-old.done
			}
			d.pending = append([]*reading(nil), d.pending[i+1:]...)
			return r
		}
	}
	return read(batch, d.workers)
}

// NewGPUDetector runs m on dev at precision p; labels as NewDetector.
func NewGPUDetector(m *Model, dev cuda.Device, p cuda.Precision, labels []int32) (*GPUDetector, error) {
	if len(labels) != m.Classes {
		return nil, fmt.Errorf("retinanet: %d label ids for a %d-class model: %w", len(labels), m.Classes, infer.ErrModel)
	}
	info := dev.Info()
	return &GPUDetector{r: NewGPURunner(m, dev, p), labels: labels, workers: 1,
		name: fmt.Sprintf("retinanet-%s %s %s on %s", info.Backend, p, m.Arch, info.Name)}, nil
}

// NewGPUDetectorWith is NewGPUDetector with the runner's options (the
// cuDNN path). slots > 0 batches by global position: every Detect call
// holds images of one global batch k (Input.Index in [kN, kN+N)), each run
// in slot Index mod N of a batch of N (DetectSlots).
func NewGPUDetectorWith(m *Model, dev cuda.Device, o gpu.Options, labels []int32, slots int) (*GPUDetector, error) {
	if len(labels) != m.Classes {
		return nil, fmt.Errorf("retinanet: %d label ids for a %d-class model: %w", len(labels), m.Classes, infer.ErrModel)
	}
	r, err := NewGPURunnerWith(m, dev, o)
	if err != nil {
		return nil, err
	}
	info := dev.Info()
	return &GPUDetector{r: r, labels: labels, slots: slots,
		name: fmt.Sprintf("retinanet-%s %s %s on %s", info.Backend, o.Precision, m.Arch, info.Name)}, nil
}

// CUDNN reports the detector's cuDNN use (nil off the cuDNN path).
func (d *GPUDetector) CUDNN() *gpu.CUDNNReport { return d.r.CUDNN() }

// Name implements infer.Detector.
func (d *GPUDetector) Name() string { return d.name }

// Detect implements infer.Detector. Image errors wrap imagefile.ErrImage.
func (d *GPUDetector) Detect(ctx context.Context, batch []infer.Input) ([][]box.Detection, error) {
	out, _, err := d.detect(ctx, batch, nil)
	return out, err
}

// DetectLoss implements infer.LossDetector.
func (d *GPUDetector) DetectLoss(ctx context.Context, batch []infer.Input, truth [][]box.Truth) ([][]box.Detection, []box.Loss, error) {
	if err := truthFits(truth, batch); err != nil {
		return nil, nil, err
	}
	return d.detect(ctx, batch, truth)
}

func (d *GPUDetector) detect(ctx context.Context, batch []infer.Input, truth [][]box.Truth) ([][]box.Detection, []box.Loss, error) {
	r := d.take(batch)
	<-r.done
	imgs, errs := r.imgs, r.errs
	for i, err := range errs {
		if err != nil {
			return nil, nil, err
		}
		if err := checkSize(batch[i].File, imgs[i], d.r.m.Opt); err != nil {
			return nil, nil, err
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	var targets [][]Target
	if truth != nil {
		targets = make([][]Target, len(imgs))
		for i, img := range imgs {
			targets[i] = Targets(truth[i], img.W, img.H, func(id int32) (int, bool) { return modelClass(d.labels, id) })
		}
	}
	if d.r.g.Holds() {
		d.r.keys = make(map[*float32]int, len(imgs))
		for i, im := range imgs {
			if len(im.Pix) > 0 {
				d.r.keys[&im.Pix[0]] = batch[i].Index
			}
		}
		defer func() { d.r.keys = nil }()
	}
	var dets [][]Detection
	var losses []box.Loss
	var err error
	if d.slots > 0 {
		idx := make([]int, len(batch))
		for i, in := range batch {
			idx[i] = in.Index
		}
		dets, losses, err = d.r.DetectSlots(imgs, idx, targets, d.slots)
	} else {
		dets, losses, err = d.r.detectBatch(imgs, r.u8, targets, len(imgs))
	}
	var ne *NonFiniteError
	if errors.As(err, &ne) { // the runner checked the head outputs, the detections and the losses
		files := make([]string, len(batch))
		for i, in := range batch {
			files[i] = in.File
		}
		return nil, nil, fmt.Errorf("%w (in the batch of %s)", err, strings.Join(files, ", "))
	}
	if err != nil {
		return nil, nil, err
	}
	out := make([][]box.Detection, len(dets))
	for i, ds := range dets {
		out[i] = toBoxes(ds, d.labels)
	}
	return out, losses, nil
}

func sameFiles(files []string, batch []infer.Input) bool {
	if len(files) != len(batch) {
		return false
	}
	for i, in := range batch {
		if files[i] != in.File {
			return false
		}
	}
	return true
}

// Close implements infer.Detector: it frees the runner's device memory and
// the device.
func (d *GPUDetector) Close() error {
	for _, r := range d.pending {
		<-r.done
	}
	d.pending = nil
	err := d.r.Close()
	if cerr := d.r.g.Dev.Close(); err == nil {
		err = cerr
	}
	return err
}

// EnableLayerTimes makes Detect time every layer group on the device.
func (d *GPUDetector) EnableLayerTimes() { d.r.EnableLayerTimes() }

// LayerTimes returns the time per layer group so far, slowest first.
func (d *GPUDetector) LayerTimes() []nn.LayerTime { return d.r.LayerTimes() }

// CropEngine is the detector's GPU engine, where the crop models run
// (internal/cropstage: the same device, precision, cuDNN handle, plans
// and workspace; the detector's batches are done before the crop stage).
func (d *GPUDetector) CropEngine() *gpu.Engine { return d.r.g }

// HoldWindows makes the detector keep each image's pixels on the device
// after its transform, under its input's Index (a tile run's global
// window), within budget bytes, oldest dropped first (0: keep none): the
// crop stage on its engine then cuts the crops of a window from them
// (gpu.Engine.HeldSource) instead of uploading the pixels again.
func (d *GPUDetector) HoldWindows(budget int64) { d.r.g.HoldSources(budget) }

// Device describes the detector's device.
func (d *GPUDetector) Device() cuda.Info { return d.r.g.Dev.Info() }
