package jobs

import (
	"context"
	"encoding/csv"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/canopy-hpc/canopy/infer/crop"
	"github.com/canopy-hpc/canopy/infer/cuda"
	"github.com/canopy-hpc/canopy/infer/cuda/cudnn"
	"github.com/canopy-hpc/canopy/infer/cuda/hostkern"
	"github.com/canopy-hpc/canopy/infer/cuda/kernels"
	"github.com/canopy-hpc/canopy/infer/gpu"
	"github.com/canopy-hpc/canopy/infer/imagefile"
	"github.com/canopy-hpc/canopy/internal/modelsel"
	"github.com/canopy-hpc/canopy/internal/pipeline/evalcrops"
	"github.com/canopy-hpc/canopy/report"
)

// cropCount counts the crops a device cuts and resizes (crop_hpass).
type cropCount struct {
	cuda.Device
	n *int
}

func (d cropCount) Launch(name string, g kernels.Dim, args ...any) error {
	if name == kernels.CropHPass {
		*d.n++
	}
	return d.Device.Launch(name, g, args...)
}

// evalCropsCSV writes an annotation CSV of boxes on the parity raster
// (labels the crop model's classes) for eval-crops --csv.
func evalCropsCSV(t *testing.T, raster string) (string, [][4]float64) {
	t.Helper()
	boxes := [][4]float64{{380, 159, 392, 172}, {419, 172, 431, 184}, {413, 2, 425, 15}, {3, 361, 15, 373}, {252, 241, 264, 254}, {100.5, 20.25, 180, 90}}
	labels := []string{"Alive", "Snag", "Dead", "Snag", "Dead", "Alive"}
	var b strings.Builder
	b.WriteString("image_path,xmin,ymin,xmax,ymax,label\n")
	for i, x := range boxes {
		fmt.Fprintf(&b, "%s,%v,%v,%v,%v,%s\n", filepath.Base(raster), x[0], x[1], x[2], x[3], labels[i])
	}
	dir := t.TempDir()
	raw, err := os.ReadFile(raster)
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, filepath.Base(raster)), raw, 0o644)
	}
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, "truth.csv"), []byte(b.String()), 0o644)
	}
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "truth.csv"), boxes
}

// TestEvalCropsOnGPU: eval-crops --device cuda (a fake GPU: the host
// shim; --precision exact, and fp32 on the fake cuDNN) cuts, resizes and
// classifies every crop on the GPU engine, and its crops.csv is exactly
// what crop.GPURunner gives for those crops on that engine (label and
// score, bit for bit); --device cpu stays on the CPU engine (no crop on
// the device) and is exactly crop.Runner's. report.json records device,
// devices and crop_model.device. (The GPU and CPU engines agree within the
// bounds infer/crop's tests derive, not bit for bit.)
func TestEvalCropsOnGPU(t *testing.T) {
	withFakeGPUs(t, 1)
	var cut int
	wrapFakeGPUs(func(d cuda.Device) cuda.Device { return cropCount{d, &cut} })
	pf, _ := cropParity(t)
	hub := smallCropHub(t)
	truth, boxes := evalCropsCSV(t, pf.Tile)
	// The crops as canopy cuts them, and each engine's outputs for them.
	m, err := crop.Load(hub, crop.Options{})
	if err != nil {
		t.Fatal(err)
	}
	img, err := imagefile.Read(pf.Tile)
	if err != nil {
		t.Fatal(err)
	}
	var crops []imagefile.Image
	for _, b := range boxes {
		r, err := crop.Window(b[0], b[1], b[2], b[3], m.Transform.Expand, img.W, img.H)
		if err != nil {
			t.Fatal(err)
		}
		crops = append(crops, crop.Cut(img, r))
	}
	lib, err := cudnn.Find(cudnn.Search{Flag: fakeCUDNN(t)})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]crop.Output{}
	ctx := context.Background()
	for _, p := range []cuda.Precision{cuda.Exact, cuda.FP32} {
		g, err := crop.NewGPURunnerOn(m.Net(), hostkern.New(), gpu.Options{Precision: p, CUDNN: lib})
		if err != nil {
			t.Fatal(err)
		}
		if want["cuda "+p.String()], err = g.Classify(ctx, m.Transform, crops); err != nil {
			t.Fatal(err)
		}
		g.Close()
	}
	if want["cpu"], err = crop.NewRunner(m.Net(), 1).Classify(ctx, m.Transform, crops); err != nil {
		t.Fatal(err)
	}
	for _, run := range []struct{ args []string }{
		{[]string{"--device", "cuda", "--precision", "exact"}},
		{[]string{"--device", "cuda", "--precision", "fp32"}},
		{[]string{"--device", "cpu"}},
	} {
		name := strings.Join(run.args, " ")
		key := "cpu"
		if run.args[1] == "cuda" {
			key = "cuda " + run.args[3]
		}
		cut = 0
		out := filepath.Join(t.TempDir(), "out")
		args := append([]string{"eval-crops", "--csv", truth, "--crop-model", hub, "--threads", "1", "--out", out}, run.args...)
		if code, stderr := runArgs(t, args...); code != 0 {
			t.Fatalf("%s: exit %d: %s", name, code, stderr)
		}
		wantCut := len(crops)
		if key == "cpu" {
			wantCut = 0
		}
		if cut != wantCut {
			t.Errorf("%s: %d crops cut on the device, want %d", name, cut, wantCut)
		}
		var rep struct {
			Device    string                `json:"device"`
			Devices   []modelsel.RankDevice `json:"devices"`
			CropModel struct {
				Device string `json:"device"`
			} `json:"crop_model"`
		}
		readJSONFile(t, filepath.Join(out, "report.json"), &rep)
		dev, wantDev := "cpu", "cpu"
		if key != "cpu" {
			dev, wantDev = "cuda:0", key+" on Fake GPU"
		}
		if rep.Device != wantDev || rep.CropModel.Device != wantDev || len(rep.Devices) != 1 || rep.Devices[0].Device != dev {
			t.Errorf("%s: report device %q, crop_model.device %q, devices %+v; want %q, rank 0 on %s", name, rep.Device, rep.CropModel.Device, rep.Devices, wantDev, dev)
		}
		f, err := os.Open(filepath.Join(out, "crops.csv"))
		if err != nil {
			t.Fatal(err)
		}
		rows, err := csv.NewReader(f).ReadAll()
		f.Close()
		if err != nil || len(rows) != len(crops)+1 {
			t.Fatalf("%s: crops.csv: %d rows, %v", name, len(rows), err)
		}
		for i, o := range want[key] {
			k, s := o.Best()
			got := rows[i+1][len(rows[i+1])-2:]
			if exp := []string{m.Labels()[k], report.FormatFloat(float64(s))}; got[0] != exp[0] || got[1] != exp[1] {
				t.Errorf("%s: crop %d: predicted %v, the %s engine gives %v", name, i, got, key, exp)
			}
		}
	}
}

