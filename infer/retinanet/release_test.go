package retinanet

import (
	"errors"
	"fmt"
	"testing"

	"github.com/canopy-hpc/canopy/infer/cpu"
	"github.com/canopy-hpc/canopy/infer/cuda"
	"github.com/canopy-hpc/canopy/infer/cuda/hostkern"
	"github.com/canopy-hpc/canopy/infer/gpu"
)

// TestDetectorReleasesWeights: the CPU detector drops the 3×3 weights of
// every Winograd convolution once its filters exist (and keeps the rest),
// detects the same bytes as a Runner that keeps them, makes only the
// filters of the tile each layer uses, and refuses a GPU runner afterwards.
func TestDetectorReleasesWeights(t *testing.T) {
	g := readGolden(t, "r18.json")
	fresh := func() *Model {
		m, err := New(goldenWeights(t, g), goldenOptions(t, g))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	keep, rel := fresh(), fresh()
	d, err := NewDetector(rel, 2, make([]int32, rel.Classes))
	if err != nil {
		t.Fatal(err)
	}
	if !rel.Released() || keep.Released() {
		t.Fatalf("Released: detector's model %v, runner's %v", rel.Released(), keep.Released())
	}
	for _, c := range rel.Convs() {
		if cpu.UseWinograd(c) != (c.W == nil) {
			t.Fatalf("%s: Winograd %v, weights kept %v", c.Name, cpu.UseWinograd(c), c.W != nil)
		}
	}
	if rel.CPUFilterBytes() != 0 {
		t.Fatalf("CPUFilterBytes after the filters = %d", rel.CPUFilterBytes())
	}
	img := forestSet.imageAt(t, 0)
	want := fmt.Sprintf("%#v", NewRunner(keep, 1).Detect(img))
	if got := fmt.Sprintf("%#v", d.r.Detect(img)); got != want || len(want) < 100 {
		t.Fatalf("released model detects other bytes:\n%s\nwant\n%s", got, want)
	}
	// Only the filters of the tile in use exist (F(2×2,3×3)'s as well
	// would cost 16 more floats per 3×3 filter).
	for _, c := range rel.Convs() {
		u, u4 := c.WinogradMade()
		if cpu.UseWinograd(c) && (u > 0) != (cpu.WinoTile(c) == 2) || (u4 > 0) != (cpu.UseWinograd(c) && cpu.WinoTile(c) == 4) {
			t.Fatalf("%s (tile %d): F(2×2) filters %d, F(4×4) filters %d", c.Name, cpu.WinoTile(c), u, u4)
		}
	}
	if _, err := NewGPURunnerWith(rel, hostkern.New(), gpu.Options{Precision: cuda.Exact}); !errors.Is(err, errReleased) {
		t.Fatalf("GPU runner on a released model: %v", err)
	}
}
