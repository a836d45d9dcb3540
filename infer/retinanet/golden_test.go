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
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/canopy-hpc/canopy/infer/imagefile"
	"github.com/canopy-hpc/canopy/infer/nn"
	"github.com/canopy-hpc/canopy/internal/testsupport/approx"
	"github.com/canopy-hpc/canopy/internal/testsupport/forest"
	"github.com/canopy-hpc/canopy/internal/testsupport/shareddata"
	"github.com/canopy-hpc/canopy/internal/testsupport/testweights"
)

// golden is a fixture written by tools/retinanet/golden.py: torchvision's
// RetinaNet filled by the deterministic generator of internal/testsupport/testweights,
// run on images drawn by internal/testsupport/forest (seed goldenSeed, sizes
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

// imageSet is a set of fixture images drawn by internal/testsupport/forest: image i is
// forest.Generate(seed, i, sizes[i][0], sizes[i][1]) (W×H), as
// `go run ./cmd/forestgen -seed S -sizes W1xH1,...` writes them.
type imageSet struct {
	seed  uint64
	sizes [][2]int
}

// forestSet: the images of r18.json and r50.json (make golden-retinanet,
// RETINANET_IMAGES): two DeepForest-sized crops, a large non-square image
// that is scaled down, a tiny one that is scaled up, and sizes on which the
// two resize rules disagree (1249×1035, 625×518 and the primes 997×601).
// The torch1.13 fixtures hold the first four.
var forestSet = imageSet{5, [][2]int{{400, 400}, {400, 400}, {1500, 900}, {96, 64}, {1249, 1035}, {625, 518}, {997, 601}}}

