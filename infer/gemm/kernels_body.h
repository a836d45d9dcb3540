// The bodies of canopy's C kernels, compiled once per instruction set by
// kernels.c (#include with K(name) naming each clone). Every value is
// computed with the same operations in the same order in every clone (and in
// the Go versions of wino.go), and kernels.c is compiled with
// -ffp-contract=off, so no clone fuses a multiply into an add: the clones
// give the same bits; only their speed differs.
static void K(wino_in)(const float *x, int c, int h, int w, int tw, int t0, int nb, float *v, long vs) {
	for (int ci = 0; ci < c; ci++) {
		const float *plane = x + (long)ci * h * w;
		for (int k = 0; k < nb; k++) {
			int t = t0 + k;
			int y0 = 2 * (t / tw) - 1, x0 = 2 * (t % tw) - 1;
			float d[4][4];
			if (y0 >= 0 && x0 >= 0 && y0 + 3 < h && x0 + 3 < w) {
				for (int r = 0; r < 4; r++)
					for (int s = 0; s < 4; s++)
						d[r][s] = plane[(long)(y0 + r) * w + x0 + s];
			} else {
				for (int r = 0; r < 4; r++)
					for (int s = 0; s < 4; s++) {
						int yy = y0 + r, xx = x0 + s;
						d[r][s] = (yy >= 0 && yy < h && xx >= 0 && xx < w) ? plane[(long)yy * w + xx] : 0.0f;
					}
			}
			float q[4][4];
			for (int s = 0; s < 4; s++) {
				q[0][s] = d[0][s] - d[2][s];
				q[1][s] = d[1][s] + d[2][s];
				q[2][s] = d[2][s] - d[1][s];
				q[3][s] = d[1][s] - d[3][s];
			}
			long base = (long)ci * nb + k;
			for (int r = 0; r < 4; r++) {
				v[(r * 4 + 0) * vs + base] = q[r][0] - q[r][2];
				v[(r * 4 + 1) * vs + base] = q[r][1] + q[r][2];
				v[(r * 4 + 2) * vs + base] = q[r][2] - q[r][1];
				v[(r * 4 + 3) * vs + base] = q[r][1] - q[r][3];
			}
		}
	}
}

static void K(wino_out)(const float *m, long ms, int nb, int oc, int tw, int t0, int h, int w,
		const float *bias, const float *res, int relu, float *y) {
	for (int o = 0; o < oc; o++) {
		float b = bias[o];
		float *out = y + (long)o * h * w;
		const float *rp = res ? res + (long)o * h * w : 0;
		for (int k = 0; k < nb; k++) {
			int t = t0 + k;
			int ty = t / tw, tx = t % tw;
			long idx = (long)o * nb + k;
			float mm[16];
			for (int xi = 0; xi < 16; xi++)
				mm[xi] = m[xi * ms + idx];
			float s[2][4];
			for (int col = 0; col < 4; col++) {
				s[0][col] = (mm[col] + mm[4 + col]) + mm[8 + col];
				s[1][col] = (mm[4 + col] - mm[8 + col]) - mm[12 + col];
			}
			for (int r = 0; r < 2; r++) {
				int yy = 2 * ty + r;
				if (yy >= h)
					break;
				float vals[2] = {(s[r][0] + s[r][1]) + s[r][2], (s[r][1] - s[r][2]) - s[r][3]};
				for (int q = 0; q < 2; q++) {
					int xx = 2 * tx + q;
					if (xx >= w)
						break;
					long p = (long)yy * w + xx;
					float val = vals[q] + b;
					if (rp)
						val += rp[p];
					if (relu && val < 0)
						val = 0;
					out[p] = val;
				}
			}
		}
	}
}

// bias_row: dst[j] = relu?((src[j] + b) + rr[j]) for n values (rr may be
// null; dst may be src): the epilogue of a row, for canopy_epilogue and
// the F(4×4,3×3) output transform alike.
static inline void K(bias_row)(float *dst, const float *src, int n, float b, const float *rr, int relu) {
	if (rr) {
		for (int j = 0; j < n; j++)
			dst[j] = (src[j] + b) + rr[j];
	} else {
		for (int j = 0; j < n; j++)
			dst[j] = src[j] + b;
	}
	if (relu)
		for (int j = 0; j < n; j++)
			dst[j] = dst[j] < 0 ? 0 : dst[j];
}

// canopy_epilogue: y[r][j] = relu?((y[r][j] + bias[r]) + res[r][j]) for a
// block of rows × cols (row strides ldy, ldr); res may be null. The same
// order of additions as epilogueGo.
static void K(epilogue)(float *y, long ldy, int rows, int cols, const float *bias, const float *res, long ldr, int relu) {
	for (int r = 0; r < rows; r++)
		K(bias_row)(y + r * ldy, y + r * ldy, cols, bias[r], res ? res + r * ldr : 0, relu);
}

// canopy_im2col: the patch matrix of output columns [j0, j0+nb), as
// im2colGo (wino.go); copies only.
static void K(im2col)(const float *x, int cin, long cs, int h, int w, int kh, int kw, int stride, int pad, int ow, int j0, int nb, float *col, long ldc) {
	long r = 0;
	for (int ci = 0; ci < cin; ci++) {
		const float *plane = x + (long)ci * cs;
		for (int ky = 0; ky < kh; ky++) {
			for (int kx = 0; kx < kw; kx++) {
				float *dst = col + r * ldc;
				r++;
				int oy = j0 / ow, ox = j0 % ow;
				for (int i = 0; i < nb;) {
					int iy = oy * stride - pad + ky;
					int run = ow - ox < nb - i ? ow - ox : nb - i;
					if (iy < 0 || iy >= h) {
						for (int q = 0; q < run; q++)
							dst[i + q] = 0;
					} else {
						const float *src = plane + (long)iy * w;
						int ix = ox * stride - pad + kx;
						if (stride == 1 && ix >= 0 && ix + run <= w) {
							for (int q = 0; q < run; q++)
								dst[i + q] = src[ix + q];
						} else {
							for (int q = 0; q < run; q++, ix += stride)
								dst[i + q] = (ix >= 0 && ix < w) ? src[ix] : 0;
						}
					}
					i += run;
					ox = 0;
					oy++;
				}
			}
		}
	}
}

