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
	"strconv"

	"github.com/canopy-hpc/canopy/infer/cuda/kernels"
)

// Ptr is a device address (on the host shim, a host address).
type Ptr uintptr

// Precision is --precision: which convolutions the GPU engine runs.
type Precision int

const (
	// Exact is canopy's own strict-FP32 kernels (conv_f32: fmaf in a
	// fixed k order): the host shim's bits, the same for any rank count,
	// batch size and thread count. The reference mode, and CI's.
	Exact Precision = iota
	// KernelTF32 is canopy's own TF32 tensor-core kernel (conv_tf32),
	// kept as a comparison for the GPU check ("kernel-tf32").
	KernelTF32
	// FP32 is cuDNN without tensor cores (torchvision with allow_tf32
	// off).
	FP32
	// TF32 is cuDNN with TF32 tensor cores, PyTorch's default for
	// convolutions (cudnn.allow_tf32), and the GPU default.
	TF32
	// BF16 is cuDNN with BF16 activations and weights, FP32
	// accumulation, the heads' outputs and all after them in FP32.
	BF16
)

var precisionNames = [...]string{"exact", "kernel-tf32", "fp32", "tf32", "bf16"}

func (p Precision) String() string {
	if p < 0 || int(p) >= len(precisionNames) {
		return "precision(?)"
	}
	return precisionNames[p]
}

// Cudnn says whether p runs its convolutions through cuDNN.
func (p Precision) Cudnn() bool { return p >= FP32 }

// DefaultGPUPrecision is --precision's value on a GPU when not given.
const DefaultGPUPrecision = TF32

// ParsePrecision reads --precision: exact, fp32, tf32, bf16 or
// kernel-tf32.
func ParsePrecision(s string) (Precision, error) {
	for i, n := range precisionNames {
		if s == n {
			return Precision(i), nil
		}
	}
	return Exact, errors.New("cuda: --precision must be exact, fp32, tf32 or bf16 (or kernel-tf32), not " + strconv.Quote(s))
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
	SMs     int    // multiprocessor count (cuBLAS/cuDNN bits may depend on it)
	Backend string
}

// NHWCOp is one of the data-movement kernels of the cuDNN path
// (kernels/nhwc.cu).
type NHWCOp int

const (
	// ToNHWC: Y [N,H,W,C] (FP32 or BF16) from X [N,C,H,W] FP32.
	ToNHWC NHWCOp = iota
	// ToNCHW: Y [N,C,H,W] FP32 from X [N,H,W,C] (FP32 or BF16).
	ToNCHW
	// MaxPool3s2: Y [N,OH,OW,C] from X [N,H,W,C], 3×3 stride 2 pad 1.
	MaxPool3s2NHWC
	// UpsampleAdd: X [N,H,W,C] += nearest(Y [N,OH,OW,C]) (OH, OW: the
	// top's size).
	UpsampleAddNHWC
	// Relu: Y = max(X, 0) over N·C·H·W values, any layout.
	ReluAny
)

// NHWCArgs are an NHWCOp's operands; BF16 says the NHWC side holds BF16.
type NHWCArgs struct {
	Op                 NHWCOp
	X, Y               Ptr
	N, C, H, W, OH, OW int
	BF16               bool
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
	// NHWC queues one of the cuDNN path's data-movement kernels.
	NHWC(a NHWCArgs) error
	// WithStream runs f on the device's thread with its stream (a
	// CUstream; 0 on the host shim) and its context current: where a
	// library such as cuDNN is called. f must only queue work.
	WithStream(f func(stream uintptr) error) error
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
