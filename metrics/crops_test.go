package metrics

import (
	"encoding/json"
	"math"
	"os"
	"testing"

	"github.com/canopy-hpc/canopy/internal/testsupport/approx"
)

// cropFixture is testdata/croptable.json (tools/cropmodel/validate.py):
// DeepForest 2.1.0's CropModel validated by Lightning on one CPU device.
type cropFixture struct {
	Peer      map[string]any
	LabelDict map[string]int `json:"label_dict"`
	BatchSize int            `json:"batch_size"`
	Samples   [][2]any
	Logits    []uint32
	TableF32  map[string]uint32 `json:"table_f32"`
	Cases     []struct {
		Classes        int
		Preds, Targets []int32
		ClassAccuracy  []uint32 `json:"class_accuracy"`
		Accuracy       uint32
		Precision      uint32
		MacroPrecision uint32 `json:"macro_precision"`
		Logits         []uint32
		LogitTargets   []int32 `json:"logit_targets"`
		ValLoss        uint32  `json:"val_loss"`
	}
	LogSoftmax []struct {
		Classes    int
		Logits     []uint32
		LogSoftmax []uint32 `json:"log_softmax"`
	} `json:"log_softmax"`
}

func loadCropFixture(t *testing.T) (cropFixture, []float32, []int32, []string) {
	t.Helper()
	b, err := os.ReadFile("testdata/croptable.json")
	if err != nil {
		t.Fatal(err)
	}
	var fx cropFixture
	if err := json.Unmarshal(b, &fx); err != nil {
		t.Fatal(err)
	}
	logits := make([]float32, len(fx.Logits))
	for i, u := range fx.Logits {
		logits[i] = math.Float32frombits(u)
	}
	targets := make([]int32, len(fx.Samples))
	for i, s := range fx.Samples {
		targets[i] = int32(s[1].(float64))
	}
	names := make([]string, len(fx.LabelDict))
	for k, v := range fx.LabelDict {
		names[v] = k
	}
	return fx, logits, targets, names
}

// TestCropTableDeepForest: torch's own logits of DeepForest's validation
// crops give Lightning's table (torchmetrics 1.9, Lightning 2.6) to the
// bit: per-class accuracy with a class absent from the targets, micro
// accuracy and precision, macro precision, and val_loss as Lightning
// averages batches of 4 (a last batch of 3).
func TestCropTableDeepForest(t *testing.T) {
	fx, logits, targets, names := loadCropFixture(t)
	classes := len(names)
	if classes != 4 || len(targets) < 10 || len(targets)%fx.BatchSize == 0 {
		t.Fatalf("fixture: %d classes, %d crops, batch %d: want 4 classes and a partial last batch", classes, len(targets), fx.BatchSize)
	}
	got, err := ComputeCropTable(logits, classes, targets, fx.BatchSize)
	if err != nil {
		t.Fatal(err)
	}
	check := func(key string, v float32) {
		t.Helper()
		w, ok := fx.TableF32[key]
		if !ok {
			t.Errorf("%s: not in DeepForest's table", key)
			return
		}
		if math.Float32bits(v) != w {
			t.Errorf("%s: %v (%#08x), Lightning %v (%#08x)", key, v, math.Float32bits(v), math.Float32frombits(w), w)
		}
	}
	for c, name := range names {
		check("Class Accuracy_"+name, got.ClassAccuracy[c])
	}
	check("Micro-Average Accuracy", got.Accuracy)
	check("Micro-Average Precision", got.Precision)
	check("Macro-Average Precision", got.MacroPrecision)
	check("val_loss", got.ValLoss)
	if len(fx.TableF32) != classes+4 {
		t.Errorf("DeepForest's table has %d keys, canopy's %d", len(fx.TableF32), classes+4)
	}
}

func f32s(u []uint32) []float32 {
	out := make([]float32, len(u))
	for i, v := range u {
		out[i] = math.Float32frombits(v)
	}
	return out
}

