package retinanet

import "math"

// Image is a CHW RGB float32 image in [0, 1].
type Image struct {
	W, H int
	Pix  []float32
}

// resizeSize is torchvision's GeneralizedRCNNTransform size rule:
// scale = min(min_size/min(H,W), max_size/max(H,W)) as torch computes it in
// float32, then out = floor(in·scale) in double (recompute_scale_factor).
// torch evaluates `python_float / tensor` as reciprocal(tensor)·float, so
// the scale is float32(float32(1/n)·size), not the correctly rounded
// quotient: for 1500×900 at size 400 it is 0.26666665, giving 399×239, not
// 400×240 (checked against torch 1.13 in the golden fixtures).
func resizeSize(h, w, minSize, maxSize int) (oh, ow int) {
	s := resizeScale(h, w, minSize, maxSize)
	return int(math.Floor(float64(h) * float64(s))), int(math.Floor(float64(w) * float64(s)))
}

func resizeScale(h, w, minSize, maxSize int) float32 {
	rmn := 1 / float32(min(h, w))
	rmx := 1 / float32(max(h, w))
	return min(rmn*float32(minSize), rmx*float32(maxSize))
}

// normalizeResizePad normalizes (x−mean)/std in float32, resizes bilinearly
// (align_corners=False, no antialias; torch's CPU rule) to the size rule, and
// zero-pads bottom/right to multiples of 32. It returns the padded map and the
// resized (unpadded) size.
func normalizeResizePad(e *engine, img Image, opt Options) (fmap, int, int) {
	oh, ow := resizeSize(img.H, img.W, opt.MinSize, opt.MaxSize)
	ph, pw := (oh+31)/32*32, (ow+31)/32*32
	out := e.fmap(3, ph, pw)
	clear(out.d) // the padding is 0
	n := img.W * img.H
	nm := e.fmap(1, img.H, img.W)
	defer e.put(nm)
	norm := nm.d
	wy := linearWeights(img.H, oh)
	wx := linearWeights(img.W, ow)
	for c := 0; c < 3; c++ {
		src := img.Pix[c*n : (c+1)*n]
		m, s := opt.ImageMean[c], opt.ImageStd[c]
		for i, v := range src {
			norm[i] = (v - m) / s
		}
		dst := out.d[c*ph*pw:]
		if oh == img.H && ow == img.W {
			for y := 0; y < oh; y++ {
				copy(dst[y*pw:y*pw+ow], norm[y*img.W:(y+1)*img.W])
			}
			continue
		}
		for y := 0; y < oh; y++ {
			r0 := norm[wy[y].i0*img.W:]
			r1 := norm[wy[y].i1*img.W:]
			h0, h1 := wy[y].l0, wy[y].l1
			row := dst[y*pw : y*pw+ow]
			for x := range row {
				a := wx[x]
				t0 := float32(r0[a.i0]*a.l0) + float32(r0[a.i1]*a.l1)
				t1 := float32(r1[a.i0]*a.l0) + float32(r1[a.i1]*a.l1)
				row[x] = float32(t0*h0) + float32(t1*h1)
			}
		}
	}
	return out, oh, ow
}

type lin struct {
	i0, i1 int
	l0, l1 float32
}

// linearWeights: ratio = in/out (float32); src = ratio·(dst+0.5) − 0.5,
// clamped at 0; i0 = trunc(src), i1 = i0+1 unless at the edge; λ1 = src − i0.
func linearWeights(in, out int) []lin {
	ratio := float32(in) / float32(out)
	ws := make([]lin, out)
	for d := range ws {
		src := ratio*(float32(d)+0.5) - 0.5
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
