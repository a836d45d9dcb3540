package gpu_test

import (
	"testing"

	"github.com/canopy-hpc/canopy/infer/cuda"
	"github.com/canopy-hpc/canopy/infer/gpu"
	"github.com/canopy-hpc/canopy/infer/imagefile"
	"github.com/canopy-hpc/canopy/internal/testsupport/gputest"
)

// TestHeldSources: sources held within a budget drop the oldest first,
// a key held again replaces its source, DropHeld frees what it names,
// HoldSources(0) keeps nothing; a held source's bytes are the image's
// (8-bit samples when every value is one, else float32), read back.
func TestHeldSources(t *testing.T) {
	g := gpu.NewEngine(gputest.Device(t), cuda.Exact)
	defer g.Close()
	img := func(w, h int, eight bool) imagefile.Image {
		im := imagefile.Image{W: w, H: h, Pix: make([]float32, 3*w*h)}
		for i := range im.Pix {
			im.Pix[i] = imagefile.Unit(uint8(i * 7))
			if !eight {
				im.Pix[i] += 1e-3
			}
		}
		return im
	}
	a := img(20, 10, true) // 600 bytes: 150 words
	g.HoldSources(2 * 600)
	for k := 0; k < 3; k++ {
		g.Hold(k, g.UploadSource(a, nil))
	}
	if _, ok := g.HeldSource(0); ok {
		t.Errorf("the oldest source is still held past the budget")
	}
	// a dropped source's buffer goes back to the free list (else each
	// window dropped would leak its buffer on the device)
	if n := len(g.Free[150]); n != 1 {
		t.Errorf("%d buffers of 150 words free after the oldest source was dropped, want 1 (its own)", n)
	}
	for k := 1; k < 3; k++ {
		s, ok := g.HeldSource(k)
		if !ok || !s.Eight || s.W != 20 || s.H != 10 {
			t.Errorf("source %d: %+v held %v; want an 8-bit 20×10 source", k, s, ok)
		}
	}
	g.Hold(1, g.UploadSource(a, nil)) // replaced: 1 is now the newest
	g.Hold(3, g.UploadSource(a, nil))
	if _, ok := g.HeldSource(2); ok {
		t.Errorf("source 2, now the oldest, is still held")
	}
	if _, ok := g.HeldSource(1); !ok {
		t.Errorf("source 1, held again, was dropped as the oldest")
	}
	g.DropHeld(func(k int) bool { return k == 1 })
	if _, ok := g.HeldSource(1); ok {
		t.Errorf("source 1 still held after DropHeld")
	}
	// 1's first buffer went back when 1 was held again and was reused by
	// 3's upload; 2's (dropped by 3) and 1's second (DropHeld) are free
	if n := len(g.Free[150]); n != 2 {
		t.Errorf("%d buffers of 150 words free after DropHeld, want 2 (sources 2 and 1)", n)
	}
	f := img(4, 3, false)
	g.Hold(9, g.UploadSource(f, nil))
	s, ok := g.HeldSource(9)
	if !ok || s.Eight {
		t.Fatalf("a float32 source: %+v held %v", s, ok)
	}
	back := make([]float32, len(f.Pix))
	if err := g.Dev.Download(back, s.Map.P); err != nil {
		t.Fatal(err)
	}
	for i := range back {
		if back[i] != f.Pix[i] {
			t.Fatalf("value %d held %v, the image's %v", i, back[i], f.Pix[i])
		}
	}
	if g.Uploads != 6 {
		t.Errorf("%d sources sent, want 6", g.Uploads)
	}
	g.HoldSources(0)
	if _, ok := g.HeldSource(3); ok || g.Holds() {
		t.Errorf("HoldSources(0) still holds")
	}
	g.Hold(5, g.UploadSource(a, nil))
	if _, ok := g.HeldSource(5); ok {
		t.Errorf("a source held with no budget")
	}
}
