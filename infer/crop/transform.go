package crop

import (
	"fmt"
	"math"

	"github.com/canopy-hpc/canopy/infer/gemm"
)

// Transform is DeepForest's crop transform (datasets/cropmodel.py
// bounding_box_transform, model.py CropModel.get_transform), as torch
// computes it on the CPU: ToTensor (k/255 in float32), Normalize
// ((x − mean)/std in float32), then torchvision's tensor Resize to
// [H, W]: torch's antialiased bilinear interpolation
// (_upsample_bilinear2d_aa), which runs the width pass, then the height
// pass, each skipped when that side keeps its size.
type Transform struct {
	// Size is the resized [height, width] (cropmodel.resize, default
	// [224, 224]).
	Size [2]int
	// Normalize is false when the crop model's config turns it off
	// (cropmodel.normalize false, 1bad4419); Mean and Std are then unused.
	Normalize bool
	Mean, Std [3]float32
	// Expand is the context in pixels added on every side of a box before
	// it is read (cropmodel.expand), clamped to the image.
	Expand int
	// FMA is the accumulation rule of the resize's sums: true (the
	// default) is torch's AVX2 and AVX-512 kernels, where the compiler
	// fuses each `acc += src·w` into one fused multiply-add; false is
	// ATEN_CPU_CAPABILITY=default (every product rounded, then added).
	FMA bool
}

// DefaultTransform is DeepForest 2.1.0's: 224×224, ImageNet mean and
// std, no expansion.
func DefaultTransform() Transform {
	return Transform{Size: [2]int{224, 224}, Normalize: true,
		Mean: [3]float32{0.485, 0.456, 0.406}, Std: [3]float32{0.229, 0.224, 0.225}, FMA: true}
}

// MaxSide bounds the transform's output side (a config's resize) and the
// crops it takes, so that a hostile config cannot make it allocate without
// bound.
const MaxSide = 8192

func (t Transform) check() error {
	if t.Size[0] < 1 || t.Size[1] < 1 || t.Size[0] > MaxSide || t.Size[1] > MaxSide {
		return fmt.Errorf("crop: resize %v: each side must be 1..%d", t.Size, MaxSide)
	}
	if t.Expand < 0 || t.Expand > MaxSide {
		return fmt.Errorf("crop: expand %d: must be 0..%d", t.Expand, MaxSide)
	}
	return nil
}

// Apply transforms one crop: pix holds the R, G and B planes of a w×h
// crop, values k/255 (imagefile.Image's layout), and the result is the
// [3, Size[0], Size[1]] tensor the classifier takes, in C order.
func (t Transform) Apply(pix []float32, w, h int) ([]float32, error) {
	if w < 1 || h < 1 || w > MaxSide || h > MaxSide || len(pix) != 3*w*h {
		return nil, fmt.Errorf("crop: a %d×%d crop with %d values", w, h, len(pix))
	}
	x := make([]float32, len(pix))
	copy(x, pix)
	if t.Normalize {
		n := w * h
		for c := 0; c < 3; c++ {
			m, s := t.Mean[c], t.Std[c]
			p := x[c*n : (c+1)*n]
			for i, v := range p {
				p[i] = float32(v-m) / s
			}
		}
	}
	oh, ow := t.Size[0], t.Size[1]
	if ow != w {
		x = resizeAA(x, 3*h, w, ow, t.FMA)
	}
	if oh != h {
		x = resizeAxisH(x, h, ow, oh, t.FMA)
	}
	return x, nil
}

// aaWeights are one axis's antialiased bilinear taps: for output i, the
// input indices [min[i], min[i]+size[i]) with weights w[i·stride:].
type aaWeights struct {
	min, size []int
	w         []float32
	stride    int
}

