package cropstage

import (
	"context"
	"fmt"

	"github.com/canopy-hpc/canopy/infer/crop"
	"github.com/canopy-hpc/canopy/infer/cuda"
	"github.com/canopy-hpc/canopy/infer/gpu"
	"github.com/canopy-hpc/canopy/infer/imagefile"
	"github.com/canopy-hpc/canopy/mpi"
)

// OpenOne loads eval-crops' crop model (--crop-model) on every rank
// as predict's crop stage loads its models (openCropModels: one
// collective error, every rank's weights rank 0's) and classifies with its
// runner: threads workers (default: the rank's share of the cores).
func OpenOne(c mpi.Comm, path, labelDict string, threads int) (Classifier, error) {
	cc := CropConfig{Models: []string{path}}
	if labelDict != "" {
		cc.LabelDicts = []string{labelDict}
	}
	cs, err := Open(c, cc, DefaultWorkers(threads, c.LocalSize()))
	if err != nil {
		return nil, err
	}
	m := cs.models[0]
	return &oneCropModel{m: m, info: cs.Info[0], run: crop.NewRunner(m.Net(), cs.workers)}, nil
}

// oneCropModel is a loaded crop model as eval-crops uses it.
type oneCropModel struct {
	m    *crop.Model
	info ModelInfo
	run  *crop.Runner
	gpu  *crop.GPURunner // --device cuda: the GPU engine (OnGPU)
}

// OnGPU makes eval-crops' classifier run on dev (--device cuda) in a GPU
// engine of its own at opt's precision (crop.NewGPURunnerOn: canopy's
// exact kernels, or cuDNN's graphs in batches of crop.GPUBatch); the
// report's crop_model.device names it. Close frees the engine and dev.
func (o *oneCropModel) OnGPU(dev cuda.Device, opt gpu.Options) error {
	r, err := crop.NewGPURunnerOn(o.m.Net(), dev, opt)
	if err != nil {
		return err
	}
	o.gpu = r
	o.info.Device = fmt.Sprintf("cuda %s on %s", opt.Precision, dev.Info().Name)
	return nil
}

// GPU is the classifier's GPU (OnGPU's device).
func (o *oneCropModel) GPU() cuda.Info {
	if o.gpu == nil {
		return cuda.Info{}
	}
	return o.gpu.Engine().Dev.Info()
}

// Device is where the classifier runs: "cpu", or "cuda <precision> on
// <GPU>" (report.json's crop_model.device).
func (o *oneCropModel) Device() string { return o.info.Device }

// Close frees the GPU engine and its device (none on the CPU).
func (o *oneCropModel) Close() error {
	if o.gpu == nil {
		return nil
	}
	err := o.gpu.Close()
	if cerr := o.gpu.Engine().Dev.Close(); err == nil {
		err = cerr
	}
	o.gpu = nil
	return err
}

func (o *oneCropModel) Labels() []string { return o.m.Labels() }
func (o *oneCropModel) Info() any        { return o.info }
func (o *oneCropModel) Expand() int      { return o.m.Transform.Expand }
func (o *oneCropModel) BatchSize() int   { return o.m.BatchSize }

// Classify transforms and classifies the crops; each one's score is
// DeepForest's postprocess_predictions value (Output.Best).
func (o *oneCropModel) Classify(ctx context.Context, crops []imagefile.Image) ([][]float32, []float32, error) {
	var out []crop.Output
	var err error
	if o.gpu != nil {
		out, err = o.gpu.Classify(ctx, o.m.Transform, crops)
	} else {
		out, err = o.run.Classify(ctx, o.m.Transform, crops)
	}
	if err != nil {
		return nil, nil, err
	}
	logits, scores := make([][]float32, len(out)), make([]float32, len(out))
	for i, r := range out {
		logits[i] = r.Logits
		_, scores[i] = r.Best()
	}
	return logits, scores, nil
}

// Classifier is what eval-crops needs of a crop model.
type Classifier interface {
	// Labels are the class names by index.
	Labels() []string
	// Classify classifies raw crops (imagefile's layout), in order: for
	// each, its len(Labels()) logits and its score, the largest softmax
	// probability (DeepForest's postprocess_predictions).
	Classify(ctx context.Context, crops []imagefile.Image) (logits [][]float32, scores []float32, err error)
	// Info is what report.json records of the model.
	Info() any
	// Expand is the context its crops of boxes take (cropmodel.expand).
	Expand() int
	// BatchSize is its stored cropmodel.batch_size (0: not stated).
	BatchSize() int
}
