package retinanet

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/canopy-hpc/canopy/infer/imagefile"
	"github.com/canopy-hpc/canopy/internal/forest"
	"github.com/canopy-hpc/canopy/internal/testweights"
)

// golden is a fixture written by tools/retinanet/golden.py: torchvision's
// RetinaNet filled by the deterministic generator of internal/testweights,
// run on images drawn by internal/forest (seed goldenSeed, sizes
// goldenSizes), one image per batch, float32 on the CPU.
type golden struct {
	Peer      string          `json:"peer"`
	Command   string          `json:"command"`
	Model     string          `json:"model"`
	Seed      uint64          `json:"seed"`
	Config    json.RawMessage `json:"config"`
	StateDict [][2]json.RawMessage
	Images    []goldenImage `json:"images"`
}

type levelSummary struct {
	Shape   []int     `json:"shape"`
	Sum     float64   `json:"sum"`
	AbsSum  float64   `json:"abs_sum"`
	Samples []float64 `json:"samples"`
}

type goldenImage struct {
	Path        string         `json:"path"`
	SHA256      string         `json:"sha256"`
	Size        [2]int         `json:"size"`
	Resized     [2]int         `json:"resized"`
	Padded      [2]int         `json:"padded"`
	Levels      []levelSummary `json:"levels"`
	AboveThresh []int          `json:"above_thresh"`
	LevelTop    []struct {
		Scores []float64    `json:"scores"`
		Index  []int        `json:"index"`
		Boxes  [][4]float64 `json:"boxes"`
	} `json:"level_top"`
	Boxes  [][4]float64 `json:"boxes"`
	Scores []float64    `json:"scores"`
	Labels []int        `json:"labels"`
}

// The images the fixtures were made on: `go run ./internal/forestgen -out
// DIR -n 4 -seed 5 -sizes 400x400,400x400,1500x900,96x64 -prefix forest_`
// (two DeepForest-sized crops, a large non-square image that is scaled down
// and a tiny one that is scaled up).
const goldenSeed = 5

var goldenSizes = [][2]int{{400, 400}, {400, 400}, {1500, 900}, {96, 64}}