// Winograd F(4×4, 3×3): 6×6 input tiles at rows 4·(t/tw)-1.., columns
// 4·(t%tw)-1.., V = Bᵀ d B with
//   Bᵀ = [4 0 -5 0 1 0; 0 -4 -4 1 1 0; 0 4 -4 -1 1 0;
//         0 -2 -1 2 1 0; 0 2 -1 -2 1 0; 0 4 0 -5 0 1]
// (points 0, ±1, ±2, ∞). Component ξ = 6·i + j of channel ci, tile k goes to
// v[ξ·vs + ci·nb + k]. The products by 2 and 4 are exact; by 5 rounds.

// Tiles of one tile row are done W4_KC at a time, vectorised across the
// tiles: the six input rows of the run are copied into a zero-padded
// buffer, Bᵀ combines them column by column (contiguous), then Bᵀ combines
// each tile's six columns (stride 4) and writes V contiguously along the
// tiles. The order of every operation is wino4InGo's.
#ifndef W4_KC
#define W4_KC 16
#endif

static void K(wino4_in)(const float *x, int c, long cs, int h, int w, int tw, int t0, int nb, float *v, long vs, long ldv) {
	float D[6][4 * W4_KC + 4];
	float R[6][4 * W4_KC + 4];
	for (int ci = 0; ci < c; ci++) {
		const float *plane = x + (long)ci * cs;
		for (int k = 0; k < nb;) {
			int t = t0 + k;
			int ty = t / tw, tx0 = t % tw;
			int run = tw - tx0;
			if (run > nb - k)
				run = nb - k;
			if (run > W4_KC)
				run = W4_KC;
			int y0 = 4 * ty - 1, xa = 4 * tx0 - 1;
			int span = 4 * run + 2;
			for (int r = 0; r < 6; r++) {
				int yy = y0 + r;
				float *dr = D[r];
				if (yy < 0 || yy >= h) {
					for (int xx = 0; xx < span; xx++)
						dr[xx] = 0.0f;
					continue;
				}
				const float *src = plane + (long)yy * w;
				if (xa >= 0 && xa + span <= w) {
					for (int xx = 0; xx < span; xx++)
						dr[xx] = src[xa + xx];
				} else {
					for (int xx = 0; xx < span; xx++) {
						int col = xa + xx;
						dr[xx] = (col >= 0 && col < w) ? src[col] : 0.0f;
					}
				}
			}
			for (int xx = 0; xx < span; xx++) {
				float d0 = D[0][xx], d1 = D[1][xx], d2 = D[2][xx], d3 = D[3][xx], d4 = D[4][xx], d5 = D[5][xx];
				R[0][xx] = (d0 * 4.0f - d2 * 5.0f) + d4;
				R[1][xx] = (d3 + d4) - (d1 + d2) * 4.0f;
				R[2][xx] = (d4 - d3) + (d1 - d2) * 4.0f;
				R[3][xx] = (d4 - d2) + (d3 - d1) * 2.0f;
				R[4][xx] = (d4 - d2) - (d3 - d1) * 2.0f;
				R[5][xx] = (d1 * 4.0f - d3 * 5.0f) + d5;
			}
			float *base = v + (long)ci * ldv + k;
			for (int i = 0; i < 6; i++) {
				const float *ri = R[i];
				float *o0 = base + (long)(i * 6 + 0) * vs, *o1 = base + (long)(i * 6 + 1) * vs;
				float *o2 = base + (long)(i * 6 + 2) * vs, *o3 = base + (long)(i * 6 + 3) * vs;
				float *o4 = base + (long)(i * 6 + 4) * vs, *o5 = base + (long)(i * 6 + 5) * vs;
				for (int kk = 0; kk < run; kk++) {
					float d0 = ri[4 * kk], d1 = ri[4 * kk + 1], d2 = ri[4 * kk + 2];
					float d3 = ri[4 * kk + 3], d4 = ri[4 * kk + 4], d5 = ri[4 * kk + 5];
					o0[kk] = (d0 * 4.0f - d2 * 5.0f) + d4;
					o1[kk] = (d3 + d4) - (d1 + d2) * 4.0f;
					o2[kk] = (d4 - d3) + (d1 - d2) * 4.0f;
					o3[kk] = (d4 - d2) + (d3 - d1) * 2.0f;
					o4[kk] = (d4 - d2) - (d3 - d1) * 2.0f;
					o5[kk] = (d1 * 4.0f - d3 * 5.0f) + d5;
				}
			}
			k += run;
		}
	}
}

// Y = Aᵀ M A with Aᵀ = [1 1 1 1 1 0; 0 1 -1 2 -2 0; 0 1 1 4 4 0;
// 0 1 -1 8 -8 1] (products by powers of two: exact), then bias, residual,
// ReLU, as wino_out.

