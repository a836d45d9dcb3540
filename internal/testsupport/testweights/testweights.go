// Package testweights generates the deterministic RetinaNet weights that the
// parity fixtures of infer/retinanet were made with. It is the Go twin of
// tools/retinanet/weights.py and reproduces it bit for bit, so fixtures need
// no stored weights:
//
//	key = fnv1a64(name) XOR seed
//	x_i = splitmix64(key + (i+1)·0x9E3779B97F4A7C15)   (uint64, wrapping)
//	u_i = (x_i >> 40) · 2^-24                           (exact, in [0, 1))
//	v_i = float32(lo + float64((hi-lo)·u_i))            (float64, rounded once)
//
// i is the element's C-order index; [lo, hi) depends on the tensor's role
// (Range).
package testweights

import (
	"fmt"
	"math"
	"strings"
)

const golden = 0x9E3779B97F4A7C15

func fnv1a64(s string) uint64 {
	h := uint64(0xCBF29CE484222325)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 0x100000001B3
	}
	return h
}

func splitmix(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	return z ^ (z >> 31)
}

func isBN(name string) bool {
	stem := name[:strings.LastIndexByte(name, '.')]
	last := stem[strings.LastIndexByte(stem, '.')+1:]
	return strings.HasPrefix(last, "bn") || strings.HasSuffix(stem, "downsample.1")
}

// Range is [lo, hi) of the tensor's uniform distribution (weights.py's
// ranges()). basic is true for BasicBlock bodies (a state dict without bn3):
// their bn2 gammas are damped like a Bottleneck's bn3.
func Range(name string, shape []int, basic bool) (lo, hi float64, err error) {
	leaf := name[strings.LastIndexByte(name, '.')+1:]
	if len(shape) == 4 {
		fanIn := shape[1] * shape[2] * shape[3]
		b := math.Sqrt(3.0 / float64(fanIn))
		if strings.Contains(name, "cls_logits") {
			b *= 3.0
		}
		return -b, b, nil
	}
	if len(shape) == 2 && leaf == "weight" {
		// a classifier's fc (CropModel): wider than Kaiming-uniform so
		// that the softmax of the test weights is far from uniform
		b := 8.0 * math.Sqrt(3.0/float64(shape[1]))
		return -b, b, nil
	}
	if isBN(name) {
		switch leaf {
		case "running_mean":
			return -0.1, 0.1, nil
		case "running_var":
			return 0.5, 1.5, nil
		case "bias":
			return -0.1, 0.1, nil
		}
		stem := name[:strings.LastIndexByte(name, '.')]
		if strings.HasSuffix(stem, ".bn3") || strings.HasSuffix(stem, "downsample.1") {
			return 0.3, 0.6, nil
		}
		if basic && strings.Contains(stem, ".layer") && strings.HasSuffix(stem, ".bn2") {
			return 0.3, 0.6, nil
		}
		return 1.0, 1.6, nil
	}
	if strings.Contains(name, "cls_logits") && leaf == "bias" {
		return -3.5, -2.5, nil
	}
	if leaf == "bias" {
		return -0.05, 0.05, nil
	}
	return 0, 0, fmt.Errorf("testweights: no range for %s %v", name, shape)
}

// Tensor returns the named tensor's values in C order.
func Tensor(name string, shape []int, seed uint64, basic bool) ([]float32, error) {
	lo, hi, err := Range(name, shape, basic)
	if err != nil {
		return nil, err
	}
	return uniform(name, shape, seed, lo, hi), nil
}

// uniform is the generator: float32(lo + (hi−lo)·u_i) for the C-order
// elements of a tensor of shape.
func uniform(name string, shape []int, seed uint64, lo, hi float64) []float32 {
	n := 1
	for _, d := range shape {
		n *= d
	}
	key := fnv1a64(name) ^ seed
	out := make([]float32, n)
	for i := range out {
		x := splitmix(key + uint64(i+1)*golden)
		u := float64(x>>40) * 0x1p-24
		out[i] = float32(lo + float64((hi-lo)*u))
	}
	return out
}

// Bytes are n seeded bytes: floor(u_i·256) of the generator's uniforms for
// name (the top byte of x_i), as tools/cropmodel/parity.py's gen_u8 makes
// the crops of its transform cases.
func Bytes(name string, n int, seed uint64) []byte {
	key := fnv1a64(name) ^ seed
	out := make([]byte, n)
	for i := range out {
		out[i] = byte(splitmix(key+uint64(i+1)*golden) >> 56)
	}
	return out
}