// aaAxis computes the taps of an in → out resize as aten's
// HelperInterpLinear (compute_index_ranges_weights, antialias) does for a
// float32 tensor: scale, support, centre and weights in float32 where
// scalar_t is float, in float64 where a literal makes C++ promote.
func aaAxis(in, out int) aaWeights {
	scale := float32(in) / float32(out)
	support := float32(1)
	invscale := float32(1)
	if scale >= 1 {
		support = float32(1 * float64(scale))
		invscale = float32(1 / float64(scale))
	}
	maxSize := int(float32(math.Ceil(float64(support))))*2 + 1
	a := aaWeights{min: make([]int, out), size: make([]int, out), w: make([]float32, out*maxSize), stride: maxSize}
	for i := 0; i < out; i++ {
		center := float32(float64(scale) * (float64(i) + 0.5))
		xmin := max(int(float64(center-support)+0.5), 0)
		xsize := min(int(float64(center+support)+0.5), in) - xmin
		xsize = min(max(xsize, 0), maxSize)
		wt := a.w[i*maxSize : i*maxSize+xsize]
		var total float32
		for j := range wt {
			arg := float32((float64(float32(j+xmin)-center) + 0.5) * float64(invscale))
			wt[j] = triangle(arg)
			total += wt[j]
		}
		if total != 0 {
			for j := range wt {
				wt[j] /= total
			}
		}
		a.min[i], a.size[i] = xmin, xsize
	}
	return a
}

// triangle is aten's bilinear aa_filter<float>: 1 − |x| (computed in
// double, returned as float) inside (−1, 1), else 0.
func triangle(x float32) float32 {
	if x < 0 {
		x = -x
	}
	if x < 1 {
		return float32(1 - float64(x))
	}
	return 0
}

// tapSum is Σ src[off + j·step]·w[j] as torch's compiled kernel sums it
// (interpolate_aa_single_dim: the first product rounded, then `acc +=
// src·w` for the other taps). GCC vectorizes that loop as an in-order
// reduction four taps at a time (the products rounded, then added one by
// one), and the iterations left over run as scalar code, where the
// compiler fuses the multiply-add: so with fma, of the len(w)−1 taps
// after the first, the first 4·⌊(len(w)−1)/4⌋ are rounded products added
// in order and the rest fused multiply-adds. Measured on torch 2.15's
// AVX-512 kernels against 1,500 sums of 2 to 30 taps, both passes
// (tools/cropmodel/parity.py's transform cases hold the proof); without
// fma (ATEN_CPU_CAPABILITY=default) every product is rounded.
func tapSum(src []float32, off, step int, w []float32, fma bool) float32 {
	acc := float32(src[off] * w[0])
	n := len(w)
	vec := n
	if fma {
		vec = 1 + (n-1)/4*4
	}
	j := 1
	for ; j < vec; j++ {
		acc += float32(src[off+j*step] * w[j])
	}
	for ; j < n; j++ {
		acc = gemm.FMA32(src[off+j*step], w[j], acc)
	}
	return acc
}

// resizeAA resizes the last axis of rows×in values (each row contiguous)
// to out: the horizontal pass.
func resizeAA(x []float32, rows, in, out int, fma bool) []float32 {
	a := aaAxis(in, out)
	y := make([]float32, rows*out)
	for r := 0; r < rows; r++ {
		src := x[r*in : (r+1)*in]
		dst := y[r*out : (r+1)*out]
		for i := range dst {
			dst[i] = tapSum(src, a.min[i], 1, a.w[i*a.stride:i*a.stride+a.size[i]], fma)
		}
	}
	return y
}

// resizeAxisH resizes the height of 3 planes of h×w to oh: the vertical
// pass (taps a column apart).
func resizeAxisH(x []float32, h, w, oh int, fma bool) []float32 {
	a := aaAxis(h, oh)
	y := make([]float32, 3*oh*w)
	for c := 0; c < 3; c++ {
		src := x[c*h*w : (c+1)*h*w]
		for i := 0; i < oh; i++ {
			wt := a.w[i*a.stride : i*a.stride+a.size[i]]
			dst := y[(c*oh+i)*w : (c*oh+i+1)*w]
			for col := range dst {
				dst[col] = tapSum(src, a.min[i]*w+col, w, wt, fma)
			}
		}
	}
	return y
}
