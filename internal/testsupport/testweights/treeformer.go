package testweights

import (
	"fmt"
	"math"
	"strings"
)

// TreeFormerRange is [lo, hi) of a TreeFormer tensor's uniform
// distribution (tools/treeformer/tfweights.py's ranges()): conv weights
// ±√(3/fan_in), linear weights ±√(3/in), LayerNorm and BatchNorm gammas
// [0.8, 1.2), their betas and running means [−0.1, 0.1), running variances
// [0.5, 1.5), other biases [−0.05, 0.05). bn is true when the tensor's stem
// is a BatchNorm (has a running_mean); a LayerNorm is a stem whose last
// part contains "layer_norm".
func TreeFormerRange(name string, shape []int, bn bool) (lo, hi float64, err error) {
	i := strings.LastIndexByte(name, '.')
	if i < 0 {
		return 0, 0, fmt.Errorf("testweights: no range for %s %v", name, shape)
	}
	stem, leaf := name[:i], name[i+1:]
	switch {
	case len(shape) == 4:
		b := math.Sqrt(3.0 / float64(shape[1]*shape[2]*shape[3]))
		return -b, b, nil
	case len(shape) == 2 && leaf == "weight":
		b := math.Sqrt(3.0 / float64(shape[1]))
		return -b, b, nil
	}
	last := stem[strings.LastIndexByte(stem, '.')+1:]
	if bn || strings.Contains(last, "layer_norm") {
		switch leaf {
		case "weight":
			return 0.8, 1.2, nil
		case "running_var":
			return 0.5, 1.5, nil
		case "bias", "running_mean":
			return -0.1, 0.1, nil
		}
	}
	if leaf == "bias" {
		return -0.05, 0.05, nil
	}
	return 0, 0, fmt.Errorf("testweights: no range for %s %v", name, shape)
}

// TreeFormerTensor is the named TreeFormer tensor's values in C order.
func TreeFormerTensor(name string, shape []int, seed uint64, bn bool) ([]float32, error) {
	lo, hi, err := TreeFormerRange(name, shape, bn)
	if err != nil {
		return nil, err
	}
	return uniform(name, shape, seed, lo, hi), nil
}
