package retinanet

import (
	"context"
	"fmt"
	"sync"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/infer"
	"github.com/canopy-hpc/canopy/infer/cuda"
	"github.com/canopy-hpc/canopy/infer/imagefile"
)

// GPUDetector is the infer.Detector of a Model on a cuda.Device: it reads a
// batch's images concurrently (as DeepForest reads them), then runs them
// through GPURunner.DetectBatch, which batches images of one padded size
// and transforms the next group while the device computes.
type GPUDetector struct {
	r      *GPURunner
	labels []int32
	name   string
}

var _ infer.Detector = (*GPUDetector)(nil)

// NewGPUDetector runs m on dev at precision p; labels as NewDetector.
func NewGPUDetector(m *Model, dev cuda.Device, p cuda.Precision, labels []int32) (*GPUDetector, error) {
	if len(labels) != m.Classes {
		return nil, fmt.Errorf("retinanet: %d label ids for a %d-class model: %w", len(labels), m.Classes, infer.ErrModel)
	}
	info := dev.Info()
	return &GPUDetector{r: NewGPURunner(m, dev, p), labels: labels,
		name: fmt.Sprintf("retinanet-%s %s %s on %s", info.Backend, p, m.Arch, info.Name)}, nil
}

// Name implements infer.Detector.
func (d *GPUDetector) Name() string { return d.name }

// Detect implements infer.Detector. Image errors wrap imagefile.ErrImage.
func (d *GPUDetector) Detect(ctx context.Context, batch []infer.Input) ([][]box.Detection, error) {
	imgs := make([]Image, len(batch))
	errs := make([]error, len(batch))
	var wg sync.WaitGroup
	for i := range batch {
		wg.Add(1)
		go func() {
			defer wg.Done()
			im, err := imagefile.Read(batch[i].File)
			imgs[i], errs[i] = Image(im), err
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return nil, err
		}
		if err := checkSize(batch[i].File, imgs[i], d.r.m.Opt); err != nil {
			return nil, err
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	dets, err := d.r.DetectBatch(imgs, len(imgs))
	if err != nil {
		return nil, err
	}
	out := make([][]box.Detection, len(dets))
	for i, ds := range dets {
		out[i] = toBoxes(ds, d.labels)
	}
	return out, nil
}

// Close implements infer.Detector: it frees the runner's device memory and
// the device.
func (d *GPUDetector) Close() error {
	err := d.r.Close()
	if cerr := d.r.g.dev.Close(); err == nil {
		err = cerr
	}
	return err
}

// EnableLayerTimes makes Detect time every layer group on the device.
func (d *GPUDetector) EnableLayerTimes() { d.r.EnableLayerTimes() }

// LayerTimes returns the time per layer group so far, slowest first.
func (d *GPUDetector) LayerTimes() []LayerTime { return d.r.LayerTimes() }

// Device describes the detector's device.
func (d *GPUDetector) Device() cuda.Info { return d.r.g.dev.Info() }
