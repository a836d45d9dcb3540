package gemm

import "fmt"

// Winograd F(2×2, 3×3) and F(4×4, 3×3) transforms, the memory-bound half of
// a 3×3 convolution whose other half is SGEMM (infer/retinanet builds the
// convolution; these are its inner loops). The default build runs them in C
// (kernels.c: generic, AVX2 and AVX-512 clones, simd.go); -tags noblas in
// Go. All compute each value with the same operations in the same order,
// without fused multiply-adds, so they give the same bits.

// WinoIn computes V = Bᵀ d B for the 4×4 input tiles t0..t0+nb-1 of a
// [c][h][w] map with zero padding 1 (tile t: rows 2·(t/tw)-1.., columns
// 2·(t%tw)-1..), writing component ξ of channel ci, tile k at
// v[ξ·vs + ci·nb + k].
func WinoIn(x []float32, c, h, w, tw, t0, nb int, v []float32, vs int) {
	winoIn(x, c, h, w, tw, t0, nb, v, vs)
}

// WinoOut computes Y = Aᵀ M A for the tiles t0..t0+nb-1 (M's component ξ of
// output channel o, tile k at m[ξ·ms + o·nb + k]) and writes
// relu?(Y + bias[o] (+ res)) into the [o][h][w] map y, dropping the parts of
// edge tiles outside it. res may be nil.
func WinoOut(m []float32, ms, nb, o, tw, t0, h, w int, bias, res []float32, relu bool, y []float32) {
	winoOut(m, ms, nb, o, tw, t0, h, w, bias, res, relu, y)
}

// WinoIn4 is WinoIn for F(4×4, 3×3): 6×6 input tiles at rows
// 4·(t/tw)-1.., columns 4·(t%tw)-1.., 36 components ξ = 6·i + j at
// v[ξ·vs + ci·nb + k] (Bᵀ in kernels_body.h).
func WinoIn4(x []float32, c, h, w, tw, t0, nb int, v []float32, vs int) {
	wino4In(x, c, h*w, h, w, tw, t0, nb, v, vs, nb)
}

// WinoOut4 is WinoOut for F(4×4, 3×3): 36 components of M, 4×4 outputs
// per tile.
func WinoOut4(m []float32, ms, nb, o, tw, t0, h, w int, bias, res []float32, relu bool, y []float32) {
	wino4Out(m, ms, nb, nb, o, tw, t0, h, w, h*w, bias, res, relu, y)
}

// WinoIn4Ld is WinoIn4 with the rows of V ldv floats apart (ldv ≥ nb): the
// CPU detector's blocks hold several maps' tiles, each map's a run of the
// block's columns.
func WinoIn4Ld(x []float32, c, h, w, tw, t0, nb int, v []float32, vs, ldv int) {
	wino4In(x, c, h*w, h, w, tw, t0, nb, v, vs, ldv)
}

// WinoOut4Ld is WinoOut4 with the rows of M ldm floats apart.
func WinoOut4Ld(m []float32, ms, ldm, nb, o, tw, t0, h, w int, bias, res []float32, relu bool, y []float32) {
	wino4Out(m, ms, ldm, nb, o, tw, t0, h, w, h*w, bias, res, relu, y)
}

// bt6 is Bᵀ of F(4×4, 3×3) on six values, in kernels_body.h's order (the
// conversions forbid fusing a product into an add, as -ffp-contract=off
// does in C).
func bt6(d0, d1, d2, d3, d4, d5 float32) [6]float32 {
	return [6]float32{
		(float32(d0*4) - float32(d2*5)) + d4,
		(d3 + d4) - float32((d1+d2)*4),
		(d4 - d3) + float32((d1-d2)*4),
		(d4 - d2) + float32((d3-d1)*2),
		(d4 - d2) - float32((d3-d1)*2),
		(float32(d1*4) - float32(d3*5)) + d5,
	}
}

// at6 is Aᵀ of F(4×4, 3×3) on six values.
func at6(m0, m1, m2, m3, m4, m5 float32) [4]float32 {
	a, b, c, d := m1+m2, m1-m2, m3+m4, m3-m4
	return [4]float32{(m0 + a) + c, b + float32(d*2), a + float32(c*4), (b + float32(d*8)) + m5}
}

