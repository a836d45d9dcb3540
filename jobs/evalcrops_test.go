package jobs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/draw"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/canopy-hpc/canopy/infer"
	"github.com/canopy-hpc/canopy/infer/imagefile"
	"github.com/canopy-hpc/canopy/internal/collective"
	"github.com/canopy-hpc/canopy/internal/cropstage"
	"github.com/canopy-hpc/canopy/internal/dataset"
	"github.com/canopy-hpc/canopy/internal/output"
	"github.com/canopy-hpc/canopy/metrics"
	"github.com/canopy-hpc/canopy/mpi"
	"github.com/canopy-hpc/canopy/mpi/local"
)

// cropTestFolder is tools/cropmodel/validate.py's ImageFolder.
const cropTestFolder = "testdata/cropfolder/val"

// fakeCrops is a stand-in crop model: each crop's logits are a fixed
// float32 function of its mean colour and size, so the job's plumbing
// (listing, shards, gather, table, outputs) is tested without a network.
type fakeCrops struct {
	labels []string
	batch  int // its stored cropmodel.batch_size
}

func (f fakeCrops) Labels() []string { return f.labels }
func (f fakeCrops) Info() any        { return map[string]any{"path": "fake"} }
func (f fakeCrops) Expand() int      { return 0 }
func (f fakeCrops) BatchSize() int   { return f.batch }
func (f fakeCrops) Classify(_ context.Context, crops []imagefile.Image) ([][]float32, []float32, error) {
	var logits [][]float32
	var scores []float32
	for _, im := range crops {
		var mean [3]float32
		n := im.W * im.H
		for ch := range 3 {
			for _, v := range im.Pix[ch*n : (ch+1)*n] {
				mean[ch] += v
			}
			mean[ch] /= float32(n)
		}
		row := make([]float32, len(f.labels))
		var s, best float64
		for c := range row {
			row[c] = (mean[c%3]-mean[(c+1)%3])*8 + float32((im.W*7+im.H*3+c*5)%11)/4
			s += math.Exp(float64(row[c]))
		}
		for _, v := range row {
			best = max(best, math.Exp(float64(v))/s)
		}
		logits, scores = append(logits, row), append(scores, float32(best))
	}
	return logits, scores, nil
}

func useFakeCrops(t *testing.T) {
	t.Helper()
	prev := loadCropModel
	loadCropModel = func(c mpi.Comm, path, _ string, _ int) (cropstage.Classifier, error) {
		if path == "bad" {
			return nil, collective.AgreeErr(c, ExitModel, errors.New("not a crop model: "+infer.ErrModel.Error()))
		}
		return fakeCrops{labels: []string{"Abies", "Picea", "Pinus", "Tsuga"}}, nil
	}
	t.Cleanup(func() { loadCropModel = prev })
}

func runEvalCrops(t *testing.T, ranks int, cfg EvalCropsConfig) []error {
	t.Helper()
	return local.Run(ranks, func(c mpi.Comm) error { return EvalCrops(context.Background(), c, cfg) })
}