// The output transform, W4_KC tiles of a tile row at a time: Aᵀ down the
// six rows of M (contiguous along the tiles), then Aᵀ across each tile's
// six columns into a row buffer, then bias, residual and ReLU along the
// output row. The order of every operation is wino4OutGo's.
static void K(wino4_out)(const float *m, long ms, long ldm, int nb, int oc, int tw, int t0, int h, int w, long cs,
		const float *bias, const float *res, int relu, float *y) {
	float S[4][6][W4_KC];
	float Y[4 * W4_KC];
	for (int o = 0; o < oc; o++) {
		float b = bias[o];
		float *out = y + (long)o * cs;
		const float *rp = res ? res + (long)o * cs : 0;
		for (int k = 0; k < nb;) {
			int t = t0 + k;
			int ty = t / tw, tx0 = t % tw;
			int run = tw - tx0;
			if (run > nb - k)
				run = nb - k;
			if (run > W4_KC)
				run = W4_KC;
			const float *mk = m + (long)o * ldm + k;
			for (int j = 0; j < 6; j++) {
				const float *m0 = mk + (long)(0 * 6 + j) * ms, *m1 = mk + (long)(1 * 6 + j) * ms;
				const float *m2 = mk + (long)(2 * 6 + j) * ms, *m3 = mk + (long)(3 * 6 + j) * ms;
				const float *m4 = mk + (long)(4 * 6 + j) * ms, *m5 = mk + (long)(5 * 6 + j) * ms;
				for (int kk = 0; kk < run; kk++) {
					float a_ = m1[kk] + m2[kk], b_ = m1[kk] - m2[kk], c_ = m3[kk] + m4[kk], d_ = m3[kk] - m4[kk];
					S[0][j][kk] = (m0[kk] + a_) + c_;
					S[1][j][kk] = b_ + d_ * 2.0f;
					S[2][j][kk] = a_ + c_ * 4.0f;
					S[3][j][kk] = (b_ + d_ * 8.0f) + m5[kk];
				}
			}
			int x0 = 4 * tx0;
			int n = w - x0 < 4 * run ? w - x0 : 4 * run;
			for (int r = 0; r < 4; r++) {
				int yy = 4 * ty + r;
				if (yy >= h)
					break;
				for (int kk = 0; kk < run; kk++) {
					float s0 = S[r][0][kk], s1 = S[r][1][kk], s2 = S[r][2][kk];
					float s3 = S[r][3][kk], s4 = S[r][4][kk], s5 = S[r][5][kk];
					float a_ = s1 + s2, b_ = s1 - s2, c_ = s3 + s4, d_ = s3 - s4;
					Y[4 * kk] = (s0 + a_) + c_;
					Y[4 * kk + 1] = b_ + d_ * 2.0f;
					Y[4 * kk + 2] = a_ + c_ * 4.0f;
					Y[4 * kk + 3] = (b_ + d_ * 8.0f) + s5;
				}
				K(bias_row)(out + (long)yy * w + x0, Y, n, b, rp ? rp + (long)yy * w + x0 : 0, relu);
			}
			k += run;
		}
	}
}

// The stem's max-pool (3×3, stride 2, padding 1: padding never wins) on one
// h×w plane into oh×ow, separably: the max over each row's 3-wide windows
// into tmp (h×ow), then over 3 rows. max3 is exact and takes NaN from any
// operand (torch propagates NaN) as max3Go does, so every clone gives the
// same bits.
static inline float K(max3)(float a, float b, float c) {
	float m = a;
	if (b > m || b != b)
		m = b;
	if (c > m || c != c)
		m = c;
	return a != a ? a : m;
}

static void K(maxpool)(const float *src, int h, int w, float *tmp, float *dst) {
	int oh = (h + 2 - 3) / 2 + 1, ow = (w + 2 - 3) / 2 + 1;
	for (int iy = 0; iy < h; iy++) {
		const float *row = src + (long)iy * w;
		float *out = tmp + (long)iy * ow;
		out[0] = w > 1 ? K(max3)(row[0], row[1], row[0]) : row[0];
		int full = (w - 2) / 2; // ox in [1, full]: 2·ox+1 < w
		for (int ox = 1; ox <= full; ox++)
			out[ox] = K(max3)(row[2 * ox - 1], row[2 * ox], row[2 * ox + 1]);
		for (int ox = full + 1 > 1 ? full + 1 : 1; ox < ow; ox++) {
			int i = 2 * ox - 1;
			out[ox] = i + 1 < w ? K(max3)(row[i], row[i + 1], row[i]) : row[i];
		}
	}
	for (int oy = 0; oy < oh; oy++) {
		int i = 2 * oy - 1;
		float *d = dst + (long)oy * ow;
		if (i < 0) {
			const float *r0 = tmp;
			if (h > 1) {
				const float *r1 = tmp + ow;
				for (int k = 0; k < ow; k++)
					d[k] = K(max3)(r0[k], r1[k], r0[k]);
			} else {
				for (int k = 0; k < ow; k++)
					d[k] = r0[k];
			}
		} else if (i + 2 < h) {
			const float *r0 = tmp + (long)i * ow, *r1 = r0 + ow, *r2 = r1 + ow;
			for (int k = 0; k < ow; k++)
				d[k] = K(max3)(r0[k], r1[k], r2[k]);
		} else if (i + 1 < h) {
			const float *r0 = tmp + (long)i * ow, *r1 = r0 + ow;
			for (int k = 0; k < ow; k++)
				d[k] = K(max3)(r0[k], r1[k], r0[k]);
		} else {
			const float *r0 = tmp + (long)i * ow;
			for (int k = 0; k < ow; k++)
				d[k] = r0[k];
		}
	}
}

// resize_fma is one output row of torch's bilinear resize with the fused
// rounding of its AVX2 kernel (retinanet's BlendFMA): per pixel x, with
// taps i0/i1 and weights l0/l1 along the row and h0/h1 down the columns,
// t0 = fma(r0[i0], l0, r0[i1]·l1), t1 = fma(r1[i0], l0, r1[i1]·l1),
// out = fma(t0, h0, t1·h1). fmaf rounds once in every clone (an FMA
// instruction, or libm's exact fmaf on a CPU without one), and the
// products stay separate (fp-contract=off), so all clones give the bits of
// retinanet's Go fma32.
static void K(resize_fma)(const float *r0, const float *r1, const int *i0, const int *i1,
		const float *l0, const float *l1, float h0, float h1, int n, float *out) {
	for (int x = 0; x < n; x++) {
		float p0 = r0[i1[x]] * l1[x], p1 = r1[i1[x]] * l1[x];
		float t0 = __builtin_fmaf(r0[i0[x]], l0[x], p0);
		float t1 = __builtin_fmaf(r1[i0[x]], l0[x], p1);
		float q = t1 * h1;
		out[x] = __builtin_fmaf(t0, h0, q);
	}
}

// chain: C = relu?((A·B + bias) + res) for A m×k (rows lda apart), B k×n
// (rows ldb apart), C m×n (rows ldc apart), all row-major and read where
// they lie (no packing). Each C value is one chain of fused multiply-adds
// over k in order from 0 (acc = fma(a[i][p], b[p][j], acc), p = 0..k-1,
// acc starting at +0), then + bias[i], then + res[i][j], then ReLU (NaN
// kept): the same operations, rounded the same way, in every clone (an
// FMA instruction rounds once, and so does fmaf in the generic clone), for
// every tile, edge and block: a value never depends on n, on its column's
// place, on the blocking or on the instruction set. Blocks of k (CH_KC)
// store the chain's float32 state in C and load it back, which is exact.
// bias or res may be null (then no add).