func readGolden(t testing.TB, name string) *golden {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "testdata", "golden", "retinanet", name))
	if err != nil {
		t.Fatal(err)
	}
	var raw struct {
		golden
		SD []json.RawMessage `json:"state_dict"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	g := raw.golden
	for _, e := range raw.SD {
		var pair [2]json.RawMessage
		if err := json.Unmarshal(e, &pair); err != nil {
			t.Fatal(err)
		}
		g.StateDict = append(g.StateDict, pair)
	}
	return &g
}

// goldenWeights regenerates the fixture's state dict.
func goldenWeights(t testing.TB, g *golden) Weights {
	t.Helper()
	basic := true
	for _, p := range g.StateDict {
		var name string
		json.Unmarshal(p[0], &name)
		if strings.HasSuffix(name, ".bn3.weight") {
			basic = false
		}
	}
	w := Weights{}
	for _, p := range g.StateDict {
		var name string
		var shape []int
		if err := json.Unmarshal(p[0], &name); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(p[1], &shape); err != nil {
			t.Fatal(err)
		}
		v, err := testweights.Tensor(name, shape, g.Seed, basic)
		if err != nil {
			t.Fatal(err)
		}
		w[name] = Tensor{Shape: shape, Data: v}
	}
	return w
}

func goldenOptions(t testing.TB, g *golden) Options {
	t.Helper()
	var c struct {
		ScoreThresh      float64 `json:"score_thresh"`
		NMSThresh        float64 `json:"nms_thresh"`
		DetectionsPerImg int     `json:"detections_per_img"`
		TopkCandidates   int     `json:"topk_candidates"`
		MinSize          int     `json:"min_size"`
		MaxSize          int     `json:"max_size"`
	}
	if err := json.Unmarshal(g.Config, &c); err != nil {
		t.Fatal(err)
	}
	o := DefaultOptions()
	o.ScoreThresh = float32(c.ScoreThresh)
	o.NMSThresh = c.NMSThresh
	o.DetectionsPerImg = c.DetectionsPerImg
	o.TopkCandidates = c.TopkCandidates
	if c.MinSize > 0 {
		o.MinSize = c.MinSize
	}
	if c.MaxSize > 0 {
		o.MaxSize = c.MaxSize
	}
	return o
}

var goldenImgs struct {
	once sync.Once
	imgs []Image
	sums []string
	err  error
}

// goldenImages draws the fixture images, encodes them as PNG (to check the
// generator still gives the bytes the fixture was made from) and converts
// them as DeepForest does: RGB, k/255 in float32.
func goldenImages(t testing.TB) ([]Image, []string) {
	t.Helper()
	g := &goldenImgs
	g.once.Do(func() {
		for i, s := range goldenSizes {
			rgba, _ := forest.Generate(goldenSeed, i, s[0], s[1])
			var buf bytes.Buffer
			if g.err = png.Encode(&buf, rgba); g.err != nil {
				return
			}
			sum := sha256.Sum256(buf.Bytes())
			g.sums = append(g.sums, hex.EncodeToString(sum[:]))
			g.imgs = append(g.imgs, toImage(rgba))
		}
	})
	if g.err != nil {
		t.Fatal(g.err)
	}
	return g.imgs, g.sums
}

func toImage(m *image.RGBA) Image {
	w, h := m.Bounds().Dx(), m.Bounds().Dy()
	img := Image{W: w, H: h, Pix: make([]float32, 3*w*h)}
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			o := m.PixOffset(x, y)
			for c := 0; c < 3; c++ {
				img.Pix[c*w*h+y*w+x] = float32(float64(m.Pix[o+c]) / 255)
			}
		}
	}
	return img
}

var goldenModels sync.Map

func goldenModel(t testing.TB, name string) (*golden, *Model) {
	t.Helper()
	g := readGolden(t, name)
	if m, ok := goldenModels.Load(name); ok {
		return g, m.(*Model)
	}
	m, err := New(goldenWeights(t, g), goldenOptions(t, g))
	if err != nil {
		t.Fatal(err)
	}
	goldenModels.Store(name, m)
	return g, m
}

// Tolerances against torchvision (float32 CPU): features are compared
// relative to their mean magnitude, boxes in pixels of the original image,
// scores absolutely. Both sides are float32 with different summation orders
// (OpenBLAS/oneDNN blockings), so bit equality is not expected.
const (
	tolBox   = 1e-3
	tolScore = 1e-4
	tolFeat  = 1e-4
)

func checkGolden(t *testing.T, name string) {
	g, m := goldenModel(t, name)
	checkGoldenWith(t, g, m, NewRunner(m, 2))
}

// tracer is a runner the golden tests can drive: the CPU Runner, or a
// GPURunner (tracer adapts it).
type tracer interface {
	DetectTrace(Image) ([]Detection, *Trace)
	Model() *Model
}

func checkGoldenWith(t *testing.T, g *golden, m *Model, r tracer) {
	imgs, sums := goldenImages(t)
	if len(g.Images) != len(imgs) {
		t.Fatalf("%s has %d images, the test draws %d", g.Model, len(g.Images), len(imgs))
	}
	t.Logf("%s; peer %s", m.Arch, g.Peer)
	for i, gi := range g.Images {
		t.Run(filepath.Base(gi.Path), func(t *testing.T) { checkImage(t, r, gi, imgs[i], sums[i]) })
	}
}

// checkImage compares one image's transform sizes, pyramid levels, per-level
// top scores and detections with torchvision's.
func checkImage(t *testing.T, r tracer, gi goldenImage, img Image, sum string) {
	if gi.SHA256 != sum {
		t.Fatalf("the generator now draws other bytes for %s (sha256 %s, fixture %s): regenerate the fixtures (make golden-retinanet)", gi.Path, sum, gi.SHA256)
	}
	dets, tr := r.DetectTrace(img)
	if [2]int{tr.ResizedH, tr.ResizedW} != gi.Resized || [2]int{tr.PaddedH, tr.PaddedW} != gi.Padded {
		t.Fatalf("resized %dx%d padded %dx%d, torchvision %v %v", tr.ResizedH, tr.ResizedW, tr.PaddedH, tr.PaddedW, gi.Resized, gi.Padded)
	}
	for L, lv := range gi.Levels {
		f := tr.Levels[L]
		if fmt.Sprint([]int{f.c, f.h, f.w}) != fmt.Sprint(lv.Shape) {
			t.Fatalf("level %d shape %v, torchvision %v", L, []int{f.c, f.h, f.w}, lv.Shape)
		}
		var sum, abs float64
		for _, v := range f.d {
			sum += float64(v)
			abs += math.Abs(float64(v))
		}
		scale := lv.AbsSum / float64(len(f.d))
		if d := math.Abs(abs-lv.AbsSum) / lv.AbsSum; d > tolFeat {
			t.Errorf("level %d: sum|x| %v, torchvision %v (rel %.2g)", L, abs, lv.AbsSum, d)
		}
		if d := math.Abs(sum-lv.Sum) / lv.AbsSum; d > tolFeat {
			t.Errorf("level %d: sum %v, torchvision %v", L, sum, lv.Sum)
		}
		for k, want := range lv.Samples {
			idx := int((uint64(k) * 2654435761) % uint64(len(f.d)))
			if d := math.Abs(float64(f.d[idx])-want) / scale; d > 100*tolFeat {
				t.Errorf("level %d sample %d (flat %d): %v, torchvision %v (%.2g of the mean |x|)", L, k, idx, f.d[idx], want, d)
			}
		}
	}
	for L, n := range gi.AboveThresh {
		// A score within float32 noise of the threshold may fall on either
		// side on another CPU's SGEMM kernels: allow two, and say so.
		if d := tr.AboveThresh[L] - n; d < -2 || d > 2 {
			t.Errorf("level %d: %d scores above the threshold, torchvision %d", L, tr.AboveThresh[L], n)
		} else if d != 0 {
			t.Logf("level %d: %d scores above the threshold, torchvision %d (scores at the threshold)", L, tr.AboveThresh[L], n)
		}
	}
	if len(gi.LevelTop) != 5 {
		t.Fatalf("fixture has %d level_top entries, want 5", len(gi.LevelTop))
	}
	for L, lt := range gi.LevelTop {
		got := tr.Top[L]
		if len(got) != len(lt.Scores) {
			t.Fatalf("level %d: %d top scores, torchvision %d", L, len(got), len(lt.Scores))
		}
		for k := range got {
			// The order of near-equal scores may differ: compare
			// scores in order, and boxes where the index agrees.
			if d := math.Abs(float64(got[k].Score) - lt.Scores[k]); d > tolScore {
				t.Errorf("level %d top %d: score %v, torchvision %v", L, k, got[k].Score, lt.Scores[k])
			}
			if got[k].Index != lt.Index[k] {
				continue
			}
			for j := 0; j < 4; j++ {
				if d := math.Abs(float64(got[k].Box[j]) - lt.Boxes[k][j]); d > tolBox {
					t.Errorf("level %d top %d (index %d): box %v, torchvision %v", L, k, got[k].Index, got[k].Box, lt.Boxes[k])
					break
				}
			}
		}
	}
	compareDetections(t, dets, gi, r.Model().Opt.ScoreThresh)
}

// compareDetections checks that canopy keeps the same set as torchvision,
// each detection within tolBox and tolScore of its counterpart. Both lists
// are sorted by score; where two scores differ by less than the float32
// noise between the two implementations, their order is not defined (nor
// is torch's order of exact ties), so a detection may match a neighbour
// within tolScore of its own position.
func compareDetections(t *testing.T, dets []Detection, gi goldenImage, thresh float32) {
	t.Helper()
	// A detection whose score is within nearThresh of the score threshold
	// may be kept on one side only (float32 noise between implementations
	// and CPUs), and so may the lower-scored boxes it suppresses; any other
	// detection must have its counterpart.
	const nearThresh = 1e-5
	near := func(s float64) bool { return s-float64(thresh) <= nearThresh }
	used := make([]bool, len(gi.Boxes))
	var worstBox, worstScore float64
	swapped, onlyHere := 0, 0
	for i, d := range dets {
		match := -1
		for j := range gi.Boxes {
			if used[j] || gi.Labels[j] != d.Label || math.Abs(float64(d.Score)-gi.Scores[j]) > tolScore {
				continue
			}
			ok := true
			for k := 0; k < 4; k++ {
				ok = ok && math.Abs(float64(d.Box[k])-gi.Boxes[j][k]) <= tolBox
			}
			if ok {
				match = j
				if j == i {
					break
				}
			}
		}
		if match < 0 {
			if near(float64(d.Score)) {
				onlyHere++
				continue
			}
			t.Fatalf("detection %d %v %v (label %d) has no torchvision counterpart within %g px and %g", i, d.Box, d.Score, d.Label, tolBox, tolScore)
		}
		if match != i {
			swapped++
		}
		used[match] = true
		for k := 0; k < 4; k++ {
			worstBox = max(worstBox, math.Abs(float64(d.Box[k])-gi.Boxes[match][k]))
		}
		worstScore = max(worstScore, math.Abs(float64(d.Score)-gi.Scores[match]))
	}
	onlyThere := 0
	for j, u := range used {
		if u {
			continue
		}
		if !near(gi.Scores[j]) {
			t.Fatalf("torchvision's detection %v %v (label %d) is missing", gi.Boxes[j], gi.Scores[j], gi.Labels[j])
		}
		onlyThere++
	}
	t.Logf("%d detections; worst |Δbox| %.3g px, |Δscore| %.3g; %d in another order among near-equal scores; %d/%d kept on one side only, at the threshold",
		len(dets), worstBox, worstScore, swapped, onlyHere, onlyThere)
}

func TestGoldenResNet18(t *testing.T) { checkGolden(t, "r18.json") }

// The demo model (testdata/models/canopy-demo-r18, float16 weights) loaded
// from its folder, against torchvision on the first demo images
// (internal/forestgen -seed 3): tools/retinanet/golden.py --checkpoint.
func TestGoldenDemoModel(t *testing.T) {
	g := readGolden(t, "demo.json")
	m, _, _, err := LoadFolder(filepath.Join("..", "..", "testdata", "models", "canopy-demo-r18"))
	if err != nil {
		t.Fatal(err)
	}
	r := NewRunner(m, 2)
	for i, gi := range g.Images {
		rgba, _ := forest.Generate(3, i, 400, 400)
		var buf bytes.Buffer
		if err := png.Encode(&buf, rgba); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(buf.Bytes())
		t.Run(filepath.Base(gi.Path), func(t *testing.T) { checkImage(t, r, gi, toImage(rgba), hex.EncodeToString(sum[:])) })
	}
}

func TestGoldenResNet50(t *testing.T) {
	if testing.Short() {
		t.Skip("ResNet-50 parity takes ~20 s of CPU; run without -short")
	}
	checkGolden(t, "r50.json")
}

// Detections are byte-identical whatever the thread count: every output
// element is computed by the same SGEMM call on the same column block.
func TestDeterministicAcrossThreads(t *testing.T) {
	_, m := goldenModel(t, "r18.json")
	imgs, _ := goldenImages(t)
	ref := NewRunner(m, 1)
	for _, threads := range []int{2, 3} {
		r := NewRunner(m, threads)
		for i, img := range imgs {
			a, b := ref.Detect(img), r.Detect(img)
			if len(a) == 0 {
				t.Fatalf("image %d: no detections to compare", i)
			}
			if fmt.Sprintf("%#v", a) != fmt.Sprintf("%#v", b) {
				t.Fatalf("image %d: %d threads give other detections than 1 thread", i, threads)
			}
		}
	}
}

// ModelEnv names a real DeepForest model folder for TestRealCheckpoint.
const ModelEnv = "CANOPY_TEST_MODEL"

// With a real checkpoint (e.g. weecology/deepforest-tree's snapshot folder
// in CANOPY_TEST_MODEL), canopy and the fixture script's torchvision run on
// DeepForest's own sample image give the same detections. No checkpoint can
// be fetched on the build machines, so this runs where one is at hand.
func TestRealCheckpoint(t *testing.T) {
	dir := os.Getenv(ModelEnv)
	if dir == "" {
		t.Skipf("%s is not set: no real DeepForest checkpoint to compare with torchvision", ModelEnv)
	}
	img := filepath.Join("..", "..", "..", "shared", "data", "deepforest", "OSBS_029.png")
	if _, err := os.Stat(img); err != nil {
		t.Skipf("DeepForest's sample image is absent: %v", err)
	}
	py := "/usr/bin/python3"
	if _, err := os.Stat(py); err != nil {
		t.Skipf("no %s with torch: %v", py, err)
	}
	out := filepath.Join(t.TempDir(), "peer.json")
	cmd := exec.Command(py, filepath.Join("..", "..", "tools", "retinanet", "golden.py"), "--checkpoint", dir, "--out", out, img)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("torchvision run failed: %v\n%s", err, b)
	}
	var g golden
	b, _ := os.ReadFile(out)
	if err := json.Unmarshal(b, &g); err != nil || len(g.Images) != 1 {
		t.Fatalf("peer output: %v", err)
	}
	m, _, _, err := LoadFolder(dir)
	if err != nil {
		t.Fatal(err)
	}
	im, err := imagefile.Read(img)
	if err != nil {
		t.Fatal(err)
	}
	dets := NewRunner(m, 2).Detect(Image(im))
	compareDetections(t, dets, g.Images[0], m.Opt.ScoreThresh)
}
