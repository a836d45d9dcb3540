package retinanet

import (
	"math"
	"testing"

	"github.com/canopy-hpc/canopy/infer/nn"
	"github.com/canopy-hpc/canopy/internal/testsupport/forest"
)

// The layer times count each convolution's direct-equivalent FLOPs in its
// group: the stem's are 2·64·3·7·7 per output pixel of a map half the
// padded input's size, every convolution group has work and CPU time, and
// the groups without convolutions have no FLOPs.
func TestLayerTimesFLOPs(t *testing.T) {
	gold, g := goldenModel(t, "r18.json")
	m := smallGoldenModel(t, gold, g)
	rgba, _ := forest.Generate(11, 0, 150, 100)
	img := toImage(rgba)
	r := NewRunner(m, 2)
	r.EnableLayerTimes()
	r.Detect(img)
	r.Detect(img)
	pw, ph := m.PaddedSize(img.W, img.H)
	got := map[string]nn.LayerTime{}
	for _, l := range r.LayerTimes() {
		got[l.Group] = l
	}
	stem := 2 * 2 * 64 * 3 * 49 * float64((ph/2)*(pw/2)) / 1e9
	if d := math.Abs(got["stem"].GFLOP - stem); !(d <= 1e-12) {
		t.Errorf("stem: %v GFLOP over 2 images, want %v", got["stem"].GFLOP, stem)
	}
	for _, grp := range []string{"stem", "layer1", "layer2", "layer3", "layer4", "fpn", "head.cls", "head.reg"} {
		if l := got[grp]; !(l.GFLOP > 0) || !(l.Seconds > 0) || l.CPUSeconds < 0 {
			t.Errorf("%s: %+v", grp, l)
		}
	}
	for _, grp := range []string{"transform", "maxpool", "postprocess"} {
		if l, ok := got[grp]; !ok || l.GFLOP != 0 {
			t.Errorf("%s: %+v (present %v)", grp, l, ok)
		}
	}
	t.Logf("%dx%d padded: %+v", pw, ph, r.LayerTimes())
}

// CPUFilterBytes counts the transformed Winograd filters the CPU detector
// makes (36 floats per 3×3 filter for F(4×4,3×3), 16 for F(2×2,3×3)) less
// the 9 floats of weights it drops for each, and nothing once they are
// made.
func TestCPUFilterBytes(t *testing.T) {
	gold, g := goldenModel(t, "r18.json")
	m, err := New(goldenWeights(t, gold), g.Opt)
	if err != nil {
		t.Fatal(err)
	}
	var want int64
	for _, c := range m.Convs() {
		if c.KH == 3 && c.Stride == 1 && c.In >= 32 && c.Out >= 32 {
			k := int64(36)
			if c.In*c.Out > 256*256 {
				k = 16
			}
			want += (k - 9) * int64(c.In*c.Out) * 4
		}
	}
	if got := m.CPUFilterBytes(); want == 0 || got != want {
		t.Fatalf("CPUFilterBytes %d, want %d", got, want)
	}
	NewRunner(m, 1)
	if got := m.CPUFilterBytes(); got != 0 {
		t.Fatalf("after the first runner: %d, want 0", got)
	}
}
