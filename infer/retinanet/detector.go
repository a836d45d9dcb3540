package retinanet

import (
	"context"
	"fmt"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/infer"
	"github.com/canopy-hpc/canopy/infer/imagefile"
	"github.com/canopy-hpc/canopy/infer/nn"
)

// Detector is the infer.Detector of a loaded Model on the CPU: it reads
// each image (PNG, JPEG, TIFF) as DeepForest does, runs it on its own (no
// batch padding, so an image's detections never depend on its neighbours)
// and reads the next image while the current one computes.
type Detector struct {
	r *Runner
	// labels maps the model's label ids to the job's label ids.
	labels []int32
	name   string
}

var _ infer.LossDetector = (*Detector)(nil)

// NewDetector runs m with threads workers; labels[k] is the job's id for the
// model's label k (len(labels) must equal m.Classes). The model is the CPU's
// from then on: the 3×3 weights its Winograd filters replace are dropped
// (Released), and a GPU runner refuses it.
func NewDetector(m *Model, threads int, labels []int32) (*Detector, error) {
	if len(labels) != m.Classes {
		return nil, fmt.Errorf("retinanet: %d label ids for a %d-class model: %w", len(labels), m.Classes, infer.ErrModel)
	}
	return &Detector{r: newRunner(m, threads, true), labels: labels, name: "retinanet-cpu " + m.Arch}, nil
}

// Runner is the detector's runner (memprobe times and measures it).
func (d *Detector) Runner() *Runner { return d.r }

// Name implements infer.Detector.
func (d *Detector) Name() string { return d.name }

// Threads is the number of worker threads.
func (d *Detector) Threads() int { return d.r.Threads() }

type decoded struct {
	img Image
	err error
}

// Detect implements infer.Detector. Image errors wrap imagefile.ErrImage.
func (d *Detector) Detect(ctx context.Context, batch []infer.Input) ([][]box.Detection, error) {
	out, _, err := d.detect(ctx, batch, nil)
	return out, err
}

// DetectLoss implements infer.LossDetector.
func (d *Detector) DetectLoss(ctx context.Context, batch []infer.Input, truth [][]box.Truth) ([][]box.Detection, []box.Loss, error) {
	if err := truthFits(truth, batch); err != nil {
		return nil, nil, err
	}
	return d.detect(ctx, batch, truth)
}

// detect runs batch; with truth (non-nil), it also computes the losses.
func (d *Detector) detect(ctx context.Context, batch []infer.Input, truth [][]box.Truth) ([][]box.Detection, []box.Loss, error) {
	out := make([][]box.Detection, len(batch))
	var losses []box.Loss
	if truth != nil {
		losses = make([]box.Loss, len(batch))
	}
	next := make(chan decoded, 1)
	read := func(i int) {
		im, err := batch[i].Read()
		next <- decoded{Image(im), err}
	}
	if len(batch) > 0 {
		go read(0)
	}
	for i := range batch {
		cur := <-next
		if cur.err != nil {
			return nil, nil, cur.err
		}
		if i+1 < len(batch) {
			go read(i + 1)
		}
		if err := ctx.Err(); err != nil {
			if i+1 < len(batch) {
				<-next
			}
			return nil, nil, err
		}
		if err := checkSize(batch[i].File, cur.img, d.r.m.Opt); err != nil {
			return nil, nil, err
		}
		var dets []Detection
		var loss box.Loss
		var err error
		if truth != nil {
			dets, loss, err = d.r.Check(cur.img, Targets(truth[i], cur.img.W, cur.img.H, d.classOf), true)
			losses[i] = loss
		} else {
			dets, _, err = d.r.Check(cur.img, nil, false)
		}
		if err != nil {
			if i+1 < len(batch) {
				<-next
			}
			return nil, nil, fmt.Errorf("%w (image %s)", err, batch[i].File)
		}
		out[i] = toBoxes(dets, d.labels)
	}
	return out, losses, nil
}

// truthFits checks that DetectLoss has truth for every image.
func truthFits(truth [][]box.Truth, batch []infer.Input) error {
	if len(truth) != len(batch) {
		return fmt.Errorf("retinanet: truth for %d of %d images: %w", len(truth), len(batch), infer.ErrModel)
	}
	return nil
}

// classOf maps a job label id to the model's class.
func (d *Detector) classOf(id int32) (int, bool) { return modelClass(d.labels, id) }

// modelClass is the model class whose job label id is id.
func modelClass(labels []int32, id int32) (int, bool) {
	for k, v := range labels {
		if v == id {
			return k, true
		}
	}
	return 0, false
}

// checkSize refuses an image torchvision's resize would shrink to nothing.
func checkSize(file string, img Image, opt Options) error {
	if oh, ow := resizeSize(img.H, img.W, opt); oh < 1 || ow < 1 {
		return fmt.Errorf("retinanet: %s: a %dx%d image resizes to %dx%d: too elongated for min_size %d, max_size %d (resize rule %s): %w",
			file, img.W, img.H, ow, oh, opt.MinSize, opt.MaxSize, opt.Resize, imagefile.ErrImage)
	}
	return nil
}

// toBoxes maps detections onto the job's label ids.
func toBoxes(dets []Detection, labels []int32) []box.Detection {
	o := make([]box.Detection, len(dets))
	for k, x := range dets {
		o[k] = box.Detection{
			Box:   box.Box{Xmin: float64(x.Box[0]), Ymin: float64(x.Box[1]), Xmax: float64(x.Box[2]), Ymax: float64(x.Box[3])},
			Label: labels[x.Label],
			Score: float64(x.Score),
		}
	}
	return o
}

// Close implements infer.Detector.
func (d *Detector) Close() error { return nil }

// EnableLayerTimes makes Detect time every layer group.
func (d *Detector) EnableLayerTimes() { d.r.EnableLayerTimes() }

// LayerTimes returns the time per layer group so far, slowest first.
func (d *Detector) LayerTimes() []nn.LayerTime { return d.r.LayerTimes() }
