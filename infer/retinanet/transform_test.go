package retinanet

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"math"
	"math/big"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/canopy-hpc/canopy/infer/cpu"
)

// TestResizeSizeTable: both size rules against torchvision's own
// GeneralizedRCNNTransform on 5,000 seeded random sizes and four
// (min_size, max_size) settings (testdata/golden/retinanet/sizes.json, made
// by tools/retinanet/sizes.py on meta tensors): eager torchvision ≥ 0.16 for
// ResizeTorchvision, the scripted transform (the float32 scale of ≤ 0.15)
// for ResizeTorchvision015. Every row must match.
func TestResizeSizeTable(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "testdata", "golden", "retinanet", "sizes.json"))
	if err != nil {
		t.Fatal(err)
	}
	var g struct {
		Peer        string   `json:"peer"`
		RulesDiffer int      `json:"rules_differ"`
		Rows        [][8]int `json:"rows"`
	}
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	if len(g.Rows) != 5000 {
		t.Fatalf("sizes.json has %d rows, want 5000", len(g.Rows))
	}
	match, differ, wrong := [2]int{}, 0, 0
	for _, r := range g.Rows {
		o := DefaultOptions()
		o.MinSize, o.MaxSize = r[2], r[3]
		for k, rule := range []ResizeRule{ResizeTorchvision, ResizeTorchvision015} {
			o.Resize = rule
			oh, ow := resizeSize(r[0], r[1], o)
			if want := [2]int{r[4+2*k], r[5+2*k]}; [2]int{oh, ow} == want {
				match[k]++
			} else if wrong++; wrong <= 10 {
				t.Errorf("%s: %dx%d at %d/%d resizes to %dx%d here, %dx%d in torchvision", rule, r[0], r[1], r[2], r[3], oh, ow, want[0], want[1])
			}
		}
		if r[4] != r[6] || r[5] != r[7] {
			differ++
		}
	}
	t.Logf("peer %s: %s %d/%d, %s %d/%d; the rules differ on %d sizes", g.Peer,
		ResizeTorchvision, match[0], len(g.Rows), ResizeTorchvision015, match[1], len(g.Rows), differ)
	if wrong > 0 {
		t.Errorf("%d sizes do not match", wrong)
	}
	if differ != g.RulesDiffer || differ == 0 {
		t.Errorf("the rules differ on %d rows, the fixture says %d", differ, g.RulesDiffer)
	}
}

func TestParseRules(t *testing.T) {
	for i, n := range ResizeRules {
		r, err := ParseResizeRule(n)
		if err != nil || int(r) != i || r.String() != n {
			t.Errorf("ParseResizeRule(%q) = %v, %v", n, r, err)
		}
	}
	for i, n := range BlendRules {
		r, err := ParseBlendRule(n)
		if err != nil || int(r) != i || r.String() != n {
			t.Errorf("ParseBlendRule(%q) = %v, %v", n, r, err)
		}
	}
	if _, err := ParseResizeRule("torchvision-0.14"); err == nil {
		t.Error("an unknown resize rule is accepted")
	}
	if _, err := ParseBlendRule("avx512"); err == nil {
		t.Error("an unknown blend rule is accepted")
	}
	if o := DefaultOptions(); o.Resize != ResizeTorchvision || o.Blend != BlendFMA {
		t.Errorf("the default rules are %s, %s, not torchvision ≥ 0.16's size and torch's AVX2 blend", o.Resize, o.Blend)
	}
}

// blendFixture is testdata/golden/retinanet/blend.json
// (tools/retinanet/blend.py): torch's resized tensors of three images, per
// CPU setting.
type blendFixture struct {
	MinSize  int `json:"min_size"`
	MaxSize  int `json:"max_size"`
	Settings map[string]struct {
		Torch         string `json:"torch"`
		CPUCapability string `json:"cpu_capability"`
		Threads       int    `json:"threads"`
	} `json:"settings"`
	Images []struct {
		Path      string            `json:"path"`
		SHA256PNG string            `json:"sha256_png"`
		Resized   [2]int            `json:"resized"`
		Elements  int               `json:"elements"`
		SHA256    map[string]string `json:"sha256"`
		Differ    map[string]struct {
			Elements int     `json:"elements"`
			MaxAbs   float64 `json:"max_abs"`
		} `json:"differ"`
	} `json:"images"`
}

