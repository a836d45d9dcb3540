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
