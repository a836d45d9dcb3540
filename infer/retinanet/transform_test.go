package retinanet

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"sort"
	"testing"
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

func TestParseResizeRule(t *testing.T) {
	for i, n := range ResizeRules {
		r, err := ParseResizeRule(n)
		if err != nil || int(r) != i || r.String() != n {
			t.Errorf("ParseResizeRule(%q) = %v, %v", n, r, err)
		}
	}
	if _, err := ParseResizeRule("torchvision-0.14"); err == nil {
		t.Error("an unknown rule is accepted")
	}
	if DefaultOptions().Resize != ResizeTorchvision {
		t.Error("the default rule is not torchvision ≥ 0.16's")
	}
}

// TestBlendFixture: canopy's resized tensor (normalize, bilinear resize,
// zero padding) is bit for bit the one torch computes with
// ATEN_CPU_CAPABILITY=default (ATen's scalar kernels), on three images at
// 800/1333 (testdata/golden/retinanet/blend.json, tools/retinanet/blend.py).
// torch's AVX2 kernels differ from it, and from each other by thread count,
// by the element counts the fixture records (logged here).
func TestBlendFixture(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "testdata", "golden", "retinanet", "blend.json"))
	if err != nil {
		t.Fatal(err)
	}
	var g struct {
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
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	if s := g.Settings["default-2t"]; s.CPUCapability != "DEFAULT" {
		t.Fatalf("blend.json: the default-2t setting ran with capability %q", s.CPUCapability)
	}
	if len(g.Images) != 3 {
		t.Fatalf("blend.json has %d images, want 3", len(g.Images))
	}
	o := DefaultOptions()
	o.MinSize, o.MaxSize = g.MinSize, g.MaxSize
	e := newEngine(1)
	for _, gi := range g.Images {
		img, sum := forestSet.image(t, pathIndex(t, gi.Path, forestSet))
		if sum != gi.SHA256PNG {
			t.Fatalf("%s: the generator draws other bytes than the fixture's", gi.Path)
		}
		e.reuseFor(img.H, img.W)
		x, rh, rw := normalizeResizePad(e, img, o)
		if [2]int{rh, rw} != gi.Resized || len(x.d) != gi.Elements {
			t.Fatalf("%s: resized %dx%d (%d elements), torch %v (%d)", gi.Path, rh, rw, len(x.d), gi.Resized, gi.Elements)
		}
		raw := make([]byte, 4*len(x.d))
		for i, v := range x.d {
			binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(v))
		}
		h := sha256.Sum256(raw)
		got := hex.EncodeToString(h[:])
		var same []string
		for name, want := range gi.SHA256 {
			if got == want {
				same = append(same, name)
			}
		}
		sort.Strings(same)
		if got != gi.SHA256["default-2t"] {
			t.Errorf("%s: canopy's resized tensor is not torch's ATEN_CPU_CAPABILITY=default one (equal to %v)", gi.Path, same)
		}
		e.put(x)
		t.Logf("%s -> %v: canopy = torch %v; torch avx2-2t/default-2t differ in %d of %d elements (max %.2g), avx2-1t/default-2t in %d (max %.2g)",
			gi.Path, gi.Resized, same, gi.Differ["avx2-2t/default-2t"].Elements, gi.Elements, gi.Differ["avx2-2t/default-2t"].MaxAbs,
			gi.Differ["avx2-1t/default-2t"].Elements, gi.Differ["avx2-1t/default-2t"].MaxAbs)
	}
}
