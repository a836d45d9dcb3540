package jobs

import (
	"bytes"
	"crypto/sha256"
	"encoding/csv"
	"encoding/hex"
	"encoding/json"
	"image"
	"image/draw"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/canopy-hpc/canopy/box"
	"github.com/canopy-hpc/canopy/infer/gdal"
	"github.com/canopy-hpc/canopy/infer/tile"
	"github.com/canopy-hpc/canopy/internal/testsupport/approx"
	"github.com/canopy-hpc/canopy/internal/testsupport/torchckpt"
	"github.com/canopy-hpc/canopy/internal/tilerun"
)

// e2ePixelsSHA256 is the sha256 of the RGB pixels (rows top to bottom,
// R, G, B per pixel: PIL's convert("RGB").tobytes(), what predict_tile
// "single" reads) of `go run ./cmd/forestgen -n 1 -sizes 2000x2000 -seed
// 27`'s img_0000.png, the raster DeepForest ran on for
// infer/tile/testdata/e2e2000.json (the file's own sha256, which
// scripts/e2e-tile.sh checks, is in that folder's README). If forestgen
// changes, the fixture must be made again.
const e2ePixelsSHA256 = "553b26b912415e9a2e5cbad9dd627f26b696c6413d55b98a0b78614672387b2f"

// e2eFixture is the part of e2e2000.json the test reads.
type e2eFixture struct {
	Peer  map[string]any
	Cases []struct {
		Width, Height, Patch int
		Overlap, IoU         float64
		Windows              []struct {
			Window [4]int
			Dets   [][6]float64
		}
		PredictTile [][6]any `json:"predict_tile"`
	}
}

// TestTileE2EDeepForest: canopy predict --tile against DeepForest's
// predict_tile (dataloader_strategy "single", R50 test weights, patch 400,
// overlap 0.05, iou 0.15) on the 2000×2000 forestgen raster of
// infer/tile/testdata/e2e2000.json, regenerated here and checked by the
// sha256 of its pixels. The whole raster (36 windows) takes over a minute
// of CPU, so make e2e-tile (scripts/e2e-tile.sh) compares all of it; this
// test runs canopy on the raster's bottom-right 480×480 corner, whose 2×2 windows
// (offsets 1520 and the last window moved inward to 1600, overlapping by
// 320 pixels) are DeepForest's own windows 28, 29, 34 and 35, pixel for
// pixel. DeepForest's detections of those windows, merged by predict_tile's
// rule (tile.Merge, which TestMergeDeepForest holds exactly equal to
// predict_tile on all 36), are the reference: the same number of boxes,
// integer coordinates equal for at least 99% of the matched boxes, scores
// within 1e-5.
func TestTileE2EDeepForest(t *testing.T) {
	if !gdal.Available {
		t.Skip("built with -tags nogdal: no raster reads")
	}
	b, err := os.ReadFile("../infer/tile/testdata/e2e2000.json")
	if err != nil {
		t.Fatal(err)
	}
	var fx e2eFixture
	if err := json.Unmarshal(b, &fx); err != nil {
		t.Fatal(err)
	}
	if len(fx.Cases) != 1 || fx.Cases[0].Width != 2000 || fx.Cases[0].Patch != 400 || len(fx.Cases[0].Windows) != 36 {
		t.Fatalf("e2e2000.json: want one 2000-pixel case of 36 windows of 400")
	}
	fc := fx.Cases[0]

	dir := t.TempDir()
	cmd := exec.Command("go", "run", "./cmd/forestgen", "-out", dir, "-n", "1", "-sizes", "2000x2000", "-seed", "27")
	cmd.Dir = ".."
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("forestgen: %v\n%s", err, out)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "img_0000.png"))
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	full := image.NewNRGBA(img.Bounds())
	draw.Draw(full, full.Bounds(), img, image.Point{}, draw.Src)
	rgb := make([]byte, 0, 3*len(full.Pix)/4)
	for i := 0; i < len(full.Pix); i += 4 {
		rgb = append(rgb, full.Pix[i:i+3]...)
	}
	if sum := sha256.Sum256(rgb); hex.EncodeToString(sum[:]) != e2ePixelsSHA256 {
		t.Fatalf("forestgen's 2000×2000 seed-27 raster's pixels have sha256 %x, not those DeepForest ran on (%s): make the fixture again (infer/tile/testdata/README.md)", sum, e2ePixelsSHA256)
	}
	const x0, y0, side = 1520, 1520, 480
	crop := image.NewNRGBA(image.Rect(0, 0, side, side))
	draw.Draw(crop, crop.Bounds(), img, image.Pt(x0, y0), draw.Src)
	cropFile := filepath.Join(dir, "corner.png")
	f, err := os.Create(cropFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := png.Encode(f, crop); err != nil {
		t.Fatal(err)
	}
	f.Close()

	// DeepForest's windows inside the corner, in the corner's frame.
	settings := tile.Settings{Patch: fc.Patch, Overlap: fc.Overlap}
	cw, err := tile.Windows(side, side, settings)
	if err != nil {
		t.Fatal(err)
	}
	var dfWins []tile.Window
	var dfDets [][]box.Detection
	windowDets := 0
	for _, w := range fc.Windows {
		if w.Window[0] < x0 || w.Window[1] < y0 {
			continue
		}
		dfWins = append(dfWins, tile.Window{X: w.Window[0] - x0, Y: w.Window[1] - y0, W: w.Window[2], H: w.Window[3]})
		var ds []box.Detection
		for _, d := range w.Dets {
			ds = append(ds, box.Detection{Box: box.Box{Xmin: d[0], Ymin: d[1], Xmax: d[2], Ymax: d[3]}, Label: int32(d[4]), Score: d[5]})
		}
		windowDets += len(ds)
		dfDets = append(dfDets, ds)
	}
	if len(dfWins) != 4 || len(cw) != 4 {
		t.Fatalf("the corner cuts %d windows, DeepForest's inside it %d; want 4", len(cw), len(dfWins))
	}
	for k := range cw {
		if cw[k] != dfWins[k] {
			t.Fatalf("corner window %d: %+v, DeepForest's %+v", k, cw[k], dfWins[k])
		}
	}
	want := tile.Merge(dfWins, dfDets, fc.IoU)
	if len(want) < 10 || len(want) == windowDets {
		t.Fatalf("DeepForest's corner: %d rows merged to %d: the case tests no merge", windowDets, len(want))
	}

	hub := filepath.Join(dir, "r50")
	if err := torchckpt.HubFolder(filepath.Join("..", torchckpt.Skeletons), hub, "F32"); err != nil {
		t.Fatal(err)
	}
	cfg := tilerun.Config{Names: outNames, Raster: cropFile, Out: filepath.Join(dir, "out"), BatchSize: 1, Settings: settings, IoU: fc.IoU, CacheMiB: 16,
		Model: ModelConfig{Spec: hub, Threads: 2, ScoreThresh: -1, NMSThresh: -1, Device: device("cpu")}}
	_, got := predictionRows(t, runTile(t, 1, cfg))
	matched, equal, worst, _ := matchE2E(want, got)
	t.Logf("corner: DeepForest %d rows (from %d window detections), canopy %d; %d matched, %d with equal integer coordinates, scores within %.3g",
		len(want), windowDets, len(got), matched, equal, worst)
	if len(got) != len(want) || matched != len(want) {
		t.Errorf("canopy gives %d rows, DeepForest %d; %d matched at IoU >= 0.5", len(got), len(want), matched)
	}
	if float64(equal) < 0.99*float64(matched) {
		t.Errorf("integer coordinates equal for %d of %d matched boxes; want at least 99%%", equal, matched)
	}
	if approx.Far(worst, 1e-5) {
		t.Errorf("scores differ by up to %g; want within 1e-5", worst)
	}
}

