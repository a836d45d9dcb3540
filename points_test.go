package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/infer/gdal"
	"github.com/canopy-hpc/canopy/infer/treeformer"
	"github.com/canopy-hpc/canopy/internal/dataset"
	"github.com/canopy-hpc/canopy/internal/testsupport/approx"
	"github.com/canopy-hpc/canopy/internal/testsupport/forest"
	"github.com/canopy-hpc/canopy/internal/testsupport/testweights"
	"github.com/canopy-hpc/canopy/internal/testsupport/tftol"
)

// pointSet writes a TreeFormer hub folder (the one-block test model,
// seeded) and four forest images: one large enough for windows, one too
// small for any peak away from the border (DeepForest finds none there).
func pointSet(t *testing.T) (model, images string) {
	t.Helper()
	dir := t.TempDir()
	model, images = filepath.Join(dir, "model"), filepath.Join(dir, "images")
	for _, d := range []string{model, images} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := testweights.TreeFormerFolder(model, "canopy-test/pvt_v2_b3", [4]int{1, 1, 1, 1}, 46); err != nil {
		t.Fatal(err)
	}
	for i, s := range [][2]int{{200, 150}, {333, 250}, {150, 120}, {40, 30}} {
		im, _ := forest.Generate(9, i, s[0], s[1])
		var b bytes.Buffer
		if err := png.Encode(&b, im); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(images, "img_"+string(rune('a'+i))+".png"), b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return model, images
}

// TestMPIPointPredict: predict and predict --tile with a TreeFormer
// --model write DeepForest's point columns, the same bytes on 1 and 3
// ranks (and with 1 or 2 threads).
func TestMPIPointPredict(t *testing.T) {
	model, images := pointSet(t)
	for _, tiled := range []bool{false, true} {
		var first []byte
		for _, run := range []struct{ np, threads int }{{1, 2}, {3, 1}} {
			out := filepath.Join(t.TempDir(), "out")
			args := []string{"predict", "--model", model, "--images", images, "--out", out, "--threads", string(rune('0' + run.threads))}
			if tiled {
				args = append(args, "--tile", "--patch-size", "128", "--patch-overlap", "0.1")
			}
			r := mpirun(t, run.np, nil, args...)
			if r.code != 0 {
				t.Fatalf("np %d tile %v: exit %d\n%s", run.np, tiled, r.code, r.stderr)
			}
			csv, err := os.ReadFile(filepath.Join(out, "predictions.csv"))
			if err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(strings.TrimSpace(string(csv)), "\n")
			if lines[0] != "image_path,x,y,label,score" || len(lines) < 4 {
				t.Fatalf("tile %v: predictions.csv:\n%s", tiled, csv)
			}
			for _, l := range lines[1:] {
				f := strings.Split(l, ",")
				if len(f) != 5 || f[3] != "Tree" {
					t.Fatalf("row %q", l)
				}
				// a score is above score_thresh 0.3 and at most 1
				if sc, err := strconv.ParseFloat(f[4], 64); err != nil || !(sc > 0.3 && sc <= 1) {
					t.Fatalf("row %q: score", l)
				}
			}
			if first == nil {
				first = csv
			} else if !bytes.Equal(first, csv) {
				t.Fatalf("tile %v: np %d differs from np 1:\n%s\nvs\n%s", tiled, run.np, csv, first)
			}
		}
	}
}

// TestPointPredictRefusals: flags the point path does not take are usage
// errors, and a point model of another PvT size is a model error.
func TestPointPredictRefusals(t *testing.T) {
	model, images := pointSet(t)
	out := filepath.Join(t.TempDir(), "out")
	r := run1(t, "predict", "--model", model, "--images", images, "--out", out, "--resume")
	if r.code != 2 || !strings.Contains(r.stderr, "no run to resume") {
		t.Fatalf("--resume into an empty folder: exit %d: %s", r.code, r.stderr)
	}
	r = run1(t, "predict", "--model", model, "--images", images, "--out", out, "--crop-model", model)
	if r.code != 2 || !strings.Contains(r.stderr, "which a point has not") {
		t.Fatalf("--crop-model: exit %d: %s", r.code, r.stderr)
	}
	r = run1(t, "predict", "--model", model, "--images", images, "--out", out, "--skip-empty")
	if r.code != 2 || !strings.Contains(r.stderr, "--skip-empty is for --tile") {
		t.Fatalf("--skip-empty without --tile: exit %d: %s", r.code, r.stderr)
	}
	if r = run1(t, "predict", "--model", model, "--images", images, "--out", out, "--score-thresh", "1.5"); r.code != 2 || !strings.Contains(r.stderr, "in (0, 1]") {
		t.Fatalf("--score-thresh 1.5: exit %d: %s", r.code, r.stderr)
	}
	// an image whose forward pass does not fit the rank's memory: exit 3
	// before any work, naming the image and --tile
	r = run1(t, "predict", "--model", model, "--images", images, "--out", out, "--rank-memory", "20M")
	if r.code != 3 || !strings.Contains(r.stderr, "forward pass needs about") || !strings.Contains(r.stderr, "--tile") {
		t.Fatalf("--rank-memory 20M: exit %d: %s", r.code, r.stderr)
	}
	if r = run1(t, "predict", "--model", model, "--images", images, "--out", out, "--rank-memory", "8G"); r.code != 0 {
		t.Fatalf("--rank-memory 8G: exit %d: %s", r.code, r.stderr)
	}
	// --score-thresh is the peaks' threshold: a higher one keeps fewer
	// rows, each scoring at least that, and report.json says it
	high := filepath.Join(t.TempDir(), "high")
	if r = run1(t, "predict", "--model", model, "--images", images, "--out", high, "--score-thresh", "0.8"); r.code != 0 {
		t.Fatalf("--score-thresh 0.8: exit %d: %s", r.code, r.stderr)
	}
	all := strings.Split(strings.TrimSpace(string(mustRead(t, filepath.Join(out, "predictions.csv")))), "\n")[1:]
	few := strings.Split(strings.TrimSpace(string(mustRead(t, filepath.Join(high, "predictions.csv")))), "\n")[1:]
	if len(few) >= len(all) || !strings.Contains(string(mustRead(t, filepath.Join(high, "report.json"))), `"score_thresh": "0.8"`) {
		t.Fatalf("--score-thresh 0.8: %d rows, %d at 0.3", len(few), len(all))
	}
	for _, l := range few {
		if sc, err := strconv.ParseFloat(l[strings.LastIndexByte(l, ',')+1:], 64); err != nil || sc < 0.8 {
			t.Fatalf("--score-thresh 0.8: row %q", l)
		}
	}
	out = filepath.Join(t.TempDir(), "out")
	if err := os.WriteFile(filepath.Join(model, "config.json"), []byte(`{"backbone": "OpenGVLab/pvt_v2_b2", "label_dict": {"Tree": 0}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	r = run1(t, "predict", "--model", model, "--images", images, "--out", out)
	if r.code != 4 || !strings.Contains(r.stderr, "pvt_v2_b2 is not tabulated") {
		t.Fatalf("b2: exit %d: %s", r.code, r.stderr)
	}
}

// refPointScoreTol bounds |canopy's score − DeepForest's| for the full
// pvt_v2_b3 TreeFormer (not the 1e-3): the two density maps are
// two float32 computations (canopy's CPU engine, torch on the CPU) within
// tftol.StageTol's τ = 4·√2·u·√ΣK ≈ 1.3·10⁻⁴ of the map's maximum (ΣK ≈
// 1.5·10⁵ along b3's deepest path), and a score, the cell over the map's
// maximum, within tftol.ScoreTol(τ) = 2τ/(1 − τ) + 2u ≈ 2.6·10⁻⁴. Both
// sides' CSV and JSON write the float32 score's shortest repr (exact).
var refPointScoreTol = tftol.ScoreTol(tftol.StageTol(tftol.Arch(treeformer.B3)))

// TestMPIPointPredictReference: with the full reference of
// tools/treeformer/reference.py (230 MB, outside the repository; skipped
// without it), DeepForest's hub folder on 1 rank and its Lightning .ckpt on
// 3 ranks give the same predictions.csv bytes, and its rows are
// predict_image's points (within 0.5 px, scores within refPointScoreTol).
func TestMPIPointPredictReference(t *testing.T) {
	ref := os.Getenv("CANOPY_TREEFORMER_REF")
	if ref == "" {
		ref = "/tmp/treeformer-ref"
	}
	if _, err := os.Stat(filepath.Join(ref, "points.json")); err != nil {
		t.Skipf("no TreeFormer reference in %s (tools/treeformer/reference.py full makes it): %v", ref, err)
	}
	images := t.TempDir()
	b, err := os.ReadFile(filepath.Join(ref, "img_0001.png"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(images, "img_0001.png"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	var csvs [2][]byte
	for i, run := range []struct {
		np    int
		model string
	}{{1, "hub"}, {3, "model.ckpt"}} {
		out := filepath.Join(t.TempDir(), "out")
		r := mpirun(t, run.np, nil, "predict", "--model", filepath.Join(ref, run.model), "--images", images, "--out", out, "--threads", "1")
		if r.code != 0 {
			t.Fatalf("%s on %d ranks: exit %d\n%s", run.model, run.np, r.code, r.stderr)
		}
		if csvs[i], err = os.ReadFile(filepath.Join(out, "predictions.csv")); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(csvs[0], csvs[1]) {
		t.Fatalf("the .ckpt on 3 ranks differs from the hub folder on 1:\n%s\nvs\n%s", csvs[1], csvs[0])
	}
	var pj struct {
		Images map[string]struct {
			Points []struct{ X, Y, Score float64 }
		}
	}
	pb, err := os.ReadFile(filepath.Join(ref, "points.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(pb, &pj); err != nil {
		t.Fatal(err)
	}
	want := pj.Images["img_0001.png"].Points
	rows := strings.Split(strings.TrimSpace(string(csvs[0])), "\n")[1:]
	if len(rows) != len(want) || len(want) == 0 {
		t.Fatalf("%d rows, DeepForest %d points", len(rows), len(want))
	}
	worst := 0.0
	for i, l := range rows {
		f := strings.Split(l, ",")
		x, _ := strconv.ParseFloat(f[1], 64)
		y, _ := strconv.ParseFloat(f[2], 64)
		s, _ := strconv.ParseFloat(f[4], 64)
		if approx.Far(math.Hypot(x-want[i].X, y-want[i].Y), 0.5) || approx.Far(math.Abs(s-want[i].Score), refPointScoreTol) || f[3] != "Tree" {
			t.Fatalf("row %d %q, DeepForest %+v (scores within %.3g)", i, l, want[i], refPointScoreTol)
		}
		worst = max(worst, math.Abs(s-want[i].Score))
	}
	t.Logf("%d rows, largest score difference %.3g of the bound %.3g", len(rows), worst, refPointScoreTol)
}

// TestPointPredictThenEval: a point model's predictions.csv is what eval
// --predictions scores with the point metrics (truth: the predicted points
// moved by 1 px, so every truth point is found).
func TestPointPredictThenEval(t *testing.T) {
	model, images := pointSet(t)
	out := filepath.Join(t.TempDir(), "out")
	if r := run1(t, "predict", "--model", model, "--images", images, "--out", out); r.code != 0 {
		t.Fatalf("predict: exit %d: %s", r.code, r.stderr)
	}
	csv, err := os.ReadFile(filepath.Join(out, "predictions.csv"))
	if err != nil {
		t.Fatal(err)
	}
	truth := "image_path,x,y,label\n"
	rows := strings.Split(strings.TrimSpace(string(csv)), "\n")[1:]
	for _, l := range rows {
		f := strings.Split(l, ",")
		x, _ := strconv.ParseFloat(f[1], 64)
		y, _ := strconv.ParseFloat(f[2], 64)
		truth += fmt.Sprintf("%s,%g,%g,%s\n", f[0], x+1, y, f[3])
	}
	tp := filepath.Join(images, "truth.csv")
	if err := os.WriteFile(tp, []byte(truth), 0o644); err != nil {
		t.Fatal(err)
	}
	ev := filepath.Join(t.TempDir(), "eval")
	if r := run1(t, "eval", "--csv", tp, "--predictions", filepath.Join(out, "predictions.csv"), "--out", ev); r.code != 0 {
		t.Fatalf("eval: exit %d: %s", r.code, r.stderr)
	}
	var rep struct {
		Metrics map[string]float64
	}
	b, err := os.ReadFile(filepath.Join(ev, "report.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Metrics["point_recall"] != 1 || rep.Metrics["point_precision"] != 1 || len(rows) == 0 {
		t.Fatalf("metrics %v over %d points", rep.Metrics, len(rows))
	}
	// eval --model with the point model: its points scored as eval
	// --predictions scored them, the same bytes on 1 and 3 ranks
	for _, np := range []int{1, 3} {
		em := filepath.Join(t.TempDir(), "evalmodel")
		r := mpirun(t, np, nil, "eval", "--csv", tp, "--model", model, "--out", em, "--threads", "1")
		if r.code != 0 {
			t.Fatalf("eval --model on %d ranks: exit %d: %s", np, r.code, r.stderr)
		}
		for _, f := range []string{"results.csv", "predictions.csv"} {
			if a, b := mustRead(t, filepath.Join(ev, f)), mustRead(t, filepath.Join(em, f)); !bytes.Equal(a, b) || len(a) == 0 {
				t.Fatalf("eval --model on %d ranks: %s differs from eval --predictions':\n%s\nvs\n%s", np, f, b, a)
			}
		}
		var got struct{ Metrics map[string]float64 }
		if err := json.Unmarshal(mustRead(t, filepath.Join(em, "report.json")), &got); err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(got.Metrics) != fmt.Sprint(rep.Metrics) {
			t.Fatalf("eval --model on %d ranks: metrics %v, eval --predictions %v", np, got.Metrics, rep.Metrics)
		}
	}
	if r := run1(t, "eval", "--csv", tp, "--model", model, "--out", ev); r.code != 2 || !strings.Contains(r.stderr, "previous run") {
		t.Fatalf("eval --model into a used --out: exit %d: %s", r.code, r.stderr)
	}
	if r := run1(t, "eval", "--csv", tp, "--model", model, "--out", ev, "--resume"); r.code != 2 || !strings.Contains(r.stderr, "--resume is not yet available with a point model") {
		t.Fatalf("eval --model --resume: exit %d: %s", r.code, r.stderr)
	}
}

// TestMPIPointPredictResume: a point run interrupted on 3 ranks (rank 1
// signals itself after one window: exit 8) and resumed on 2 gives the
// bytes of an uninterrupted run on 1 rank, taking the saved windows from
// the part files; a --resume with other settings or an edited image is
// refused (exit 2, naming the difference).
func TestMPIPointPredictResume(t *testing.T) {
	model, images := pointSet(t)
	tileArgs := []string{"--tile", "--patch-size", "128", "--patch-overlap", "0.1", "--threads", "1"}
	ref := filepath.Join(t.TempDir(), "ref")
	if r := mpirun(t, 1, nil, append([]string{"predict", "--model", model, "--images", images, "--out", ref}, tileArgs...)...); r.code != 0 {
		t.Fatalf("reference run: exit %d\n%s", r.code, r.stderr)
	}
	out := filepath.Join(t.TempDir(), "out")
	args := append([]string{"predict", "--model", model, "--images", images, "--out", out}, tileArgs...)
	r := mpirun(t, 3, []string{"CANOPY_TEST_INTERRUPT=1:1"}, args...)
	if r.code != 8 {
		t.Fatalf("interrupted run: exit %d, want 8\n%s", r.code, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(out, "predictions.csv")); err == nil {
		t.Fatal("an interrupted run published predictions.csv")
	}
	bad := append(append([]string(nil), args...), "--resume", "--patch-overlap", "0.2")
	if r := mpirun(t, 2, nil, bad...); r.code != 2 || !strings.Contains(r.stderr, "tile settings") {
		t.Fatalf("--resume with another overlap: exit %d\n%s", r.code, r.stderr)
	}
	r = mpirun(t, 2, nil, append(append([]string(nil), args...), "--resume")...)
	if r.code != 0 {
		t.Fatalf("--resume on 2 ranks: exit %d\n%s", r.code, r.stderr)
	}
	want, _ := os.ReadFile(filepath.Join(ref, "predictions.csv"))
	got, err := os.ReadFile(filepath.Join(out, "predictions.csv"))
	if err != nil || len(want) == 0 || !bytes.Equal(got, want) {
		t.Fatalf("resumed predictions.csv differs from the uninterrupted run's (%v):\n%s\nvs\n%s", err, got, want)
	}
	var rep struct {
		Resumed int `json:"resumed_units"`
		Windows int `json:"windows"`
	}
	b, _ := os.ReadFile(filepath.Join(out, "report.json"))
	if err := json.Unmarshal(b, &rep); err != nil || rep.Resumed < 1 || rep.Resumed >= rep.Windows {
		t.Fatalf("report.json resumed_units %d of %d windows (%v)", rep.Resumed, rep.Windows, err)
	}
	// an image edited since the run: refused, naming it
	if err := os.WriteFile(filepath.Join(images, "img_d.png"), append(mustRead(t, filepath.Join(images, "img_d.png")), 0), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := mpirun(t, 1, nil, append(append([]string(nil), args...), "--resume")...); r.code != 2 || !strings.Contains(r.stderr, "img_d.png changed since the run") {
		t.Fatalf("--resume after an image edit: exit %d\n%s", r.code, r.stderr)
	}
}

func mustRead(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestPointPredictSkipEmpty: with --tile --skip-empty a window of one
// colour gives no points without the model (report.json counts it), and
// the other images' rows are those of the run without it.
func TestPointPredictSkipEmpty(t *testing.T) {
	model, images := pointSet(t)
	im := image.NewRGBA(image.Rect(0, 0, 200, 150))
	for i := range im.Pix {
		im.Pix[i] = 200
	}
	var b bytes.Buffer
	if err := png.Encode(&b, im); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(images, "img_z.png"), b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	var csv [2]string
	var skipped [2]int
	for i, extra := range [][]string{nil, {"--skip-empty"}} {
		out := filepath.Join(t.TempDir(), "out")
		args := append([]string{"predict", "--model", model, "--images", images, "--out", out, "--tile", "--patch-size", "128", "--patch-overlap", "0.1"}, extra...)
		if r := run1(t, args...); r.code != 0 {
			t.Fatalf("%v: exit %d: %s", extra, r.code, r.stderr)
		}
		csv[i] = string(mustRead(t, filepath.Join(out, "predictions.csv")))
		var rep struct {
			Skipped int `json:"skipped_windows"`
		}
		if err := json.Unmarshal(mustRead(t, filepath.Join(out, "report.json")), &rep); err != nil {
			t.Fatal(err)
		}
		skipped[i] = rep.Skipped
	}
	// 200×150 at 128, overlap 0.1: 2×2 windows, all one colour
	if skipped != [2]int{0, 4} {
		t.Fatalf("skipped windows %v, want [0 4]", skipped)
	}
	var other [2][]string
	for i, c := range csv {
		for _, l := range strings.Split(strings.TrimSpace(c), "\n") {
			if strings.HasPrefix(l, "img_z.png,") {
				if i == 1 {
					t.Fatalf("--skip-empty: a point in the empty image: %s", l)
				}
				continue
			}
			other[i] = append(other[i], l)
		}
	}
	if strings.Join(other[0], "\n") != strings.Join(other[1], "\n") || len(other[0]) < 2 {
		t.Fatalf("--skip-empty changed the other images' rows:\n%v\nvs\n%v", other[1], other[0])
	}
}

// TestPointPredictConfig: a DeepForest config.yaml (and key=value
// overrides) sets a point run's score_thresh, patch_size and
// patch_overlap as the flags do (the same bytes), the flags beat it, the
// keys a point model does not use are listed in report.json, and a
// threshold of 0 is a usage error.
func TestPointPredictConfig(t *testing.T) {
	model, images := pointSet(t)
	conf := filepath.Join(t.TempDir(), "point.yaml")
	if err := os.WriteFile(conf, []byte("score_thresh: 0.6\nnms_thresh: 0.2\npatch_size: 128\npatch_overlap: 0.1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	runOut := func(args ...string) (string, string) {
		t.Helper()
		out := filepath.Join(t.TempDir(), "out")
		r := run1(t, append([]string{"predict", "--model", model, "--images", images, "--out", out, "--tile"}, args...)...)
		if r.code != 0 {
			t.Fatalf("%v: exit %d: %s", args, r.code, r.stderr)
		}
		return string(mustRead(t, filepath.Join(out, "predictions.csv"))), string(mustRead(t, filepath.Join(out, "report.json")))
	}
	flags, _ := runOut("--score-thresh", "0.6", "--patch-size", "128", "--patch-overlap", "0.1")
	byConf, rep := runOut("--config", conf)
	if byConf != flags || !strings.Contains(rep, `"nms_thresh"`) || !strings.Contains(rep, `"score_thresh": "0.6"`) {
		t.Fatalf("--config: rows differ from the flags' or report.json lacks the config:\n%s\nvs\n%s\n%s", byConf, flags, rep)
	}
	over, _ := runOut("--config", conf, "score_thresh=0.3")
	def, _ := runOut("--patch-size", "128", "--patch-overlap", "0.1")
	if over != def || over == flags {
		t.Fatalf("the override score_thresh=0.3: rows differ from the default run's")
	}
	flagWins, _ := runOut("--config", conf, "--score-thresh", "0.3")
	if flagWins != def {
		t.Fatalf("--score-thresh 0.3 over the config's 0.6: rows differ from the default run's")
	}
	// the schema allows 0; a point model's relative threshold does not
	r := run1(t, "predict", "--model", model, "--images", images, "--out", filepath.Join(t.TempDir(), "o"), "score_thresh=0")
	if r.code != 2 || !strings.Contains(r.stderr, "in (0, 1]") {
		t.Fatalf("score_thresh=0: exit %d: %s", r.code, r.stderr)
	}
}

// TestPointPredictGPKG: predict --tile on a georeferenced GeoTIFF writes
// predictions.gpkg with one Point layer, a feature per row of
// predictions.csv, each at DeepForest's image_to_geo_coordinates of its
// pixel (rasterio's transform.xy at the pixel centre), its x and y columns
// the pixels; a raster without a CRS gets no GeoPackage and a note.
func TestPointPredictGPKG(t *testing.T) {
	if !gdal.Available {
		t.Skip("built without GDAL (-tags nogdal): no GeoPackage is written")
	}
	model, images := pointSet(t)
	tif := filepath.Join(t.TempDir(), "ortho.tif")
	// img_b is 333×250: 2 m pixels from (500000, 4000500), north up
	out, err := exec.Command("gdal_translate", "-q", "-of", "GTiff", "-a_srs", "EPSG:32617", "-a_ullr", "500000", "4000500", "500666", "4000000",
		filepath.Join(images, "img_b.png"), tif).CombinedOutput()
	if err != nil {
		t.Fatalf("gdal_translate: %v\n%s", err, out)
	}
	dir := filepath.Join(t.TempDir(), "out")
	if r := run1(t, "predict", "--model", model, "--raster", tif, "--tile", "--patch-size", "128", "--patch-overlap", "0.1", "--out", dir); r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	rows := strings.Split(strings.TrimSpace(string(mustRead(t, filepath.Join(dir, "predictions.csv")))), "\n")[1:]
	v, err := gdal.ReadVector(filepath.Join(dir, "predictions.gpkg"))
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Layers) != 1 || v.Layers[0] != "ortho" || v.CRSName != "EPSG:32617" || len(v.Features) != len(rows) || len(rows) == 0 {
		t.Fatalf("layers %v, CRS %q, %d features for %d rows", v.Layers, v.CRSName, len(v.Features), len(rows))
	}
	for i, l := range rows {
		f := strings.Split(l, ",")
		x, _ := strconv.ParseFloat(f[1], 64)
		y, _ := strconv.ParseFloat(f[2], 64)
		kind, pt, _, err := dataset.ParseWKB(v.Features[i].WKB)
		if err != nil || kind != box.KindPoint {
			t.Fatalf("feature %d: %v %v", i, kind, err)
		}
		if gx, gy := 500000+(x+0.5)*2, 4000500-(y+0.5)*2; pt.X != gx || pt.Y != gy || v.Features[i].ImagePath != "ortho.tif" {
			t.Fatalf("feature %d at (%v, %v) of %q, want (%v, %v) for row %q", i, pt.X, pt.Y, v.Features[i].ImagePath, gx, gy, l)
		}
	}
	// a PNG has no CRS: no GeoPackage, and report.json says so
	dir = filepath.Join(t.TempDir(), "out")
	if r := run1(t, "predict", "--model", model, "--images", images, "--out", dir); r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "predictions.gpkg")); err == nil || !strings.Contains(string(mustRead(t, filepath.Join(dir, "report.json"))), "no image has a CRS") {
		t.Fatalf("a run without a CRS wrote predictions.gpkg, or its report has no note (%v)", err)
	}
}
