package modelsel

import (
	"errors"
	"strings"
	"testing"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/infer"
	"github.com/canopy-hpc/canopy/infer/cuda"
)

// A model's own labels win: a given map must equal them (same names, same
// ids), and every truth label must be the model's; both refusals are
// model errors naming what differs.
func TestCheckLabels(t *testing.T) {
	model, _ := box.NewLabelMap([]string{"Tree", "Dead"})
	same, _ := box.NewLabelMap([]string{"Tree", "Dead"})
	swapped, _ := box.NewLabelMap([]string{"Dead", "Tree"})
	if err := CheckLabels(model, &same, "bird.csv", []string{"Dead", "Tree"}, "truth.csv"); err != nil {
		t.Fatalf("the model's own map: %v", err)
	}
	if err := CheckLabels(model, nil, "", nil, "truth.csv"); err != nil {
		t.Fatalf("no map given: %v", err)
	}
	err := CheckLabels(model, &swapped, "bird.csv", nil, "truth.csv")
	if !errors.Is(err, infer.ErrModel) || !strings.Contains(err.Error(), `{"Dead": 0, "Tree": 1}, contradicts the model's own label_dict, {"Tree": 0, "Dead": 1}`) {
		t.Fatalf("the same names with other ids: %v", err)
	}
	fewer, _ := box.NewLabelMap([]string{"Tree"})
	if err := CheckLabels(model, &fewer, "one.csv", nil, "truth.csv"); !errors.Is(err, infer.ErrModel) {
		t.Fatalf("a map of the model's first label alone: %v", err)
	}
	err = CheckLabels(model, nil, "", []string{"Tree", "Snag"}, "truth.csv")
	if !errors.Is(err, infer.ErrModel) || !strings.Contains(err.Error(), `truth.csv has label "Snag"`) {
		t.Fatalf("an unknown truth label: %v", err)
	}
	if d := LabelDictOf(swapped); len(d) != 2 || d["Dead"] != 0 || d["Tree"] != 1 {
		t.Fatalf("LabelDictOf %v", d)
	}
	if j := string(LabelMapJSON(model)); j != `{"Tree": 0, "Dead": 1}` {
		t.Fatalf("LabelMapJSON %s", j)
	}
}

// A rank's threads: the cores it may use, at most its share of the node,
// at least one.
func TestDefaultThreads(t *testing.T) {
	for _, c := range []struct{ maxprocs, ncpu, ranks, want int }{
		{1, 64, 4, 1},   // bound to one core
		{64, 64, 4, 16}, // unbound: the node's share
		{8, 64, 4, 8},   // bound to a socket narrower than the share
		{64, 2, 8, 1},   // more ranks than cores
		{4, 4, 0, 4},    // no local rank count
	} {
		if got := DefaultThreads(c.maxprocs, c.ncpu, c.ranks); got != c.want {
			t.Errorf("DefaultThreads(%d, %d, %d) = %d, want %d", c.maxprocs, c.ncpu, c.ranks, got, c.want)
		}
	}
}

// The first GPU-only flag given is named; none on an exact CPU run.
func TestGPUOnlyFlag(t *testing.T) {
	for _, c := range []struct {
		mc   ModelConfig
		p    cuda.Precision
		want string
	}{
		{ModelConfig{}, cuda.Exact, ""},
		{ModelConfig{Plan: "p.json", ExclusiveGPU: true}, cuda.BF16, "--precision bf16"},
		{ModelConfig{Plan: "p.json", CUDNN: "/lib"}, cuda.Exact, "--plan p.json"},
		{ModelConfig{CUDNN: "/lib", ExclusiveGPU: true}, cuda.Exact, "--cudnn /lib"},
		{ModelConfig{ExclusiveGPU: true}, cuda.Exact, "--exclusive-gpu"},
	} {
		if got := GPUOnlyFlag(c.mc, c.p); got != c.want {
			t.Errorf("%+v %v: %q, want %q", c.mc, c.p, got, c.want)
		}
	}
}
