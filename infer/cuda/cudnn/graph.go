package cudnn

/*
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"runtime"
	"strings"
	"unsafe"
)

// Math is a convolution's arithmetic.
type Math int

const (
	// FP32 is FP32 in and out without tensor cores (engines noted
	// TENSOR_CORE are filtered out), as torchvision with allow_tf32 off.
	FP32 Math = iota
	// TF32 is FP32 in and out with TF32 tensor cores allowed (PyTorch's
	// default for convolutions).
	TF32
	// BF16 is BF16 activations and weights with FP32 accumulation.
	BF16
)

func (m Math) String() string { return [...]string{"fp32", "tf32", "bf16"}[m] }

// Conv is one fused convolution layer over a batch, all tensors NHWC:
// Y = act(conv(X, W) + B [+ R]) with X [N,H,W,C], W [M,KH,KW,C] (KRSC),
// B [M], R and Y [N,OH,OW,M]. With BF16, X, W and R are BF16, B is FP32 and
// Y is BF16 unless OutFP32 (the heads' last convolutions).
type Conv struct {
	N, C, H, W, M, KH, KW, Stride, Pad int
	Relu, Residual                     bool
	Math                               Math
	OutFP32                            bool
}

// Out is the output's spatial size.
func (c Conv) Out() (oh, ow int) {
	return (c.H+2*c.Pad-c.KH)/c.Stride + 1, (c.W+2*c.Pad-c.KW)/c.Stride + 1
}

// Key names the shape, batch and arithmetic: a plan file's key per layer.
func (c Conv) Key() string {
	k := fmt.Sprintf("n%d c%d h%d w%d m%d k%dx%d s%d p%d %s", c.N, c.C, c.H, c.W, c.M, c.KH, c.KW, c.Stride, c.Pad, c.Math)
	if c.Relu {
		k += " relu"
	}
	if c.Residual {
		k += " res"
	}
	if c.OutFP32 {
		k += " outf32"
	}
	return k
}

// The tensors' unique ids in the variant pack.
const (
	uidX = 1 + iota
	uidW
	uidB
	uidR
	uidY
)

// Alignment is the byte alignment canopy declares for every tensor (its
// allocations are 256-byte aligned on a GPU, 16 on the host shim).
const Alignment = 16

// Knob is one knob choice of an engine configuration.
type Knob struct {
	Type  int   `json:"type"`
	Value int64 `json:"value"`
}

// Engine pins an engine: cuDNN's global index and its knob choices.
type Engine struct {
	Index int64  `json:"index"`
	Knobs []Knob `json:"knobs,omitempty"`
}

func (e Engine) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "eng%d", e.Index)
	for _, k := range e.Knobs {
		fmt.Fprintf(&b, " k%d=%d", k.Type, k.Value)
	}
	return b.String()
}

// Eligible is the determinism filter: an engine noted NONDETERMINISTIC is
// out; so is one whose knobs split a reduction (split-K, stream-K,
// split-P: a knob of those types above 0, and for the slice counts above
// 1, one slice being no split); and for FP32, an engine noted
// TENSOR_CORE (on FP32 data it computes in TF32). It returns why not.
func Eligible(m Math, notes []int, knobs []Knob) (bool, string) {
	for _, n := range notes {
		if n == noteNondeterministic {
			return false, "NONDETERMINISTIC"
		}
		if n == noteTensorCore && m == FP32 {
			return false, "tensor cores (TF32) in fp32 mode"
		}
	}
	for _, k := range knobs {
		switch k.Type {
		case KnobSplitK, KnobSplitKBuf, KnobStreamK:
			if k.Value != 0 {
				return false, fmt.Sprintf("split reduction (knob %d = %d)", k.Type, k.Value)
			}
		case KnobSplitKSlc, KnobSplitPSlc:
			if k.Value > 1 {
				return false, fmt.Sprintf("split reduction (knob %d = %d)", k.Type, k.Value)
			}
		}
	}
	return true, ""
}

// desc is a backend descriptor; a builder owns the ones it makes.
type desc = C.cdn_desc

type builder struct {
	l     *Lib
	made  []desc
	err   error
	where string
}

func (b *builder) fail(call string, s C.cdn_status) bool {
	if b.err != nil {
		return true
	}
	if err := b.l.check(call, s); err != nil {
		b.err = fmt.Errorf("%s: %w", b.where, err)
		return true
	}
	return false
}

func (b *builder) create(t int) desc {
	var d desc
	if b.err != nil {
		return nil
	}
	if b.fail("cudnnBackendCreateDescriptor", C.cdn_create_desc(b.l.c, C.int(t), &d)) {
		return nil
	}
	b.made = append(b.made, d)
	return d
}

func (b *builder) set(d desc, name, typ int, n int, v unsafe.Pointer) {
	if b.err != nil {
		return
	}
	b.fail(fmt.Sprintf("cudnnBackendSetAttribute(%d)", name), C.cdn_set(b.l.c, d, C.int(name), C.int(typ), C.int64_t(n), v))
}

func (b *builder) setI64(d desc, name int, v ...int64) {
	b.set(d, name, typeInt64, len(v), unsafe.Pointer(&v[0]))
}

func (b *builder) setI32(d desc, name, typ int, v int32) {
	b.set(d, name, typ, 1, unsafe.Pointer(&v))
}

func (b *builder) setDescs(d desc, name int, v ...desc) {
	b.set(d, name, typeDescriptor, len(v), unsafe.Pointer(&v[0]))
}

func (b *builder) finalize(d desc, what string) {
	if b.err != nil {
		return
	}
	b.fail("cudnnBackendFinalize("+what+")", C.cdn_finalize(b.l.c, d))
}

func (b *builder) getI64(d desc, name int, max int) []int64 {
	if b.err != nil {
		return nil
	}
	out := make([]int64, max)
	var n C.int64_t
	if b.fail(fmt.Sprintf("cudnnBackendGetAttribute(%d)", name), C.cdn_get(b.l.c, d, C.int(name), typeInt64, C.int64_t(max), &n, unsafe.Pointer(&out[0]))) {
		return nil
	}
	return out[:min(int(n), max)]
}

// getDescs reads an attribute of descriptors into fresh descriptors of
// type t (cuDNN fills the ones it is given).
func (b *builder) getDescs(d desc, name, t, max int) []desc {
	if b.err != nil {
		return nil
	}
	out := make([]desc, max)
	for i := range out {
		out[i] = b.create(t)
	}
	if b.err != nil {
		return nil
	}
	var n C.int64_t
	if b.fail(fmt.Sprintf("cudnnBackendGetAttribute(%d)", name), C.cdn_get(b.l.c, d, C.int(name), typeDescriptor, C.int64_t(max), &n, unsafe.Pointer(&out[0]))) {
		return nil
	}
	return out[:min(int(n), max)]
}

func (b *builder) free() {
	for i := len(b.made) - 1; i >= 0; i-- {
		C.cdn_destroy_desc(b.l.c, b.made[i])
	}
	b.made = nil
}

// tensor makes a finalized NHWC tensor descriptor of logical dims
// [n,c,h,w].
func (b *builder) tensor(uid int64, dtype int32, n, c, h, w int, virtual bool) desc {
	t := b.create(descTensor)
	b.setI32(t, attrTensorDataType, typeDataType, dtype)
	b.setI64(t, attrTensorDims, int64(n), int64(c), int64(h), int64(w))
	b.setI64(t, attrTensorStrides, int64(h*w*c), 1, int64(w*c), int64(c))
	b.setI64(t, attrTensorUID, uid)
	b.setI64(t, attrTensorAlignment, Alignment)
	if virtual {
		v := C.bool(true)
		b.set(t, attrTensorVirtual, typeBoolean, 1, unsafe.Pointer(&v))
	}
	b.finalize(t, "tensor")
	return t
}

func (b *builder) pointwise(mode int32, x, bias, y desc) desc {
	pw := b.create(descPointwise)
	b.setI32(pw, attrPointwiseMode, typePointwise, mode)
	b.setI32(pw, attrPointwiseMathPrec, typeDataType, dataFloat)
	b.finalize(pw, "pointwise")
	op := b.create(descPointwiseOp)
	b.setDescs(op, attrPwOpDesc, pw)
	b.setDescs(op, attrPwOpX, x)
	if bias != nil {
		b.setDescs(op, attrPwOpB, bias)
	}
	b.setDescs(op, attrPwOpY, y)
	b.finalize(op, "pointwise op")
	return op
}

// graph builds c's operation graph on h: conv → +B → [+R] → [ReLU] → Y.
func (b *builder) graph(h *Handle, c Conv) desc {
	act := int32(dataFloat)
	if c.Math == BF16 {
		act = dataBFloat16
	}
	out := act
	if c.OutFP32 {
		out = dataFloat
	}
	oh, ow := c.Out()
	x := b.tensor(uidX, act, c.N, c.C, c.H, c.W, false)
	w := b.tensor(uidW, act, c.M, c.C, c.KH, c.KW, false)
	bias := b.tensor(uidB, dataFloat, 1, c.M, 1, 1, false)
	virt := int64(100)
	next := func(last bool) desc {
		if last {
			return b.tensor(uidY, out, c.N, c.M, oh, ow, false)
		}
		virt++
		return b.tensor(virt, dataFloat, c.N, c.M, oh, ow, true)
	}
	cd := b.create(descConvolution)
	b.setI32(cd, attrConvCompType, typeDataType, dataFloat)
	b.setI32(cd, attrConvMode, typeConvMode, crossCorrelation)
	b.setI64(cd, attrConvSpatialDims, 2)
	b.setI64(cd, attrConvDilations, 1, 1)
	b.setI64(cd, attrConvStrides, int64(c.Stride), int64(c.Stride))
	b.setI64(cd, attrConvPrePad, int64(c.Pad), int64(c.Pad))
	b.setI64(cd, attrConvPostPad, int64(c.Pad), int64(c.Pad))
	b.finalize(cd, "convolution")
	acc := next(false)
	conv := b.create(descConvFwdOp)
	b.setDescs(conv, attrConvFwdX, x)
	b.setDescs(conv, attrConvFwdW, w)
	b.setDescs(conv, attrConvFwdY, acc)
	b.setDescs(conv, attrConvFwdConvDesc, cd)
	alpha, beta := float32(1), float32(0)
	b.set(conv, attrConvFwdAlpha, typeFloat, 1, unsafe.Pointer(&alpha))
	b.set(conv, attrConvFwdBeta, typeFloat, 1, unsafe.Pointer(&beta))
	b.finalize(conv, "convolution forward")
	ops := []desc{conv}
	y := next(!c.Residual && !c.Relu)
	ops = append(ops, b.pointwise(pointwiseAdd, acc, bias, y))
	if c.Residual {
		r := b.tensor(uidR, act, c.N, c.M, oh, ow, false)
		y2 := next(!c.Relu)
		ops = append(ops, b.pointwise(pointwiseAdd, y, r, y2))
		y = y2
	}
	if c.Relu {
		y2 := next(true)
		ops = append(ops, b.pointwise(pointwiseRelu, y, nil, y2))
	}
	g := b.create(descOpGraph)
	hh := h.h
	b.set(g, attrGraphHandle, typeHandle, 1, unsafe.Pointer(&hh))
	b.setDescs(g, attrGraphOps, ops...)
	b.finalize(g, "operation graph")
	return g
}

// engineOf reads an engine descriptor's index and numerical notes.
func (b *builder) notes(e desc) []int {
	if b.err != nil {
		return nil
	}
	var raw [16]C.int
	var n C.int64_t
	if b.fail("cudnnBackendGetAttribute(ENGINE_NUMERICAL_NOTE)", C.cdn_get(b.l.c, e, attrEngineNumNotes, typeNumNote, C.int64_t(len(raw)), &n, unsafe.Pointer(&raw[0]))) {
		return nil
	}
	out := make([]int, min(int(n), len(raw)))
	for i := range out {
		out[i] = int(raw[i])
	}
	return out
}

// Candidate is an engine configuration cuDNN's heuristic offers for a
// graph, with the filter's verdict.
type Candidate struct {
	Engine   Engine
	Notes    []int
	Eligible bool
	Why      string // why not eligible
}

// candidates lists heuristic mode A's configurations for graph g, in its
// order.
func (b *builder) candidates(g desc, m Math) []Candidate {
	heur := b.create(descEngineHeur)
	b.setDescs(heur, attrHeurOpGraph, g)
	b.setI32(heur, attrHeurMode, typeHeurMode, heurModeA)
	b.finalize(heur, "engine heuristics")
	if b.err != nil {
		return nil
	}
	var n C.int64_t
	if b.fail("cudnnBackendGetAttribute(ENGINEHEUR_RESULTS count)", C.cdn_get(b.l.c, heur, attrHeurResults, typeDescriptor, 0, &n, nil)) {
		return nil
	}
	cfgs := b.getDescs(heur, attrHeurResults, descEngineCfg, max(int(n), 1))
	var out []Candidate
	for _, cfg := range cfgs {
		eng := b.getDescs(cfg, attrCfgEngine, descEngine, 1)
		if b.err != nil || len(eng) != 1 {
			return nil
		}
		idx := b.getI64(eng[0], attrEngineIndex, 1)
		notes := b.notes(eng[0])
		kd := b.getDescs(cfg, attrCfgKnobChoices, descKnobChoice, 32)
		var knobs []Knob
		for _, k := range kd {
			var t C.int
			var cnt C.int64_t
			if b.fail("cudnnBackendGetAttribute(KNOB_CHOICE_KNOB_TYPE)", C.cdn_get(b.l.c, k, attrKnobChoiceType, typeKnobType, 1, &cnt, unsafe.Pointer(&t))) {
				return nil
			}
			v := b.getI64(k, attrKnobChoiceValue, 1)
			if b.err != nil || len(v) != 1 {
				return nil
			}
			knobs = append(knobs, Knob{Type: int(t), Value: v[0]})
		}
		if b.err != nil || len(idx) != 1 {
			return nil
		}
		ok, why := Eligible(m, notes, knobs)
		out = append(out, Candidate{Engine: Engine{Index: idx[0], Knobs: knobs}, Notes: notes, Eligible: ok, Why: why})
	}
	return out
}

// Plan is a finalized execution plan of one layer, with the descriptors it
// holds.
type Plan struct {
	Conv      Conv
	Engine    Engine
	Workspace int64 // bytes
	h         *Handle
	b         *builder
	plan      desc
}

// pinned builds the plan of engine e for graph g, checking the filter
// (a plan file cannot bring in an ineligible engine).
func (b *builder) pinned(h *Handle, g desc, m Math, e Engine) desc {
	eng := b.create(descEngine)
	b.setDescs(eng, attrEngineGraph, g)
	b.setI64(eng, attrEngineIndex, e.Index)
	b.finalize(eng, "engine")
	notes := b.notes(eng)
	if b.err != nil {
		return nil
	}
	if ok, why := Eligible(m, notes, e.Knobs); !ok {
		b.err = fmt.Errorf("%s: engine %s is not allowed: %s", b.where, e, why)
		return nil
	}
	var kds []desc
	for _, k := range e.Knobs {
		kd := b.create(descKnobChoice)
		b.setI32(kd, attrKnobChoiceType, typeKnobType, int32(k.Type))
		b.setI64(kd, attrKnobChoiceValue, k.Value)
		b.finalize(kd, "knob choice")
		kds = append(kds, kd)
	}
	cfg := b.create(descEngineCfg)
	b.setDescs(cfg, attrCfgEngine, eng)
	if len(kds) > 0 {
		b.setDescs(cfg, attrCfgKnobChoices, kds...)
	}
	b.finalize(cfg, "engine config")
	plan := b.create(descPlan)
	hh := h.h
	b.set(plan, attrPlanHandle, typeHandle, 1, unsafe.Pointer(&hh))
	b.setDescs(plan, attrPlanEngineCfg, cfg)
	b.finalize(plan, "execution plan")
	return plan
}

// Candidates lists the engine configurations cuDNN's heuristic (mode A)
// offers for c, in its order, each with the filter's verdict.
func (h *Handle) Candidates(c Conv) ([]Candidate, error) {
	b := &builder{l: h.l, where: c.Key()}
	defer b.free()
	g := b.graph(h, c)
	out := b.candidates(g, c.Math)
	return out, b.err
}

// NewPlan builds c's plan: with pin, that engine (checked by the filter);
// without, the first eligible configuration of heuristic mode A, which is
// reproducible on the same cuDNN, GPU and shape.
func (h *Handle) NewPlan(c Conv, pin *Engine) (*Plan, error) {
	b := &builder{l: h.l, where: c.Key()}
	g := b.graph(h, c)
	var e Engine
	if pin != nil {
		e = *pin
	} else {
		cands := b.candidates(g, c.Math)
		found := false
		var whys []string
		for _, cd := range cands {
			if cd.Eligible {
				e, found = cd.Engine, true
				break
			}
			whys = append(whys, cd.Engine.String()+": "+cd.Why)
		}
		if b.err == nil && !found {
			b.err = fmt.Errorf("%s: no eligible engine among the heuristic's %d (%s)", b.where, len(cands), strings.Join(whys, "; "))
		}
	}
	plan := b.pinned(h, g, c.Math, e)
	ws := b.getI64(plan, attrPlanWorkspace, 1)
	if b.err != nil {
		b.free()
		return nil, b.err
	}
	p := &Plan{Conv: c, Engine: e, h: h, b: b, plan: plan}
	if len(ws) == 1 {
		p.Workspace = ws[0]
	}
	runtime.SetFinalizer(p, (*Plan).Close)
	return p, nil
}

// JSON is cuDNN's own serialization of the finalized plan, for the record.
func (p *Plan) JSON() string {
	var n C.int64_t
	buf := make([]byte, 1<<16)
	if s := C.cdn_get(p.h.l.c, p.plan, attrPlanJSON, typeChar, C.int64_t(len(buf)), &n, unsafe.Pointer(&buf[0])); s != statusSuccess {
		return ""
	}
	s := string(buf[:min(int(n), len(buf))])
	return strings.TrimRight(s, "\x00")
}

// Execute runs the plan: x, w, b, r (0 without a residual), y and the
// workspace ws (at least p.Workspace bytes) are device addresses.
func (p *Plan) Execute(x, w, b, r, y, ws uintptr) error {
	uids := []int64{uidX, uidW, uidB, uidY}
	ptrs := []uintptr{x, w, b, y}
	if p.Conv.Residual {
		uids = append(uids, uidR)
		ptrs = append(ptrs, r)
	}
	bl := &builder{l: p.h.l, where: p.Conv.Key()}
	defer bl.free()
	vp := bl.create(descVariantPack)
	bl.setI64(vp, attrPackUIDs, uids...)
	bl.set(vp, attrPackPointers, typeVoidPtr, len(ptrs), unsafe.Pointer(&ptrs[0]))
	bl.set(vp, attrPackWorkspace, typeVoidPtr, 1, unsafe.Pointer(&ws))
	bl.finalize(vp, "variant pack")
	if bl.err != nil {
		return bl.err
	}
	bl.fail("cudnnBackendExecute", C.cdn_execute(p.h.l.c, p.h.h, p.plan, vp))
	return bl.err
}

// Close frees the plan's descriptors.
func (p *Plan) Close() {
	if p.b != nil {
		p.b.free()
		p.b = nil
	}
	runtime.SetFinalizer(p, nil)
}