// TestEvalCropsIdenticalAcrossRanks: the table, the confusion matrix and
// crops.csv are the same bytes for 1, 2 and 3 ranks and any batch size;
// the table is ComputeCropTable of the crops in ImageFolder order; the
// sub-folder images DeepForest drops are reported, not classified.
func TestEvalCropsIdenticalAcrossRanks(t *testing.T) {
	useFakeCrops(t)
	var refMetrics, refCSV []byte
	for _, v := range []struct{ ranks, batch int }{{1, 1}, {2, 3}, {3, 5}} {
		out := t.TempDir()
		cfg := EvalCropsConfig{Folder: cropTestFolder, Out: out, CropModel: "m", BatchSize: v.batch, LossBatch: 4, HTML: true}
		for r, err := range runEvalCrops(t, v.ranks, cfg) {
			if err != nil {
				t.Fatalf("%+v: rank %d: %v", v, r, err)
			}
		}
		var rep struct {
			Metrics   json.RawMessage
			Confusion cropConfusion
			Crops     int
			Input     cropInput
			Outputs   map[string]string
		}
		b, _ := os.ReadFile(filepath.Join(out, "report.json"))
		if err := json.Unmarshal(b, &rep); err != nil {
			t.Fatal(err)
		}
		csv, _ := os.ReadFile(filepath.Join(out, cropsFile))
		html, err := os.ReadFile(filepath.Join(out, "report.html"))
		if err != nil || !bytes.Contains(html, []byte(`<table class="confusion">`)) || rep.Outputs["report.html"] == "" {
			t.Errorf("%+v: report.html %d bytes (%v), outputs %v", v, len(html), err, rep.Outputs)
		}
		if refMetrics == nil {
			refMetrics, refCSV = rep.Metrics, csv
			var total int64
			for _, r := range rep.Confusion.Matrix {
				for _, n := range r {
					total += n
				}
			}
			if rep.Crops != 19 || total != 19 || rep.Input.Dropped != 5 || rep.Input.Skipped != 1 || bytes.Count(csv, []byte("\n")) != 20 {
				t.Fatalf("%d crops, confusion total %d, dropped %d, skipped %d, crops.csv %d lines", rep.Crops, total, rep.Input.Dropped, rep.Input.Skipped, bytes.Count(csv, []byte("\n")))
			}
			var m map[string]float64
			if err := json.Unmarshal(rep.Metrics, &m); err != nil {
				t.Fatal(err)
			}
			if a := m["Micro-Average Accuracy"]; !(a > 0 && a < 1) || len(m) != 8 {
				t.Fatalf("metrics %v: the fake model must get some crops right and some wrong", m)
			}
			continue
		}
		if !bytes.Equal(rep.Metrics, refMetrics) || !bytes.Equal(csv, refCSV) {
			t.Errorf("%+v: metrics or crops.csv differ from 1 rank's:\n%s\n%s", v, rep.Metrics, refMetrics)
		}
	}
	// The table is ComputeCropTable's of the crops in order.
	var logits []float32
	var targets []int32
	f := fakeCrops{labels: []string{"Abies", "Picea", "Pinus", "Tsuga"}}
	for _, line := range strings.Split(strings.TrimSpace(string(refCSV)), "\n")[1:] {
		parts := strings.Split(line, ",")
		im, err := imagefile.Read(filepath.Join(cropTestFolder, parts[0]))
		if err != nil {
			t.Fatal(err)
		}
		l, _, _ := f.Classify(context.Background(), []imagefile.Image{im})
		logits = append(logits, l[0]...)
		targets = append(targets, map[string]int32{"Abies": 0, "Picea": 1, "Pinus": 2, "Tsuga": 3}[parts[1]])
	}
	tab, err := metrics.ComputeCropTable(logits, 4, targets, 4)
	if err != nil {
		t.Fatal(err)
	}
	var want, got bytes.Buffer
	json.Compact(&want, output.MetricsJSON(cropValues(tab, f.labels)))
	json.Compact(&got, refMetrics)
	if want.Len() == 0 || !bytes.Equal(want.Bytes(), got.Bytes()) {
		t.Errorf("report.json metrics %s, ComputeCropTable %s", got.Bytes(), want.Bytes())
	}
}

