package jobs

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/infer/imagefile"
	"github.com/canopy-hpc/canopy/infer/modelfile"
	"github.com/canopy-hpc/canopy/infer/retinanet"
	"github.com/canopy-hpc/canopy/internal/collective"
	"github.com/canopy-hpc/canopy/internal/dataset"
	"github.com/canopy-hpc/canopy/internal/output"
	"github.com/canopy-hpc/canopy/internal/testhook"
	"github.com/canopy-hpc/canopy/internal/wire"
	"github.com/canopy-hpc/canopy/mpi/local"
)

// The job's val_* rows are the mean over the images of the losses the
// runner computes image by image (summed in image order), and the report
// and table carry them; replay has none.
func TestModelEvalLosses(t *testing.T) {
	model, csv, dir := testModelSet(t)
	out := t.TempDir()
	cfg := modelCfg(t, out)
	var table bytes.Buffer
	cfg.Stdout = &table
	if codes := runLocal(t, 2, cfg); codes[0] != 0 {
		t.Fatalf("exit %v", codes)
	}
	_, vals := reportMetrics(t, out)

	m, _, _, err := modelfile.LoadFolder(model)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(csv)
	truth, err := dataset.ParseTruth(csv, data)
	if err != nil {
		t.Fatal(err)
	}
	lm, _ := box.NewLabelMap([]string{"Tree", "Dead"})
	images, err := truth.Resolve(csv, lm)
	if err != nil {
		t.Fatal(err)
	}
	r := retinanet.NewRunner(m, 1)
	var cls, reg, tot float64
	empty := 0
	for _, im := range images {
		img, err := imagefile.Read(filepath.Join(dir, im.Path))
		if err != nil {
			t.Fatal(err)
		}
		tg := retinanet.Targets(im.Truth, img.W, img.H, func(id int32) (int, bool) { return int(id), true })
		if len(tg) == 0 {
			empty++
		}
		_, l := r.DetectLoss(retinanet.Image(img), tg)
		cls += float64(l.Classification)
		reg += float64(l.BoxRegression)
		tot += float64(l.Classification) + float64(l.BoxRegression)
	}
	n := float64(len(images))
	for k, want := range map[string]float64{keyValClassification: cls / n, keyValBoxRegression: reg / n, keyValLoss: tot / n} {
		got, ok := vals[k].(float64)
		if !ok || got != want || !(got > 0) || math.IsInf(got, 0) {
			t.Errorf("%s = %v, want %v (the runner's per-image losses, averaged)", k, vals[k], want)
		}
	}
	t.Logf("%d images (%d without targets): %v", len(images), empty, vals[keyValLoss])
	for _, k := range []string{keyValClassification, keyValBoxRegression, keyValLoss} {
		if !strings.Contains(table.String(), k) {
			t.Errorf("the printed table lacks %s:\n%s", k, table.String())
		}
	}
	rep, _ := os.ReadFile(filepath.Join(out, "report.json"))
	if !bytes.Contains(rep, []byte(`"loss_batchnorm": "val_classification, val_bbox_regression and val_loss use the model's stored BatchNorm statistics`)) {
		t.Errorf("report.json does not say which batch-norm statistics the losses use")
	}

	replay := t.TempDir()
	if codes := runLocal(t, 1, setCfg("multi", replay)); codes[0] != 0 {
		t.Fatal(codes)
	}
	if raw, _ := reportMetrics(t, replay); bytes.Contains(raw, []byte("val_")) {
		t.Errorf("a replay reports losses: %s", raw)
	}
}

// An interrupted --model run resumed on another rank count reports the
// uninterrupted losses, byte for byte: the part files keep each image's
// losses.
func TestModelResumeKeepsLosses(t *testing.T) {
	ref := t.TempDir()
	if codes := runLocal(t, 1, modelCfg(t, ref)); codes[0] != 0 {
		t.Fatal(codes)
	}
	want, vals := reportMetrics(t, ref)
	if _, ok := vals[keyValLoss].(float64); !ok {
		t.Fatalf("no %s in %s", keyValLoss, want)
	}
	out := t.TempDir()
	cfg := modelCfg(t, out)
	cfg.BatchSize = 1
	t.Setenv(testhook.InterruptEnv, "1:1")
	var stderr bytes.Buffer
	if codes := runLocalInterrupt(t, 2, cfg, &stderr); codes[0] != ExitResumable {
		t.Fatalf("exit %v\n%s", codes, stderr.String())
	}
	os.Unsetenv(testhook.InterruptEnv)
	cfg.Resume = true
	if codes := runLocal(t, 3, cfg); codes[0] != 0 {
		t.Fatalf("resume: %v", codes)
	}
	if ri := resumeOf(t, out); ri.FromParts == 0 || ri.Computed == 0 {
		t.Fatalf("the resume took nothing from the part files, or computed nothing: %+v", ri)
	}
	if got, _ := reportMetrics(t, out); !bytes.Equal(got, want) {
		t.Fatalf("resumed metrics\n%s\ndiffer from an uninterrupted run\n%s", got, want)
	}
}

func TestLossValues(t *testing.T) {
	ls := []*box.Loss{{Classification: 1, BoxRegression: 0.5}, {Classification: 3}}
	v := lossValues(ls)
	if v[0].Key != keyValClassification || v[0].V != 2 || v[1].Key != keyValBoxRegression || v[1].V != 0.25 || v[2].Key != keyValLoss || v[2].V != 2.25 {
		t.Fatalf("%+v", v)
	}
	v = lossValues([]*box.Loss{ls[0], nil})
	if !math.IsNaN(v[2].V) || output.FormatValue(v[2]) != "null" {
		t.Fatalf("a missing loss: %+v", v)
	}
}

// A resume whose part files mix records with losses and records without
// (an older canopy's attempt, then this one's) merges: the loss rows are
// null, as lossValues promises, not an encoding error.
func TestGatherMergeMixedResumedLosses(t *testing.T) {
	c := local.New(1)[0]
	mine := []wire.Image{{Index: 2, Loss: &box.Loss{Classification: 1}}}
	prev := []wire.Image{{Index: 0, Loss: &box.Loss{Classification: 2, BoxRegression: 1}}, {Index: 1}}
	stats := collective.RankStats{Seconds: map[string]float64{}}
	dets, losses, err := collective.GatherMerge(c, time.Minute, 0, mine, prev, 3, &stats)
	if err != nil {
		t.Fatal(err)
	}
	if len(dets) != 3 || losses[0] == nil || losses[0].Classification != 2 || losses[1] != nil || losses[2] == nil {
		t.Fatalf("losses %v", losses)
	}
	if v := lossValues(losses); !math.IsNaN(v[2].V) {
		t.Fatalf("val_loss %v, want null", v[2])
	}
}
