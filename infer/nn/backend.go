// Package nn holds what canopy's networks and its compute engines share:
// the convolution layer (Conv: its weights with batch norm folded, its
// Winograd filters), the state dict and its checked taking (Weights,
// Take), the engine interface (Backend), per-layer-group times, and big
// buffers (BigFloats). It knows no network and no engine: infer/resnet and
// infer/retinanet build networks from its layers, infer/cpu (and the GPU
// engine) run them.
package nn

// Backend is what a network needs from a compute engine, over its
// tensor type T: the CPU engine (infer/cpu's Fmap) and the GPU engine
// (infer/gpu's Map, a batch on a cuda.Device) run the same networks (resnet.Features,
// RetinaNet's FPN and heads).
type Backend[T any] interface {
	// Conv computes relu?(conv(x) + b [+ res]).
	Conv(c *Conv, x T, relu bool, res *T) T
	MaxPool3s2(x T) T
	// UpsampleAdd adds the nearest-upsampled top to lat in place.
	UpsampleAdd(lat, top T)
	ReluCopy(x T) T
	// Put returns dead tensors for reuse.
	Put(xs ...T)
	// Same reports whether a and b are one tensor (false when either
	// is T's zero value).
	Same(a, b T) bool
}

// PairBackend is a Backend that can run a convolution and the next one
// together, job by job, where both are 1×1 stride-1 (column-local): each
// job's columns of the first's output are still in the core's cache when
// the second reads them. It changes no value: ConvPair is
//
//	a = Conv(c1, x, true, res); b = Conv(c2, a, true, nil)
//
// bit for bit. ResNet's bottleneck blocks end with a 1×1 (and the
// residual) that the next block's first 1×1 reads.
type PairBackend[T any] interface {
	Backend[T]
	// CanPair reports whether ConvPair runs c1 then c2 together on x
	// (false: the caller runs them one after the other).
	CanPair(c1, c2 *Conv, x T) bool
	ConvPair(c1 *Conv, x T, res *T, c2 *Conv) (a, b T)
}
