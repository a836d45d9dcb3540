package jobs

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/canopy-hpc/canopy/infer/crop"
	"github.com/canopy-hpc/canopy/infer/cuda"
	"github.com/canopy-hpc/canopy/infer/imagefile"
	"github.com/canopy-hpc/canopy/internal/cropstage"
	"github.com/canopy-hpc/canopy/internal/testsupport/croptol"
)

// smallCropHub is the parity ResNet-50 hub folder with cropmodel.resize
// [32, 32] (the host shim is slow at 224×224).
func smallCropHub(t *testing.T) string {
	t.Helper()
	pf, _ := cropParity(t)
	return resizedHub(t, pf.Hub)
}

// resizedHub is a copy of the hub folder src with cropmodel.resize
// [32, 32].
func resizedHub(t *testing.T, src string) string {
	t.Helper()
	pf := struct{ Hub string }{src}
	dir := filepath.Join(t.TempDir(), "crop-hub-32")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(pf.Hub, "model.safetensors"))
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, "model.safetensors"), raw, 0o644)
	}
	var cfg map[string]any
	if err == nil {
		raw, err = os.ReadFile(filepath.Join(pf.Hub, "config.json"))
	}
	if err == nil {
		err = json.Unmarshal(raw, &cfg)
	}
	cm, ok := cfg["cropmodel"].(map[string]any)
	if err != nil || !ok {
		t.Fatalf("the parity hub folder's config.json: %v", err)
	}
	cm["resize"] = []int{32, 32}
	raw, _ = json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(dir, "config.json"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestCropsOnTheDetectorsGPU: eval --device cuda --crop-model (a fake GPU:
// the host shim) classifies the crops on the detector's GPU engine
// (report: run.crops.device and the model's device name it), --device cpu
// on the CPU engine; the crop columns are there in both, and each box's
// crop label is the CPU's wherever the CPU's best probability leads the
// next by more than twice croptol's probability bound (sameCropLabels).
func TestCropsOnTheDetectorsGPU(t *testing.T) {
	withFakeGPUs(t, 1)
	hub := smallCropHub(t)
	preds := map[string][]byte{}
	for _, dev := range []string{"cuda", "cpu"} {
		out := t.TempDir()
		cfg := gpuCfg(t, out)
		cfg.Model.Device = device(dev)
		if dev == "cuda" {
			cfg.Model.Precision, cfg.Model.PrecisionSet = cuda.Exact, true
		}
		cfg.Model.ScoreThresh = 0.3 // a few crops: the shim runs one CUDA thread at a time
		cfg.Crops = cropstage.CropConfig{Models: []string{hub}}
		if codes := runLocal(t, 1, cfg); codes[0] != 0 {
			t.Fatalf("--device %s: exit %v", dev, codes)
		}
		var rep struct {
			Run struct {
				CropModels []cropstage.ModelInfo `json:"crop_models"`
				Crops      cropstage.Stats       `json:"crops"`
			} `json:"run"`
		}
		readJSONFile(t, filepath.Join(out, "report.json"), &rep)
		want := "cpu"
		if dev == "cuda" {
			want = "cuda exact on Fake GPU"
		}
		if rep.Run.Crops.Device != want || len(rep.Run.CropModels) != 1 || rep.Run.CropModels[0].Device != want {
			t.Errorf("--device %s: crops.device %q, crop_models %+v; want %q", dev, rep.Run.Crops.Device, rep.Run.CropModels, want)
		}
		preds0, err := os.ReadFile(filepath.Join(out, "predictions.csv"))
		if err != nil || !bytes.Contains(bytes.SplitN(preds0, []byte("\n"), 2)[0], []byte("cropmodel_label")) {
			t.Errorf("--device %s: predictions.csv without crop columns (%v)", dev, err)
		}
		t.Logf("--device %s: %d crops classified on %s", dev, rep.Run.Crops.Classified, rep.Run.Crops.Device)
		if rep.Run.Crops.Classified == 0 {
			t.Errorf("--device %s: no crops classified: the test shows nothing", dev)
		}
		preds[dev] = preds0
	}
	_, _, images := testModelSet(t)
	sameCropLabels(t, hub, images, preds["cpu"], preds["cuda"])
}

// cropRow is a box of predictions.csv with its crop label and score.
type cropRow struct {
	image, label, cropLabel string
	box                     [4]float64
	cropScore               float64
}

// cropRows reads predictions.csv's boxes.
func cropRows(t *testing.T, b []byte) []cropRow {
	t.Helper()
	recs, err := csv.NewReader(bytes.NewReader(b)).ReadAll()
	if err != nil || len(recs) == 0 {
		t.Fatalf("predictions.csv: %v", err)
	}
	col := map[string]int{}
	for i, h := range recs[0] {
		col[h] = i
	}
	num := []string{"xmin", "ymin", "xmax", "ymax", "cropmodel_score"}
	for _, h := range append([]string{"image_path", "label", "cropmodel_label"}, num...) {
		if _, ok := col[h]; !ok {
			t.Fatalf("predictions.csv has no %s column: %v", h, recs[0])
		}
	}
	var rows []cropRow
	for _, r := range recs[1:] {
		c := cropRow{image: r[col["image_path"]], label: r[col["label"]], cropLabel: r[col["cropmodel_label"]]}
		var v [5]float64
		for i, h := range num {
			if v[i], err = strconv.ParseFloat(r[col[h]], 64); err != nil {
				t.Fatalf("predictions.csv row %v: %v", r, err)
			}
		}
		c.box, c.cropScore = [4]float64{v[0], v[1], v[2], v[3]}, v[4]
		rows = append(rows, c)
	}
	return rows
}

// sameCropLabels: every box of the CPU run has a box of the GPU run on the
// same image with the same label and the same crop window (the detectors'
// boxes may differ in their last bits; the crops are then the same
// pixels), and its crop label is the CPU's wherever the CPU's top two
// probabilities are more than twice croptol.ProbTolerance apart (the crop
// engine's GPU tests' rule; closer, either side may take either class).
// The CPU's probabilities are the crop model's on the CPU engine,
// recomputed here from the crops (and checked against the CPU run's label
// and score); at least one box must be unambiguous, or the comparison
// shows nothing.
func sameCropLabels(t *testing.T, hub, images string, cpuCSV, gpuCSV []byte) {
	t.Helper()
	m, err := crop.Load(hub, crop.Options{})
	if err != nil {
		t.Fatal(err)
	}
	read := map[string]imagefile.Image{}
	window := func(r cropRow) (imagefile.Image, crop.Rect, string) {
		im, ok := read[r.image]
		if !ok {
			if im, err = imagefile.Read(filepath.Join(images, r.image)); err != nil {
				t.Fatal(err)
			}
			read[r.image] = im
		}
		w, err := crop.Window(r.box[0], r.box[1], r.box[2], r.box[3], m.Transform.Expand, im.W, im.H)
		if err != nil {
			t.Fatal(err)
		}
		return im, w, fmt.Sprintf("%s %s %+v", r.image, r.label, w)
	}
	cpuRows, gpuRows := cropRows(t, cpuCSV), cropRows(t, gpuCSV)
	if len(gpuRows) != len(cpuRows) {
		t.Fatalf("the GPU run has %d boxes, the CPU run %d", len(gpuRows), len(cpuRows))
	}
	gpuLabel := map[string]string{}
	for _, r := range gpuRows {
		_, _, k := window(r)
		gpuLabel[k] = r.cropLabel
	}
	var crops []imagefile.Image
	var keys []string
	for _, r := range cpuRows {
		im, w, k := window(r)
		crops = append(crops, crop.Cut(im, w))
		keys = append(keys, k)
	}
	out, err := m.Classify(context.Background(), crops, 1)
	if err != nil {
		t.Fatal(err)
	}
	n := m.Net()
	tol, _, _, err := croptol.ProbTolerance(croptol.Net{Body: n.Body, FCW: n.FCWeights(), Classes: n.Classes, Apply: m.Transform.Apply, Size: m.Transform.Size}, crops)
	if err != nil {
		t.Fatal(err)
	}
	clear := 0
	for i, r := range cpuRows {
		got, ok := gpuLabel[keys[i]]
		if !ok {
			t.Fatalf("the CPU run's box %s (%v) has no box with its crop in the GPU run", keys[i], r.box)
		}
		best, p := out[i].Best()
		label := m.Labels()[best]
		if r.cropLabel != label || float32(r.cropScore) != p {
			t.Fatalf("box %s: the CPU run says %s %v, its crop model here %s %v", keys[i], r.cropLabel, r.cropScore, label, p)
		}
		second := float32(math.Inf(-1))
		for j, q := range out[i].Probs {
			if j != best {
				second = max(second, q)
			}
		}
		// !(gap <= 2·tol): a NaN gap is not "ambiguous"
		if gap := float64(p - second); !(gap <= 2*tol) {
			clear++
			if got != label {
				t.Errorf("box %s: the GPU's crop label %s, the CPU's %s (probabilities %v, top two %.3g apart, bound %.3g)", keys[i], got, label, out[i].Probs, gap, tol)
			}
		}
	}
	t.Logf("%d boxes, %d with the CPU's top two probabilities more than twice the bound %.3g apart", len(cpuRows), clear, tol)
	if clear == 0 {
		t.Fatalf("every box is within twice the bound %.3g: no label compared", tol)
	}
}