// TestEvalCropsPage: report.html opens in chromium without errors and
// shows the confusion matrix of report.json, every cell.
func TestEvalCropsPage(t *testing.T) {
	chromium := findChromium(t)
	useFakeCrops(t)
	out := t.TempDir()
	cfg := EvalCropsConfig{Folder: cropTestFolder, Out: out, CropModel: "m", BatchSize: 4, LossBatch: 4, HTML: true}
	if errs := runEvalCrops(t, 2, cfg); errs[0] != nil {
		t.Fatal(errs[0])
	}
	var rep struct{ Confusion cropConfusion }
	b, _ := os.ReadFile(filepath.Join(out, "report.json"))
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	dom, console := browse(t, chromium, filepath.Join(out, "report.html"))
	if got := domAttr(dom, "data-check"); got != "ok" || len(console) > 0 {
		t.Errorf("page check %q, console %v", got, console)
	}
	var cells []string
	for _, row := range rep.Confusion.Matrix {
		for _, n := range row {
			cells = append(cells, fmt.Sprintf(">%d</td>", n))
		}
	}
	pos := 0
	for _, c := range cells {
		k := strings.Index(dom[pos:], c)
		if k < 0 {
			t.Fatalf("the page lacks the confusion cell %s after offset %d", c, pos)
		}
		pos += k + len(c)
	}
}

// TestEvalCropsLossBatch: val_loss's batches are --loss-batch-size, else
// the crop model's stored cropmodel.batch_size, else DeepForest's 4; the
// report says which, and val_loss is ComputeCropTable's at that size.
func TestEvalCropsLossBatch(t *testing.T) {
	labels := []string{"Abies", "Picea", "Pinus", "Tsuga"}
	for _, c := range []struct {
		flag, stored, want int
		from               string
	}{{0, 0, 4, "DeepForest's default"}, {0, 1, 1, "crop model cropmodel.batch_size"}, {7, 1, 7, "--loss-batch-size"}} {
		prev := loadCropModel
		loadCropModel = func(mpi.Comm, string, string, int) (cropstage.Classifier, error) {
			return fakeCrops{labels: labels, batch: c.stored}, nil
		}
		out := t.TempDir()
		cfg := EvalCropsConfig{Folder: cropTestFolder, Out: out, CropModel: "m", BatchSize: 4, LossBatch: c.flag}
		errs := runEvalCrops(t, 1, cfg)
		loadCropModel = prev
		if errs[0] != nil {
			t.Fatal(errs[0])
		}
		var rep struct {
			Metrics       map[string]float64
			LossBatch     int    `json:"loss_batch_size"`
			LossBatchFrom string `json:"loss_batch_size_from"`
		}
		b, _ := os.ReadFile(filepath.Join(out, "report.json"))
		if err := json.Unmarshal(b, &rep); err != nil {
			t.Fatal(err)
		}
		csv, _ := os.ReadFile(filepath.Join(out, cropsFile))
		var logits []float32
		var targets []int32
		for _, line := range strings.Split(strings.TrimSpace(string(csv)), "\n")[1:] {
			p := strings.Split(line, ",")
			im, err := imagefile.Read(filepath.Join(cropTestFolder, p[0]))
			if err != nil {
				t.Fatal(err)
			}
			l, _, _ := fakeCrops{labels: labels}.Classify(context.Background(), []imagefile.Image{im})
			logits = append(logits, l[0]...)
			targets = append(targets, int32(slices.Index(labels, p[1])))
		}
		tab, err := metrics.ComputeCropTable(logits, 4, targets, c.want)
		if err != nil {
			t.Fatal(err)
		}
		if rep.LossBatch != c.want || rep.LossBatchFrom != c.from || rep.Metrics["val_loss"] != float64(tab.ValLoss) {
			t.Errorf("%+v: loss batch %d from %q, val_loss %v; want %d from %q, %v", c, rep.LossBatch, rep.LossBatchFrom, rep.Metrics["val_loss"], c.want, c.from, tab.ValLoss)
		}
	}
}

