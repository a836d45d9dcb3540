// Package cuda is canopy's GPU backend seam: the Device interface the
// RetinaNet's GPU engine (infer/retinanet) drives, the choice of a rank's GPU
// (Place), and, with -tags cuda, the implementation on the CUDA driver API
// through gorgonia.org/cu (Open). Without the tag Open says the build has no
// CUDA, and nothing here links a CUDA library.
//
// Two Devices implement the interface: the real one (cuda build) and the host
// shim (infer/cuda/hostkern), which runs the same kernels.cu on the CPU with
// the same launch geometry; the shim is what CI tests.
package cuda

import (
	"errors"

	"github.com/canopy-hpc/canopy/infer/cuda/kernels"
)

// Ptr is a device address (on the host shim, a host address).
type Ptr uintptr

// Precision selects the convolution kernels.
type Precision int

const (
	// FP32 is strict float32 (conv_f32): fmaf in a fixed k order.
	FP32 Precision = iota
	// TF32 rounds the operands to TF32 and uses tensor cores (conv_tf32),
	// as PyTorch does for convolutions by default (cudnn.allow_tf32).
	TF32
)

func (p Precision) String() string {
	if p == TF32 {
		return "tf32"
	}
	return "fp32"
}

// ParsePrecision reads "fp32" (or "", the default) or "tf32".
func ParsePrecision(s string) (Precision, error) {
	switch s {
	case "fp32", "":
		return FP32, nil
	case "tf32":
		return TF32, nil
	}
	return FP32, errors.New("cuda: precision must be fp32 or tf32, not " + s)
}

// ConvArgs is one convolution over a batch: X [N,C,H,W] → Y [N,M,OH,OW]
// with W [M, C·KH·KW], bias B [M], optional residual Res (0 for none) shaped
// like Y, and ReLU last.
type ConvArgs struct {
	X, W, B, Res, Y              Ptr
	N, C, H, Wd, M, KH, KW, S, P int
	OH, OW                       int
	Relu                         bool
}

// Info describes a device for the report.
type Info struct {
	Index   int    // ordinal among the visible devices
	Name    string // e.g. "NVIDIA H200"
	UUID    string // "GPU-…"
	SM      string // compute capability, e.g. "9.0"
	Backend string
}

// Device runs canopy's kernels. Calls are asynchronous where the device
// allows (in one stream, in order); Download and Sync wait. A Device is not
// safe for concurrent use.
type Device interface {
	// Alloc returns room for n float32 values (not zeroed).
	Alloc(n int) (Ptr, error)
	Free(p Ptr)
	// Upload copies src to dst (pinned staging on a GPU).
	Upload(dst Ptr, src []float32) error
	// Download copies n = len(dst) values from src, after all queued work.
	Download(dst []float32, src Ptr) error
	Conv(a ConvArgs, p Precision) error
	MaxPool3s2(x, y Ptr, n, c, h, w, oh, ow int) error
	UpsampleAdd(lat, top Ptr, n, c, h, w, th, tw int) error
	ReluCopy(x, y Ptr, n int) error
	// UploadBytes copies src to dst, an allocation of at least
	// ceil(len(src)/4) floats (8-bit images; double-buffered pinned staging
	// on a GPU, so the next upload's copy overlaps this one's transfer).
	UploadBytes(dst Ptr, src []byte) error
	// Launch queues kernel name (one of kernels.Names) over grid d with
	// args, each a Ptr, int (C int), int64 (C long long), float32 (C float)
	// or float64 (C double), in the kernel's parameter order (Slots).
	Launch(name string, d kernels.Dim, args ...any) error
	Sync() error
	Info() Info
	Close() error
}

// ErrNoCUDA is returned by Open in a build without -tags cuda.
var ErrNoCUDA = errors.New("cuda: this canopy was built without the cuda backend (build with -tags cuda: make build-cuda)")