// TestEvalCropsGPUNonFinite: eval-crops --device cuda with a crop model
// whose logits overflow (finite weights, fc.weight all 3e38) exits 4, as
// the CPU engine and the detector do, naming the crop; nothing is
// published.
func TestEvalCropsGPUNonFinite(t *testing.T) {
	withFakeGPUs(t, 1)
	pf, _ := cropParity(t)
	huge := resizedHub(t, overflowCrops(t).Hub)
	truth, _ := evalCropsCSV(t, pf.Tile)
	for _, dev := range []string{"cuda", "cpu"} {
		out := filepath.Join(t.TempDir(), "out")
		cfg := evalcrops.Config{CSV: truth, Out: out, CropModel: huge, Threads: 1, LossBatch: 4,
			Device: ModelConfig{Device: device(dev), Precision: cuda.Exact, PrecisionSet: true}}
		errs := runEvalCrops(t, 1, cfg)
		if code := Code(errs[0]); code != ExitModel || !strings.Contains(fmt.Sprint(errs[0]), "logits for crop") {
			t.Errorf("--device %s: exit %d (%v); want %d naming the crop's logits", dev, code, errs[0], ExitModel)
		}
		for _, f := range []string{"crops.csv", "report.json"} {
			if _, err := os.Stat(filepath.Join(out, f)); err == nil {
				t.Errorf("--device %s: %s published", dev, f)
			}
		}
	}
}

// closeFails is a device whose Close fails (after freeing it).
type closeFails struct{ cuda.Device }

func (d closeFails) Close() error {
	d.Device.Close()
	return fmt.Errorf("the device did not close")
}

// TestEvalCropsGPUCloseError: eval-crops --device cuda whose GPU engine
// fails to close fails the run (exit 5, ExitMPI as a device that does not open; the
// close's error named) and
// publishes nothing: no report.json, no crops.csv.
func TestEvalCropsGPUCloseError(t *testing.T) {
	withFakeGPUs(t, 1)
	wrapFakeGPUs(func(d cuda.Device) cuda.Device { return closeFails{d} })
	pf, _ := cropParity(t)
	truth, _ := evalCropsCSV(t, pf.Tile)
	out := filepath.Join(t.TempDir(), "out")
	cfg := evalcrops.Config{CSV: truth, Out: out, CropModel: smallCropHub(t), Threads: 1,
		Device: ModelConfig{Device: device("cuda"), Precision: cuda.Exact, PrecisionSet: true}}
	errs := runEvalCrops(t, 1, cfg)
	if msg := fmt.Sprint(errs[0]); Code(errs[0]) != ExitMPI || !strings.Contains(msg, "close the crop model's GPU engine") || !strings.Contains(msg, "the device did not close") {
		t.Fatalf("exit %d (%v); want %d naming the failed close", Code(errs[0]), errs[0], ExitMPI)
	}
	for _, n := range []string{"report.json", "crops.csv"} {
		if _, err := os.Stat(filepath.Join(out, n)); err == nil {
			t.Errorf("a run whose GPU engine failed to close published %s", n)
		}
	}
}
