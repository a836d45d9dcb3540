package jobs

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/canopy-hpc/canopy/internal/geos"
	"github.com/canopy-hpc/canopy/internal/htmlreport"
	"github.com/canopy-hpc/canopy/internal/testsupport/testfile"
	"github.com/canopy-hpc/canopy/metrics"
)

// peerGeo is tools/geometry/peer.py's record of one case.
type peerGeo struct {
	Kind             string `json:"kind"`
	EvaluateGeometry struct {
		Precision   *float64 `json:"precision"`
		Recall      *float64 `json:"recall"`
		ClassRecall []struct {
			Label             string
			Recall, Precision float64
		} `json:"class_recall"`
		Results []map[string]any `json:"results"`
	} `json:"evaluate_geometry"`
	Validation map[string]*float64 `json:"validation"`
}

func geoCases(t *testing.T) []string {
	t.Helper()
	dirs, err := filepath.Glob(filepath.Join("testdata", "geometry", "*", "deepforest.json"))
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no cases in testdata/geometry: %v", err)
	}
	for i := range dirs {
		dirs[i] = filepath.Dir(dirs[i])
	}
	return dirs
}

func geoCfg(dir, out string, sem metrics.Semantics) EvalConfig {
	return EvalConfig{CSV: filepath.Join(dir, "truth.csv"), Predictions: filepath.Join(dir, "preds.csv"), RootDir: dir,
		Out: out, IoUThreshold: 0.4, DistanceThreshold: 10, Semantics: sem, BatchSize: 1}
}

// runGeo runs eval at np 1 and np 3 and returns np 1's output folder after
// checking that both wrote the same report metrics and results.csv.
func runGeo(t *testing.T, dir string, sem metrics.Semantics) string {
	t.Helper()
	var outs []string
	for _, n := range []int{1, 3} {
		out := t.TempDir()
		if codes := runLocal(t, n, geoCfg(dir, out, sem)); codes[0] != 0 {
			t.Fatalf("%s np%d %v: codes %v", dir, n, sem, codes)
		}
		outs = append(outs, out)
	}
	for _, f := range []string{"results.csv", "predictions.csv"} {
		a, _ := os.ReadFile(filepath.Join(outs[0], f))
		b, _ := os.ReadFile(filepath.Join(outs[1], f))
		if len(a) == 0 || !bytes.Equal(a, b) {
			t.Fatalf("%s %v: %s differs between np 1 and np 3 (or is empty)", dir, sem, f)
		}
	}
	m1, _ := reportMetrics(t, outs[0])
	m3, _ := reportMetrics(t, outs[1])
	if !bytes.Equal(m1, m3) {
		t.Fatalf("%s %v: metrics differ: np1 %s, np3 %s", dir, sem, m1, m3)
	}
	return outs[0]
}

// sameFloat: exact equality (the same float64 computation on both sides),
// nil (None/NaN) only against nil.
func sameFloat(got any, want *float64) bool {
	g, ok := got.(float64)
	if want == nil {
		return got == nil
	}
	return ok && g == *want
}

// TestGeometryEvaluateGeometryAsDeepForest: under --semantics
// evaluate_boxes, points and polygons give DeepForest 1bad4419's
// evaluate_geometry: precision, recall, class table, and results.csv's
// assignment row by row.
func TestGeometryEvaluateGeometryAsDeepForest(t *testing.T) {
	if !geos.Available {
		t.Skip("built without GEOS (-tags nogeos/nogdal): the polygon cases need it")
	}
	for _, dir := range geoCases(t) {
		var peer peerGeo
		testfile.ReadJSON(t, filepath.Join(dir, "deepforest.json"), &peer)
		out := runGeo(t, dir, metrics.EvaluateBoxes)
		_, got := reportMetrics(t, out)
		eg := peer.EvaluateGeometry
		if !sameFloat(got[peer.Kind+"_precision"], eg.Precision) || !sameFloat(got[peer.Kind+"_recall"], eg.Recall) {
			t.Errorf("%s: precision %v recall %v, DeepForest %v %v", dir, got[peer.Kind+"_precision"], got[peer.Kind+"_recall"], deref(eg.Precision), deref(eg.Recall))
		}
		nClass := 0
		for k := range got {
			if len(k) > 7 && (k[len(k)-7:] == "_Recall") {
				nClass++
			}
		}
		if nClass != len(eg.ClassRecall) {
			t.Errorf("%s: %d classes, DeepForest %d", dir, nClass, len(eg.ClassRecall))
		}
		for _, c := range eg.ClassRecall {
			r, p := c.Recall, c.Precision
			if !sameFloat(got[c.Label+"_Recall"], &r) || !sameFloat(got[c.Label+"_Precision"], &p) {
				t.Errorf("%s: class %s: %v %v, DeepForest %v %v", dir, c.Label, got[c.Label+"_Recall"], got[c.Label+"_Precision"], r, p)
			}
		}
		compareGeoResults(t, dir, peer.Kind, filepath.Join(out, "results.csv"), eg.Results)
	}
}

