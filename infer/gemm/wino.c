//go:build !noblas

// Winograd F(2x2,3x3) transforms in C: the same additions in the same order
// as winoInGo/winoOutGo (wino.go), so the same bits; compiled with -O3 and,
// through target_clones, an AVX2 version the loader picks where the CPU has
// it. Only additions and subtractions: no contraction into FMA can change
// a result.
#include "wino.h"

#if defined(__x86_64__)
#define CANOPY_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define CANOPY_CLONES
#endif

CANOPY_CLONES
void canopy_wino_in(const float *x, int c, int h, int w, int tw, int t0, int nb, float *v, long vs) {
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

CANOPY_CLONES
void canopy_wino_out(const float *m, long ms, int nb, int oc, int tw, int t0, int h, int w,
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

// canopy_epilogue: y[r][j] = relu?((y[r][j] + bias[r]) + res[r][j]) for a
// block of rows × cols (row strides ldy, ldr); res may be null. The same
// order of additions as epilogueGo.
CANOPY_CLONES
void canopy_epilogue(float *y, long ldy, int rows, int cols, const float *bias, const float *res, long ldr, int relu) {
	for (int r = 0; r < rows; r++) {
		float *row = y + r * ldy;
		float b = bias[r];
		if (res) {
			const float *rr = res + r * ldr;
			for (int j = 0; j < cols; j++)
				row[j] = (row[j] + b) + rr[j];
		} else {
			for (int j = 0; j < cols; j++)
				row[j] = row[j] + b;
		}
		if (relu)
			for (int j = 0; j < cols; j++)
				row[j] = row[j] < 0 ? 0 : row[j];
	}
}

// canopy_im2col: the patch matrix of output columns [j0, j0+nb), as
// im2colGo (wino.go); copies only.
CANOPY_CLONES
void canopy_im2col(const float *x, int cin, int h, int w, int kh, int kw, int stride, int pad, int ow, int j0, int nb, float *col) {
	long r = 0;
	for (int ci = 0; ci < cin; ci++) {
		const float *plane = x + (long)ci * h * w;
		for (int ky = 0; ky < kh; ky++) {
			for (int kx = 0; kx < kw; kx++) {
				float *dst = col + r * nb;
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
