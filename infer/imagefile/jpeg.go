package imagefile

import "image"

// fromJPEG converts a decoded JPEG, whose bounds start at the origin, as
// libjpeg (and so PIL) does: chroma subsampled 2:1 horizontally (4:2:2), or
// both ways (4:2:0), is interpolated with libjpeg's triangle filter ("fancy
// upsampling", jdsample.c) rather than replicated, and YCbCr becomes RGB
// with libjpeg's fixed-point arithmetic (jdcolor.c), which rounds otherwise
// than color.YCbCrToRGB. Other subsampling ratios are replicated.
func fromJPEG(m *image.YCbCr) Image {
	w, h := m.Rect.Dx(), m.Rect.Dy()
	hd, vd := chromaDiv(m.SubsampleRatio)
	cw, ch := (w+hd-1)/hd, (h+vd-1)/vd
	fancyH := hd == 2 && cw > 2
	fancyV := fancyH && vd == 2
	n := w * h
	im := Image{W: w, H: h, Pix: make([]float32, 3*n)}
	R, G, B := im.Pix[:n], im.Pix[n:2*n], im.Pix[2*n:]
	cbRow, crRow := make([]uint8, cw*hd), make([]uint8, cw*hd) // upsampled
	sum := make([]int32, cw)
	for y := 0; y < h; y++ {
		cy := y / vd
		for p, dst := range [2][]uint8{cbRow, crRow} {
			src := m.Cb
			if p == 1 {
				src = m.Cr
			}
			row := src[cy*m.CStride:][:cw]
			switch {
			case fancyV:
				ny := min(max(cy+2*(y%2)-1, 0), ch-1) // the nearer neighbouring row
				near := src[ny*m.CStride:][:cw]
				for j := range sum {
					sum[j] = 3*int32(row[j]) + int32(near[j])
				}
				upsample2(dst, sum, 8, 7, 4)
			case fancyH:
				for j := range sum {
					sum[j] = int32(row[j])
				}
				upsample2(dst, sum, 1, 2, 2)
			default:
				for x := range dst {
					dst[x] = row[x/hd]
				}
			}
		}
		yy := m.Y[y*m.YStride:][:w]
		o := y * w
		for x, l := range yy {
			r, g, b := ycc(l, cbRow[x], crRow[x])
			R[o+x], G[o+x], B[o+x] = unit[r], unit[g], unit[b]
		}
	}
	return im
}

// upsample2 doubles the row s into d as libjpeg's fancy upsamplers do: each
// input sample gives a left and a right output, 3/4 of itself plus 1/4 of its
// left or right neighbour (itself at the ends), plus bias bl or br, shifted
// right by shift.
func upsample2(d []uint8, s []int32, bl, br int32, shift uint) {
	last := len(s) - 1
	for j, c := range s {
		l, r := s[max(j-1, 0)], s[min(j+1, last)]
		d[2*j] = uint8((3*c + l + bl) >> shift)
		d[2*j+1] = uint8((3*c + r + br) >> shift)
	}
}

// ycc converts as libjpeg's ycc_rgb_convert: the constants 1.402, 0.34414,
// 0.71414 and 1.772 in 16-bit fixed point, rounded to nearest, and the
// chroma terms rounded to integers before y is added.
func ycc(y, cb, cr uint8) (r, g, b uint8) {
	const half = 1 << 15
	Y, Cb, Cr := int32(y), int32(cb)-128, int32(cr)-128
	return clamp8(Y + (91881*Cr+half)>>16),
		clamp8(Y + (-22554*Cb-46802*Cr+half)>>16),
		clamp8(Y + (116130*Cb+half)>>16)
}

func clamp8(v int32) uint8 { return uint8(min(max(v, 0), 255)) }