func deref(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}

// compareGeoResults matches results.csv's rows to DeepForest's by (image,
// truth id): the same prediction, score, match and labels, the same
// distance, and IoU within 1e-9 relative (GEOS 3.11 here, 3.14 in
// shapely 2.2: the overlay may round differently in the last bits; the
// areas are sums of a few hundred products of coordinates below 1e3, so
// 1e-9 leaves six orders of magnitude above double rounding for that).
func compareGeoResults(t *testing.T, dir, kind, path string, want []map[string]any) {
	t.Helper()
	recs := testfile.ReadCSV(t, path)
	col := "IoU"
	if kind == "point" {
		col = "distance"
	}
	rows := map[string][]string{}
	for _, r := range recs[1:] {
		rows[r[0]+"#"+r[1]] = r
	}
	if len(rows) != len(want) || len(recs)-1 != len(want) {
		t.Fatalf("%s: %d results rows, DeepForest %d", dir, len(recs)-1, len(want))
	}
	str := func(v any) string {
		switch x := v.(type) {
		case nil:
			return ""
		case float64:
			if x == math.Trunc(x) && math.Abs(x) < 1e15 {
				return strconv.FormatInt(int64(x), 10)
			}
			return fmt.Sprint(x)
		}
		return fmt.Sprint(v)
	}
	bad := 0
	for _, w := range want {
		key := fmt.Sprint(w["image_path"]) + "#" + str(w["truth_id"])
		r, ok := rows[key]
		if !ok {
			t.Fatalf("%s: no row %s", dir, key)
		}
		match := "False"
		if w["match"] == true {
			match = "True"
		}
		same := r[2] == str(w["prediction_id"]) && r[5] == match && r[6] == fmt.Sprint(w["true_label"]) && r[7] == str(w["predicted_label"])
		if s, ok := w["score"].(float64); ok {
			g, _ := strconv.ParseFloat(r[4], 64)
			same = same && g == s
		} else {
			same = same && r[4] == ""
		}
		switch v := w[col].(type) {
		case nil:
			same = same && r[3] == ""
		case string: // "inf"
			same = same && r[3] == v
		case float64:
			g, err := strconv.ParseFloat(r[3], 64)
			tol := 0.0
			if kind == "polygon" {
				tol = 1e-9 * math.Abs(v)
			}
			same = same && err == nil && math.Abs(g-v) <= tol
		}
		if !same && bad < 5 {
			t.Errorf("%s: row %v, DeepForest %v", dir, r, w)
		}
		if !same {
			bad++
		}
	}
	if bad > 0 {
		t.Errorf("%s: %d of %d rows differ", dir, bad, len(want))
	}
}

// TestGeometryPointValidationAsDeepForest: under the default semantics,
// points give the point model's validation: RecallPrecision(task="point")
// over PointDataset's targets (float32, filter_points on the image sizes
// read from the PNGs) and MeanAbsoluteError of the counts.
func TestGeometryPointValidationAsDeepForest(t *testing.T) {
	for _, dir := range geoCases(t) {
		var peer peerGeo
		testfile.ReadJSON(t, filepath.Join(dir, "deepforest.json"), &peer)
		if peer.Kind != "point" {
			continue
		}
		out := runGeo(t, dir, metrics.Validation)
		raw, got := reportMetrics(t, out)
		if len(got) != len(peer.Validation) {
			t.Errorf("%s: keys %s, DeepForest %v", dir, raw, peer.Validation)
		}
		for k, v := range peer.Validation {
			if !sameFloat(got[k], v) {
				t.Errorf("%s: %s = %v, DeepForest %v", dir, k, got[k], deref(v))
			}
		}
	}
}

