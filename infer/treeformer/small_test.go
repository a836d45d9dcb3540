package treeformer

import (
	"testing"

	"github.com/canopy-hpc/canopy/infer/tile"
	"github.com/canopy-hpc/canopy/internal/testsupport/approx"
	"github.com/canopy-hpc/canopy/internal/testsupport/testfile"
	"github.com/canopy-hpc/canopy/internal/testsupport/testweights"
	"github.com/canopy-hpc/canopy/internal/testsupport/tftol"
)

// small is the reduced-depth fixture's architecture.
var small = Tiny

type sampled struct {
	Shape  []int
	Stride int
	B64    string
	Sum    float64
	Absmax float64
}

type smallFixture struct {
	Meta    map[string]any
	Tensors map[string]sampled
	Density struct {
		Shape  [2]int
		Padded [2]int
		B64    string
	}
	Points struct {
		XY     []float64
		Scores []float64
	}
}

// imageOf is an Image of HWC bytes, k/255 in float32.
func imageOf(rgb []uint8, h, w int) Image {
	im := Image{W: w, H: h, Pix: make([]float32, 3*h*w)}
	for i := 0; i < h*w; i++ {
		for c := 0; c < 3; c++ {
			im.Pix[c*h*w+i] = float32(rgb[3*i+c]) / 255
		}
	}
	return im
}

func whole(im Image) tile.Window { return tile.Window{W: im.W, H: im.H} }

func xyPoints(xy, scores []float64) []Point {
	out := make([]Point, len(scores))
	for i := range out {
		out[i] = Point{X: xy[2*i], Y: xy[2*i+1], Score: float32(scores[i])}
	}
	return out
}

// TestSmallStages runs the one-block-per-stage model (weights regenerated
// by testweights, the twin of tools/treeformer/tfweights.py) on the seeded
// 150×200 image of testdata/small.json: every stage's sampled values
// within the derived tolerance, the density map too, and the same points
// as DeepForest's forward.
func TestSmallStages(t *testing.T) {
	var fx smallFixture
	testfile.ReadJSON(t, "testdata/small.json", &fx)
	m, err := New(seeded(t, small), small)
	if err != nil {
		t.Fatal(err)
	}
	h, w := 150, 200
	im := imageOf(testweights.Bytes("treeformer-small-input", h*w*3, 46), h, w)
	tol := stageTol(small)
	r := NewRunner(m, 2)
	seen := map[string]bool{}
	r.Trace = func(name string, shape []int, v []float32) {
		ref, ok := fx.Tensors[name]
		if !ok {
			return
		}
		seen[name] = true
		if len(shape) != len(ref.Shape) {
			t.Fatalf("%s: shape %v, DeepForest %v", name, shape, ref.Shape)
		}
		for i := range shape {
			if shape[i] != ref.Shape[i] {
				t.Fatalf("%s: shape %v, DeepForest %v", name, shape, ref.Shape)
			}
		}
		if d := relErr(v, f32s(t, ref.B64), ref.Stride); approx.Far(d, tol) {
			t.Errorf("%s: relative error %.3g > %.3g", name, d, tol)
		}
	}
	d, err := r.Forward(im, whole(im))
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) != len(fx.Tensors) {
		t.Fatalf("compared %d of the fixture's %d tensors", len(seen), len(fx.Tensors))
	}
	if d.H != fx.Density.Shape[0] || d.W != fx.Density.Shape[1] || d.PadH != fx.Density.Padded[0] || d.PadW != fx.Density.Padded[1] {
		t.Fatalf("density %dx%d padded %dx%d, DeepForest %v padded %v", d.H, d.W, d.PadH, d.PadW, fx.Density.Shape, fx.Density.Padded)
	}
	if e := relErr(d.Map, f32s(t, fx.Density.B64), 1); approx.Far(e, tol) {
		t.Fatalf("density map: relative error %.3g > %.3g", e, tol)
	}
	want := xyPoints(fx.Points.XY, fx.Points.Scores)
	got := WindowPoints(d, DefaultPeaks)
	// a score is a map value over the map's maximum (scoreTol)
	if n, extra, _ := matchPoints(got, want, tftol.ScoreTol(tol)); n != len(want) || extra != 0 || len(want) == 0 {
		t.Fatalf("%d of DeepForest's %d points matched, %d extra: %v vs %v", n, len(want), extra, got, want)
	}
}