static inline float K(chain_last)(float v, const float *bias, int r, const float *res, long ldr, int j, int relu) {
	if (bias)
		v = v + bias[r];
	if (res)
		v = v + res[(long)r * ldr + j];
	if (relu)
		v = v < 0 ? 0 : v;
	return v;
}

#if CANOPY_VEC == 512
// 8 rows × nv vectors of 16 columns (nv ≤ 3: 24 accumulators). The k and
// row blocks were chosen by thread CPU time (BenchmarkChain).
#define CH_MR 8
#define CH_NR 48
#define CH_KC 512
#define CH_MC 128
static inline __attribute__((always_inline)) void K(chain_tile)(const int nv, const int full, int kc, const float *a, long lda,
		const float *b, long ldb, float *c, long ldc, int rows, int ncols, int first, int last,
		const float *bias, const float *res, long ldr, int relu) {
	__m512 acc[8][3];
	__mmask16 mk[3];
	for (int v = 0; v < 3; v++) {
		int l = ncols - 16 * v;
		mk[v] = l >= 16 ? (__mmask16)0xffff : l > 0 ? (__mmask16)((1u << l) - 1) : (__mmask16)0;
	}
	const float *ar[8];
#pragma GCC unroll 8
	for (int r = 0; r < 8; r++) {
		ar[r] = a + (long)(r < rows ? r : 0) * lda;
#pragma GCC unroll 3
		for (int v = 0; v < nv; v++)
			acc[r][v] = (first || r >= rows) ? _mm512_setzero_ps()
				: full ? _mm512_loadu_ps(c + (long)r * ldc + 16 * v) : _mm512_maskz_loadu_ps(mk[v], c + (long)r * ldc + 16 * v);
	}
	for (int p = 0; p < kc; p++) {
		__m512 bv[3];
		const float *bp = b + (long)p * ldb;
#pragma GCC unroll 3
		for (int v = 0; v < nv; v++)
			bv[v] = full ? _mm512_loadu_ps(bp + 16 * v) : _mm512_maskz_loadu_ps(mk[v], bp + 16 * v);
#pragma GCC unroll 8
		for (int r = 0; r < 8; r++) {
			__m512 av = _mm512_set1_ps(ar[r][p]);
#pragma GCC unroll 3
			for (int v = 0; v < nv; v++)
				acc[r][v] = _mm512_fmadd_ps(av, bv[v], acc[r][v]);
		}
	}
	const __m512 zero = _mm512_setzero_ps();
	// Constant indices only (unrolled, rows tested inside), so that the
	// accumulators stay in registers.
#pragma GCC unroll 8
	for (int r = 0; r < 8; r++) {
		if (r >= rows)
			break;
#pragma GCC unroll 3
		for (int v = 0; v < nv; v++) {
			__m512 x = acc[r][v];
			float *cp = c + (long)r * ldc + 16 * v;
			if (last) {
				if (bias)
					x = _mm512_add_ps(x, _mm512_set1_ps(bias[r]));
				if (res)
					x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(mk[v], res + (long)r * ldr + 16 * v));
				if (relu)
					x = _mm512_max_ps(zero, x); // NaN (second operand) kept
			}
			_mm512_mask_storeu_ps(cp, mk[v], x);
		}
	}
}

static void K(chain_tiles)(int kc, const float *a, long lda, const float *b, long ldb, float *c, long ldc, int rows, int ncols,
		int first, int last, const float *bias, const float *res, long ldr, int relu) {
	if (ncols == 48)
		K(chain_tile)(3, 1, kc, a, lda, b, ldb, c, ldc, rows, ncols, first, last, bias, res, ldr, relu);
	else if (ncols > 32)
		K(chain_tile)(3, 0, kc, a, lda, b, ldb, c, ldc, rows, ncols, first, last, bias, res, ldr, relu);
	else if (ncols > 16)
		K(chain_tile)(2, 0, kc, a, lda, b, ldb, c, ldc, rows, ncols, first, last, bias, res, ldr, relu);
	else
		K(chain_tile)(1, 0, kc, a, lda, b, ldb, c, ldc, rows, ncols, first, last, bias, res, ldr, relu);
}
#elif CANOPY_VEC == 256
// 4 rows × nv vectors of 8 columns (nv ≤ 3: 12 accumulators of 16 registers).
#define CH_MR 4
#define CH_NR 24
#define CH_KC 256
#define CH_MC 128
static inline __attribute__((always_inline)) void K(chain_tile)(const int nv, const int full, int kc, const float *a, long lda,
		const float *b, long ldb, float *c, long ldc, int rows, int ncols, int first, int last,
		const float *bias, const float *res, long ldr, int relu) {
	__m256 acc[4][3];
	__m256i mk[3];
	const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
	for (int v = 0; v < 3; v++)
		mk[v] = _mm256_cmpgt_epi32(_mm256_set1_epi32(ncols - 8 * v), iota);
	const float *ar[4];
#pragma GCC unroll 4
	for (int r = 0; r < 4; r++) {
		ar[r] = a + (long)(r < rows ? r : 0) * lda;
#pragma GCC unroll 3
		for (int v = 0; v < nv; v++)
			acc[r][v] = (first || r >= rows) ? _mm256_setzero_ps()
				: full ? _mm256_loadu_ps(c + (long)r * ldc + 8 * v) : _mm256_maskload_ps(c + (long)r * ldc + 8 * v, mk[v]);
	}
	for (int p = 0; p < kc; p++) {
		__m256 bv[3];
		const float *bp = b + (long)p * ldb;
#pragma GCC unroll 3
		for (int v = 0; v < nv; v++)
			bv[v] = full ? _mm256_loadu_ps(bp + 8 * v) : _mm256_maskload_ps(bp + 8 * v, mk[v]);
#pragma GCC unroll 4
		for (int r = 0; r < 4; r++) {
			__m256 av = _mm256_broadcast_ss(ar[r] + p);
#pragma GCC unroll 3
			for (int v = 0; v < nv; v++)
				acc[r][v] = _mm256_fmadd_ps(av, bv[v], acc[r][v]);
		}
	}
	const __m256 zero = _mm256_setzero_ps();
#pragma GCC unroll 4
	for (int r = 0; r < 4; r++) {
		if (r >= rows)
			break;
#pragma GCC unroll 3
		for (int v = 0; v < nv; v++) {
			__m256 x = acc[r][v];
			float *cp = c + (long)r * ldc + 8 * v;
			if (last) {
				if (bias)
					x = _mm256_add_ps(x, _mm256_set1_ps(bias[r]));
				if (res)
					x = _mm256_add_ps(x, full ? _mm256_loadu_ps(res + (long)r * ldr + 8 * v) : _mm256_maskload_ps(res + (long)r * ldr + 8 * v, mk[v]));
				if (relu)
					x = _mm256_max_ps(zero, x); // NaN (second operand) kept
			}
			// (vmaskmovps stores are slow on AMD: plain ones for full tiles)
			if (full)
				_mm256_storeu_ps(cp, x);
			else
				_mm256_maskstore_ps(cp, mk[v], x);
		}
	}
}

