package jobs

import (
	"bytes"
	"encoding/csv"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/canopy-hpc/canopy/infer/crop"
	"github.com/canopy-hpc/canopy/infer/cuda"
	"github.com/canopy-hpc/canopy/infer/cuda/kernels"
	"github.com/canopy-hpc/canopy/infer/tile"
	"github.com/canopy-hpc/canopy/internal/cropstage"
	"github.com/canopy-hpc/canopy/internal/tilerun"
)

// sentCount counts what a device is sent (Upload, UploadBytes) and the
// crops it cuts (crop_hpass).
type sentCount struct {
	cuda.Device
	bytes, crops *atomic.Int64 // the in-process ranks' devices share them
}

func (d sentCount) Upload(dst cuda.Ptr, src []float32) error {
	d.bytes.Add(int64(4 * len(src)))
	return d.Device.Upload(dst, src)
}

func (d sentCount) UploadBytes(dst cuda.Ptr, src []byte) error {
	d.bytes.Add(int64(len(src)))
	return d.Device.UploadBytes(dst, src)
}

func (d sentCount) Launch(name string, g kernels.Dim, args ...any) error {
	if name == kernels.CropHPass {
		d.crops.Add(1)
	}
	return d.Device.Launch(name, g, args...)
}

// TestCropTileFromHeldWindows: predict --tile --device cuda --crop-model
// (a fake GPU: the host shim, --precision exact) cuts each crop from the
// window the detector already has on the device: predictions.csv is the
// same bytes as when every crop is read from the raster and uploaded
// (tilerun.HeldWindowBytes 0, the path before), the device cuts as many
// crops, and it is sent exactly the crops' pixels less (3·w·h 8-bit
// samples per crop). On 2 ranks, where a crop's rank may not be the one
// that detected its window (then it is read and uploaded as before), the
// same bytes again; and at fp32 on the fake cuDNN (global batches with
// pads) held against read. (The crops' classes against the CPU engine's:
// infer/crop's TestGPUCropFromHeldWindows.)
func TestCropTileFromHeldWindows(t *testing.T) {
	withFakeGPUs(t, 2)
	var sent, cut atomic.Int64
	wrapFakeGPUs(func(d cuda.Device) cuda.Device { return sentCount{d, &sent, &cut} })
	hub := smallCropHub(t)
	raster, _ := tileRasterFile(t, 260, 200, 7)
	spec := gpuCfg(t, t.TempDir()).Model.Spec
	prec := cuda.Exact
	run := func(ranks int, held int64) ([]byte, int, int) {
		prev := tilerun.HeldWindowBytes
		tilerun.HeldWindowBytes = held
		defer func() { tilerun.HeldWindowBytes = prev }()
		sent.Store(0)
		cut.Store(0)
		cfg := tilerun.Config{Names: tileCfg("", "").Names, Raster: raster, Out: filepath.Join(t.TempDir(), "out"), BatchSize: 2,
			Settings: tile.Settings{Patch: 128, Overlap: 0.25}, IoU: tile.DefaultIoU, CacheMiB: 16,
			Model: ModelConfig{Spec: spec, Threads: 1, ScoreThresh: 0.05, NMSThresh: -1, Device: device("cuda"), Precision: prec, PrecisionSet: true},
			Crops: cropstage.CropConfig{Models: []string{hub}}}
		return runTile(t, ranks, cfg), int(sent.Load()), int(cut.Load())
	}
	before, sentBefore, cutBefore := run(1, 0)
	after, sentAfter, cutAfter := run(1, tilerun.HeldWindowBytes)
	if !bytes.Equal(before, after) {
		t.Errorf("predictions.csv differs when the crops are cut from the held windows")
	}
	if two, _, _ := run(2, tilerun.HeldWindowBytes); !bytes.Equal(two, after) {
		t.Errorf("predictions.csv on 2 ranks (held windows) differs from 1 rank's")
	}
	// The cuDNN path (the fake cuDNN at fp32): global batches padded to
	// --batch-size, the pads never held.
	prec = cuda.FP32
	readFP32, _, _ := run(1, 0)
	heldFP32, _, _ := run(1, tilerun.HeldWindowBytes)
	if !bytes.Equal(readFP32, heldFP32) || bytes.Count(heldFP32, []byte("\n")) < 3 {
		t.Errorf("fp32: predictions.csv differs when the crops are cut from the held windows (or holds under 2 crops)")
	}
	rows, err := csv.NewReader(bytes.NewReader(after)).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	// Every crop went up from the raster before: its 8-bit samples.
	crops := 0
	for _, r := range rows[1:] {
		var b [4]float64
		for k := range b {
			if b[k], err = strconv.ParseFloat(r[1+k], 64); err != nil {
				t.Fatal(err)
			}
		}
		w, err := crop.Window(b[0], b[1], b[2], b[3], 0, 260, 200)
		if err != nil {
			t.Fatal(err)
		}
		crops += 3 * w.W * w.H
	}
	t.Logf("%d crops: %d bytes sent to the device before, %d after; %d and %d crops cut there", len(rows)-1, sentBefore, sentAfter, cutBefore, cutAfter)
	if len(rows) < 3 {
		t.Fatalf("%d crops: the test shows little", len(rows)-1)
	}
	if cutBefore != len(rows)-1 || cutAfter != cutBefore {
		t.Errorf("crops cut on the device: %d before, %d after; want %d", cutBefore, cutAfter, len(rows)-1)
	}
	if sentBefore-sentAfter != crops {
		t.Errorf("the device was sent %d bytes less; the crops' pixels are %d bytes", sentBefore-sentAfter, crops)
	}
}