// A GeoPackage of the same points or polygons (no CRS: pixel coordinates)
// scores as its CSV does: the layer's geometries are read whole (WKB),
// not as bounds.
func TestGeometryVectorTruthAsCSV(t *testing.T) {
	if !geos.Available {
		t.Skip("built without GEOS/GDAL (-tags nogeos/nogdal)")
	}
	if _, err := exec.LookPath("ogr2ogr"); err != nil {
		t.Fatalf("ogr2ogr (gdal-bin, scripts/install-deps.sh) is needed to write the test layer: %v", err)
	}
	for _, c := range []struct{ dir, oo string }{
		{"points_edge", "X_POSSIBLE_NAMES=x"},
		{"polygons_many", "GEOM_POSSIBLE_NAMES=geometry"},
	} {
		dir := filepath.Join("testdata", "geometry", c.dir)
		gpkg := filepath.Join(t.TempDir(), "truth.gpkg")
		args := []string{"-f", "GPKG", gpkg, filepath.Join(dir, "truth.csv"), "-nln", "truth", "-oo", c.oo, "-oo", "KEEP_GEOM_COLUMNS=NO"}
		if c.dir == "points_edge" {
			args = append(args, "-oo", "Y_POSSIBLE_NAMES=y")
		}
		if out, err := exec.Command("ogr2ogr", args...).CombinedOutput(); err != nil {
			t.Fatalf("ogr2ogr: %v\n%s", err, out)
		}
		for _, sem := range []metrics.Semantics{metrics.EvaluateBoxes, metrics.Validation} {
			want, fromLayer := t.TempDir(), t.TempDir()
			cfg := geoCfg(dir, want, sem)
			if codes := runLocal(t, 1, cfg); codes[0] != 0 {
				t.Fatalf("csv: %v", codes)
			}
			cfg.CSV, cfg.Out = gpkg, fromLayer
			if codes := runLocal(t, 2, cfg); codes[0] != 0 {
				t.Fatalf("%s: %v", gpkg, codes)
			}
			a, _ := reportMetrics(t, want)
			b, _ := reportMetrics(t, fromLayer)
			ra, _ := os.ReadFile(filepath.Join(want, "results.csv"))
			rb, _ := os.ReadFile(filepath.Join(fromLayer, "results.csv"))
			if !bytes.Equal(a, b) || !bytes.Equal(ra, rb) {
				t.Errorf("%s %v: layer gives %s, CSV %s", c.dir, sem, b, a)
			}
		}
	}
}

// --html on points and polygons: report.html draws the worst images (the
// geometries over them) and is published with the rest.
func TestGeometryHTML(t *testing.T) {
	for _, c := range []string{"points_edge", "polygons_edge"} {
		if c == "polygons_edge" && !geos.Available {
			continue
		}
		out := t.TempDir()
		cfg := geoCfg(filepath.Join("testdata", "geometry", c), out, metrics.Validation)
		opt := htmlreport.DefaultOptions
		cfg.HTML = &opt
		if codes := runLocal(t, 2, cfg); codes[0] != 0 {
			t.Fatalf("%s: %v", c, codes)
		}
		b, err := os.ReadFile(filepath.Join(out, "report.html"))
		if err != nil {
			t.Fatal(err)
		}
		if n := bytes.Count(b, []byte("data:image/jpeg;base64,")); n < 2 {
			t.Errorf("%s: %d images drawn", c, n)
		}
	}
}