func wino4InGo(x []float32, c, cs, h, w, tw, t0, nb int, v []float32, vs, ldv int) {
	for ci := 0; ci < c; ci++ {
		plane := x[ci*cs : ci*cs+h*w]
		for k := 0; k < nb; k++ {
			t := t0 + k
			y0, x0 := 4*(t/tw)-1, 4*(t%tw)-1
			var d [6][6]float32
			for r := 0; r < 6; r++ {
				yy := y0 + r
				if yy < 0 || yy >= h {
					continue
				}
				for s := 0; s < 6; s++ {
					if xx := x0 + s; xx >= 0 && xx < w {
						d[r][s] = plane[yy*w+xx]
					}
				}
			}
			var q [6][6]float32
			for s := 0; s < 6; s++ {
				o := bt6(d[0][s], d[1][s], d[2][s], d[3][s], d[4][s], d[5][s])
				for i := range o {
					q[i][s] = o[i]
				}
			}
			base := ci*ldv + k
			for i := 0; i < 6; i++ {
				o := bt6(q[i][0], q[i][1], q[i][2], q[i][3], q[i][4], q[i][5])
				for j := range o {
					v[(i*6+j)*vs+base] = o[j]
				}
			}
		}
	}
}

func wino4OutGo(m []float32, ms, ldm, nb, oc, tw, t0, h, w, cs int, bias, res []float32, relu bool, y []float32) {
	for o := 0; o < oc; o++ {
		b := bias[o]
		out := y[o*cs : o*cs+h*w]
		var rp []float32
		if res != nil {
			rp = res[o*cs : o*cs+h*w]
		}
		for k := 0; k < nb; k++ {
			t := t0 + k
			ty, tx := t/tw, t%tw
			idx := o*ldm + k
			var mm [36]float32
			for xi := range mm {
				mm[xi] = m[xi*ms+idx]
			}
			var s [4][6]float32
			for col := 0; col < 6; col++ {
				r := at6(mm[col], mm[6+col], mm[12+col], mm[18+col], mm[24+col], mm[30+col])
				for i := range r {
					s[i][col] = r[i]
				}
			}
			for r := 0; r < 4; r++ {
				yy := 4*ty + r
				if yy >= h {
					break
				}
				vals := at6(s[r][0], s[r][1], s[r][2], s[r][3], s[r][4], s[r][5])
				for q := 0; q < 4; q++ {
					xx := 4*tx + q
					if xx >= w {
						break
					}
					p := yy*w + xx
					val := vals[q] + b
					if rp != nil {
						val += rp[p]
					}
					if relu && val < 0 {
						val = 0
					}
					out[p] = val
				}
			}
		}
	}
}

func winoInGo(x []float32, c, h, w, tw, t0, nb int, v []float32, vs int) {
	for ci := 0; ci < c; ci++ {
		plane := x[ci*h*w : (ci+1)*h*w]
		for k := 0; k < nb; k++ {
			t := t0 + k
			y0, x0 := 2*(t/tw)-1, 2*(t%tw)-1
			var d [4][4]float32
			for r := 0; r < 4; r++ {
				yy := y0 + r
				if yy < 0 || yy >= h {
					continue
				}
				for s := 0; s < 4; s++ {
					if xx := x0 + s; xx >= 0 && xx < w {
						d[r][s] = plane[yy*w+xx]
					}
				}
			}
			var q [4][4]float32
			for s := 0; s < 4; s++ {
				q[0][s] = d[0][s] - d[2][s]
				q[1][s] = d[1][s] + d[2][s]
				q[2][s] = d[2][s] - d[1][s]
				q[3][s] = d[1][s] - d[3][s]
			}
			base := ci*nb + k
			for r := 0; r < 4; r++ {
				v[(r*4+0)*vs+base] = q[r][0] - q[r][2]
				v[(r*4+1)*vs+base] = q[r][1] + q[r][2]
				v[(r*4+2)*vs+base] = q[r][2] - q[r][1]
				v[(r*4+3)*vs+base] = q[r][1] - q[r][3]
			}
		}
	}
}