// TestEvalCropsBadInput: bad folders and models end with their exit code
// and a message naming the cause, never a hang (a FIFO named .png is
// never opened).
func TestEvalCropsBadInput(t *testing.T) {
	useFakeCrops(t)
	mk := func(t *testing.T, files map[string]string) string {
		root := t.TempDir()
		for rel, data := range files {
			p := filepath.Join(root, rel)
			os.MkdirAll(filepath.Dir(p), 0o755)
			os.WriteFile(p, []byte(data), 0o644)
		}
		return root
	}
	png, err := os.ReadFile(filepath.Join(cropTestFolder, "Abies", "a0.png"))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		args func(t *testing.T) []string
		code int
		msg  string
	}{
		{"empty class", func(t *testing.T) []string {
			root := mk(t, map[string]string{"Abies/a.png": string(png), "Picea/notes.txt": "x"})
			return []string{root}
		}, ExitInput, "no image file in the class folders Picea"},
		{"not an image", func(t *testing.T) []string {
			return []string{mk(t, map[string]string{"Abies/a.png": string(png), "Picea/b.png": "not a png"})}
		}, ExitInput, "Picea/b.png"},
		{"fifo", func(t *testing.T) []string {
			root := mk(t, map[string]string{"Abies/a.png": string(png)})
			os.MkdirAll(filepath.Join(root, "Picea"), 0o755)
			if err := syscall.Mkfifo(filepath.Join(root, "Picea", "p.png"), 0o644); err != nil {
				t.Fatal(err)
			}
			return []string{root}
		}, ExitInput, "Picea/p.png is not a regular file (a FIFO)"},
		{"unknown class", func(t *testing.T) []string {
			return []string{mk(t, map[string]string{"Abies/a.png": string(png), "Quercus/q.png": string(png)})}
		}, ExitInput, `class folder "Quercus" is not a label`},
		{"symlink outside", func(t *testing.T) []string {
			root := mk(t, map[string]string{"Abies/a.png": string(png)})
			other := mk(t, map[string]string{"p.png": string(png)})
			os.Symlink(other, filepath.Join(root, "Picea"))
			return []string{root}
		}, ExitInput, "Picea leads outside the folder"},
		{"bad model", func(t *testing.T) []string {
			return []string{cropTestFolder, "--crop-model", "bad"}
		}, ExitModel, "not a crop model"},
		{"no model", func(t *testing.T) []string { return []string{cropTestFolder, "--crop-model", ""} }, ExitUsage, "--crop-model is required"},
		{"two folders", func(t *testing.T) []string { return []string{cropTestFolder, cropTestFolder} }, ExitUsage, "one FOLDER"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			args := append([]string{"eval-crops", "--out", t.TempDir(), "--crop-model", "m"}, c.args(t)...)
			done := make(chan struct{})
			var code int
			var msg string
			go func() { code, msg = cliRun(t, args...); close(done) }()
			select {
			case <-done:
			case <-time.After(60 * time.Second):
				t.Fatal("eval-crops hangs")
			}
			if code != c.code || !strings.Contains(msg, c.msg) {
				t.Errorf("exit %d, %q; want %d with %q", code, msg, c.code, c.msg)
			}
		})
	}
}

