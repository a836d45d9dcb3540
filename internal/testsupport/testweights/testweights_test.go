package testweights

import "testing"

// Values printed by tools/retinanet/weights.py (numpy) for the same names:
//
//	/usr/bin/python3 -c "import sys; sys.path.insert(0,'tools/retinanet'); import weights; print(weights.tensor(NAME, SHAPE)[...]..."
func TestMatchesPython(t *testing.T) {
	cases := []struct {
		name  string
		shape []int
		idx   []int
		want  []float32
	}{
		{"backbone.body.conv1.weight", []int{64, 3, 7, 7}, []int{0, 1, 9407}, []float32{-0.006753257475793362, -0.09032780677080154, 0.01167615782469511}},
		{"backbone.body.layer1.0.bn3.weight", []int{256}, []int{0, 255}, []float32{0.4594757854938507, 0.3475823402404785}},
		{"backbone.body.bn1.running_var", []int{64}, []int{5}, []float32{1.2817111015319824}},
		{"head.classification_head.cls_logits.bias", []int{9}, []int{0, 8}, []float32{-3.046220541000366, -2.7928271293640137}},
	}
	// BasicBlock bodies damp bn2: weights.tensor(NAME, SHAPE, 0, True).
	basic := []struct {
		name  string
		shape []int
		idx   []int
		want  []float32
	}{
		{"backbone.body.layer1.0.bn2.weight", []int{64}, []int{0, 63}, []float32{0.3681110739707947, 0.5766913294792175}},
	}
	for _, c := range basic {
		v, err := Tensor(c.name, c.shape, 0, true)
		if err != nil {
			t.Fatal(err)
		}
		for j, i := range c.idx {
			if v[i] != c.want[j] {
				t.Errorf("basic %s[%d] = %v, python says %v", c.name, i, v[i], c.want[j])
			}
		}
	}
	for _, c := range cases {
		v, err := Tensor(c.name, c.shape, 0, false)
		if err != nil {
			t.Fatal(err)
		}
		for j, i := range c.idx {
			if v[i] != c.want[j] {
				t.Errorf("%s[%d] = %v (%#x), python says %v", c.name, i, v[i], v[i], c.want[j])
			}
		}
	}
}

func TestRanges(t *testing.T) {
	if _, _, err := Range("backbone.body.fc.foo", []int{3}, false); err == nil {
		t.Error("unknown tensor role accepted")
	}
	v, _ := Tensor("backbone.body.layer2.0.bn1.running_var", []int{1000}, 7, false)
	for _, x := range v {
		if !(x >= 0.5 && x < 1.5) { // NaN fails too
			t.Fatalf("running_var %v outside [0.5, 1.5)", x)
		}
	}
}
