package gemm

// Kernels over lane-interleaved maps: a batch of n images of c channels
// stored [c][h][w][n] (infer/cpu's Batch), so the n images' values of one
// channel and pixel lie side by side. The Winograd transforms, im2col and
// the max-pool then work on n lanes at a time (one AVX-512 vector for the
// crop classifier's batches of 16) at every map size: at 7×7 and 14×14 a
// tile row has only 2–4 tiles to vectorise over, a batch has 16 crops.
// A matrix column is a pair (position, image): column j is image j mod n
// of position j / n (a Winograd tile, or an output pixel). Each value is
// computed with the same operations in the same order as in the
// plane-at-a-time kernels (WinoIn4, WinoOut4, Im2col, MaxPool3s2) and in
// every clone, so the layout changes no bit.

// WinoIn4L is WinoIn4 on a [c][h][w][n] map: columns [j0, j0+nb) of V
// (column j: tile j/n, tile rows of (w+3)/4, image j%n) for every channel,
// component ξ of channel ci and column j at v[ξ·vs + ci·ldv + j−j0].
func WinoIn4L(x []float32, c, h, w, n, j0, nb int, v []float32, vs, ldv int) {
	if c == 0 || nb == 0 {
		return
	}
	_, _ = x[c*h*w*n-1], v[35*vs+(c-1)*ldv+nb-1] // sizes checked before C writes
	wino4InL(x, c, h, w, n, j0, nb, v, vs, ldv)
}

// WinoOut4L is WinoOut4 into a [o][h][w][n] map (y, and res unless nil):
// columns [j0, j0+nb) of M, component ξ of output channel oc, column j at
// m[ξ·ms + oc·ldm + j−j0], give relu?(Y + bias[oc] (+ res)).
func WinoOut4L(m []float32, ms, ldm, j0, nb, o, h, w, n int, bias, res []float32, relu bool, y []float32) {
	if o == 0 || nb == 0 {
		return
	}
	_, _, _ = m[35*ms+(o-1)*ldm+nb-1], y[o*h*w*n-1], bias[o-1]
	if res != nil {
		_ = res[o*h*w*n-1]
	}
	wino4OutL(m, ms, ldm, j0, nb, o, h, w, n, bias, res, relu, y)
}

// Im2colL is Im2col on a [cin][h][w][n] map: the patch matrix's columns
// [j0, j0+nb) (column j: output position j/n, ow per row, image j%n),
// rows ldc apart.
func Im2colL(x []float32, cin, h, w, n, kh, kw, stride, pad, ow, j0, nb int, col []float32, ldc int) {
	if cin == 0 || nb == 0 {
		return
	}
	_, _ = x[cin*h*w*n-1], col[(cin*kh*kw-1)*ldc+nb-1]
	im2colL(x, cin, h, w, n, kh, kw, stride, pad, ow, j0, nb, col, ldc)
}

// MaxPool3s2L is MaxPool3s2 of one channel's [h][w][n] values into
// [(h+1)/2][(w+1)/2][n], with tmp (h·((w+1)/2)·n floats) as scratch.
func MaxPool3s2L(src []float32, h, w, n int, tmp, dst []float32) {
	if h == 0 || w == 0 || n == 0 {
		return
	}
	ow := (w+2-3)/2 + 1
	_, _, _ = src[h*w*n-1], tmp[h*ow*n-1], dst[((h+2-3)/2+1)*ow*n-1]
	maxpoolL(src, h, w, n, tmp, dst)
}

// lanesAt calls f for each run of columns [j0, j0+nb) of one position:
// the position, the first image and the count.
func lanesAt(j0, nb, n int, f func(pos, b0, cnt int)) {
	for j := j0; j < j0+nb; {
		pos, b0 := j/n, j%n
		cnt := min(n-b0, j0+nb-j)
		f(pos, b0, cnt)
		j += cnt
	}
}

