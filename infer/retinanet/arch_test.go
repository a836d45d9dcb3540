package retinanet

import (
	"testing"

	"github.com/canopy-hpc/canopy/infer/nn"
	"github.com/canopy-hpc/canopy/internal/testsupport/testweights"
)

// generatedWeights is a torchvision RetinaNet state dict of the given body,
// class count and FPN width from the test weight generator
// (internal/testsupport/testweights, FrozenBatchNorm2d layout, seed).
func generatedWeights(t testing.TB, arch string, classes, fpn int, seed uint64) nn.Weights {
	t.Helper()
	w, err := testweights.Weights(arch, classes, fpn, seed)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// The body's depth, the FPN width and the class count come from the
// tensors: every torchvision ResNet builds, names itself and runs.
func TestArchitecturesFromTensors(t *testing.T) {
	img := Image{W: 70, H: 50, Pix: make([]float32, 3*70*50)}
	for i := range img.Pix {
		img.Pix[i] = float32(i%251) / 250
	}
	for _, c := range []struct {
		arch    string
		classes int
		fpn     int
		want    string
	}{
		{"resnet18", 3, 32, "resnet18-fpn32"},
		{"resnet34", 1, 64, "resnet34-fpn64"},
		{"resnet50", 2, 64, "resnet50-fpn64"},
		{"resnet101", 1, 32, "resnet101-fpn32"},
	} {
		w := generatedWeights(t, c.arch, c.classes, c.fpn, 1)
		opt := DefaultOptions()
		opt.MinSize, opt.MaxSize = 96, 128
		m, err := New(w, opt)
		if err != nil {
			t.Fatalf("%s: %v", c.arch, err)
		}
		if m.Arch != c.want || m.Classes != c.classes || m.FPN != c.fpn {
			t.Fatalf("%s: arch %q, %d classes, FPN %d; want %q, %d, %d", c.arch, m.Arch, m.Classes, m.FPN, c.want, c.classes, c.fpn)
		}
		dets := NewRunner(m, 2).Detect(img)
		for _, d := range dets {
			if d.Label < 0 || d.Label >= c.classes || !(d.Box[2] >= d.Box[0]) || !(d.Box[3] >= d.Box[1]) {
				t.Fatalf("%s: bad detection %+v", c.arch, d)
			}
		}
		t.Logf("%s: %d detections", m.Arch, len(dets))
	}
}
