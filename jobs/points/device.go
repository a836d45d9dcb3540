package points

import (
	"fmt"

	"github.com/canopy-hpc/canopy/infer/cuda"
	"github.com/canopy-hpc/canopy/infer/cuda/cudnn"
	"github.com/canopy-hpc/canopy/infer/gpu"
	"github.com/canopy-hpc/canopy/infer/tile"
	"github.com/canopy-hpc/canopy/infer/treeformer"
	"github.com/canopy-hpc/canopy/internal/errkind"
	"github.com/canopy-hpc/canopy/internal/modelsel"
	"github.com/canopy-hpc/canopy/mpi"
)

// Device is a point run's --device, --precision and --cudnn.
type Device struct {
	// Request is --device (the zero Request is auto).
	Request cuda.Request
	// Precision is --precision when PrecisionSet; else exact on the CPU
	// and DefaultGPUPrecision on a GPU.
	Precision    cuda.Precision
	PrecisionSet bool
	// CUDNN is --cudnn ("" searches as the box detectors do).
	CUDNN string
}

// DefaultGPUPrecision is a point model's precision on a GPU when
// --precision is not given: fp32 (cuDNN without tensor cores), not the box
// detectors' tf32. A point's score is a density value over the map's
// maximum, held to DeepForest's within 1e-3; TF32's 10-bit operands in
// every linear put that at risk (0.94e-3 measured on the one-block test
// model, gpu_test.go), where FP32 keeps it below 1e-5.
const DefaultGPUPrecision = cuda.FP32

// DeviceInfo is the report's record of where rank 0 ran the model.
type DeviceInfo struct {
	Device    string           `json:"device"` // "cpu" or "cuda:N"
	Reason    string           `json:"reason"`
	Precision string           `json:"precision"`
	GPU       string           `json:"gpu,omitempty"`
	UUID      string           `json:"uuid,omitempty"`
	CUDNN     *gpu.CUDNNReport `json:"cudnn,omitempty"`
}

// engine is a rank's network: the CPU engine, or the GPU runner on the
// rank's device.
type engine struct {
	fwd interface {
		Forward(treeformer.Image, tile.Window) (treeformer.Density, error)
	}
	gpu  *treeformer.GPURunner
	dev  cuda.Device
	info DeviceInfo
}

// openEngine places this rank (node-local rank mod the visible GPUs, as
// the box detectors: cuda.Place) and opens its network. A GPU that cannot
// be used, or a GPU-only flag on a rank placed on the CPU, is exit 5.
func openEngine(c mpi.Comm, cfg Config, m *treeformer.Model) (*engine, error) {
	d := cfg.Device
	gpuErr := func(err error) error {
		return &errkind.Error{Code: errkind.ExitMPI, Err: fmt.Errorf("points: %w", err)}
	}
	visible := 0
	if modelsel.HaveCUDA && d.Request.Kind != "cpu" {
		var err error
		if visible, err = modelsel.CountDevices(); err != nil {
			return nil, gpuErr(fmt.Errorf("counting CUDA devices: %w", err))
		}
	}
	place, err := cuda.Place(d.Request, c.LocalRank(), c.LocalSize(), visible, modelsel.HaveCUDA)
	if err != nil {
		if why := modelsel.NoGPU(); why != "" && visible == 0 {
			err = fmt.Errorf("%w: %s", err, why)
		}
		return nil, gpuErr(err)
	}
	p := d.Precision
	if !d.PrecisionSet {
		p = cuda.Exact
		if place.Kind == "cuda" {
			p = DefaultGPUPrecision
		}
	}
	e := &engine{info: DeviceInfo{Device: place.Kind, Reason: place.Reason, Precision: p.String()}}
	if place.Kind == "cpu" {
		if f := modelsel.GPUOnlyFlag(modelsel.ModelConfig{CUDNN: d.CUDNN}, p); f != "" {
			return nil, gpuErr(fmt.Errorf("%s needs a GPU; this rank runs on the CPU (%s), which computes exact FP32", f, place.Reason))
		}
		e.fwd = treeformer.NewRunner(m, max(cfg.Threads, 1))
		return e, nil
	}
	if p == cuda.BF16 {
		return nil, &errkind.Error{Code: errkind.ExitUsage, Err: treeformer.ErrGPUPrecision}
	}
	o := gpu.Options{Precision: p}
	if p.Cudnn() {
		if o.CUDNN, err = modelsel.FindCUDNN(cudnn.Search{Flag: d.CUDNN}); err != nil {
			return nil, gpuErr(fmt.Errorf("--precision %s: %w (or run --precision exact, canopy's own kernels)", p, err))
		}
	}
	if e.dev, err = modelsel.OpenDevice(place.Index); err != nil {
		return nil, gpuErr(err)
	}
	if e.gpu, err = treeformer.NewGPURunner(m, e.dev, o); err != nil {
		e.dev.Close()
		return nil, gpuErr(err)
	}
	e.fwd = e.gpu
	in := e.dev.Info()
	e.info.Device = fmt.Sprintf("cuda:%d", place.Index)
	e.info.GPU, e.info.UUID = in.Name, in.UUID
	return e, nil
}

// report is the engine's record, with the cuDNN engines it used.
func (e *engine) report() *DeviceInfo {
	i := e.info
	if e.gpu != nil {
		i.CUDNN = e.gpu.CUDNN()
	}
	return &i
}

// Close frees the GPU runner and the device.
func (e *engine) Close() error {
	if e.gpu == nil {
		return nil
	}
	err := e.gpu.Close()
	if cerr := e.dev.Close(); err == nil {
		err = cerr
	}
	return err
}