func winoOutGo(m []float32, ms, nb, oc, tw, t0, h, w int, bias, res []float32, relu bool, y []float32) {
	for o := 0; o < oc; o++ {
		b := bias[o]
		out := y[o*h*w : (o+1)*h*w]
		var rp []float32
		if res != nil {
			rp = res[o*h*w : (o+1)*h*w]
		}
		for k := 0; k < nb; k++ {
			t := t0 + k
			ty, tx := t/tw, t%tw
			idx := o*nb + k
			var mm [16]float32
			for xi := 0; xi < 16; xi++ {
				mm[xi] = m[xi*ms+idx]
			}
			var s [2][4]float32
			for col := 0; col < 4; col++ {
				s[0][col] = (mm[col] + mm[4+col]) + mm[8+col]
				s[1][col] = (mm[4+col] - mm[8+col]) - mm[12+col]
			}
			for r := 0; r < 2; r++ {
				yy := 2*ty + r
				if yy >= h {
					break
				}
				vals := [2]float32{(s[r][0] + s[r][1]) + s[r][2], (s[r][1] - s[r][2]) - s[r][3]}
				for q := 0; q < 2; q++ {
					xx := 2*tx + q
					if xx >= w {
						break
					}
					p := yy*w + xx
					val := vals[q] + b
					if rp != nil {
						val += rp[p]
					}
					if relu && val < 0 {
						val = 0
					}
					out[p] = val
				}
			}
		}
	}
}

// Epilogue applies a convolution's bias, residual and ReLU to a block of
// GEMM output: y[r·ldy + j] = relu?((y + bias[r]) + res[r·ldr + j]) for r <
// rows, j < cols. res may be nil.
func Epilogue(y []float32, ldy, rows, cols int, bias, res []float32, ldr int, relu bool) {
	if rows == 0 || cols == 0 {
		return
	}
	epilogue(y, ldy, rows, cols, bias, res, ldr, relu)
}

func epilogueGo(y []float32, ldy, rows, cols int, bias, res []float32, ldr int, relu bool) {
	for r := 0; r < rows; r++ {
		row := y[r*ldy : r*ldy+cols]
		b := bias[r]
		if res != nil {
			rr := res[r*ldr : r*ldr+cols]
			for i := range row {
				row[i] = (row[i] + b) + rr[i]
			}
		} else {
			for i := range row {
				row[i] += b
			}
		}
		if relu {
			for i, v := range row {
				if v < 0 {
					row[i] = 0
				}
			}
		}
	}
}

// Im2col writes the [cin·kh·kw, nb] patch matrix of a convolution's output
// columns [j0, j0+nb) (output positions in row-major order, ow per row) of
// the [cin][h][w] map x; padding reads as 0. It only copies, so the C and Go
// versions give the same bits.
func Im2col(x []float32, cin, h, w, kh, kw, stride, pad, ow, j0, nb int, col []float32) {
	if cin == 0 || nb == 0 {
		return
	}
	_, _ = x[cin*h*w-1], col[cin*kh*kw*nb-1] // sizes checked before C writes
	im2col(x, cin, h*w, h, w, kh, kw, stride, pad, ow, j0, nb, col, nb)
}

func im2colGo(x []float32, cin, cs, h, w, kh, kw, stride, pad, ow, j0, nb int, col []float32, ldc int) {
	r := 0
	for ci := 0; ci < cin; ci++ {
		plane := x[ci*cs : ci*cs+h*w]
		for ky := 0; ky < kh; ky++ {
			for kx := 0; kx < kw; kx++ {
				dst := col[r*ldc : r*ldc+nb]
				r++
				oy, ox := j0/ow, j0%ow
				for i := 0; i < nb; {
					iy := oy*stride - pad + ky
					run := min(ow-ox, nb-i)
					if iy < 0 || iy >= h {
						clear(dst[i : i+run])
					} else {
						src := plane[iy*w : (iy+1)*w]
						ix := ox*stride - pad + kx
						for q := 0; q < run; q++ {
							if ix >= 0 && ix < w {
								dst[i+q] = src[ix]
							} else {
								dst[i+q] = 0
							}
							ix += stride
						}
					}
					i += run
					ox = 0
					oy++
				}
			}
		}
	}
}

// MaxPool3s2 is torchvision's stem max-pool (3×3, stride 2, padding 1) of
// one h×w plane into dst, (h+1)/2 × (w+1)/2 values, with tmp (h·(w+1)/2
// floats) as scratch; NaN propagates as in torch. Max is exact, so every
// version gives the same bits.
func MaxPool3s2(src []float32, h, w int, tmp, dst []float32) {
	if h == 0 || w == 0 {
		return
	}
	ow := (w+2-3)/2 + 1
	_, _, _ = src[h*w-1], tmp[h*ow-1], dst[((h+2-3)/2+1)*ow-1] // sizes checked before C writes
	maxpool(src, h, w, tmp, dst)
}

