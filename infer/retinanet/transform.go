package retinanet

import (
	"fmt"
	"math"
	"strings"

	"github.com/canopy-hpc/canopy/infer/cpu"
	"github.com/canopy-hpc/canopy/infer/gemm"
)

// Image is a CHW RGB float32 image in [0, 1].
type Image struct {
	W, H int
	Pix  []float32
}

// ResizeRule is how GeneralizedRCNNTransform turns an image's size into the
// resized size: scale = min(min_size/min(H,W), max_size/max(H,W)), then
// out = floor(in·scale) in double (interpolate's recompute_scale_factor).
// The rules differ in how the scale is computed, and so by one pixel in one
// dimension for about half of all sizes (1249×1035 at 800/1333: 965×800
// against 965×799); 400×400 tiles at 400, 1000×1000 and 2000×2000 agree.
type ResizeRule uint8

const (
	// ResizeTorchvision is torchvision ≥ 0.16 in eager mode (what
	// DeepForest 2.x runs: torchvision ≥ 0.17): the scale is a Python
	// float, float64(size)/float64(side), correctly rounded.
	ResizeTorchvision ResizeRule = iota
	// ResizeTorchvision015 is torchvision ≤ 0.15, and any torchvision
	// under torch.jit.script or ONNX tracing: the scale is a float32
	// tensor, and torch evaluates `python_float / tensor` as
	// reciprocal(tensor)·float, so it is float32(float32(1/n)·size), not
	// the correctly rounded quotient (1500×900 at 400: 0.26666665, giving
	// 399×239, not 400×240).
	ResizeTorchvision015
)

// ResizeRules are the names ParseResizeRule accepts, default first.
var ResizeRules = []string{"torchvision", "torchvision-0.15"}

// ParseResizeRule reads a rule's name (--resize).
func ParseResizeRule(s string) (ResizeRule, error) {
	return parseRule[ResizeRule]("resize", s, ResizeRules)
}

// String is the rule's name, as ParseResizeRule reads it.
func (r ResizeRule) String() string { return ruleName(r, ResizeRules) }

// parseRule is the index of s in names, the rule's value.
func parseRule[R ~uint8](kind, s string, names []string) (R, error) {
	for i, n := range names {
		if s == n {
			return R(i), nil
		}
	}
	return 0, fmt.Errorf("retinanet: %s rule %q: want one of %s", kind, s, strings.Join(names, ", "))
}

func ruleName[R ~uint8](r R, names []string) string {
	if int(r) < len(names) {
		return names[r]
	}
	return fmt.Sprintf("rule(%d)", int(r))
}

// resizeSize is the resized (unpadded) size of an h×w image under o's sizes
// and rule.
func resizeSize(h, w int, o Options) (oh, ow int) {
	var s float64
	switch o.Resize {
	case ResizeTorchvision015:
		rmn := 1 / float32(min(h, w))
		rmx := 1 / float32(max(h, w))
		s = float64(min(rmn*float32(o.MinSize), rmx*float32(o.MaxSize)))
	default:
		s = min(float64(o.MinSize)/float64(min(h, w)), float64(o.MaxSize)/float64(max(h, w)))
	}
	return int(math.Floor(float64(h) * s)), int(math.Floor(float64(w) * s))
}

// BlendRule is how the bilinear resize rounds its blend of four source
// pixels. Torch's CPU result depends on the kernel it dispatches to
// (testdata/golden/retinanet/blend.json, tools/retinanet/blend.py): fma
// and no-fma differ by at most 2.4e-7 on normalized pixels, in about a fifth
// of the elements; fma-1t's source index moves some taps (up to 8.4e-5).
type BlendRule uint8

const (
	// BlendFMA is torch's AVX2 CPU kernel with more than one thread (the
	// x86-64 wheels, as DeepForest users run them): each row's two taps and
	// then the two rows are blended with a fused multiply-add,
	// fma(a, λ0, b·λ1), one rounding for the multiply-add.
	BlendFMA BlendRule = iota
	// BlendNoFMA is torch with ATEN_CPU_CAPABILITY=default (ATen's scalar
	// kernels): every product rounded, then summed.
	BlendNoFMA
	// BlendFMA1T is torch's AVX2 CPU kernel on one thread (another kernel):
	// the source index is fma(ratio, dst+0.5, −0.5), the four weights are
	// the rounded products of the row and column weights, and the four
	// taps are accumulated with FMAs from the top-right one: p01·w01, then
	// p00, p10, p11.
	BlendFMA1T
)

// BlendRules are the names ParseBlendRule accepts, default first.
var BlendRules = []string{"fma", "no-fma", "fma-1t"}

// ParseBlendRule reads a rule's name (--blend).
func ParseBlendRule(s string) (BlendRule, error) { return parseRule[BlendRule]("blend", s, BlendRules) }

// String is the rule's name, as ParseBlendRule reads it.
func (r BlendRule) String() string { return ruleName(r, BlendRules) }

// fma32 is gemm.FMA32: a·b+c rounded once to float32, as the FMA
// instruction computes it.
func fma32(a, b, c float32) float32 { return gemm.FMA32(a, b, c) }