static void K(chain_tiles)(int kc, const float *a, long lda, const float *b, long ldb, float *c, long ldc, int rows, int ncols,
		int first, int last, const float *bias, const float *res, long ldr, int relu) {
	if (ncols == 24)
		K(chain_tile)(3, 1, kc, a, lda, b, ldb, c, ldc, rows, ncols, first, last, bias, res, ldr, relu);
	else if (ncols > 16)
		K(chain_tile)(3, 0, kc, a, lda, b, ldb, c, ldc, rows, ncols, first, last, bias, res, ldr, relu);
	else if (ncols > 8)
		K(chain_tile)(2, 0, kc, a, lda, b, ldb, c, ldc, rows, ncols, first, last, bias, res, ldr, relu);
	else
		K(chain_tile)(1, 0, kc, a, lda, b, ldb, c, ldc, rows, ncols, first, last, bias, res, ldr, relu);
}
#else
// Scalar: 4 rows × 16 columns, fmaf (one rounding, as the instruction).
#define CH_MR 4
#define CH_NR 16
#define CH_KC 256
#define CH_MC 128
static void K(chain_tiles)(int kc, const float *a, long lda, const float *b, long ldb, float *c, long ldc, int rows, int ncols,
		int first, int last, const float *bias, const float *res, long ldr, int relu) {
	float acc[4][16];
	for (int r = 0; r < rows; r++)
		for (int j = 0; j < ncols; j++)
			acc[r][j] = first ? 0.0f : c[(long)r * ldc + j];
	for (int p = 0; p < kc; p++) {
		const float *bp = b + (long)p * ldb;
		for (int r = 0; r < rows; r++) {
			float av = a[(long)r * lda + p];
			for (int j = 0; j < ncols; j++)
				acc[r][j] = fmaf(av, bp[j], acc[r][j]);
		}
	}
	for (int r = 0; r < rows; r++)
		for (int j = 0; j < ncols; j++)
			c[(long)r * ldc + j] = last ? K(chain_last)(acc[r][j], bias, r, res, ldr, j, relu) : acc[r][j];
}
#endif

// chain_pack copies the kc × nc panel of B at b (rows ldb apart) into
// buf (rows CH_NR apart): copies only, so no value changes.
static inline void K(chain_pack)(int kc, int nc, const float *b, long ldb, float *buf) {
	if (nc == CH_NR) {
		for (int p = 0; p < kc; p++)
			__builtin_memcpy(buf + (long)p * CH_NR, b + (long)p * ldb, CH_NR * sizeof(float));
		return;
	}
	for (int p = 0; p < kc; p++)
		__builtin_memcpy(buf + (long)p * CH_NR, b + (long)p * ldb, (size_t)nc * sizeof(float));
}

// The kc × CH_NR panel of B that a block's row tiles share is copied into
// a contiguous buffer first when the block has more than one row tile and
// B's rows lie a multiple of 2 KiB apart (ldb a multiple of
// CH_PACK_LDB floats): then every row of the panel falls in one or two
// sets of the L1 cache (64 sets of 64 bytes). So it is at the crop
// classifier's 1×1 convolutions over 56×56 maps of 16 crops (ldb 50,176
// floats, 49·4 KiB), which the AVX2 clone ran at 65% of its speed on a
// contiguous panel (BenchmarkChainStride; BenchmarkBatchResNet50's 1×1s at
// 56²: 1.2–1.5× less CPU on AVX2; on AVX-512 1.3× on the 256←64, 0.9× on
// the 64←256, loaded machine). Elsewhere
// (28² and 14² maps, Winograd's V, im2col chunks) the rows spread over 4
// or more sets, and copying there gained nothing on AVX2 and cost AVX-512
// up to a tenth. The packed panel holds the same values, read in the same
// order: no bit changes.
#define CH_PACK_LDB 512
static void K(chain)(int m, int n, int k, const float *a, long lda, const float *b, long ldb, float *c, long ldc,
		const float *bias, const float *res, long ldr, int relu) {
	// The panel is the thread's (canopy_panel: 96 KB, more than a small
	// thread stack should lend, allocated once per thread, not per call).
	// Without one B is read in place (the same bits, slower).
	_Static_assert(CH_KC * CH_NR * sizeof(float) <= CANOPY_PANEL_BYTES, "a panel outgrows canopy_panel");
	const int pack = m > CH_MR && ldb >= CH_PACK_LDB && ldb % CH_PACK_LDB == 0;
	float *panel = pack ? canopy_panel() : 0;
	int pc = 0;
	do {
		int kc = k - pc < CH_KC ? k - pc : CH_KC;
		int first = pc == 0, last = pc + kc >= k;
		for (int ic = 0; ic < m; ic += CH_MC) {
			int mc = m - ic < CH_MC ? m - ic : CH_MC;
			for (int j = 0; j < n; j += CH_NR) {
				int nc = n - j < CH_NR ? n - j : CH_NR;
				const float *bp = b + (long)pc * ldb + j;
				long lb = ldb;
				if (panel && mc > CH_MR) {
					K(chain_pack)(kc, nc, bp, ldb, panel);
					bp = panel;
					lb = CH_NR;
				}
				for (int i = ic; i < ic + mc; i += CH_MR) {
					int rows = ic + mc - i < CH_MR ? ic + mc - i : CH_MR;
					K(chain_tiles)(kc, a + (long)i * lda + pc, lda, bp, lb, c + (long)i * ldc + j, ldc,
						rows, nc, first, last, bias ? bias + i : 0, res ? res + (long)i * ldr + j : 0, ldr, relu);
				}
			}
		}
		pc += kc;
	} while (pc < k);
}
#undef CH_MR
#undef CH_NR
#undef CH_KC
#undef CH_MC
#undef CH_PACK_LDB

