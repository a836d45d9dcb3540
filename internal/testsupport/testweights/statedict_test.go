package testweights

import (
	"bufio"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/canopy-hpc/canopy/internal/testsupport/shareddata"
)

// The names, shapes and order match torchvision's own state dict as listed
// in shared/spec/retinanet_state_dict_keys.txt
// (retinanet_resnet50_fpn(weights=None, weights_backbone=None,
// num_classes=1).state_dict(), BatchNorm2d so with num_batches_tracked).
func TestStateDictMatchesTorchvision(t *testing.T) {
	const f = "../../../../shared/spec/retinanet_state_dict_keys.txt"
	shareddata.Need(t, f, "torchvision's state-dict key list")
	fh, err := os.Open(f)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	var want []string
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		want = append(want, line)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	got, err := StateDict("resnet50", 1, 256, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) || len(want) != 354 {
		t.Errorf("%d entries, torchvision has %d (the file says 354)", len(got), len(want))
	}
	total := 0
	for i := 0; i < len(got) && i < len(want); i++ {
		e := got[i]
		dtype := "float32"
		if e.Int64 {
			dtype = "int64"
		}
		shape := strings.ReplaceAll(fmt.Sprint(e.Shape), " ", ", ")
		if line := e.Name + "\t" + shape + "\t" + dtype; line != want[i] {
			t.Fatalf("entry %d: %q, torchvision %q", i, line, want[i])
		}
		n := 1 // a num_batches_tracked scalar counts as one element
		for _, d := range e.Shape {
			n *= d
		}
		total += n
	}
	if total != 32254242 {
		t.Errorf("%d elements, torchvision 32254242", total)
	}
	// Without BatchNorm2d counters (FrozenBatchNorm2d, the hub models).
	frozen, _ := StateDict("resnet50", 1, 256, false)
	if len(frozen) != 354-53 {
		t.Errorf("FrozenBatchNorm2d dict has %d entries, want %d", len(frozen), 354-53)
	}
}

func TestStateDictResNet18(t *testing.T) {
	got, err := StateDict("resnet18", 2, 64, false)
	if err != nil {
		t.Fatal(err)
	}
	shapes := map[string][]int{}
	for _, e := range got {
		if _, dup := shapes[e.Name]; dup {
			t.Fatalf("duplicate %s", e.Name)
		}
		shapes[e.Name] = e.Shape
	}
	for name, want := range map[string][]int{
		"backbone.body.layer1.1.conv2.weight":        {64, 64, 3, 3},
		"backbone.body.layer2.0.conv1.weight":        {128, 64, 3, 3},
		"backbone.body.layer2.0.downsample.0.weight": {128, 64, 1, 1},
		"backbone.body.layer4.1.bn2.running_var":     {512},
		"backbone.fpn.inner_blocks.0.0.weight":       {64, 128, 1, 1},
		"backbone.fpn.inner_blocks.2.0.weight":       {64, 512, 1, 1},
		"backbone.fpn.extra_blocks.p6.weight":        {64, 64, 3, 3},
		"head.classification_head.cls_logits.weight": {18, 64, 3, 3},
		"head.regression_head.bbox_reg.bias":         {36},
	} {
		if fmt.Sprint(shapes[name]) != fmt.Sprint(want) {
			t.Errorf("%s: %v, want %v", name, shapes[name], want)
		}
	}
	for _, absent := range []string{"backbone.body.layer1.0.downsample.0.weight", "backbone.body.layer1.0.conv3.weight", "backbone.body.layer2.2.conv1.weight"} {
		if _, ok := shapes[absent]; ok {
			t.Errorf("%s present", absent)
		}
	}
	v, err := Values(got, 3)
	if err != nil {
		t.Fatal(err)
	}
	// BasicBlock bodies damp bn2 (as weights.py's fill does).
	want, _ := Tensor("backbone.body.layer1.0.bn2.weight", []int{64}, 3, true)
	if len(v) != len(got) || v["backbone.body.layer1.0.bn2.weight"][5] != want[5] || want[5] >= 0.6 {
		t.Errorf("Values: %d tensors, bn2 %v vs %v", len(v), v["backbone.body.layer1.0.bn2.weight"][5], want[5])
	}
	if _, err := StateDict("vgg16", 1, 256, false); err == nil {
		t.Error("vgg16 accepted")
	}
}
