package treeformer

import (
	"strconv"
	"strings"
	"testing"

	"github.com/canopy-hpc/canopy/infer/nn"
	"github.com/canopy-hpc/canopy/internal/testsupport/testweights"
)

// stateDictShapes lists TreeFormerModel's float tensors for arch a (one
// class), as DeepForest's state_dict() names them.
func stateDictShapes(a Arch) map[string][]int {
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
		c := a.Widths[i]
		p := "backbone.encoder.layers." + strconv.Itoa(i) + "."
		k := 3
		if i == 0 {
			k = 7
		}
		conv(p+"patch_embedding.proj", c, in, k)
		ln(p+"patch_embedding.layer_norm", c)
		for b := 0; b < a.Depths[i]; b++ {
			q := p + "blocks." + strconv.Itoa(b) + "."
			ln(q+"layer_norm_1", c)
			for _, n := range []string{"query", "key", "value", "proj"} {
				lin(q+"attention."+n, c, c)
			}
			if r := a.SR[i]; r > 1 {
				conv(q+"attention.spatial_reduction", c, c, r)
				ln(q+"attention.layer_norm", c)
			}
			ln(q+"layer_norm_2", c)
			hd := c * a.MLPRatios[i]
			lin(q+"mlp.dense1", c, hd)
			sd[q+"mlp.dwconv.dwconv.weight"], sd[q+"mlp.dwconv.dwconv.bias"] = []int{hd, 1, 3, 3}, []int{hd}
			lin(q+"mlp.dense2", hd, c)
		}
		ln(p+"layer_norm", c)
		conv("proj."+strconv.Itoa(i), RegDims[i], c, 1)
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

// seeded is the state dict tools/treeformer/tfweights.py fills (seed 46).
func seeded(t testing.TB, a Arch) nn.Weights {
	t.Helper()
	sd := stateDictShapes(a)
	w := nn.Weights{}
	for name, shape := range sd {
		stem := name[:strings.LastIndexByte(name, '.')]
		_, isBN := sd[stem+".running_mean"]
		v, err := testweights.TreeFormerTensor(name, shape, 46, isBN)
		if err != nil {
			t.Fatal(err)
		}
		w[name] = nn.Tensor{Shape: shape, Data: v}
	}
	return w
}
