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
// of 2 to 54 classes: within 4 float32 ulps everywhere, and equal to the
// bit for at least 90% of the values (the rest: SLEEF's expf, which is not
// float64's exp rounded). A sum in another order than torch's 8-lane
// reduction falls below that from 8 classes up.
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
			} else if u := approx.ULPs32(got, want[i]); !(u <= 4) {
				t.Errorf("%d classes, row %d, class %d: %v, torch %v (%v ulps)", c.Classes, row, i%c.Classes, got, want[i], u)
			}
		}
		t.Logf("%d classes: %d of %d values equal to the bit", c.Classes, exact, len(x))
		if float64(exact) < 0.9*float64(len(x)) {
			t.Errorf("%d classes: %d of %d values equal to torch's", c.Classes, exact, len(x))
		}
	}
}
