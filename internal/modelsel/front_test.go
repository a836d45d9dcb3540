package modelsel

import (
	"bytes"
	"strings"
	"testing"

	"github.com/canopy-hpc/canopy/infer/cuda"
)

// The cuda build's front without a GPU: --device cuda names what the probe
// saw, auto runs on the CPU and says why, cpu says nothing more.
func TestPlaceDeviceSaysWhyNoGPU(t *testing.T) {
	h, c, n := HaveCUDA, CountDevices, NoGPU
	t.Cleanup(func() { HaveCUDA, CountDevices, NoGPU = h, c, n })
	const why = "libcuda.so.1 cannot be loaded (probe)"
	HaveCUDA = true
	CountDevices = func() (int, error) { return 0, nil }
	NoGPU = func() string { return why }

	lm := &Model{Threads: 1}
	err := lm.placeDevice(ModelConfig{Device: cuda.Request{Kind: "cuda", Index: -1}}, 0, 1)
	if err == nil || !strings.Contains(err.Error(), "no CUDA device is visible") || !strings.Contains(err.Error(), why) {
		t.Fatalf("--device cuda: %v, want the placement error with the probe's words", err)
	}
	lm = &Model{Threads: 1}
	if err := lm.placeDevice(ModelConfig{Device: cuda.Request{Kind: "auto", Index: -1}}, 0, 1); err != nil {
		t.Fatal(err)
	}
	if lm.Place.Kind != "cpu" || !strings.HasPrefix(lm.Place.Reason, "auto:") || !strings.Contains(lm.Place.Reason, why) {
		t.Fatalf("--device auto: %+v, want the CPU with the probe's words", lm.Place)
	}
	lm = &Model{Threads: 1}
	if err := lm.placeDevice(ModelConfig{Device: cuda.Request{Kind: "cpu", Index: -1}}, 0, 1); err != nil {
		t.Fatal(err)
	}
	if lm.Place.Reason != "--device cpu" {
		t.Fatalf("--device cpu: reason %q", lm.Place.Reason)
	}
}

// One note for the job, not one per rank; none from the CPU build, none
// for ranks that asked for the CPU.
func TestAutoCPUNote(t *testing.T) {
	h := HaveCUDA
	t.Cleanup(func() { HaveCUDA = h })
	auto := func(r int) RankDevice {
		return RankDevice{Rank: r, Device: "cpu", Why: "auto: no GPU visible: probe says X"}
	}
	for _, tc := range []struct {
		cuda bool
		devs []RankDevice
		want string // "" for no note
	}{
		{true, []RankDevice{auto(0), auto(1), auto(2)}, "every rank runs on the CPU (auto: no GPU visible: probe says X)"},
		{true, []RankDevice{auto(0), {Rank: 1, Device: "cuda:0", Why: "local rank 0 mod 1 visible device(s)"}, auto(2)}, "ranks [0 2] run on the CPU"},
		{true, []RankDevice{{Rank: 0, Device: "cpu", Why: "--device cpu"}}, ""},
		{false, []RankDevice{{Rank: 0, Device: "cpu", Why: "auto: this build has no cuda backend"}}, ""},
	} {
		HaveCUDA = tc.cuda
		var b bytes.Buffer
		autoCPUNote(&b, tc.devs)
		got := b.String()
		if tc.want == "" {
			if got != "" {
				t.Errorf("%+v: note %q, want none", tc.devs, got)
			}
			continue
		}
		if strings.Count(got, "\n") != 1 || !strings.Contains(got, "canopy: note: --device auto") || !strings.Contains(got, tc.want) {
			t.Errorf("%+v: note %q, want one line with %q", tc.devs, got, tc.want)
		}
	}
}
