package crop

import (
	"bytes"
	"context"
	"testing"

	"github.com/canopy-hpc/canopy/infer/cuda"
	"github.com/canopy-hpc/canopy/infer/gpu"
	"github.com/canopy-hpc/canopy/infer/imagefile"
	"github.com/canopy-hpc/canopy/internal/testsupport/gputest"
)

// upCount counts the bytes a device is sent (Upload, UploadBytes).
type upCount struct {
	cuda.Device
	bytes int
}

func (d *upCount) Upload(dst cuda.Ptr, src []float32) error {
	d.bytes += 4 * len(src)
	return d.Device.Upload(dst, src)
}

func (d *upCount) UploadBytes(dst cuda.Ptr, src []byte) error {
	d.bytes += len(src)
	return d.Device.UploadBytes(dst, src)
}

// heldPieces are ps with each piece that lies inside its image's held
// window (wins[img], held under key img) cut from that window: R made
// relative to the window's origin.
func heldPieces(g *gpu.Engine, ps []Piece, wins []Rect) []Piece {
	out := make([]Piece, len(ps))
	for i, p := range ps {
		out[i] = p
		w := wins[p.Img]
		if s, ok := g.HeldSource(p.Img); ok && p.R.X >= w.X && p.R.Y >= w.Y && p.R.X+p.R.W <= w.X+w.W && p.R.Y+p.R.H <= w.Y+w.H {
			out[i] = Piece{Held: &s, R: Rect{X: p.R.X - w.X, Y: p.R.Y - w.Y, W: p.R.W, H: p.R.H}}
		}
	}
	return out
}

// TestGPUCropFromHeldWindows: crops cut from windows already on the
// device (a tile run's detector windows, held after their transform: an
// 8-bit window of the 8-bit image at an offset, the float32 image whole)
// give the batch the same bits as the crops cut from their images
// uploaded for the crop step, hence the same outputs, byte for byte, and
// the CPU engine's classes within the derived bounds (pairCrops, as
// TestGPUCropMatchesCPU); and the held sources are not sent again: the
// crop step uploads exactly their bytes less. A crop outside its held
// window goes up from its image as before, in the same batch.
func TestGPUCropFromHeldWindows(t *testing.T) {
	net := smallNet(t, 2)
	tr := testTransform()
	imgs, ps := testSources(2)
	dev := &upCount{Device: gputest.Device(t)}
	g := gpu.NewEngine(dev, cuda.Exact)
	defer g.Close()
	r := NewGPURunner(net, g)
	defer r.Close()
	r.Batch = 4
	ctx := context.Background()
	plainX := deviceBatch(t, r, tr, imgs, ps)
	if _, err := r.ClassifyWindows(ctx, tr, imgs, ps); err != nil { // the weights go up
		t.Fatal(err)
	}
	before := dev.bytes
	plain, err := r.ClassifyWindows(ctx, tr, imgs, ps)
	if err != nil {
		t.Fatal(err)
	}
	plainBytes := dev.bytes - before

	// Hold the windows as the detector does (UploadSource, then Hold).
	wins := []Rect{{X: 1, Y: 1, W: 60, H: 50}, {W: imgs[1].W, H: imgs[1].H}}
	g.HoldSources(1 << 20)
	for k, w := range wins {
		g.Hold(k, g.UploadSource(Cut(imgs[k], w), nil))
	}
	hp := heldPieces(g, ps, wins)
	n := 0
	for _, p := range hp {
		if p.Held != nil {
			n++
		}
	}
	if n == 0 || n == len(hp) {
		t.Fatalf("%d of %d pieces in held windows: the test wants both kinds", n, len(hp))
	}
	heldX := deviceBatch(t, r, tr, imgs, hp)
	if !bytes.Equal(f32Bytes(heldX), f32Bytes(plainX)) {
		t.Errorf("the batch cut from held windows differs from the batch cut from uploaded images")
	}
	before = dev.bytes
	held, err := r.ClassifyWindows(ctx, tr, imgs, hp)
	if err != nil {
		t.Fatal(err)
	}
	heldBytes := dev.bytes - before
	if !bytes.Equal(outBytes(held), outBytes(plain)) {
		t.Errorf("crops cut from held windows: other outputs than from uploaded images")
	}
	// The bytes saved are those of the images a batch no longer sends:
	// each batch sends each image of its pieces not held once.
	if want := plainBytes - srcBytes(imgs, ps, r.Batch) + srcBytes(imgs, hp, r.Batch); heldBytes != want || heldBytes >= plainBytes {
		t.Errorf("the crop step sent %d bytes from held windows, %d from images: want %d", heldBytes, plainBytes, want)
	}
	if fails := pairCrops(t, "held", net, g, sideFP32, heldX, len(hp), tr.Size, nil, net); fails > 0 {
		t.Errorf("held windows: %d values outside their bounds against the CPU engine", fails)
	}
	// A piece outside its held window is refused, not read out of bounds.
	bad := []Piece{{Held: hp[1].Held, R: Rect{X: 50, Y: 40, W: 20, H: 20}}}
	if _, err := r.ClassifyWindows(ctx, tr, nil, bad); err == nil {
		t.Errorf("a window beyond its held image was classified")
	}
	if _, err := NewRunner(net, 1).ClassifyWindows(ctx, tr, imgs, hp); err == nil {
		t.Errorf("the CPU engine took a piece held on the device")
	}
}

// srcBytes are the bytes of the source images the batches of ps send:
// each image of a batch's pieces not held, once (8-bit samples, or
// float32).
func srcBytes(imgs []imagefile.Image, ps []Piece, batch int) int {
	n := 0
	for lo := 0; lo < len(ps); lo += batch {
		seen := map[int]bool{}
		for _, p := range ps[lo:min(lo+batch, len(ps))] {
			if p.Held != nil || seen[p.Img] {
				continue
			}
			seen[p.Img] = true
			if imagefile.ToPlanes(imgs[p.Img].Pix, make([]byte, len(imgs[p.Img].Pix))) {
				n += len(imgs[p.Img].Pix)
			} else {
				n += 4 * len(imgs[p.Img].Pix)
			}
		}
	}
	return n
}
