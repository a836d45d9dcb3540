package testweights

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/canopy-hpc/canopy/infer/nn"
)

// Entry is one tensor of a state dict: its torchvision name and shape.
// Int64 marks BatchNorm2d's num_batches_tracked counters (shape []), which
// carry no weights.
type Entry struct {
	Name  string
	Shape []int
	Int64 bool
}

// resnets are the torchvision ResNets: blocks per layer, Bottleneck or not.
var resnets = map[string]struct {
	blocks     [4]int
	bottleneck bool
}{
	"resnet18":  {[4]int{2, 2, 2, 2}, false},
	"resnet34":  {[4]int{3, 4, 6, 3}, false},
	"resnet50":  {[4]int{3, 4, 6, 3}, true},
	"resnet101": {[4]int{3, 4, 23, 3}, true},
	"resnet152": {[4]int{3, 8, 36, 3}, true},
}

// StateDict lists, in state_dict() order, the tensors of torchvision's
// RetinaNet v1 built as
//
//	RetinaNet(BackboneWithFPN(arch(), return_layers={layer2: 0, layer3: 1, layer4: 2},
//	          in_channels_list=[C3, C4, C5], out_channels=fpn,
//	          extra_blocks=LastLevelP6P7(fpn, fpn)), num_classes=classes)
//
// with arch one of resnet18, resnet34, resnet50, resnet101, resnet152: the
// body up to layer4 (IntermediateLayerGetter drops avgpool and fc), the FPN
// in the current key layout (inner_blocks.{i}.0), P6/P7 from P5, and the
// v1 head (conv.{i}.0, no GroupNorm). batchNorm adds the
// num_batches_tracked counters that BatchNorm2d has (the state dict of a
// model built without pretrained backbone weights) and FrozenBatchNorm2d
// (DeepForest's hub models) has not. retinanet_resnet50_fpn(num_classes=1)
// is StateDict("resnet50", 1, 256, true).
func StateDict(arch string, classes, fpn int, batchNorm bool) ([]Entry, error) {
	r, ok := resnets[arch]
	if !ok {
		return nil, fmt.Errorf("testweights: unknown architecture %q (want resnet18, resnet34, resnet50, resnet101 or resnet152)", arch)
	}
	if classes < 1 || fpn < 1 {
		return nil, fmt.Errorf("testweights: %d classes, %d FPN channels", classes, fpn)
	}
	var out []Entry
	add := func(name string, shape ...int) { out = append(out, Entry{Name: name, Shape: shape}) }
	bn := func(p string, c int) {
		for _, leaf := range []string{"weight", "bias", "running_mean", "running_var"} {
			add(p+"."+leaf, c)
		}
		if batchNorm {
			out = append(out, Entry{Name: p + ".num_batches_tracked", Shape: []int{}, Int64: true})
		}
	}
	const body = "backbone.body."
	add(body+"conv1.weight", 64, 3, 7, 7)
	bn(body+"bn1", 64)
	exp := 1
	if r.bottleneck {
		exp = 4
	}
	in := 64
	var cin [4]int
	for L, n := range r.blocks {
		w := 64 << L
		for b := 0; b < n; b++ {
			p := body + "layer" + strconv.Itoa(L+1) + "." + strconv.Itoa(b)
			if r.bottleneck {
				add(p+".conv1.weight", w, in, 1, 1)
				bn(p+".bn1", w)
				add(p+".conv2.weight", w, w, 3, 3)
				bn(p+".bn2", w)
				add(p+".conv3.weight", w*exp, w, 1, 1)
				bn(p+".bn3", w*exp)
			} else {
				add(p+".conv1.weight", w, in, 3, 3)
				bn(p+".bn1", w)
				add(p+".conv2.weight", w, w, 3, 3)
				bn(p+".bn2", w)
			}
			// torchvision's _make_layer: a downsample when the first
			// block changes stride (layers 2-4) or width.
			if b == 0 && (L > 0 || in != w*exp) {
				add(p+".downsample.0.weight", w*exp, in, 1, 1)
				bn(p+".downsample.1", w*exp)
			}
			in = w * exp
		}
		cin[L] = in
	}
	const f = "backbone.fpn."
	for i := 0; i < 3; i++ {
		add(f+"inner_blocks."+strconv.Itoa(i)+".0.weight", fpn, cin[i+1], 1, 1)
		add(f+"inner_blocks."+strconv.Itoa(i)+".0.bias", fpn)
	}
	for i := 0; i < 3; i++ {
		add(f+"layer_blocks."+strconv.Itoa(i)+".0.weight", fpn, fpn, 3, 3)
		add(f+"layer_blocks."+strconv.Itoa(i)+".0.bias", fpn)
	}
	for _, p := range []string{"p6", "p7"} {
		add(f+"extra_blocks."+p+".weight", fpn, fpn, 3, 3)
		add(f+"extra_blocks."+p+".bias", fpn)
	}
	for _, h := range []struct {
		head, last string
		out        int
	}{{"classification_head", "cls_logits", 9 * classes}, {"regression_head", "bbox_reg", 36}} {
		p := "head." + h.head + "."
		for i := 0; i < 4; i++ {
			add(p+"conv."+strconv.Itoa(i)+".0.weight", fpn, fpn, 3, 3)
			add(p+"conv."+strconv.Itoa(i)+".0.bias", fpn)
		}
		add(p+h.last+".weight", h.out, fpn, 3, 3)
		add(p+h.last+".bias", h.out)
	}
	return out, nil
}

// Values fills every float tensor of a state dict with Tensor's values for
// seed (the Int64 counters are left out), as tools/retinanet/weights.py's
// fill() does: basic (BasicBlock damping) is true when the dict has no bn3.
func Values(entries []Entry, seed uint64) (map[string][]float32, error) {
	basic := true
	for _, e := range entries {
		if strings.HasSuffix(e.Name, ".bn3.weight") {
			basic = false
			break
		}
	}
	out := make(map[string][]float32, len(entries))
	for _, e := range entries {
		if e.Int64 {
			continue
		}
		v, err := Tensor(e.Name, e.Shape, seed, basic)
		if err != nil {
			return nil, err
		}
		out[e.Name] = v
	}
	return out, nil
}

// Weights is StateDict(arch, classes, fpn, false) filled with Values for
// seed, as a state dict the loaders take.
func Weights(arch string, classes, fpn int, seed uint64) (nn.Weights, error) {
	entries, err := StateDict(arch, classes, fpn, false)
	if err != nil {
		return nil, err
	}
	vals, err := Values(entries, seed)
	if err != nil {
		return nil, err
	}
	w := nn.Weights{}
	for _, e := range entries {
		w[e.Name] = nn.Tensor{Shape: e.Shape, Data: vals[e.Name]}
	}
	return w, nil
}
