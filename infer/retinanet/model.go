// Package retinanet is canopy's native torchvision RetinaNet (v1, ResNet-FPN)
// for the CPU: the inference path DeepForest runs, reproduced from
// torchvision's semantics (../shared/spec/semantics.md §1) with one
// deliberate difference: every image is padded on its own, so detections
// never depend on which images share a batch, and every reduction has a fixed
// order, so they are byte-identical for any rank count, thread count or batch
// size.
//
// The ResNet body is infer/resnet's, the layers infer/nn's; the network
// runs on the CPU engine (infer/cpu) or the GPU engine (gpu_*.go: the
// runner, its slots and cuDNN options, the detector, CUDA graphs, the
// device transform, postprocess and losses).
//
// The gpu_*.go files carry no build tag and stay in the default build on
// purpose: they drive a cuda.Device through infer/gpu's engine and never
// call CUDA themselves, so the host-shim tests (infer/cuda/hostkern, the
// kernels compiled for the CPU) compile and run them on every machine;
// only the device behind -tags cuda (infer/cuda) needs the driver.
package retinanet

import (
	"fmt"
	"strconv"

	"github.com/canopy-hpc/canopy/infer/cpu"
	"github.com/canopy-hpc/canopy/infer/nn"
	"github.com/canopy-hpc/canopy/infer/resnet"
)

// NumAnchors is A, the anchors per location of the default generator
// (3 aspect ratios × 3 sizes).
const NumAnchors = 9

// Options are the constructor arguments of torchvision's RetinaNet that
// change inference; DefaultOptions gives DeepForest's.
type Options struct {
	MinSize, MaxSize    int
	ScoreThresh         float32
	NMSThresh           float64
	DetectionsPerImg    int
	TopkCandidates      int
	ImageMean, ImageStd [3]float32
	// Resize is the size rule of the transform (the zero value is
	// torchvision ≥ 0.16's).
	Resize ResizeRule
	// Blend is the bilinear resize's rounding (the zero value is torch's
	// AVX2 multi-thread FMA blend).
	Blend BlendRule
}

// DefaultOptions are DeepForest's (config.yaml) on torchvision's defaults.
func DefaultOptions() Options {
	return Options{
		MinSize: 800, MaxSize: 1333,
		ScoreThresh: 0.1, NMSThresh: 0.05,
		DetectionsPerImg: 300, TopkCandidates: 1000,
		ImageMean: [3]float32{0.485, 0.456, 0.406},
		ImageStd:  [3]float32{0.229, 0.224, 0.225},
	}
}

// Model is a loaded RetinaNet.
type Model struct {
	Arch    string // e.g. "resnet50-fpn256", "resnet18-fpn64"
	Classes int
	FPN     int
	Opt     Options

	body   *resnet.Body
	inner  [3]*nn.Conv
	layer  [3]*nn.Conv
	p6, p7 *nn.Conv
	clsT   [4]*nn.Conv
	regT   [4]*nn.Conv
	cls    *nn.Conv
	reg    *nn.Conv

	cpu cpu.Filters // the CPU engine's transformed filters
}

// CPUFilterBytes is the memory the CPU detector (NewDetector) will add
// for its transformed Winograd filters, net of the 3×3 weights it drops
// (0 once they are made): a job's memory estimate adds it to the process's
// resident memory, measured before any runner exists.
func (m *Model) CPUFilterBytes() int64 { return m.cpu.Bytes(m.Convs()) }

// prepareCPU makes the model's Winograd filters once (cpu.Filters.Prepare):
// with release (the CPU detector) the 3×3 weights they replace are
// dropped. The first runner decides: a later NewDetector on a model a
// Runner prepared keeps the weights.
func (m *Model) prepareCPU(release bool) { m.cpu.Prepare(m.Convs(), release) }

// Released reports whether the CPU detector dropped the 3×3 weights that
// its Winograd filters replace: the model then runs on the CPU only.
func (m *Model) Released() bool { return m.cpu.Released() }

// Convs lists every convolution of the network: the body's
// (resnet.Body.Convs), the FPN's (inner, layer, P6, P7), the heads' (the
// classification subnet's, the regression subnet's, cls_logits, bbox_reg).
func (m *Model) Convs() []*nn.Conv {
	cs := m.body.Convs()
	cs = append(cs, m.inner[:]...)
	cs = append(cs, m.layer[:]...)
	cs = append(cs, m.p6, m.p7)
	cs = append(cs, m.clsT[:]...)
	cs = append(cs, m.regT[:]...)
	return append(cs, m.cls, m.reg)
}