// TestCropTableCases: DeepForest's MetricCollection on crafted predictions
// (classes absent from the targets, from the predictions, from both; 9
// classes, so torch.sum's 8-lane path) and Lightning's val_loss over
// seeded logits in batches of 4 (a partial last batch), to the bit.
// The predictions reach ComputeCropTable as one-hot logits.
func TestCropTableCases(t *testing.T) {
	fx, _, _, _ := loadCropFixture(t)
	if len(fx.Cases) < 5 {
		t.Fatalf("%d cases", len(fx.Cases))
	}
	for k, c := range fx.Cases {
		oneHot := make([]float32, len(c.Preds)*c.Classes)
		for i, p := range c.Preds {
			oneHot[i*c.Classes+int(p)] = 1
		}
		got, err := ComputeCropTable(oneHot, c.Classes, c.Targets, 4)
		if err != nil {
			t.Fatal(err)
		}
		eq := func(what string, v float32, w uint32) {
			if math.Float32bits(v) != w {
				t.Errorf("case %d (%d classes): %s %v, torchmetrics %v", k, c.Classes, what, v, math.Float32frombits(w))
			}
		}
		for i, w := range c.ClassAccuracy {
			eq("Class Accuracy "+string(rune('0'+i)), got.ClassAccuracy[i], w)
		}
		eq("Accuracy", got.Accuracy, c.Accuracy)
		eq("Precision", got.Precision, c.Precision)
		eq("Macro Precision", got.MacroPrecision, c.MacroPrecision)
		lt, err := ComputeCropTable(f32s(c.Logits), c.Classes, c.LogitTargets, 4)
		if err != nil {
			t.Fatal(err)
		}
		eq("val_loss", lt.ValLoss, c.ValLoss)
	}
}

// TestLogSoftmaxTorch: logSoftmaxAt against torch's F.log_softmax on rows
// of 2 to 54 classes: equal to the bit for at least 90% of the values (the
// rest: SLEEF's expf, which is not float64's exp rounded; a sum in another
// order than torch's 8-lane reduction falls below that from 8 classes up),
// and everywhere within the derived bound (logSoftmaxBound; it replaces a
// fixed 4 ulps).
func TestLogSoftmaxTorch(t *testing.T) {
	fx, _, _, _ := loadCropFixture(t)
	if len(fx.LogSoftmax) < 5 {
		t.Fatalf("%d log_softmax cases", len(fx.LogSoftmax))
	}
	for _, c := range fx.LogSoftmax {
		x, want := f32s(c.Logits), f32s(c.LogSoftmax)
		if len(x) != len(want) || len(x)%c.Classes != 0 {
			t.Fatalf("%d classes: %d logits, %d values", c.Classes, len(x), len(want))
		}
		exact := 0
		for i := range x {
			row := i / c.Classes
			got := logSoftmaxAt(x[row*c.Classes:(row+1)*c.Classes], i%c.Classes)
			if got == want[i] {
				exact++
			} else if lim := logSoftmaxBound(x[row*c.Classes:(row+1)*c.Classes], got); approx.Far(approx.Diff(float64(got), float64(want[i])), lim) {
				t.Errorf("%d classes, row %d, class %d: %v, torch %v (|Δ| %.3g, bound %.3g)", c.Classes, row, i%c.Classes, got, want[i],
					approx.Diff(float64(got), float64(want[i])), lim)
			}
		}
		t.Logf("%d classes: %d of %d values equal to the bit", c.Classes, exact, len(x))
		if float64(exact) < 0.9*float64(len(x)) {
			t.Errorf("%d classes: %d of %d values equal to torch's", c.Classes, exact, len(x))
		}
	}
}

// logSoftmaxBound is how far canopy's log_softmax value v of a row of C
// logits may be from torch's. Both compute (x_y − m) − log Σ exp(x_j − m)
// in float32 with the same x_j − m (the same bits) and the same 8-lane
// sum order; the exponentials differ (SLEEF's expf within 1 ulp, 2u
// relative, u = 2⁻²⁴; canopy's float64 exp rounded, u), so each side's S
// is within its exp error plus γ_{C−1} (C−1 additions of positive terms)
// of the exact sum: |ΔS|/S ≤ 3u + 2γ_{C−1}, which log turns into an
// absolute |ΔL| ≤ 3u + 2γ_{C−1} (d log S = dS/S); each side rounds L
// (torch's logf within 1 ulp, canopy ½ ulp: 3u·|L|) and the final
// subtraction (½ ulp of v each).
func logSoftmaxBound(row []float32, v float32) float64 {
	m := row[0]
	for _, x := range row[1:] {
		m = max(m, x)
	}
	var s float64
	for _, x := range row {
		s += math.Exp(float64(x - m))
	}
	L := math.Log(s)
	ulp := float64(math.Nextafter32(float32(math.Abs(float64(v))), float32(math.Inf(1))) - float32(math.Abs(float64(v))))
	C := len(row)
	return 3*approx.U32 + 2*approx.Gamma32(C-1) + 3*approx.U32*L + ulp
}