// The point model's element-wise kernels (infer/treeformer), the same
// operations in the same order as their Go twins in wino.go (expFastGo,
// geluGo, softmaxRowGo, dwconvGELURowGo), so every clone and the Go code
// give the same bits. Written branch-free so the loops vectorize.

// exp_fast: e^x to ~1e-8 relative: n = floor(x·log2e + 0.5), r = x − n·ln2,
// Taylor to degree 8, times 2ⁿ built from the bits of n + 1023 + 1.5·2⁵²;
// 0 below −708, +∞ above 709.
//
// floor is written out (floor_exact) because GCC keeps a libm call for it,
// and so the whole loop scalar, unless FP traps are ruled out; the
// rounding gives floor's bits exactly.
static inline double K(floor_exact)(double t) {
	// |t| < 2⁵¹: t + 1.5·2⁵² rounds t to the nearest integer (ties to
	// even) and the subtraction is exact; one below when that is above t.
	// Both arms of each select are computed first: GCC does not make a
	// conditional floating-point operation unconditional (it could trap),
	// so an arm computed inside the select keeps the loop scalar.
	double r = (t + 6755399441055744.0) - 6755399441055744.0;
	double below = r - 1.0;
	return r > t ? below : r;
}

static inline double K(exp_fast)(double x) {
	double lo = x < -708.0 ? -708.0 : x;
	double xc = lo > 709.0 ? 709.0 : lo;
	double n = K(floor_exact)(xc * 1.4426950408889634 + 0.5);
	double r = xc - n * 0.69314718055994529;
	double p = 1 + r * (1 + r * (1.0 / 2 + r * (1.0 / 6 + r * (1.0 / 24 + r * (1.0 / 120 + r * (1.0 / 720 + r * (1.0 / 5040 + r * (1.0 / 40320))))))));
	double m = n + 1023.0 + 6755399441055744.0;
	unsigned long long bits;
	memcpy(&bits, &m, 8);
	bits <<= 52;
	double s;
	memcpy(&s, &bits, 8);
	// The out-of-range cases select the scale, not the product (p is in
	// [0.7, 1.5]: p·0 = +0, p·∞ = ∞, the values of selects on the
	// product), and test the clamp (xc > x exactly when x < −708, xc < x
	// when x > 709; a NaN passes through): with the clamp's own
	// conditions repeated, GCC threads the two into a branch, and the
	// softmax's loop stayed scalar.
	s = xc > x ? 0.0 : s;
	s = xc < x ? (double)INFINITY : s;
	return p * s;
}

static inline float K(gelu1)(float xf) {
	double v = xf;
	double z = fabs(v) * 0.70710678118654757;
	double t = 1 / (1 + 0.3275911 * z);
	double erfc = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429)))) * K(exp_fast)(-z * z);
	double neg = (0.5 * v) * erfc, pos = (0.5 * v) * (2 - erfc);
	double g = v < 0 ? neg : pos;
	return (float)g;
}

// gelu_row: x[i] = gelu(x[i]) in place.
static void K(gelu_row)(float *x, int n) {
	for (int i = 0; i < n; i++)
		x[i] = K(gelu1)(x[i]);
}

// softmax_row: exp(x − max) (the difference in float32), the float64 sum in
// order, each times 1/sum.
static void K(softmax_row)(float *x, int n) {
	float m = x[0];
	for (int i = 0; i < n; i++)
		m = x[i] > m ? x[i] : m;
	for (int i = 0; i < n; i++)
		x[i] = (float)K(exp_fast)((double)(x[i] - m));
	double s = 0;
	for (int i = 0; i < n; i++)
		s += (double)x[i];
	double inv = 1 / s;
	for (int i = 0; i < n; i++)
		x[i] = (float)((double)x[i] * inv);
}

// dwconv_gelu_row: output row y of the depthwise 3×3 convolution (zero
// padding 1) of an h×wd token map of c channels (token-major), taps in
// (ky, kx) order from the bias, then GELU. w is tap-major [9][c].
static void K(dwconv_gelu_row)(const float *x, int h, int wd, int c, const float *w, const float *b, int y, float *out) {
	float *acc = out + (long)y * wd * c;
	for (int xx = 0; xx < wd; xx++)
		for (int ch = 0; ch < c; ch++)
			acc[(long)xx * c + ch] = b[ch];
	for (int ky = 0; ky < 3; ky++) {
		int sy = y + ky - 1;
		if (sy < 0 || sy >= h)
			continue;
		for (int kx = 0; kx < 3; kx++) {
			const float *wk = w + (ky * 3 + kx) * c;
			int x0 = 1 - kx > 0 ? 1 - kx : 0, x1 = wd + 1 - kx < wd ? wd + 1 - kx : wd;
			for (int xx = x0; xx < x1; xx++) {
				const float *src = x + ((long)sy * wd + xx + kx - 1) * c;
				float *dst = acc + (long)xx * c;
				for (int ch = 0; ch < c; ch++)
					dst[ch] += wk[ch] * src[ch];
			}
		}
	}
	K(gelu_row)(acc, wd * c);
}

// Lane-interleaved maps ([c][h][w][n]: infer/cpu's Batch, lanes.go): the
// n images' values of a pixel lie side by side, and matrix column j is
// image j%n of position j/n. Each kernel works on up to CANOPY_LN lanes at a time
// in fixed-size buffers (one AVX-512 vector, two AVX2 ones, at the crop
// classifier's batch of 16), so every map size vectorises; every value
// goes through the operations of the plane kernels above, in their order.
#ifndef CANOPY_LN
#define CANOPY_LN 16
#endif

