package jobs

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/infer/tile"
	"github.com/canopy-hpc/canopy/internal/output"
	"github.com/canopy-hpc/canopy/internal/pipeline/predict"
	"github.com/canopy-hpc/canopy/internal/testsupport/approx"
	"github.com/canopy-hpc/canopy/internal/testsupport/shareddata"
	"github.com/canopy-hpc/canopy/mpi"
	"github.com/canopy-hpc/canopy/mpi/local"
)

// writeTwoLabelR50 writes the model folder of tools/deepforest/across_nms.py:
// the r50 test weights (seed 0) with two classes, Alive and Dead, and
// DeepForest's thresholds.
func writeTwoLabelR50(t *testing.T, dir string) {
	t.Helper()
	cfg := `{"num_classes": 2, "label_dict": {"Alive": 0, "Dead": 1}, "score_thresh": 0.1, "nms_thresh": 0.05,
 "detections_per_img": 300, "topk_candidates": 1000}`
	if err := writeWeightsModel(dir, "resnet50", 2, 256, false, "F32", cfg); err != nil {
		t.Fatal(err)
	}
}

// predictRows runs canopy predict on one rank and returns predictions.csv's
// rows (xmin, ymin, xmax, ymax, score), their labels and report.json.
func predictRows(t *testing.T, cfg PredictConfig) (rows [][5]float64, labels []string, rep map[string]any) {
	t.Helper()
	if errs := local.Run(1, func(c mpi.Comm) error { return predict.Run(context.Background(), c, cfg) }); errs[0] != nil {
		t.Fatal(errs[0])
	}
	b, err := os.ReadFile(filepath.Join(cfg.Out, "predictions.csv"))
	if err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(bytes.NewReader(b)).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs[1:] {
		var v [5]float64
		for i, s := range []string{r[1], r[2], r[3], r[4], r[6]} {
			if v[i], err = strconv.ParseFloat(s, 64); err != nil {
				t.Fatal(err)
			}
		}
		rows, labels = append(rows, v), append(labels, r[5])
	}
	b, err = os.ReadFile(filepath.Join(cfg.Out, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	return rows, labels, rep
}

// TestPredictAcrossClassNMSDeepForest: canopy predict with the two-label
// R50 of tools/deepforest/across_nms.py on DeepForest's SOAP_061.png gives
// predict_image's rows (infer/tile/testdata/across_nms.json): the same
// number, each matched at IoU ≥ 0.5 with the same label, integer
// coordinates equal for at least 99%, scores within 1e-5 (canopy's network
// is not torch's arithmetic; the NMS itself is exact, TestAcrossClassNMSDeepForest).
// --raw-rows gives the detector's rows: as many as DeepForest handed
// across_class_nms, float boxes; report.json says which.
func TestPredictAcrossClassNMSDeepForest(t *testing.T) {
	const image = "SOAP_061.png"
	src := filepath.Join("..", "..", "shared", "data", "deepforest", image)
	shareddata.Need(t, src, "DeepForest's sample "+image)
	b, err := os.ReadFile("../infer/tile/testdata/across_nms.json")
	if err != nil {
		t.Fatal(err)
	}
	var fx struct {
		Cases []struct {
			Image string
			Raw   [][6]uint64
			Rows  [][6]any
		}
	}
	if err := json.Unmarshal(b, &fx); err != nil {
		t.Fatal(err)
	}
	var want []box.Detection
	var wantLabels []string
	raw := -1
	for _, c := range fx.Cases {
		if c.Image != image {
			continue
		}
		raw = len(c.Raw)
		for _, r := range c.Rows {
			want = append(want, box.Detection{Box: box.Box{Xmin: r[0].(float64), Ymin: r[1].(float64), Xmax: r[2].(float64), Ymax: r[3].(float64)},
				Score: r[5].(float64)})
			wantLabels = append(wantLabels, r[4].(string))
		}
	}
	if raw <= len(want) || len(want) < 50 {
		t.Fatalf("the fixture's %s case: %d detections, %d rows: the case must suppress rows", image, raw, len(want))
	}
	dir := t.TempDir()
	model := filepath.Join(dir, "r50-2")
	writeTwoLabelR50(t, model)
	imgs := filepath.Join(dir, "images")
	os.MkdirAll(imgs, 0o755)
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(imgs, image), data, 0o644)

	cfg := PredictConfig{Images: imgs, Out: filepath.Join(dir, "out"), BatchSize: 1,
		Model: ModelConfig{Spec: model, Threads: 2, ScoreThresh: -1, NMSThresh: -1, Device: device("cpu")}}
	got, labels, rep := predictRows(t, cfg)
	matched, equal, worst, pair := matchE2E(want, got)
	badLabel := 0
	for i, k := range pair {
		if k >= 0 && labels[k] != wantLabels[i] {
			badLabel++
		}
	}
	t.Logf("%s: predict_image %d rows (of %d detections), canopy %d; %d matched, %d with equal integer coordinates, %d labels differ, scores within %.3g",
		image, len(want), raw, len(got), matched, equal, badLabel, worst)
	if len(got) != len(want) || matched != len(want) {
		t.Errorf("canopy gives %d rows, predict_image %d; %d matched at IoU >= 0.5", len(got), len(want), matched)
	}
	if float64(equal) < 0.99*float64(matched) || badLabel > 0 {
		t.Errorf("integer coordinates equal for %d of %d matched rows, %d labels differ", equal, matched, badLabel)
	}
	if approx.Far(worst, 1e-5) {
		t.Errorf("scores differ by up to %g; want within 1e-5", worst)
	}
	if rep["rows"] != output.RowsAcrossClassNMS || rep["across_class_nms_iou"] != 0.05 || rep["raw_detections"] != float64(raw) {
		t.Errorf("report.json: rows %v, across_class_nms_iou %v, raw_detections %v; want %s, 0.05, %d",
			rep["rows"], rep["across_class_nms_iou"], rep["raw_detections"], output.RowsAcrossClassNMS, raw)
	}

	cfg.Out, cfg.RawRows = filepath.Join(dir, "raw"), true
	rawRows, rawLabels, rep := predictRows(t, cfg)
	fractional := 0
	for _, r := range rawRows {
		if r[0] != float64(int64(r[0])) {
			fractional++
		}
	}
	if len(rawRows) != raw || fractional == 0 || rep["rows"] != output.RowsRaw || rep["across_class_nms_iou"] != nil {
		t.Errorf("--raw-rows: %d rows (%d fractional), report rows %v iou %v; want DeepForest's %d detections, float boxes, %q",
			len(rawRows), fractional, rep["rows"], rep["across_class_nms_iou"], raw, output.RowsRaw)
	}
	// The default rows are AcrossClassNMS of the raw rows, exactly.
	dets := make([]box.Detection, len(rawRows))
	for i, r := range rawRows {
		dets[i] = box.Detection{Box: box.Box{Xmin: r[0], Ymin: r[1], Xmax: r[2], Ymax: r[3]}, Score: r[4]}
		if rawLabels[i] == "Dead" {
			dets[i].Label = 1
		}
	}
	red := tile.AcrossClassNMS(dets, 0.05)
	if len(red) != len(got) {
		t.Fatalf("AcrossClassNMS of the raw rows gives %d rows, predict %d", len(red), len(got))
	}
	for i, d := range red {
		if g := got[i]; [5]float64{d.Box.Xmin, d.Box.Ymin, d.Box.Xmax, d.Box.Ymax, d.Score} != g {
			t.Fatalf("row %d: predict %v, AcrossClassNMS of the raw rows %+v", i, g, d)
		}
	}
}

// --raw-rows belongs to whole-image predict: with --tile it is a usage
// error (predict_tile's merge is class-agnostic already), and --help
// explains it.
func TestRawRowsFlag(t *testing.T) {
	code, msg := cliRun(t, "predict", "--tile", "--raw-rows", "--raster", "x.tif", "--model", "m", "--out", t.TempDir())
	if code != ExitUsage || !strings.Contains(msg, "--raw-rows goes without --tile") {
		t.Errorf("predict --tile --raw-rows: exit %d, %q; want %d naming the flag", code, msg, ExitUsage)
	}
	code, msg = cliRun(t, "predict", "--help")
	if code != 0 || !strings.Contains(msg, "--raw-rows") || !strings.Contains(msg, "across_class_nms") {
		t.Errorf("predict --help: exit %d, does not explain --raw-rows: %q", code, msg)
	}
}
