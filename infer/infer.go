// Package infer defines the Detector interface that every inference backend
// implements (infer/replay: stored predictions; infer/retinanet: the native
// RetinaNet on the CPU or, through infer/cuda, on a GPU). jobs/ runs any
// Detector the same way; only internal/modelsel, which builds the detectors,
// learns of a new backend. Its sub-packages hold what the backends share:
// infer/imagefile (images as DeepForest reads them), infer/safetensors
// (weight files) and infer/gemm (SGEMM and the convolution kernels).
package infer

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/infer/imagefile"
)

// Input is one image handed to a detector.
type Input struct {
	// Index is the image's global index in the dataset.
	Index int
	// Path is the image_path as written in the annotation CSV.
	Path string
	// File is Path resolved against the root directory.
	File string
	// Pixels, when set, supplies the image instead of File (a window of a
	// raster, read through infer/gdal); File then only names it.
	Pixels func() (imagefile.Image, error)
}

// Read returns the input's image: Pixels' when set, else File's as
// imagefile.Read decodes it.
func (in Input) Read() (imagefile.Image, error) {
	if in.Pixels != nil {
		return in.Pixels()
	}
	return imagefile.Read(in.File)
}

// Detector turns a batch of images into per-image detections, in the order
// of the batch. Implementations must be deterministic: the same image gives
// the same detections whatever else is in the batch.
type Detector interface {
	Detect(ctx context.Context, batch []Input) ([][]box.Detection, error)
	// Name describes the backend for the report, e.g. "replay".
	Name() string
	Close() error
}

// Prefetcher is a Detector that can start reading a batch before Detect
// asks for it: the job announces batch k+1 before running batch k, so the
// GPU detector decodes the next images while the device computes. Prefetch
// never fails; a prefetched image's error comes from the Detect of its
// batch. A Detect of another batch than the one announced reads its own.
type Prefetcher interface {
	Prefetch(batch []Input)
}

// ErrModel marks a failure of the model or detector (exit code 4).
var ErrModel = errors.New("model error")

// LossDetector is a Detector that also computes each image's validation
// losses against its ground truth from the same forward pass, as
// torchvision's RetinaNet does in train mode (DeepForest's
// validation_step). truth[i] is batch[i]'s truth in original pixels, with
// the job's label ids.
type LossDetector interface {
	Detector
	DetectLoss(ctx context.Context, batch []Input, truth [][]box.Truth) ([][]box.Detection, []box.Loss, error)
}

// modelError wraps err so that it also matches ErrModel (exit code 4)
// without changing its message.
type modelError struct{ err error }

func (e *modelError) Error() string   { return e.err.Error() }
func (e *modelError) Unwrap() []error { return []error{e.err, ErrModel} }

// ModelErr marks err as the model's (it then matches ErrModel, exit 4),
// its message unchanged; nil stays nil.
func ModelErr(err error) error {
	if err == nil || errors.Is(err, ErrModel) {
		return err
	}
	return &modelError{err}
}

// FileSHA256 is the hex sha256 of a file's bytes (a model's weights, as
// report.json records them).
func FileSHA256(path string) (string, error) {
	fh, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer fh.Close()
	h := sha256.New()
	if _, err := io.Copy(h, fh); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