// liveCount counts the buffers of size words a device holds at once
// (allocated, not yet freed), and the most it held (one rank's device).
type liveCount struct {
	cuda.Device
	size int
	live map[cuda.Ptr]bool
	cur  int
	peak *int
}

func (d *liveCount) Alloc(n int) (cuda.Ptr, error) {
	p, err := d.Device.Alloc(n)
	if err == nil && n == d.size {
		d.live[p] = true
		d.cur++
		*d.peak = max(*d.peak, d.cur)
	}
	return p, err
}

func (d *liveCount) Free(p cuda.Ptr) {
	if d.live[p] {
		delete(d.live, p)
		d.cur--
	}
	d.Device.Free(p)
}

// TestCropTileDropsHeldWindows: a raster's held windows are freed once
// its crops are done (tilerun's DropWindows): predict --tile --device
// cuda --crop-model (the host shim) over two copies of one raster, one
// round each, holds at most as many buffers of a window's size (3·128²
// 8-bit samples) on the device at once as over the raster alone. Were
// the first raster's windows kept (the budget is 1 GiB), the second's
// would be held beside them: twice as many.
func TestCropTileDropsHeldWindows(t *testing.T) {
	withFakeGPUs(t, 1)
	// a window's 8-bit samples, in words (gpu.Engine.UploadSource)
	const window = 3 * 128 * 128 / 4
	var peak int
	wrapFakeGPUs(func(d cuda.Device) cuda.Device {
		return &liveCount{Device: d, size: window, live: map[cuda.Ptr]bool{}, peak: &peak}
	})
	hub := smallCropHub(t)
	_, raster := tileRasterFile(t, 260, 200, 7)
	b, err := os.ReadFile(raster)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, n := range []string{"a.tif", "b.tif"} {
		if err := os.WriteFile(filepath.Join(dir, n), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	settings := tile.Settings{Patch: 128, Overlap: 0.25}
	wins, err := tile.Windows(260, 200, settings)
	if err != nil {
		t.Fatal(err)
	}
	spec := gpuCfg(t, t.TempDir()).Model.Spec
	run := func(list string) ([]byte, int) {
		csvFile := filepath.Join(t.TempDir(), "rasters.csv")
		if err := os.WriteFile(csvFile, []byte("image_path\n"+list), 0o644); err != nil {
			t.Fatal(err)
		}
		peak = 0
		cfg := tilerun.Config{Names: tileCfg("", "").Names, CSV: csvFile, RootDir: dir, Out: filepath.Join(t.TempDir(), "out"), BatchSize: 2,
			RoundWindows: len(wins), Settings: settings, IoU: tile.DefaultIoU, CacheMiB: 16,
			Model: ModelConfig{Spec: spec, Threads: 1, ScoreThresh: 0.05, NMSThresh: -1, Device: device("cuda"), Precision: cuda.Exact, PrecisionSet: true},
			Crops: cropstage.CropConfig{Models: []string{hub}}}
		return runTile(t, 1, cfg), peak
	}
	one, alone := run("a.tif\n")
	two, both := run("a.tif\nb.tif\n")
	if n := bytes.Count(one, []byte("\n")); n < 3 || bytes.Count(two, []byte("\n")) != 2*n-1 {
		t.Fatalf("%d rows for one raster, %d for two: the test shows little", n-1, bytes.Count(two, []byte("\n"))-1)
	}
	t.Logf("%d windows a raster; at most %d buffers of a window's size on the device at once for one raster, %d for two", len(wins), alone, both)
	if alone < len(wins) || both != alone {
		t.Errorf("at most %d buffers of a window's size on the device for one raster (want at least its %d windows held), %d for two (want as many: the first raster's freed)", alone, len(wins), both)
	}
}
