package crop

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/canopy-hpc/canopy/infer"
	"github.com/canopy-hpc/canopy/infer/imagefile"
	"github.com/canopy-hpc/canopy/internal/testsupport/torchckpt"
)

// planted writes the parity crop model in its three forms (Lightning
// checkpoint, bare state dict, hub folder) with the given tensors, and
// the labels the state dict needs.
func planted(t *testing.T, given map[string][]float32) (torchckpt.CropFiles, map[string]int) {
	t.Helper()
	pf, err := torchckpt.CropPlanted("../..", t.TempDir(), given)
	if err != nil {
		t.Fatal(err)
	}
	return pf, map[string]int{"Alive": 0, "Dead": 1, "Snag": 2}
}

func classes(t *testing.T) int {
	t.Helper()
	k, err := torchckpt.CropClasses("../..")
	if err != nil || k < 2 {
		t.Fatalf("the parity model's classes: %d %v", k, err)
	}
	return k
}

// TestNonFiniteWeightsRefused (issue 42, F2): a NaN in fc.bias and a -Inf
// in bn1.bias, in each file form a crop model comes in, are a model
// error (exit 4) naming the first such tensor as the file stores it, its
// index and value, and how many tensors hold one (the detector's check,
// nn.Weights' CheckFinite); it loaded and gave class 0, score NaN, to
// every crop.
func TestNonFiniteWeightsRefused(t *testing.T) {
	k := classes(t)
	bias := make([]float32, k)
	bias[1] = float32(math.NaN())
	bn := make([]float32, 64) // ResNet-50's bn1: 64 channels
	bn[3] = float32(math.Inf(-1))
	for _, c := range []struct {
		given map[string][]float32
		want  string
	}{
		{map[string][]float32{"fc.bias": bias}, "fc.bias holds NaN at index 1 (1 tensors hold NaN or Inf)"},
		{map[string][]float32{"fc.bias": bias, "bn1.bias": bn}, "bn1.bias holds -Inf at index 3 (2 tensors hold NaN or Inf)"},
	} {
		pf, labels := planted(t, c.given)
		for _, f := range []struct {
			path string
			opts Options
		}{{pf.Ckpt, Options{}}, {pf.PT, Options{LabelDict: labels}}, {pf.Hub, Options{}}} {
			_, err := Load(f.path, f.opts)
			if err == nil || !errors.Is(err, infer.ErrModel) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), f.path) {
				t.Errorf("%s: %v, want a model error naming %s and %q", f.path, err, f.path, c.want)
			}
		}
	}
}

// TestNonFiniteLogitsRefused (issue 42, F2): finite weights whose logits
// overflow float32 (fc.weight all 3e38: every logit +Inf, the softmax
// NaN) are refused at run time, a model error naming the crop, by
// Classify and by Run, in each file form; the same crops through the
// ordinary weights are finite.
func TestNonFiniteLogitsRefused(t *testing.T) {
	k := classes(t)
	w := make([]float32, k*2048) // ResNet-50's fc: 2048 features
	for i := range w {
		w[i] = 3e38
	}
	pf, labels := planted(t, map[string][]float32{"fc.weight": w})
	good, _ := planted(t, nil)
	crops := make([]imagefile.Image, 3)
	for i := range crops {
		im := imagefile.Image{W: 40 + i, H: 30, Pix: make([]float32, 3*(40+i)*30)}
		for j := range im.Pix {
			im.Pix[j] = float32((j*7+i)%255) / 255
		}
		crops[i] = im
	}
	ok, err := Load(good.Ckpt, Options{})
	if err != nil {
		t.Fatal(err)
	}
	out, err := ok.Classify(context.Background(), crops, 2)
	if err != nil || checkFinite(out) != nil {
		t.Fatalf("ordinary weights: %v", err)
	}
	for _, f := range []struct {
		path string
		opts Options
	}{{pf.Ckpt, Options{}}, {pf.PT, Options{LabelDict: labels}}, {pf.Hub, Options{}}} {
		m, err := Load(f.path, f.opts)
		if err != nil {
			t.Fatalf("%s: finite weights refused at load: %v", f.path, err)
		}
		out, err := m.Classify(context.Background(), crops, 2)
		var ne *NonFiniteError
		if !errors.As(err, &ne) || !errors.Is(err, infer.ErrModel) || out != nil || ne.Crop != 0 || !strings.Contains(err.Error(), "for crop 0 hold") {
			t.Errorf("%s Classify: %v (%d outputs), want a NonFiniteError for crop 0", f.path, err, len(out))
		}
		x, err := m.Transform.Apply(crops[1].Pix, crops[1].W, crops[1].H)
		if err != nil {
			t.Fatal(err)
		}
		out, err = NewRunner(m.Net(), 1).Run(context.Background(), [][]float32{x}, m.Transform.Size)
		if !errors.As(err, &ne) || !errors.Is(err, infer.ErrModel) || out != nil {
			t.Errorf("%s Run: %v (%d outputs), want a NonFiniteError", f.path, err, len(out))
		}
	}
}
