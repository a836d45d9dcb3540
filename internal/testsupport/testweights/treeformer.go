package testweights

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/canopy-hpc/canopy/infer/safetensors"
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

// TreeFormerStateDict lists TreeFormerModel's float tensors (one class,
// pvt_v2_b3's widths, depths per stage as given), as DeepForest's
// state_dict() names them.
func TreeFormerStateDict(depths [4]int) map[string][]int {
	widths, mlp, sr := [4]int{64, 128, 320, 512}, [4]int{8, 8, 4, 4}, [4]int{8, 4, 2, 1}
	regDims := [4]int{128, 256, 512, 1024}
	sd := map[string][]int{}
	in := 3
	ln := func(p string, c int) { sd[p+".weight"], sd[p+".bias"] = []int{c}, []int{c} }
	lin := func(p string, i, o int) { sd[p+".weight"], sd[p+".bias"] = []int{o, i}, []int{o} }
	conv := func(p string, o, i, k int) { sd[p+".weight"], sd[p+".bias"] = []int{o, i, k, k}, []int{o} }
	bn := func(p string, c int) {
		for _, l := range []string{"weight", "bias", "running_mean", "running_var"} {
			sd[p+"."+l] = []int{c}
		}
	}
	for i := 0; i < 4; i++ {
		c := widths[i]
		p := "backbone.encoder.layers." + strconv.Itoa(i) + "."
		k := 3
		if i == 0 {
			k = 7
		}
		conv(p+"patch_embedding.proj", c, in, k)
		ln(p+"patch_embedding.layer_norm", c)
		for b := 0; b < depths[i]; b++ {
			q := p + "blocks." + strconv.Itoa(b) + "."
			ln(q+"layer_norm_1", c)
			for _, n := range []string{"query", "key", "value", "proj"} {
				lin(q+"attention."+n, c, c)
			}
			if r := sr[i]; r > 1 {
				conv(q+"attention.spatial_reduction", c, c, r)
				ln(q+"attention.layer_norm", c)
			}
			ln(q+"layer_norm_2", c)
			hd := c * mlp[i]
			lin(q+"mlp.dense1", c, hd)
			sd[q+"mlp.dwconv.dwconv.weight"], sd[q+"mlp.dwconv.dwconv.bias"] = []int{hd, 1, 3, 3}, []int{hd}
			lin(q+"mlp.dense2", hd, c)
		}
		ln(p+"layer_norm", c)
		conv("proj."+strconv.Itoa(i), regDims[i], c, 1)
		in = c
	}
	for i, c := range []int{128, 256, 512} {
		n := "regression.ca" + strconv.Itoa(i)
		sd[n+".0.fc.0.weight"], sd[n+".0.fc.2.weight"] = []int{c / 16, c}, []int{c, c / 16}
		conv(n+".1", c, c, 3)
		bn(n+".2", c)
		v := "regression.v" + strconv.Itoa(i+1)
		conv(v+".1", c, 2*c, 3)
		bn(v+".2", c)
	}
	conv("regression.res0.0", 64, 128, 3)
	bn("regression.res0.1", 64)
	conv("regression.res0.3", 1, 64, 3)
	conv("regression.res1.0", 128, 256, 3)
	bn("regression.res1.1", 128)
	conv("regression.res1.3", 64, 128, 3)
	bn("regression.res1.4", 64)
	conv("regression.res1.6", 1, 64, 3)
	conv("regression.res2.0", 256, 512, 3)
	bn("regression.res2.1", 256)
	conv("regression.res2.3", 128, 256, 3)
	bn("regression.res2.4", 128)
	conv("regression.res2.6", 1, 128, 3)
	sd["regression.cls_lin1.weight"] = []int{512, 1024}
	sd["regression.cls_lin2.weight"] = []int{256, 512}
	sd["regression.cls_lin3.weight"] = []int{128, 256}
	lin("regression.cls_lin4", 128, 1)
	return sd
}

// TreeFormerWeights fills TreeFormerStateDict(depths) with seed's values.
func TreeFormerWeights(depths [4]int, seed uint64) (map[string][]float32, map[string][]int, error) {
	sd := TreeFormerStateDict(depths)
	out := make(map[string][]float32, len(sd))
	for name, shape := range sd {
		stem := name[:strings.LastIndexByte(name, '.')]
		_, isBN := sd[stem+".running_mean"]
		v, err := TreeFormerTensor(name, shape, seed, isBN)
		if err != nil {
			return nil, nil, err
		}
		out[name] = v
	}
	return out, sd, nil
}

// TreeFormerFolder writes a DeepForest hub folder (model.safetensors and
// config.json naming backbone, label_dict {"Tree": 0}) of the seeded
// weights.
func TreeFormerFolder(dir, backbone string, depths [4]int, seed uint64) error {
	w, sd, err := TreeFormerWeights(depths, seed)
	if err != nil {
		return err
	}
	ts := make(map[string]safetensors.Tensor, len(w))
	for k, v := range w {
		ts[k] = safetensors.Tensor{Shape: sd[k], Data: v}
	}
	if err := safetensors.Write(filepath.Join(dir, "model.safetensors"), ts, "F32", nil); err != nil {
		return err
	}
	cfg := `{"backbone": ` + strconv.Quote(backbone) + `, "num_classes": 1, "label_dict": {"Tree": 0}, "score_thresh": 0.3, "score_integration_radius": 5}`
	return os.WriteFile(filepath.Join(dir, "config.json"), []byte(cfg+"\n"), 0o644)
}