// Hostile geometry inputs: a mix of geometries between the files, an
// invalid polygon, and point validation without the images.
func TestGeometryHostileInputs(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	pts := write("pts.csv", "image_path,x,y,label\na.png,1,2,Tree\n")
	boxes := write("boxes.csv", "image_path,xmin,ymin,xmax,ymax,label,score\na.png,1,2,3,4,Tree,0.5\n")
	bow := write("bow.csv", "image_path,geometry,label\na.png,\"POLYGON ((0 0, 2 0, 2 2, 0 2, 0 0))\",Tree\na.png,\"POLYGON ((0 0, 10 10, 10 0, 0 10, 0 0))\",Tree\n")
	polys := write("polys.csv", "image_path,geometry,label,score\na.png,\"POLYGON ((0 0, 10 0, 10 10, 0 0))\",Tree,0.5\n")
	ppts := write("ppts.csv", "image_path,x,y,label,score\na.png,1,3,Tree,0.5\n")
	run := func(csv, preds string, strict bool) (int, string) {
		var se bytes.Buffer
		cfg := EvalConfig{CSV: csv, Predictions: preds, RootDir: dir, Out: t.TempDir(), IoUThreshold: 0.4, DistanceThreshold: 10, BatchSize: 1, Strict: strict, Warnings: &se}
		codes := runLocalCtx(t, 2, cfg, func(int) context.Context { return context.Background() }, &se)
		return codes[0], se.String()
	}
	if code, se := run(pts, boxes, false); code != ExitInput || !strings.Contains(se, "pts.csv holds points but the predictions") || !strings.Contains(se, "boxes.csv") {
		t.Errorf("points against boxes: exit %d %q", code, se)
	}
	if geos.Available {
		if code, se := run(bow, polys, false); code != ExitInput || !strings.Contains(se, "bow.csv:3") || !strings.Contains(se, "invalid polygon") {
			t.Errorf("bow tie: exit %d %q", code, se)
		}
	}
	if code, se := run(pts, ppts, false); code != 0 || !strings.Contains(se, "could not be read for their size") {
		t.Errorf("no images: exit %d %q", code, se)
	}
	if code, _ := run(pts, ppts, true); code != ExitInput {
		t.Errorf("no images under --strict: exit %d", code)
	}
	if geos.Available {
		tri := write("tri.csv", "image_path,geometry,label\na.png,\"POLYGON ((0 0, 10 0, 10 10, 0 0))\",Tree\n")
		for _, strict := range []bool{false, true} {
			if code, se := run(tri, polys, strict); code != 0 || strings.Count(se, "COCO segm mAP skipped") != 1 {
				t.Errorf("polygons without images (strict %v): exit %d %q", strict, code, se)
			}
		}
	}
}

// Options that only boxes have are refused, not ignored.
func TestGeometryRefusesBoxOnlyOptions(t *testing.T) {
	dir := filepath.Join("testdata", "geometry", "points_edge")
	cfg := geoCfg(dir, t.TempDir(), metrics.Validation)
	cfg.COCOOut = true
	if codes := runLocal(t, 2, cfg); codes[0] != ExitUsage {
		t.Errorf("--coco-out: exit %v", codes)
	}
	cfg = geoCfg(dir, t.TempDir(), metrics.Validation)
	cfg.Families = metrics.COCOmAP
	if codes := runLocal(t, 2, cfg); codes[0] != ExitUsage {
		t.Errorf("--metrics coco: exit %v", codes)
	}
}

// Polygons with their images: the COCO segm family equals faster-coco-
// eval's COCOeval(iou_type="segm") on the same polygons (tools/geometry/
// peer.py's coco_segm), each value rounded to float32 as the box family
// rounds torchmetrics' tensors (canopy's summary is float32 of the same
// double).
func TestGeometrySegmAsFasterCOCOEval(t *testing.T) {
	if !geos.Available {
		t.Skip("built without GEOS (-tags nogeos/nogdal)")
	}
	for _, c := range []string{"polygons_edge", "polygons_many"} {
		dir := filepath.Join("testdata", "geometry", c)
		var peer struct {
			Segm map[string]float64 `json:"coco_segm"`
		}
		testfile.ReadJSON(t, filepath.Join(dir, "deepforest.json"), &peer)
		if len(peer.Segm) != 12 {
			t.Fatalf("%s: %d segm values recorded", c, len(peer.Segm))
		}
		out := runGeo(t, dir, metrics.Validation)
		_, got := reportMetrics(t, out)
		for k, v := range peer.Segm {
			g, ok := got[k].(float64)
			if !ok || g != float64(float32(v)) {
				t.Errorf("%s: %s = %v, faster-coco-eval %v", c, k, got[k], v)
			}
		}
	}
}