func readBlendFixture(t *testing.T) *blendFixture {
	t.Helper()
	var g blendFixture
	readFixture(t, "blend.json", &g)
	if len(g.Images) != 3 {
		t.Fatalf("blend.json has %d images, want 3", len(g.Images))
	}
	if s := g.Settings["default-2t"]; s.CPUCapability != "DEFAULT" {
		t.Fatalf("blend.json: the default-2t setting ran with capability %q", s.CPUCapability)
	}
	if s := g.Settings["avx2-2t"]; s.CPUCapability != "AVX2" || s.Threads != 2 {
		t.Fatalf("blend.json: the avx2-2t setting ran with capability %q, %d threads", s.CPUCapability, s.Threads)
	}
	return &g
}

// TestBlendFixture: canopy's resized tensor (normalize, bilinear resize,
// zero padding) is bit for bit torch's, on three images at 800/1333: the
// fma blend (the default) is torch's AVX2 kernel on 2 threads, no-fma is
// torch with ATEN_CPU_CAPABILITY=default, fma-1t torch's AVX2 result on one
// thread (another kernel). The element counts by which the settings differ
// are the fixture's, logged here.
func TestBlendFixture(t *testing.T) {
	g := readBlendFixture(t)
	o := DefaultOptions()
	o.MinSize, o.MaxSize = g.MinSize, g.MaxSize
	e := cpu.NewEngine(1)
	for _, gi := range g.Images {
		img, sum := forestSet.image(t, pathIndex(t, gi.Path, forestSet))
		if sum != gi.SHA256PNG {
			t.Fatalf("%s: the generator draws other bytes than the fixture's", gi.Path)
		}
		for _, c := range []struct {
			rule BlendRule
			want string
		}{{BlendFMA, "avx2-2t"}, {BlendNoFMA, "default-2t"}, {BlendFMA1T, "avx2-1t"}} {
			o.Blend = c.rule
			e.ReuseFor(img.H, img.W)
			x, rh, rw := normalizeResizePad(e, img, o)
			if [2]int{rh, rw} != gi.Resized || len(x.D) != gi.Elements {
				t.Fatalf("%s: resized %dx%d (%d elements), torch %v (%d)", gi.Path, rh, rw, len(x.D), gi.Resized, gi.Elements)
			}
			raw := make([]byte, 4*len(x.D))
			for i, v := range x.D {
				binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(v))
			}
			e.Put(x)
			h := sha256.Sum256(raw)
			got := hex.EncodeToString(h[:])
			var same []string
			for name, want := range gi.SHA256 {
				if got == want {
					same = append(same, name)
				}
			}
			sort.Strings(same)
			if got != gi.SHA256[c.want] {
				t.Errorf("%s: blend %s is not torch's %s tensor (equal to %v)", gi.Path, c.rule, c.want, same)
			}
			t.Logf("%s -> %v: blend %s = torch %v", gi.Path, gi.Resized, c.rule, same)
		}
		for _, pair := range []string{"avx2-2t/default-2t", "avx2-2t/avx2-1t", "avx2-1t/default-2t"} {
			d := gi.Differ[pair]
			t.Logf("%s: torch %s differ in %d of %d elements (max %.2g)", gi.Path, pair, d.Elements, gi.Elements, d.MaxAbs)
		}
	}
}

// bigFMA computes a·b+c rounded once, in big.Float (exact before the
// rounding: 200 bits hold any float32 product plus a float32).
type bigFMA struct{ x, y, z big.Float }

func (f *bigFMA) fma32(a, b, c float32) float32 {
	f.x.SetPrec(200).SetFloat64(float64(a))
	f.y.SetPrec(200).SetFloat64(float64(b))
	f.z.SetPrec(200).SetFloat64(float64(c))
	f.x.Mul(&f.x, &f.y)
	f.x.Add(&f.x, &f.z)
	r, _ := f.x.Float32()
	return r
}