// lanes_in copies cnt lanes into d and zeroes the rest of its CANOPY_LN
// (memcpy: the compiler cannot vectorise a copy it must assume overlaps);
// lanes_out copies cnt lanes.
static inline void K(lanes_in)(float *d, const float *s, int cnt) {
	if (cnt == CANOPY_LN) {
		__builtin_memcpy(d, s, CANOPY_LN * sizeof(float));
		return;
	}
	__builtin_memcpy(d, s, (size_t)cnt * sizeof(float));
	for (int l = cnt; l < CANOPY_LN; l++)
		d[l] = 0.0f;
}

static inline void K(lanes_out)(float *d, const float *s, int cnt) {
	if (cnt == CANOPY_LN)
		__builtin_memcpy(d, s, CANOPY_LN * sizeof(float));
	else
		__builtin_memcpy(d, s, (size_t)cnt * sizeof(float));
}

// lanes_geom is the geometry of up to CANOPY_LG runs of columns from j0:
// each run's position (j/n), first lane (j%n), lane count (at most
// CANOPY_LN, never past a position) and first column (from j0), so that a
// kernel divides once per run, not once per run and channel.
#define CANOPY_LG 64
struct K(lanes_run) {
	int pos, b0, cnt, col;
};

static inline int K(lanes_geom)(struct K(lanes_run) *g, int j, int end, int j0, int n) {
	int k = 0;
	int pos = j / n, b0 = j % n;
	while (j < end && k < CANOPY_LG) {
		int cnt = n - b0;
		if (cnt > end - j)
			cnt = end - j;
		if (cnt > CANOPY_LN)
			cnt = CANOPY_LN;
		g[k].pos = pos;
		g[k].b0 = b0;
		g[k].cnt = cnt;
		g[k].col = j - j0;
		k++;
		j += cnt;
		b0 += cnt;
		if (b0 == n) {
			b0 = 0;
			pos++;
		}
	}
	return k;
}

// w4in_tile: V = Bᵀ d B of one tile on CANOPY_LN lanes, d[r][s] at
// d + r·rs + s·ps (the map itself, or a zero-padded copy), component ξ
// at out + ξ·vs, cnt lanes stored.
static inline __attribute__((always_inline)) void K(w4in_tile)(const float *d, long rs, long ps, float *out, long vs, int cnt) {
	float R[6][6][CANOPY_LN], O[6][CANOPY_LN];
	for (int s = 0; s < 6; s++)
		for (int l = 0; l < CANOPY_LN; l++) {
			const float *c = d + s * ps + l;
			float d0 = c[0], d1 = c[rs], d2 = c[2 * rs], d3 = c[3 * rs], d4 = c[4 * rs], d5 = c[5 * rs];
			R[0][s][l] = (d0 * 4.0f - d2 * 5.0f) + d4;
			R[1][s][l] = (d3 + d4) - (d1 + d2) * 4.0f;
			R[2][s][l] = (d4 - d3) + (d1 - d2) * 4.0f;
			R[3][s][l] = (d4 - d2) + (d3 - d1) * 2.0f;
			R[4][s][l] = (d4 - d2) - (d3 - d1) * 2.0f;
			R[5][s][l] = (d1 * 4.0f - d3 * 5.0f) + d5;
		}
	for (int i = 0; i < 6; i++) {
		for (int l = 0; l < CANOPY_LN; l++) {
			float d0 = R[i][0][l], d1 = R[i][1][l], d2 = R[i][2][l], d3 = R[i][3][l], d4 = R[i][4][l], d5 = R[i][5][l];
			O[0][l] = (d0 * 4.0f - d2 * 5.0f) + d4;
			O[1][l] = (d3 + d4) - (d1 + d2) * 4.0f;
			O[2][l] = (d4 - d3) + (d1 - d2) * 4.0f;
			O[3][l] = (d4 - d2) + (d3 - d1) * 2.0f;
			O[4][l] = (d4 - d2) - (d3 - d1) * 2.0f;
			O[5][l] = (d1 * 4.0f - d3 * 5.0f) + d5;
		}
		for (int jj = 0; jj < 6; jj++)
			K(lanes_out)(out + (long)(i * 6 + jj) * vs, O[jj], cnt);
	}
}

// wino4_in_l: V = Bᵀ d B (wino4_in's operations) for columns [j0, j0+nb):
// a tile inside the map with all its lanes is read in place, the others
// through a zero-padded copy.
static void K(wino4_in_l)(const float *x, int c, int h, int w, int n, int j0, int nb, float *v, long vs, long ldv) {
	const int tw = (w + 3) / 4;
	const long cs = (long)h * w * n, rs = (long)w * n;
	float D[6][6][CANOPY_LN];
	struct K(lanes_run) g[CANOPY_LG];
	for (int j = j0; j < j0 + nb;) {
		int runs = K(lanes_geom)(g, j, j0 + nb, j0, n);
		for (int ci = 0; ci < c; ci++) {
			const float *plane = x + ci * cs;
			float *vc = v + ci * ldv;
			for (int k = 0; k < runs; k++) {
				int y0 = 4 * (g[k].pos / tw) - 1, x0 = 4 * (g[k].pos % tw) - 1, cnt = g[k].cnt;
				const float *src = plane + ((long)y0 * w + x0) * n + g[k].b0;
				if (cnt == CANOPY_LN && y0 >= 0 && x0 >= 0 && y0 + 5 < h && x0 + 5 < w) {
					K(w4in_tile)(src, rs, n, vc + g[k].col, vs, cnt);
					continue;
				}
				for (int r = 0; r < 6; r++)
					for (int s = 0; s < 6; s++) {
						int yy = y0 + r, xx = x0 + s;
						if (yy < 0 || yy >= h || xx < 0 || xx >= w) {
							for (int l = 0; l < CANOPY_LN; l++)
								D[r][s][l] = 0.0f;
						} else {
							K(lanes_in)(D[r][s], src + (long)r * rs + (long)s * n, cnt);
						}
					}
				K(w4in_tile)(&D[0][0][0], 6 * CANOPY_LN, CANOPY_LN, vc + g[k].col, vs, cnt);
			}
		}
		j += g[runs - 1].col + g[runs - 1].cnt - (j - j0);
	}
}