// New builds the network from a normalized state dict (Normalize). The body's
// depth (Bottleneck or BasicBlock, blocks per layer), the FPN width and the
// class count come from the tensors' names and shapes; anything missing,
// misshapen or left over is an error.
func New(w nn.Weights, opt Options) (*Model, error) {
	names := make([]string, 0, len(w))
	for k := range w {
		names = append(names, k)
	}
	if a := ForeignArchitecture(names); a != "" {
		return nil, fmt.Errorf("retinanet: the state dict is %s, not a RetinaNet: canopy runs DeepForest's RetinaNet only", a)
	}
	t := nn.NewTake(w, "retinanet: the weights do not fit a torchvision RetinaNet")
	m := &Model{Opt: opt}
	const body = "backbone.body."
	if !t.Has(body + "conv1.weight") {
		return nil, fmt.Errorf("retinanet: no %sconv1.weight: not a torchvision ResNet-FPN RetinaNet state dict", body)
	}
	b, err := resnet.Load(t, body)
	if err != nil {
		return nil, fmt.Errorf("retinanet: %w", err)
	}
	m.body = b
	name := b.Arch
	const fpn = "backbone.fpn."
	s := t.Shape(fpn + "inner_blocks.0.0.weight")
	if len(s) != 4 {
		return nil, fmt.Errorf("retinanet: no %sinner_blocks.0.0.weight (nor the old inner_blocks.0.weight)", fpn)
	}
	m.FPN = s[0]
	cin := [3]int{b.Channels[1], b.Channels[2], b.Channels[3]}
	for i := 0; i < 3; i++ {
		m.inner[i] = nn.LoadConv(t, fpn+"inner_blocks."+strconv.Itoa(i)+".0", "", m.FPN, cin[i], 1, 1, 0)
		m.layer[i] = nn.LoadConv(t, fpn+"layer_blocks."+strconv.Itoa(i)+".0", "", m.FPN, m.FPN, 3, 1, 1)
	}
	if ps := t.Shape(fpn + "extra_blocks.p6.weight"); len(ps) == 4 && ps[1] != m.FPN {
		return nil, fmt.Errorf("retinanet: %sextra_blocks.p6 takes %d channels: a RetinaNet v2 (P6 from C5) is not supported, only v1 (P6 from P5)", fpn, ps[1])
	}
	m.p6 = nn.LoadConv(t, fpn+"extra_blocks.p6", "", m.FPN, m.FPN, 3, 2, 1)
	m.p7 = nn.LoadConv(t, fpn+"extra_blocks.p7", "", m.FPN, m.FPN, 3, 2, 1)
	const ch, rh = "head.classification_head.", "head.regression_head."
	if t.Has(ch+"conv.0.1.weight") || t.Has(ch+"conv.0.1.bias") {
		return nil, fmt.Errorf("retinanet: the head has GroupNorm (RetinaNet v2); only v1 is supported")
	}
	for i := 0; i < 4; i++ {
		m.clsT[i] = nn.LoadConv(t, ch+"conv."+strconv.Itoa(i)+".0", "", m.FPN, m.FPN, 3, 1, 1)
		m.regT[i] = nn.LoadConv(t, rh+"conv."+strconv.Itoa(i)+".0", "", m.FPN, m.FPN, 3, 1, 1)
	}
	cs := t.Shape(ch + "cls_logits.weight")
	if len(cs) != 4 || cs[0]%NumAnchors != 0 || cs[0] == 0 {
		return nil, fmt.Errorf("retinanet: %scls_logits.weight has shape %v, want [%d·classes, %d, 3, 3]", ch, cs, NumAnchors, m.FPN)
	}
	m.Classes = cs[0] / NumAnchors
	m.cls = nn.LoadConv(t, ch+"cls_logits", "", NumAnchors*m.Classes, m.FPN, 3, 1, 1)
	m.reg = nn.LoadConv(t, rh+"bbox_reg", "", NumAnchors*4, m.FPN, 3, 1, 1)
	if err := t.Err(); err != nil {
		return nil, err
	}
	m.Arch = fmt.Sprintf("%s-fpn%d", name, m.FPN)
	return m, nil
}