// TestFMA32Exact: fma32 is the exactly rounded a·b+c on every
// multiply-add of the fma and fma-1t blends (and fma-1t's source indices)
// over the blend fixture's three images, and
// on random and tie-constructed operands; float32(math.FMA(...)) (two
// roundings) is not, on the ties.
func TestFMA32Exact(t *testing.T) {
	g := readBlendFixture(t)
	o := DefaultOptions()
	o.MinSize, o.MaxSize = g.MinSize, g.MaxSize
	checked, twice := 0, 0
	var oracle bigFMA
	check := func(a, b, c float32) float32 {
		got, want := fma32(a, b, c), oracle.fma32(a, b, c)
		if math.Float32bits(got) != math.Float32bits(want) {
			t.Fatalf("fma32(%g, %g, %g) = %g, exactly rounded %g", a, b, c, got, want)
		}
		if float32(math.FMA(float64(a), float64(b), float64(c))) != want {
			twice++
		}
		checked++
		return got
	}
	for _, gi := range g.Images {
		img, _ := forestSet.image(t, pathIndex(t, gi.Path, forestSet))
		oh, ow := resizeSize(img.H, img.W, o)
		wy, wx := linearWeights(img.H, oh, false), linearWeights(img.W, ow, false)
		wy1, wx1 := linearWeights(img.H, oh, true), linearWeights(img.W, ow, true)
		for i := range wy1 {
			check(float32(img.H)/float32(oh), float32(i)+0.5, -0.5) // fma-1t's source index
		}
		for i := range wx1 {
			check(float32(img.W)/float32(ow), float32(i)+0.5, -0.5)
		}
		n := img.W * img.H
		norm := make([]float32, n)
		for c := 0; c < 3; c++ {
			for i, v := range img.Pix[c*n : (c+1)*n] {
				norm[i] = (v - o.ImageMean[c]) / o.ImageStd[c]
			}
			for y := 0; y < oh; y++ {
				r0, r1 := norm[wy[y].i0*img.W:], norm[wy[y].i1*img.W:]
				for _, a := range wx {
					t0 := check(r0[a.i0], a.l0, float32(r0[a.i1]*a.l1))
					t1 := check(r1[a.i0], a.l0, float32(r1[a.i1]*a.l1))
					check(t0, wy[y].l0, float32(t1*wy[y].l1))
				}
				// fma-1t's chain
				r0, r1 = norm[wy1[y].i0*img.W:], norm[wy1[y].i1*img.W:]
				h0, h1 := wy1[y].l0, wy1[y].l1
				for _, a := range wx1 {
					acc := float32(r0[a.i1] * float32(h0*a.l1))
					acc = check(r0[a.i0], float32(h0*a.l0), acc)
					acc = check(r1[a.i0], float32(h1*a.l0), acc)
					check(r1[a.i1], float32(h1*a.l1), acc)
				}
			}
		}
	}
	pixels := checked
	r := rand.New(rand.NewPCG(14, 1))
	for i := 0; i < 200000; i++ {
		a, b, c := float32(r.NormFloat64()), float32(r.Float64()), float32(r.NormFloat64())
		check(a, b, c)
		// A near-tie: c has an odd last bit, a·b = half its ulp·(1−2⁻³⁰),
		// so a·b+c rounds to the float32 midpoint in float64 (ties to the
		// even neighbour above), while the exact value is just below it.
		c = math.Float32frombits(math.Float32bits(float32(1+r.Float64())) | 1)
		c = float32(math.Ldexp(float64(c), r.IntN(40)-20))
		half := (float64(math.Nextafter32(c, float32(math.Inf(1)))) - float64(c)) / 2
		want := check(float32(half*(1+0x1p-15)), 1-0x1p-15, c)
		if want != c {
			t.Fatalf("near-tie %g: got %g", c, want)
		}
	}
	if twice == 0 {
		t.Error("no operands on which float32(math.FMA) rounds twice: the near-ties do not test fma32")
	}
	t.Logf("%d multiply-adds of the fixture images and %d others exactly rounded; float32(math.FMA) rounds %d of them wrongly", pixels, checked-pixels, twice)
}