// wino4_out_l: Y = Aᵀ M A (wino4_out's operations), then bias, residual
// and ReLU (bias_row), for columns [j0, j0+nb).
static void K(wino4_out_l)(const float *m, long ms, long ldm, int j0, int nb, int oc, int h, int w, int n,
		const float *bias, const float *res, int relu, float *y) {
	const int tw = (w + 3) / 4;
	const long cs = (long)h * w * n;
	float M[36][CANOPY_LN], S[4][6][CANOPY_LN], Y[4][4][CANOPY_LN];
	struct K(lanes_run) g[CANOPY_LG];
	for (int j = j0; j < j0 + nb;) {
		int runs = K(lanes_geom)(g, j, j0 + nb, j0, n);
		for (int o = 0; o < oc; o++) {
			float bo = bias[o];
			float *out = y + o * cs;
			const float *rp = res ? res + o * cs : 0;
			for (int k = 0; k < runs; k++) {
				int cnt = g[k].cnt;
				const float *mk = m + o * ldm + g[k].col;
				long mstride = ms;
				if (cnt != CANOPY_LN) {
					for (int xi = 0; xi < 36; xi++)
						K(lanes_in)(M[xi], mk + xi * ms, cnt);
					mk = &M[0][0];
					mstride = CANOPY_LN;
				}
				for (int col = 0; col < 6; col++)
					for (int l = 0; l < CANOPY_LN; l++) {
						const float *q = mk + col * mstride + l;
						float m0 = q[0], m1 = q[6 * mstride], m2 = q[12 * mstride];
						float m3 = q[18 * mstride], m4 = q[24 * mstride], m5 = q[30 * mstride];
						float a_ = m1 + m2, b_ = m1 - m2, c_ = m3 + m4, d_ = m3 - m4;
						S[0][col][l] = (m0 + a_) + c_;
						S[1][col][l] = b_ + d_ * 2.0f;
						S[2][col][l] = a_ + c_ * 4.0f;
						S[3][col][l] = (b_ + d_ * 8.0f) + m5;
					}
				for (int r = 0; r < 4; r++)
					for (int l = 0; l < CANOPY_LN; l++) {
						float s0 = S[r][0][l], s1 = S[r][1][l], s2 = S[r][2][l];
						float s3 = S[r][3][l], s4 = S[r][4][l], s5 = S[r][5][l];
						float a_ = s1 + s2, b_ = s1 - s2, c_ = s3 + s4, d_ = s3 - s4;
						Y[r][0][l] = (s0 + a_) + c_;
						Y[r][1][l] = b_ + d_ * 2.0f;
						Y[r][2][l] = a_ + c_ * 4.0f;
						Y[r][3][l] = (b_ + d_ * 8.0f) + s5;
					}
				int ty = g[k].pos / tw, tx = g[k].pos % tw;
				for (int r = 0; r < 4 && 4 * ty + r < h; r++)
					for (int q = 0; q < 4 && 4 * tx + q < w; q++) {
						long p = ((long)(4 * ty + r) * w + 4 * tx + q) * n + g[k].b0;
						K(bias_row)(out + p, Y[r][q], cnt, bo, rp ? rp + p : 0, relu);
					}
			}
		}
		j += g[runs - 1].col + g[runs - 1].cnt - (j - j0);
	}
}

// im2col_l: the patch matrix's columns [j0, j0+nb) (copies only).
static void K(im2col_l)(const float *x, int cin, int h, int w, int n, int kh, int kw, int stride, int pad, int ow, int j0, int nb, float *col, long ldc) {
	const long cs = (long)h * w * n;
	struct K(lanes_run) g[CANOPY_LG];
	int oy[CANOPY_LG], ox[CANOPY_LG];
	for (int j = j0; j < j0 + nb;) {
		int runs = K(lanes_geom)(g, j, j0 + nb, j0, n);
		for (int k = 0; k < runs; k++) {
			oy[k] = g[k].pos / ow * stride - pad;
			ox[k] = g[k].pos % ow * stride - pad;
		}
		long r = 0;
		for (int ci = 0; ci < cin; ci++) {
			const float *plane = x + ci * cs;
			for (int ky = 0; ky < kh; ky++)
				for (int kx = 0; kx < kw; kx++) {
					float *dst = col + r * ldc;
					r++;
					for (int k = 0; k < runs; k++) {
						int iy = oy[k] + ky, ix = ox[k] + kx, cnt = g[k].cnt;
						float *d = dst + g[k].col;
						if (iy < 0 || iy >= h || ix < 0 || ix >= w) {
							for (int l = 0; l < cnt; l++)
								d[l] = 0.0f;
						} else {
							K(lanes_out)(d, plane + ((long)iy * w + ix) * n + g[k].b0, cnt);
						}
					}
				}
		}
		j += g[runs - 1].col + g[runs - 1].cnt - (j - j0);
	}
}

// maxpool_l: maxpool's separable max (rows, then columns) on n lanes.
static void K(maxpool_l)(const float *src, int h, int w, int n, float *tmp, float *dst) {
	int oh = (h + 2 - 3) / 2 + 1, ow = (w + 2 - 3) / 2 + 1;
	for (int iy = 0; iy < h; iy++) {
		const float *row = src + (long)iy * w * n;
		float *out = tmp + (long)iy * ow * n;
		for (int ox = 0; ox < ow; ox++) {
			int i = 2 * ox - 1;
			float *o = out + (long)ox * n;
			const float *a = row + (long)(ox == 0 ? 0 : i) * n;
			if (ox == 0 ? w > 1 : i + 1 < w) {
				const float *b = a + n, *c = (ox > 0 && i + 2 < w) ? a + 2 * n : a;
				for (int l = 0; l < n; l++)
					o[l] = K(max3)(a[l], b[l], c[l]);
			} else {
				for (int l = 0; l < n; l++)
					o[l] = a[l];
			}
		}
	}
	const long rs = (long)ow * n;
	for (int oy = 0; oy < oh; oy++) {
		int i = 2 * oy - 1;
		float *d = dst + (long)oy * rs;
		const float *a = tmp + (long)(i < 0 ? 0 : i) * rs;
		if (i < 0 ? h > 1 : i + 1 < h) {
			const float *b = a + rs, *c = (i >= 0 && i + 2 < h) ? a + 2 * rs : a;
			for (long k = 0; k < rs; k++)
				d[k] = K(max3)(a[k], b[k], c[k]);
		} else {
			for (long k = 0; k < rs; k++)
				d[k] = a[k];
		}
	}
}