// blend is one output pixel from rows r0, r1 (taps a) and row weights h0, h1.
func (b BlendRule) blend(r0, r1 []float32, a lin, h0, h1 float32) float32 {
	switch b {
	case BlendNoFMA:
		t0 := float32(r0[a.i0]*a.l0) + float32(r0[a.i1]*a.l1)
		t1 := float32(r1[a.i0]*a.l0) + float32(r1[a.i1]*a.l1)
		return float32(t0*h0) + float32(t1*h1)
	case BlendFMA1T:
		acc := float32(r0[a.i1] * float32(h0*a.l1))
		acc = fma32(r0[a.i0], float32(h0*a.l0), acc)
		acc = fma32(r1[a.i0], float32(h1*a.l0), acc)
		return fma32(r1[a.i1], float32(h1*a.l1), acc)
	}
	t0 := fma32(r0[a.i0], a.l0, float32(r0[a.i1]*a.l1))
	t1 := fma32(r1[a.i0], a.l0, float32(r1[a.i1]*a.l1))
	return fma32(t0, h0, float32(t1*h1))
}

// normalizeResizePad normalizes (x−mean)/std in float32, resizes bilinearly
// (align_corners=False, no antialias; torch's CPU index rule, opt.Blend's
// rounding) to the size rule, and zero-pads bottom/right to multiples of
// 32. It returns the padded map and the resized (unpadded) size.
func normalizeResizePad(e *cpu.Engine, img Image, opt Options) (cpu.Fmap, int, int) {
	oh, ow := resizeSize(img.H, img.W, opt)
	ph, pw := (oh+31)/32*32, (ow+31)/32*32
	out := e.Fmap(3, ph, pw)
	clear(out.D) // the padding is 0
	n := img.W * img.H
	nm := e.Fmap(3, img.H, img.W)
	defer e.Put(nm)
	norm := nm.D
	wy := linearWeights(img.H, oh, opt.Blend == BlendFMA1T)
	wx := linearWeights(img.W, ow, opt.Blend == BlendFMA1T)
	for c := 0; c < 3; c++ {
		src := img.Pix[c*n : (c+1)*n]
		m, s := opt.ImageMean[c], opt.ImageStd[c]
		nc := norm[c*n : (c+1)*n]
		for i, v := range src {
			nc[i] = (v - m) / s
		}
	}
	// The default blend runs in infer/gemm's C clones (hardware FMA: the
	// same bits as fma32, several times faster); the others, and the noblas
	// build, in Go.
	var taps *gemm.ResizeTaps
	if opt.Blend == BlendFMA {
		taps = resizeTaps(wx, img.W)
	}
	// The resize, in blocks of rows on the engine's workers: every output
	// pixel is computed alone, so the bytes do not depend on the threads.
	const rowsPer = 16
	rb := (oh + rowsPer - 1) / rowsPer
	e.Parallel(3*rb, func(_, j int) {
		c, y0 := j/rb, j%rb*rowsPer
		nc := norm[c*n : (c+1)*n]
		dst := out.D[c*ph*pw:]
		for y := y0; y < min(y0+rowsPer, oh); y++ {
			row := dst[y*pw : y*pw+ow]
			if oh == img.H && ow == img.W {
				copy(row, nc[y*img.W:(y+1)*img.W])
				continue
			}
			r0 := nc[wy[y].i0*img.W:]
			r1 := nc[wy[y].i1*img.W:]
			h0, h1 := wy[y].l0, wy[y].l1
			if taps != nil && gemm.ResizeRowFMA(taps, r0[:img.W], r1[:img.W], h0, h1, row) {
				continue
			}
			for x := range row {
				row[x] = opt.Blend.blend(r0, r1, wx[x], h0, h1)
			}
		}
	})
	return out, oh, ow
}

// resizeTaps is one axis's taps for gemm.ResizeRowFMA.
func resizeTaps(ws []lin, srcW int) *gemm.ResizeTaps {
	i0, i1 := make([]int32, len(ws)), make([]int32, len(ws))
	l0, l1 := make([]float32, len(ws)), make([]float32, len(ws))
	for x, a := range ws {
		i0[x], i1[x], l0[x], l1[x] = int32(a.i0), int32(a.i1), a.l0, a.l1
	}
	t, err := gemm.NewResizeTaps(i0, i1, l0, l1, srcW)
	if err != nil {
		panic(err) // linearWeights keeps every tap inside the row
	}
	return t
}

type lin struct {
	i0, i1 int
	l0, l1 float32
}

// linearWeights: ratio = in/out (float32); src = ratio·(dst+0.5) − 0.5
// (rounded twice, or once with fmaIndex), clamped at 0; i0 = trunc(src),
// i1 = i0+1 unless at the edge; λ1 = src − i0.
func linearWeights(in, out int, fmaIndex bool) []lin {
	ratio := float32(in) / float32(out)
	ws := make([]lin, out)
	for d := range ws {
		src := float32(ratio*(float32(d)+0.5)) - 0.5
		if fmaIndex {
			src = fma32(ratio, float32(d)+0.5, -0.5)
		}
		if src < 0 {
			src = 0
		}
		i0 := int(src)
		i1 := i0
		if i0 < in-1 {
			i1 = i0 + 1
		}
		l1 := min(max(src-float32(i0), 0), 1)
		ws[d] = lin{i0, i1, 1 - l1, l1}
	}
	return ws
}
