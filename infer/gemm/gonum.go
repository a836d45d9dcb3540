//go:build noblas

package gemm

import (
	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/gonum"
)

const backend = "gonum"

// Core names the kernels: gonum's pure Go.
func Core() string { return "gonum" }

var impl gonum.Implementation

func mul(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	if m == 0 || n == 0 {
		return
	}
	impl.Sgemm(blas.NoTrans, blas.NoTrans, m, n, k, 1, a, lda, b, ldb, 0, c, ldc)
}

func winoIn(x []float32, c, h, w, tw, t0, nb int, v []float32, vs int) {
	winoInGo(x, c, h, w, tw, t0, nb, v, vs)
}

func detectSIMD() SIMD { return Generic }

func wino4In(x []float32, c, cs, h, w, tw, t0, nb int, v []float32, vs, ldv int) {
	wino4InGo(x, c, cs, h, w, tw, t0, nb, v, vs, ldv)
}

func wino4Out(m []float32, ms, ldm, nb, o, tw, t0, h, w, cs int, bias, res []float32, relu bool, y []float32) {
	wino4OutGo(m, ms, ldm, nb, o, tw, t0, h, w, cs, bias, res, relu, y)
}

func winoOut(m []float32, ms, nb, o, tw, t0, h, w int, bias, res []float32, relu bool, y []float32) {
	winoOutGo(m, ms, nb, o, tw, t0, h, w, bias, res, relu, y)
}

func epilogue(y []float32, ldy, rows, cols int, bias, res []float32, ldr int, relu bool) {
	epilogueGo(y, ldy, rows, cols, bias, res, ldr, relu)
}

func maxpool(src []float32, h, w int, tmp, dst []float32) { maxpoolGo(src, h, w, tmp, dst) }

func im2col(x []float32, cin, cs, h, w, kh, kw, stride, pad, ow, j0, nb int, col []float32, ldc int) {
	im2colGo(x, cin, cs, h, w, kh, kw, stride, pad, ow, j0, nb, col, ldc)
}

func resizeFMA(r0, r1 []float32, i0, i1 []int32, l0, l1 []float32, h0, h1 float32, out []float32) bool {
	return false
}

func chain(m, n, k int, a []float32, lda int, b []float32, ldb int, c []float32, ldc int, ep Epi) {
	chainGo(m, n, k, a, lda, b, ldb, c, ldc, ep)
}

func geluRow(x []float32)    { geluRowGo(x) }
func softmaxRow(x []float32) { softmaxRowGo(x) }
func dwconvGELURow(x []float32, h, wd, c int, w, b []float32, y int, out []float32) {
	dwconvGELURowGo(x, h, wd, c, w, b, y, out)
}

func wino4InL(x []float32, c, h, w, n, j0, nb int, v []float32, vs, ldv int) {
	wino4InLGo(x, c, h, w, n, j0, nb, v, vs, ldv)
}

func wino4OutL(m []float32, ms, ldm, j0, nb, o, h, w, n int, bias, res []float32, relu bool, y []float32) {
	wino4OutLGo(m, ms, ldm, j0, nb, o, h, w, n, bias, res, relu, y)
}

func im2colL(x []float32, cin, h, w, n, kh, kw, stride, pad, ow, j0, nb int, col []float32, ldc int) {
	im2colLGo(x, cin, h, w, n, kh, kw, stride, pad, ow, j0, nb, col, ldc)
}

func maxpoolL(src []float32, h, w, n int, tmp, dst []float32) { maxpoolLGo(src, h, w, n, tmp, dst) }