func maxpoolGo(src []float32, h, w int, tmp, dst []float32) {
	oh, ow := (h+2-3)/2+1, (w+2-3)/2+1
	for iy := 0; iy < h; iy++ {
		row := src[iy*w : (iy+1)*w]
		out := tmp[iy*ow : (iy+1)*ow]
		out[0] = row[0]
		if w > 1 {
			out[0] = max3(row[0], row[1], row[0])
		}
		for ox := 1; ox < ow; ox++ {
			i := 2*ox - 1
			if i+2 < w {
				out[ox] = max3(row[i], row[i+1], row[i+2])
			} else if i+1 < w {
				out[ox] = max3(row[i], row[i+1], row[i])
			} else {
				out[ox] = row[i]
			}
		}
	}
	for oy := 0; oy < oh; oy++ {
		i := 2*oy - 1
		d := dst[oy*ow : (oy+1)*ow]
		switch {
		case i < 0:
			r0 := tmp[0:ow]
			if h > 1 {
				r1 := tmp[ow : 2*ow]
				for k := range d {
					d[k] = max3(r0[k], r1[k], r0[k])
				}
			} else {
				copy(d, r0)
			}
		case i+2 < h:
			r0, r1, r2 := tmp[i*ow:(i+1)*ow], tmp[(i+1)*ow:(i+2)*ow], tmp[(i+2)*ow:(i+3)*ow]
			for k := range d {
				d[k] = max3(r0[k], r1[k], r2[k])
			}
		case i+1 < h:
			r0, r1 := tmp[i*ow:(i+1)*ow], tmp[(i+1)*ow:(i+2)*ow]
			for k := range d {
				d[k] = max3(r0[k], r1[k], r0[k])
			}
		default:
			copy(d, tmp[i*ow:(i+1)*ow])
		}
	}
}

// max3 is the largest of three values, NaN if any is NaN (torch's max
// pooling propagates NaN).
func max3(a, b, c float32) float32 {
	m := a
	if b > m || b != b {
		m = b
	}
	if c > m || c != c {
		m = c
	}
	if a != a {
		return a
	}
	return m
}

// ResizeTaps are one axis of a bilinear resize: output x blends source
// columns I0[x], I1[x] (both below SrcW) with weights L0[x], L1[x].
type ResizeTaps struct {
	I0, I1 []int32
	L0, L1 []float32
	SrcW   int
}

// NewResizeTaps checks the taps once for ResizeRowFMA.
func NewResizeTaps(i0, i1 []int32, l0, l1 []float32, srcW int) (*ResizeTaps, error) {
	n := len(i0)
	if len(i1) != n || len(l0) != n || len(l1) != n {
		return nil, fmt.Errorf("gemm: resize taps of lengths %d, %d, %d, %d", n, len(i1), len(l0), len(l1))
	}
	for x := 0; x < n; x++ {
		if i0[x] < 0 || i1[x] < 0 || int(i0[x]) >= srcW || int(i1[x]) >= srcW {
			return nil, fmt.Errorf("gemm: resize tap %d (%d, %d) outside a row of %d", x, i0[x], i1[x], srcW)
		}
	}
	return &ResizeTaps{I0: i0, I1: i1, L0: l0, L1: l1, SrcW: srcW}, nil
}

// ResizeRowFMA computes one output row of torch's bilinear resize with the
// fused roundings of its AVX2 kernel (infer/retinanet's BlendFMA): for each
// x, t0 = fma(r0[I0[x]], L0[x], r0[I1[x]]·L1[x]), t1 likewise on r1,
// out[x] = fma(t0, h0, t1·h1), each fma rounded once; out has one value
// per tap. It reports false, writing nothing, in the noblas build (no C
// kernels): the caller computes the row itself. Every clone gives the same
// bits.
func ResizeRowFMA(t *ResizeTaps, r0, r1 []float32, h0, h1 float32, out []float32) bool {
	if len(out) != len(t.I0) || len(r0) < t.SrcW || len(r1) < t.SrcW {
		panic(fmt.Sprintf("gemm: ResizeRowFMA: %d outputs for %d taps, rows of %d and %d for %d", len(out), len(t.I0), len(r0), len(r1), t.SrcW))
	}
	if len(out) == 0 {
		return true
	}
	return resizeFMA(r0, r1, t.I0, t.I1, t.L0, t.L1, h0, h1, out)
}