// predictionRows reads predictions.csv: its rows, and each row's box and
// score (xmin, ymin, xmax, ymax, score).
func predictionRows(t *testing.T, b []byte) ([][]string, [][5]float64) {
	t.Helper()
	rows, err := csv.NewReader(bytes.NewReader(b)).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	var got [][5]float64
	for _, r := range rows[1:] {
		var v [5]float64
		for i, s := range []string{r[1], r[2], r[3], r[4], r[6]} {
			if v[i], err = strconv.ParseFloat(s, 64); err != nil {
				t.Fatal(err)
			}
		}
		got = append(got, v)
	}
	return rows, got
}

// matchE2E matches each reference row, in order, to the unused canopy row
// of highest IoU (at least 0.5), as tools/tile/e2e.py does, and counts the
// matches, those with equal coordinates, and the largest score difference;
// pair[i] is the canopy row matched to want[i] (-1: none).
func matchE2E(want []box.Detection, got [][5]float64) (matched, equal int, worst float64, pair []int) {
	used := make([]bool, len(got))
	pair = make([]int, len(want))
	for i, d := range want {
		pair[i] = -1
		a := [4]float64{d.Box.Xmin, d.Box.Ymin, d.Box.Xmax, d.Box.Ymax}
		best, k := 0.0, -1
		for j, g := range got {
			if v := iou4(a, [4]float64{g[0], g[1], g[2], g[3]}); !used[j] && v > best {
				best, k = v, j
			}
		}
		if k < 0 || best < 0.5 {
			continue
		}
		used[k], pair[i] = true, k
		matched++
		if got[k][0] == a[0] && got[k][1] == a[1] && got[k][2] == a[2] && got[k][3] == a[3] {
			equal++
		}
		worst = max(worst, approx.Diff(got[k][4], d.Score)) // max keeps a NaN, and Far fails on it
	}
	return matched, equal, worst, pair
}

func iou4(a, b [4]float64) float64 {
	w := min(a[2], b[2]) - max(a[0], b[0])
	h := min(a[3], b[3]) - max(a[1], b[1])
	if w <= 0 || h <= 0 {
		return 0
	}
	i := w * h
	return i / ((a[2]-a[0])*(a[3]-a[1]) + (b[2]-b[0])*(b[3]-b[1]) - i)
}