func wino4InLGo(x []float32, c, h, w, n, j0, nb int, v []float32, vs, ldv int) {
	tw := (w + 3) / 4
	for ci := 0; ci < c; ci++ {
		plane := x[ci*h*w*n : (ci+1)*h*w*n]
		lanesAt(j0, nb, n, func(t, b0, cnt int) {
			y0, x0 := 4*(t/tw)-1, 4*(t%tw)-1
			for l := 0; l < cnt; l++ {
				var d [6][6]float32
				for r := 0; r < 6; r++ {
					for s := 0; s < 6; s++ {
						if yy, xx := y0+r, x0+s; yy >= 0 && yy < h && xx >= 0 && xx < w {
							d[r][s] = plane[(yy*w+xx)*n+b0+l]
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
				base := ci*ldv + t*n + b0 + l - j0
				for i := 0; i < 6; i++ {
					o := bt6(q[i][0], q[i][1], q[i][2], q[i][3], q[i][4], q[i][5])
					for jj := range o {
						v[(i*6+jj)*vs+base] = o[jj]
					}
				}
			}
		})
	}
}

func wino4OutLGo(m []float32, ms, ldm, j0, nb, oc, h, w, n int, bias, res []float32, relu bool, y []float32) {
	tw := (w + 3) / 4
	cs := h * w * n
	for o := 0; o < oc; o++ {
		lanesAt(j0, nb, n, func(t, b0, cnt int) {
			ty, tx := t/tw, t%tw
			for l := 0; l < cnt; l++ {
				idx := o*ldm + t*n + b0 + l - j0
				var s [4][6]float32
				for col := 0; col < 6; col++ {
					r := at6(m[col*ms+idx], m[(6+col)*ms+idx], m[(12+col)*ms+idx], m[(18+col)*ms+idx], m[(24+col)*ms+idx], m[(30+col)*ms+idx])
					for i := range r {
						s[i][col] = r[i]
					}
				}
				for r := 0; r < 4 && 4*ty+r < h; r++ {
					vals := at6(s[r][0], s[r][1], s[r][2], s[r][3], s[r][4], s[r][5])
					for q := 0; q < 4 && 4*tx+q < w; q++ {
						p := o*cs + ((4*ty+r)*w+4*tx+q)*n + b0 + l
						val := vals[q] + bias[o]
						if res != nil {
							val += res[p]
						}
						if relu && val < 0 {
							val = 0
						}
						y[p] = val
					}
				}
			}
		})
	}
}

func im2colLGo(x []float32, cin, h, w, n, kh, kw, stride, pad, ow, j0, nb int, col []float32, ldc int) {
	r := 0
	for ci := 0; ci < cin; ci++ {
		plane := x[ci*h*w*n : (ci+1)*h*w*n]
		for ky := 0; ky < kh; ky++ {
			for kx := 0; kx < kw; kx++ {
				dst := col[r*ldc : r*ldc+nb]
				r++
				lanesAt(j0, nb, n, func(p, b0, cnt int) {
					d := dst[p*n+b0-j0 : p*n+b0-j0+cnt]
					iy, ix := p/ow*stride-pad+ky, p%ow*stride-pad+kx
					if iy < 0 || iy >= h || ix < 0 || ix >= w {
						clear(d)
						return
					}
					copy(d, plane[(iy*w+ix)*n+b0:])
				})
			}
		}
	}
}

func maxpoolLGo(src []float32, h, w, n int, tmp, dst []float32) {
	oh, ow := (h+2-3)/2+1, (w+2-3)/2+1
	// at is value (y, x) of lane l of a [rows][cols][n] array.
	at := func(a []float32, cols, y, x, l int) float32 { return a[(y*cols+x)*n+l] }
	for l := 0; l < n; l++ {
		for iy := 0; iy < h; iy++ {
			for ox := 0; ox < ow; ox++ {
				i := 2*ox - 1
				var v float32
				switch {
				case ox == 0 && w > 1:
					v = max3(at(src, w, iy, 0, l), at(src, w, iy, 1, l), at(src, w, iy, 0, l))
				case ox == 0:
					v = at(src, w, iy, 0, l)
				case i+2 < w:
					v = max3(at(src, w, iy, i, l), at(src, w, iy, i+1, l), at(src, w, iy, i+2, l))
				case i+1 < w:
					v = max3(at(src, w, iy, i, l), at(src, w, iy, i+1, l), at(src, w, iy, i, l))
				default:
					v = at(src, w, iy, i, l)
				}
				tmp[(iy*ow+ox)*n+l] = v
			}
		}
		for oy := 0; oy < oh; oy++ {
			i := 2*oy - 1
			for ox := 0; ox < ow; ox++ {
				var v float32
				switch {
				case i < 0 && h > 1:
					v = max3(at(tmp, ow, 0, ox, l), at(tmp, ow, 1, ox, l), at(tmp, ow, 0, ox, l))
				case i < 0:
					v = at(tmp, ow, 0, ox, l)
				case i+2 < h:
					v = max3(at(tmp, ow, i, ox, l), at(tmp, ow, i+1, ox, l), at(tmp, ow, i+2, ox, l))
				case i+1 < h:
					v = max3(at(tmp, ow, i, ox, l), at(tmp, ow, i+1, ox, l), at(tmp, ow, i, ox, l))
				default:
					v = at(tmp, ow, i, ox, l)
				}
				dst[(oy*ow+ox)*n+l] = v
			}
		}
	}
}
