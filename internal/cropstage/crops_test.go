package cropstage

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/infer/crop"
	"github.com/canopy-hpc/canopy/infer/cuda"
	"github.com/canopy-hpc/canopy/infer/cuda/kernels"
	"github.com/canopy-hpc/canopy/infer/gpu"
	"github.com/canopy-hpc/canopy/infer/imagefile"
	"github.com/canopy-hpc/canopy/internal/testsupport/gputest"
	"github.com/canopy-hpc/canopy/internal/testsupport/torchckpt"
	"github.com/canopy-hpc/canopy/mpi"
	"github.com/canopy-hpc/canopy/mpi/local"
)

// memSource serves in-memory images; whole makes it a Whole source (the
// GPU cuts the crops from the image), else every crop is Read.
type memSource struct {
	imgs  []imagefile.Image
	reads int
}

func (s *memSource) Open(i int) (int, int, error) { return s.imgs[i].W, s.imgs[i].H, nil }
func (s *memSource) Read(i int, r crop.Rect) (imagefile.Image, error) {
	s.reads++
	return crop.Cut(s.imgs[i], r), nil
}
func (s *memSource) Release(int) {}

type wholeSource struct{ *memSource }

func (s wholeSource) Whole(i int) imagefile.Image { return s.imgs[i] }

// countDev counts the crops the device transforms (the scores alone
// cannot tell the engines apart: this model's probabilities round to 1).
type countDev struct {
	cuda.Device
	crops int
}

func (d *countDev) Launch(name string, g kernels.Dim, args ...any) error {
	if name == kernels.CropHPass {
		d.crops++
	}
	return d.Device.Launch(name, g, args...)
}

// gpuDet stands for a GPU detector: its engine is where the crops run.
type gpuDet struct{ g *gpu.Engine }

func (d gpuDet) CropEngine() *gpu.Engine { return d.g }

// TestCropStageOnDetectorsGPU: with a GPU detector (OnDetector) the
// stage classifies on its engine (report: crops.device and each model's
// device), giving exactly what crop.GPURunner gives for the same windows,
// whether the source is whole (cut on the device) or read crop by crop;
// without one, exactly the CPU runner's. (GPU and CPU agree within the
// bounds infer/crop's tests derive, not bit for bit.)
func TestCropStageOnDetectorsGPU(t *testing.T) {
	pf, err := torchckpt.CropPlanted("../..", t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	m, err := crop.Load(pf.R18, crop.Options{LabelDict: map[string]int{"a": 0, "b": 1}})
	if err != nil {
		t.Fatal(err)
	}
	m.Transform.Size = [2]int{32, 32} // the host shim is slow at 224×224
	r := rand.New(rand.NewPCG(5, 5))
	var imgs []imagefile.Image
	for _, wh := range [][2]int{{60, 50}, {45, 70}} {
		im := imagefile.Image{W: wh[0], H: wh[1], Pix: make([]float32, 3*wh[0]*wh[1])}
		for i := range im.Pix {
			im.Pix[i] = imagefile.Unit(uint8(r.IntN(256)))
		}
		imgs = append(imgs, im)
	}
	dets := [][]box.Detection{
		{{Box: box.Box{Xmin: 3, Ymin: 4, Xmax: 40.5, Ymax: 30}}, {Box: box.Box{Xmin: 10, Ymin: 10, Xmax: 10, Ymax: 20}}, {Box: box.Box{Xmin: 20, Ymin: 1, Xmax: 59, Ymax: 49}}},
		{{Box: box.Box{Xmin: 0, Ymin: 0, Xmax: 12, Ymax: 9}}, {Box: box.Box{Xmin: 5, Ymin: 30.7, Xmax: 44, Ymax: 69}}},
	}
	var wins []crop.Piece
	for i, ds := range dets {
		for _, d := range ds {
			if crop.ZeroSize(d.Box.Xmin, d.Box.Ymin, d.Box.Xmax, d.Box.Ymax) {
				continue
			}
			w, err := crop.Window(d.Box.Xmin, d.Box.Ymin, d.Box.Xmax, d.Box.Ymax, 0, imgs[i].W, imgs[i].H)
			if err != nil {
				t.Fatal(err)
			}
			wins = append(wins, crop.Piece{Img: i, R: w})
		}
	}
	ctx := context.Background()
	results := func(out []crop.Output) []Result {
		var rs []Result
		for _, o := range out {
			k, s := o.Best()
			rs = append(rs, Result{Label: int32(k), Score: s})
		}
		return rs
	}
	dev := &countDev{Device: gputest.Device(t)}
	eng := gpu.NewEngine(dev, cuda.Exact)
	defer eng.Close()
	direct, err := crop.NewGPURunner(m.Net(), eng).ClassifyWindows(ctx, m.Transform, imgs, wins)
	if err != nil {
		t.Fatal(err)
	}
	onCPU, err := crop.NewRunner(m.Net(), 2).ClassifyWindows(ctx, m.Transform, imgs, wins)
	if err != nil {
		t.Fatal(err)
	}
	whole, read := &memSource{imgs: imgs}, &memSource{imgs: imgs}
	for _, c := range []struct {
		name  string
		det   any
		src   Source
		reads *int // the crops Read (none from a whole source)
		want  []Result
	}{
		{"gpu, whole images", gpuDet{eng}, wholeSource{whole}, &whole.reads, results(direct)},
		{"gpu, crops read", gpuDet{eng}, read, &read.reads, results(direct)},
		{"cpu detector", struct{}{}, wholeSource{whole}, &whole.reads, results(onCPU)},
	} {
		before := dev.crops
		cs := &Set{models: []*crop.Model{m}, Info: []ModelInfo{{Device: "cpu"}}, workers: 2, Stats: Stats{Device: "cpu"}}
		cs.OnDetector(c.det)
		var tab *Table
		for _, err := range local.Run(1, func(comm mpi.Comm) error {
			var err error
			tab, err = Classify(ctx, comm, cs, c.src, dets)
			return err
		}) {
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
		}
		if _, gpuRun := c.det.(gpuDet); (dev.crops > before) != gpuRun {
			t.Errorf("%s: %d crops transformed on the device", c.name, dev.crops-before)
		}
		if _, w := c.src.(wholeSource); (*c.reads == 0) != w {
			t.Errorf("%s: %d crops read one by one", c.name, *c.reads)
		}
		var got []Result
		for _, rows := range tab.Rows {
			for _, r := range rows {
				if r != nil {
					got = append(got, r[0])
				}
			}
		}
		if len(got) != len(c.want) {
			t.Fatalf("%s: %d results, want %d", c.name, len(got), len(c.want))
		}
		for i := range got {
			if got[i] != c.want[i] {
				t.Errorf("%s: crop %d is %+v, want %+v", c.name, i, got[i], c.want[i])
			}
		}
		onGPU := strings.HasPrefix(cs.Stats.Device, "cuda exact on ")
		if _, gpuRun := c.det.(gpuDet); onGPU != gpuRun || cs.Info[0].Device != cs.Stats.Device {
			t.Errorf("%s: crops.device %q, the model's %q", c.name, cs.Stats.Device, cs.Info[0].Device)
		}
	}
}