// TestEvalCropsCSV: --csv cuts each truth box from its image. The
// folder's crops pasted into two canvases, with a CSV whose boxes are
// exactly the pasted rectangles (in the folder's order), give the folder's
// table and scores; a 0,0,0,0 row and a box of zero width are left out
// (counted), a label the model does not know is exit 3.
func TestEvalCropsCSV(t *testing.T) {
	useFakeCrops(t)
	f, err := dataset.ReadImageFolder(cropTestFolder, func(s string) bool { return s != "b" && s != "x" && s != "x-y" && s != "z" }, false)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var rows strings.Builder
	rows.WriteString("image_path,xmin,ymin,xmax,ymax,label\n")
	canvases := [2]*image.NRGBA{image.NewNRGBA(image.Rect(0, 0, 700, 700)), image.NewNRGBA(image.Rect(0, 0, 700, 700))}
	x, y, rowH, k := 3, 5, 0, 0
	for i, s := range f.Samples {
		if i == len(f.Samples)/2 {
			k, x, y, rowH = 1, 3, 5, 0
		}
		fh, err := os.Open(filepath.Join(cropTestFolder, s.Path))
		if err != nil {
			t.Fatal(err)
		}
		im, err := png.Decode(fh)
		fh.Close()
		if err != nil {
			t.Fatal(err)
		}
		w, h := im.Bounds().Dx(), im.Bounds().Dy()
		if x+w > 700 {
			x, y, rowH = 3, y+rowH+2, 0
		}
		draw.Draw(canvases[k], image.Rect(x, y, x+w, y+h), im, image.Point{}, draw.Src)
		fmt.Fprintf(&rows, "c%d.png,%d,%d,%d,%d,%s\n", k, x, y, x+w, y+h, s.Class)
		if i == 2 {
			fmt.Fprintf(&rows, "c%d.png,10,10,10,30,Abies\n", k) // zero width: dropped
		}
		x, rowH = x+w+2, max(rowH, h)
	}
	rows.WriteString("empty.png,0,0,0,0,Abies\n")
	for k, c := range canvases {
		g, _ := os.Create(filepath.Join(dir, fmt.Sprintf("c%d.png", k)))
		png.Encode(g, c)
		g.Close()
	}
	os.WriteFile(filepath.Join(dir, "truth.csv"), []byte(rows.String()), 0o644)

	run := func(cfg EvalCropsConfig) (map[string]any, []byte) {
		t.Helper()
		for r, err := range runEvalCrops(t, 2, cfg) {
			if err != nil {
				t.Fatalf("rank %d: %v", r, err)
			}
		}
		var rep map[string]any
		b, _ := os.ReadFile(filepath.Join(cfg.Out, "report.json"))
		if err := json.Unmarshal(b, &rep); err != nil {
			t.Fatal(err)
		}
		csv, _ := os.ReadFile(filepath.Join(cfg.Out, cropsFile))
		return rep, csv
	}
	fold, fcsv := run(EvalCropsConfig{Folder: cropTestFolder, Out: filepath.Join(dir, "f"), CropModel: "m", BatchSize: 4, LossBatch: 4})
	csvRep, ccsv := run(EvalCropsConfig{CSV: filepath.Join(dir, "truth.csv"), Out: filepath.Join(dir, "c"), CropModel: "m", BatchSize: 3, LossBatch: 4})
	if fmt.Sprint(fold["metrics"]) != fmt.Sprint(csvRep["metrics"]) {
		t.Errorf("--csv metrics %v, the folder's %v", csvRep["metrics"], fold["metrics"])
	}
	in := csvRep["input"].(map[string]any)
	if in["dropped_zero_size"] != 1.0 || in["images"] != 3.0 || csvRep["crops"] != float64(len(f.Samples)) {
		t.Errorf("--csv input %v, crops %v", in, csvRep["crops"])
	}
	score := func(csv []byte) []string {
		var out []string
		for _, l := range strings.Split(strings.TrimSpace(string(csv)), "\n")[1:] {
			p := strings.Split(l, ",")
			out = append(out, strings.Join(p[len(p)-3:], ","))
		}
		return out
	}
	if a, b := score(fcsv), score(ccsv); strings.Join(a, ";") != strings.Join(b, ";") {
		t.Errorf("--csv crops.csv labels and scores differ from the folder's:\n%v\n%v", b, a)
	}
	bad := strings.Replace(rows.String(), ",Pinus\n", ",Quercus\n", 1)
	os.WriteFile(filepath.Join(dir, "bad.csv"), []byte(bad), 0o644)
	code, msg := cliRun(t, "eval-crops", "--csv", filepath.Join(dir, "bad.csv"), "--crop-model", "m", "--out", filepath.Join(dir, "b"))
	if code != ExitInput || !strings.Contains(msg, `label "Quercus" is not a class of the crop model`) {
		t.Errorf("unknown label: exit %d, %q", code, msg)
	}
}