// demoSet: the images of demo.json (forestgen -seed 3, the demo's seed,
// never trained on); legacyDemoSet those of torch1.13/demo.json.
var (
	demoSet       = imageSet{3, [][2]int{{400, 400}, {1249, 1035}, {625, 518}, {997, 601}}}
	legacyDemoSet = imageSet{3, [][2]int{{400, 400}, {400, 400}, {400, 400}}}
)

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
func goldenWeights(t testing.TB, g *golden) nn.Weights {
	t.Helper()
	basic := true
	for _, p := range g.StateDict {
		var name string
		json.Unmarshal(p[0], &name)
		if strings.HasSuffix(name, ".bn3.weight") {
			basic = false
		}
	}
	w := nn.Weights{}
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
		w[name] = nn.Tensor{Shape: shape, Data: v}
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
	o.Resize = fixtureRule(t, g.Peer)
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

type drawn struct {
	img Image
	sum string
}

var drawnImages sync.Map // [3]uint64{seed, i, W<<32|H} → drawn

// image draws image i of the set, encodes it as PNG (to check the generator
// still gives the bytes the fixture was made from) and converts it as
// DeepForest does: RGB, k/255 in float32.
func (s imageSet) image(t testing.TB, i int) (Image, string) {
	t.Helper()
	w, h := s.sizes[i][0], s.sizes[i][1]
	key := [3]uint64{s.seed, uint64(i), uint64(w)<<32 | uint64(h)}
	if d, ok := drawnImages.Load(key); ok {
		return d.(drawn).img, d.(drawn).sum
	}
	rgba, _ := forest.Generate(s.seed, i, w, h)
	var buf bytes.Buffer
	if err := png.Encode(&buf, rgba); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(buf.Bytes())
	d := drawn{toImage(rgba), hex.EncodeToString(sum[:])}
	drawnImages.Store(key, d)
	return d.img, d.sum
}

// goldenImages are forestSet's images, in order.
func goldenImages(t testing.TB) ([]Image, []string) {
	t.Helper()
	var imgs []Image
	var sums []string
	for i := range forestSet.sizes {
		img, sum := forestSet.image(t, i)
		imgs, sums = append(imgs, img), append(sums, sum)
	}
	return imgs, sums
}

// imageAt is image i of the set.
func (s imageSet) imageAt(t testing.TB, i int) Image {
	img, _ := s.image(t, i)
	return img
}

var fixtureIndex = regexp.MustCompile(`_(\d+)\.png$`)

// pathIndex is the index in the set of a fixture's image: the number in
// its file name (forest_0004.png is image 4).
func pathIndex(t testing.TB, path string, s imageSet) int {
	t.Helper()
	m := fixtureIndex.FindStringSubmatch(path)
	if m == nil {
		t.Fatalf("fixture image %s: no index in the name", path)
	}
	i, _ := strconv.Atoi(m[1])
	if i >= len(s.sizes) {
		t.Fatalf("fixture image %s: the set has %d images", path, len(s.sizes))
	}
	return i
}

// fixtureImage is the image of the set a fixture entry was made from.
func (s imageSet) fixtureImage(t testing.TB, gi goldenImage) (Image, string) {
	t.Helper()
	i := pathIndex(t, gi.Path, s)
	if [2]int{gi.Size[1], gi.Size[0]} != s.sizes[i] {
		t.Fatalf("fixture image %s is %dx%d, the set draws %dx%d", gi.Path, gi.Size[1], gi.Size[0], s.sizes[i][0], s.sizes[i][1])
	}
	return s.image(t, i)
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

// smallGoldenModel is the golden model at a 128–160 pixel network input:
// a whole detector small enough for the slow clones and the per-layer
// timings (both run it on forest image 11, 150×100).
func smallGoldenModel(t testing.TB, gold *golden, m *Model) *Model {
	opt := m.Opt
	opt.MinSize, opt.MaxSize = 128, 160
	small, err := New(goldenWeights(t, gold), opt)
	if err != nil {
		t.Fatal(err)
	}
	return small
}

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

func checkGolden(t *testing.T, name string, set imageSet) {
	g, m := goldenModel(t, name)
	checkRuleExercised(t, g, m.Opt)
	checkGoldenWith(t, g, m, NewRunner(m, 2), set)
}

// tracer is a runner the golden tests can drive: the CPU Runner, or a
// GPURunner (tracer adapts it).
type tracer interface {
	DetectTrace(Image) ([]Detection, *Trace)
	Model() *Model
}

func checkGoldenWith(t *testing.T, g *golden, m *Model, r tracer, set imageSet) {
	if len(g.Images) == 0 {
		t.Fatalf("%s has no images", g.Model)
	}
	t.Logf("%s, resize rule %s; peer %s", m.Arch, m.Opt.Resize, g.Peer)
	for _, gi := range g.Images {
		img, sum := set.fixtureImage(t, gi)
		t.Run(filepath.Base(gi.Path), func(t *testing.T) { checkImage(t, r, gi, img, sum) })
	}
}

// checkRuleExercised: at least one of the fixture's images resizes to
// another size under the other rule, so the fixture tells the rules apart.
func checkRuleExercised(t *testing.T, g *golden, o Options) {
	t.Helper()
	other := o
	other.Resize = ResizeTorchvision
	if o.Resize == ResizeTorchvision {
		other.Resize = ResizeTorchvision015
	}
	for _, gi := range g.Images {
		if oh, ow := resizeSize(gi.Size[0], gi.Size[1], other); [2]int{oh, ow} != gi.Resized {
			return
		}
	}
	t.Errorf("%s: no image resizes differently under %s: the fixture does not test the resize rule", g.Model, other.Resize)
}

// fixtureRule is the resize rule of the torchvision that made a fixture:
// eager torchvision ≥ 0.16 computes the scale in float64, older ones in
// float32.
func fixtureRule(t testing.TB, peer string) ResizeRule {
	t.Helper()
	var major, minor int
	if _, err := fmt.Sscanf(peer, "torchvision %d.%d", &major, &minor); err != nil {
		t.Fatalf("fixture peer %q: no torchvision version: %v", peer, err)
	}
	if major == 0 && minor < 16 {
		return ResizeTorchvision015
	}
	return ResizeTorchvision
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
		if fmt.Sprint([]int{f.C, f.H, f.W}) != fmt.Sprint(lv.Shape) {
			t.Fatalf("level %d shape %v, torchvision %v", L, []int{f.C, f.H, f.W}, lv.Shape)
		}
		var sum, abs float64
		for _, v := range f.D {
			sum += float64(v)
			abs += math.Abs(float64(v))
		}
		scale := lv.AbsSum / float64(len(f.D))
		if d := math.Abs(abs-lv.AbsSum) / lv.AbsSum; approx.Far(d, tolFeat) {
			t.Errorf("level %d: sum|x| %v, torchvision %v (rel %.2g)", L, abs, lv.AbsSum, d)
		}
		if d := math.Abs(sum-lv.Sum) / lv.AbsSum; approx.Far(d, tolFeat) {
			t.Errorf("level %d: sum %v, torchvision %v", L, sum, lv.Sum)
		}
		for k, want := range lv.Samples {
			idx := int((uint64(k) * 2654435761) % uint64(len(f.D)))
			if d := math.Abs(float64(f.D[idx])-want) / scale; approx.Far(d, 100*tolFeat) {
				t.Errorf("level %d sample %d (flat %d): %v, torchvision %v (%.2g of the mean |x|)", L, k, idx, f.D[idx], want, d)
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
			if d := math.Abs(float64(got[k].Score) - lt.Scores[k]); approx.Far(d, tolScore) {
				t.Errorf("level %d top %d: score %v, torchvision %v", L, k, got[k].Score, lt.Scores[k])
			}
			if got[k].Index != lt.Index[k] {
				continue
			}
			for j := 0; j < 4; j++ {
				if d := math.Abs(float64(got[k].Box[j]) - lt.Boxes[k][j]); approx.Far(d, tolBox) {
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
			if used[j] || gi.Labels[j] != d.Label || approx.Far(math.Abs(float64(d.Score)-gi.Scores[j]), tolScore) {
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

func TestGoldenResNet18(t *testing.T) { checkGolden(t, "r18.json", forestSet) }

// The demo model (testdata/models/canopy-demo-r18, float16 weights) loaded
// from its folder, against torchvision on demo images (cmd/forestgen
// -seed 3): tools/retinanet/golden.py --checkpoint.
func TestGoldenDemoModel(t *testing.T) {
	g := checkDemo(t, "demo.json", demoSet)
	checkRuleExercised(t, g, DefaultOptions())
}

func checkDemo(t *testing.T, name string, set imageSet) *golden {
	g := readGolden(t, name)
	m, err := demoModel(t)
	if err != nil {
		t.Fatal(err)
	}
	m.Opt.Resize = fixtureRule(t, g.Peer)
	checkGoldenWith(t, g, m, NewRunner(m, 2), set)
	return g
}

func TestGoldenResNet50(t *testing.T) {
	if testing.Short() {
		t.Skip("ResNet-50 parity takes ~30 s of CPU; run without -short")
	}
	checkGolden(t, "r50.json", forestSet)
}

// TestGoldenLegacyResize: with --resize torchvision-0.15, canopy meets the
// fixtures torch 1.13 / torchvision 0.14 made (testdata/golden/retinanet/
// torch1.13, Debian's python3-torch), whose float32 size rule gives
// 1500×900 399×239 at 400 and 1332×799 at 800/1333.
func TestGoldenLegacyResize(t *testing.T) {
	t.Run("r18", func(t *testing.T) { checkGolden(t, "torch1.13/r18.json", forestSet) })
	t.Run("demo", func(t *testing.T) {
		g := readGolden(t, "torch1.13/demo.json")
		if fixtureRule(t, g.Peer) != ResizeTorchvision015 {
			t.Fatalf("torch1.13/demo.json: peer %s", g.Peer)
		}
		checkDemo(t, "torch1.13/demo.json", legacyDemoSet)
	})
	t.Run("r50", func(t *testing.T) {
		if testing.Short() {
			t.Skip("ResNet-50 parity takes ~20 s of CPU; run without -short")
		}
		checkGolden(t, "torch1.13/r50.json", forestSet)
	})
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

// TestGoldenDemoOnSample: the committed demo checkpoint (a real
// DeepForest-layout model folder, testdata/models/canopy-demo-r18) on
// DeepForest's own sample image OSBS_029.png (../shared) meets torchvision
// (demo_osbs.json, make golden-sample): the pyramid, the per-level top
// scores and the detections, on aerial data rather than generated images.
// (It replaces an opt-in test on a downloaded checkpoint that nothing ran:
// no checkpoint can be fetched on the build machines.)
func TestGoldenDemoOnSample(t *testing.T) {
	g := readGolden(t, "demo_osbs.json")
	if len(g.Images) != 1 {
		t.Fatalf("demo_osbs.json: %d images", len(g.Images))
	}
	gi := g.Images[0]
	path := filepath.Join("..", "..", gi.Path)
	shareddata.Need(t, path, "DeepForest's sample image "+filepath.Base(gi.Path))
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	im, err := imagefile.Read(path)
	if err != nil {
		t.Fatal(err)
	}
	m, err := demoModel(t)
	if err != nil {
		t.Fatal(err)
	}
	m.Opt.Resize = fixtureRule(t, g.Peer)
	if len(gi.Scores) == 0 {
		t.Fatal("the fixture has no detections to compare")
	}
	sum := sha256.Sum256(b)
	checkImage(t, NewRunner(m, 2), gi, Image(im), hex.EncodeToString(sum[:]))
}

// TestFixtureCommands: every fixture under testdata/golden/retinanet
// records a command that names a script or package that exists, run from
// the folder it names (`cd DIR && ...`), whose --out is the fixture itself
// (or, for a fixture moved since, the path recorded in moved_from).
func TestFixtureCommands(t *testing.T) {
	root := filepath.Join("..", "..")
	dir := filepath.Join(root, "testdata", "golden", "retinanet")
	n := 0
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.Ext(p) != ".json" {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		var meta struct {
			Command       string `json:"command"`
			ImagesCommand string `json:"images_command"`
			MovedFrom     string `json:"moved_from"`
		}
		if err := json.Unmarshal(b, &meta); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		self, _ := filepath.Rel(root, p)
		if meta.Command == "" {
			t.Errorf("%s records no command", self)
			return nil
		}
		n++
		want := self
		if meta.MovedFrom != "" {
			want, _, _ = strings.Cut(meta.MovedFrom, " ")
		}
		checkCommand(t, root, self, meta.Command, want)
		if meta.ImagesCommand != "" {
			checkCommand(t, root, self, meta.ImagesCommand, "")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 8 {
		t.Fatalf("only %d fixtures with a command", n)
	}
}

// checkCommand: cmd's script (a .py file or `go run ./pkg`) exists
// relative to its folder, and its --out, when it has one, is want.
func checkCommand(t *testing.T, root, fixture, cmd, want string) {
	t.Helper()
	cwd := "."
	if rest, ok := strings.CutPrefix(cmd, "cd "); ok {
		d, tail, ok := strings.Cut(rest, " && ")
		if !ok {
			t.Errorf("%s: command %q: cd without &&", fixture, cmd)
			return
		}
		cwd, cmd = d, tail
	}
	f := strings.Fields(cmd)
	script := ""
	for i, w := range f {
		switch {
		case strings.HasSuffix(w, ".py") && script == "":
			script = w
		case w == "run" && i > 0 && f[i-1] == "go" && i+1 < len(f):
			script = f[i+1]
		case w == "--out" && i+1 < len(f) && want != "":
			if got := filepath.Clean(filepath.Join(cwd, f[i+1])); got != filepath.Clean(want) {
				t.Errorf("%s: command writes --out %s (from %s), not %s", fixture, got, cwd, want)
			}
		}
	}
	if script == "" {
		t.Errorf("%s: command %q names no script", fixture, cmd)
		return
	}
	if _, err := os.Stat(filepath.Join(root, cwd, script)); err != nil {
		t.Errorf("%s: command %q: %v", fixture, cmd, err)
	}
}