// A Point layer in a projected CRS is converted to the pixels of the
// GeoTIFF its image_path names as read_file's geo_to_image_coordinates
// converts it: (x - left)/res, (top - y)/res. The layer's points are made
// from pixel coordinates with a power-of-two resolution, so the converted
// points are those pixels exactly and the run equals the pixel CSV's.
func TestGeometryVectorTruthWithCRS(t *testing.T) {
	if !geos.Available {
		t.Skip("built without GDAL/GEOS (-tags nogdal/nogeos)")
	}
	dir := t.TempDir()
	src := filepath.Join("testdata", "geometry", "points_edge", "a.png")
	tif := filepath.Join(dir, "a.tif")
	if out, err := exec.Command("gdal_translate", "-q", "-of", "GTiff", "-a_srs", "EPSG:32617", "-a_ullr", "404000", "3285000", "404050", "3284975", src, tif).CombinedOutput(); err != nil {
		t.Fatalf("gdal_translate: %v\n%s", err, out) // 200×100 pixels of 0.25 m
	}
	px := [][2]float64{{10, 10}, {20, 10}, {30, 10.5}, {50, 50}, {199.75, 0}, {0.25, 99.5}}
	var pixCSV, mapCSV strings.Builder
	pixCSV.WriteString("image_path,x,y,label\n")
	mapCSV.WriteString("image_path,WKT,label\n")
	for i, p := range px {
		lab := []string{"Tree", "Snag"}[i%2]
		fmt.Fprintf(&pixCSV, "a.tif,%v,%v,%s\n", p[0], p[1], lab)
		fmt.Fprintf(&mapCSV, "a.tif,POINT (%v %v),%s\n", 404000+p[0]*0.25, 3285000-p[1]*0.25, lab)
	}
	preds := "image_path,x,y,label,score\na.tif,12,10,Tree,0.9\na.tif,31,14,Snag,0.8\na.tif,199,1,Tree,0.7\na.tif,60,50,Tree,0.6\n"
	for name, body := range map[string]string{"pix.csv": pixCSV.String(), "map.csv": mapCSV.String(), "preds.csv": preds} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	gpkg := filepath.Join(dir, "truth.gpkg")
	if out, err := exec.Command("ogr2ogr", "-q", "-f", "GPKG", gpkg, filepath.Join(dir, "map.csv"), "-nln", "stems",
		"-oo", "GEOM_POSSIBLE_NAMES=WKT", "-oo", "KEEP_GEOM_COLUMNS=NO", "-a_srs", "EPSG:32617").CombinedOutput(); err != nil {
		t.Fatalf("ogr2ogr: %v\n%s", err, out)
	}
	for _, sem := range []metrics.Semantics{metrics.EvaluateBoxes, metrics.Validation} {
		outs := map[string]string{}
		for _, truth := range []string{"pix.csv", "truth.gpkg"} {
			out := t.TempDir()
			cfg := EvalConfig{CSV: filepath.Join(dir, truth), Predictions: filepath.Join(dir, "preds.csv"), RootDir: dir, Out: out,
				IoUThreshold: 0.4, DistanceThreshold: 10, Semantics: sem, BatchSize: 1}
			if codes := runLocal(t, 2, cfg); codes[0] != 0 {
				t.Fatalf("%s %v: %v", truth, sem, codes)
			}
			outs[truth] = out
		}
		a, _ := reportMetrics(t, outs["pix.csv"])
		b, _ := reportMetrics(t, outs["truth.gpkg"])
		ra, _ := os.ReadFile(filepath.Join(outs["pix.csv"], "results.csv"))
		rb, _ := os.ReadFile(filepath.Join(outs["truth.gpkg"], "results.csv"))
		if !bytes.Equal(a, b) || !bytes.Equal(ra, rb) {
			t.Errorf("%v: the EPSG:32617 layer gives %s\n%s\nthe pixel CSV %s\n%s", sem, b, rb, a, ra)
		}
	}
}
