package treeformer

import (
	"testing"

	"github.com/canopy-hpc/canopy/infer/nn"
	"github.com/canopy-hpc/canopy/internal/testsupport/testweights"
)

// seeded is the state dict tools/treeformer/tfweights.py fills (seed 46).
func seeded(t testing.TB, a Arch) nn.Weights {
	t.Helper()
	vals, sd, err := testweights.TreeFormerWeights(a.Depths, 46)
	if err != nil {
		t.Fatal(err)
	}
	w := nn.Weights{}
	for name, v := range vals {
		w[name] = nn.Tensor{Shape: sd[name], Data: v}
	}
	return w
}
