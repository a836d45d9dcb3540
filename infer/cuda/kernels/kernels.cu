// kernels.cu: canopy's CUDA kernels for the RetinaNet forward pass.
//
// One source, two compilers:
//   - nvcc builds it into kernels.fatbin (go generate; see gen.go), the
//     module the cuda backend loads through the driver API;
//   - the host C++ compiler builds it with shim.h (infer/cuda/hostkern), so
//     CI runs every kernel, with the same launch geometry, without a GPU.
// Keep to what shim.h provides: blockIdx/threadIdx/blockDim, __shared__,
// __syncthreads, fmaf, __float_to_tf32 and the nvcuda::wmma calls used below.
//
// Determinism: every output element is reduced by one thread (or one warp's
// mma chain) in a fixed k order; no atomics, no split-K. An element's value
// therefore does not depend on the batch size or its position in the grid.
//
// Layout: NCHW float32. Convolutions are implicit GEMMs:
//   Y[m, col] = sum_k W[m, k] * im2col(X)[k, col],  col = (n, oy, ox),
//   k = (ci, ky, kx), with bias, residual add and ReLU in the epilogue.

#ifdef __CUDACC__
#include <mma.h>
#define CANOPY_INLINE __device__ __forceinline__
#else
#include "shim.h"
#endif

// Tile sizes; infer/cuda/kernels/kernels.go holds the same numbers (a test
// checks that they agree).
#define CONV_BM 64
#define CONV_BN 64
#define CONV_BK 16
#define CONV_THREADS 256
#define TC_BM 64
#define TC_BN 64
#define TC_BK 16
#define TC_THREADS 128
#define ELEM_THREADS 256

// col_t is one column of im2col(X): an output pixel (n, oy, ox), decomposed
// once per thread (a thread loads one column throughout the k loop).
struct col_t {
	const float *base; // image n of X
	int iy0, ix0;      // top-left input tap
	int ok;            // inside the batch
};

CANOPY_INLINE col_t im2col_col(const float *__restrict__ x, int gn, int Ncol, int C, int H, int W,
                               int S, int P, int OW, int ohw)
{
	col_t c;
	c.ok = gn < Ncol;
	if (!c.ok)
		gn = 0;
	int img = gn / ohw, r = gn - img * ohw;
	int oy = r / OW, ox = r - oy * OW;
	c.base = x + (long long)img * C * H * W;
	c.iy0 = oy * S - P;
	c.ix0 = ox * S - P;
	return c;
}

// im2col_at is the element k of column c, 0 outside the image.
CANOPY_INLINE float im2col_at(const col_t &c, int gk, int Kd, int H, int W, int KH, int KW)
{
	if (!c.ok || gk >= Kd)
		return 0.f;
	int kk = KH * KW;
	int ci = gk / kk, q = gk - ci * kk;
	int ky = q / KW, kx = q - ky * KW;
	int iy = c.iy0 + ky, ix = c.ix0 + kx;
	if (iy < 0 || iy >= H || ix < 0 || ix >= W)
		return 0.f;
	return c.base[((long long)ci * H + iy) * W + ix];
}

// epilogue: v + bias (+ residual), then ReLU as torch's max(v, 0) (NaN stays).
CANOPY_INLINE void conv_store(float *__restrict__ y, const float *__restrict__ bias,
                              const float *__restrict__ res, float acc, int gm, int gn,
                              int M, int ohw, int relu)
{
	int img = gn / ohw, r = gn - img * ohw;
	long long o = ((long long)img * M + gm) * ohw + r;
	float v = acc + bias[gm];
	if (res)
		v += res[o];
	if (relu && !(v > 0.f) && v == v)
		v = 0.f;
	y[o] = v;
}

// conv_f32: strict FP32. Block: CONV_THREADS threads, a CONV_BM×CONV_BN
// tile of Y; each thread owns a 4×4 patch and accumulates it with fmaf in
// k order. Grid: (ceil(Ncol/BN), ceil(M/BM)).
extern "C" __global__ void conv_f32(const float *__restrict__ x, const float *__restrict__ wt,
                                    const float *__restrict__ bias, const float *__restrict__ res,
                                    float *__restrict__ y, int N, int C, int H, int W, int M,
                                    int KH, int KW, int S, int P, int OH, int OW, int relu)
{
	__shared__ float As[CONV_BK][CONV_BM];
	__shared__ float Bs[CONV_BK][CONV_BN];
	const int Kd = C * KH * KW, ohw = OH * OW, Ncol = N * ohw;
	const int m0 = blockIdx.y * CONV_BM, n0 = blockIdx.x * CONV_BN;
	const int tid = threadIdx.x;
	const int tm = (tid / 16) * 4, tn = (tid % 16) * 4;
	float acc[4][4];
	for (int i = 0; i < 4; i++)
		for (int j = 0; j < 4; j++)
			acc[i][j] = 0.f;
	// This thread loads column tid % BN of every B tile, rows tid / BN + k·(THREADS/BN).
	const col_t col = im2col_col(x, n0 + tid % CONV_BN, Ncol, C, H, W, S, P, OW, ohw);
	for (int k0 = 0; k0 < Kd; k0 += CONV_BK) {
		for (int i = 0; i < (CONV_BM * CONV_BK) / CONV_THREADS; i++) {
			int e = tid + i * CONV_THREADS;
			int mm = e / CONV_BK, kk = e % CONV_BK;
			int gm = m0 + mm, gk = k0 + kk;
			As[kk][mm] = (gm < M && gk < Kd) ? wt[(long long)gm * Kd + gk] : 0.f;
		}
		for (int i = 0; i < (CONV_BN * CONV_BK) / CONV_THREADS; i++) {
			int e = tid + i * CONV_THREADS;
			int kk = e / CONV_BN, nn = e % CONV_BN;
			Bs[kk][nn] = im2col_at(col, k0 + kk, Kd, H, W, KH, KW);
		}
		__syncthreads();
		for (int kk = 0; kk < CONV_BK; kk++) {
			float a[4], b[4];
			for (int i = 0; i < 4; i++)
				a[i] = As[kk][tm + i];
			for (int j = 0; j < 4; j++)
				b[j] = Bs[kk][tn + j];
			for (int i = 0; i < 4; i++)
				for (int j = 0; j < 4; j++)
					acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
		}
		__syncthreads();
	}
	for (int i = 0; i < 4; i++) {
		int gm = m0 + tm + i;
		if (gm >= M)
			continue;
		for (int j = 0; j < 4; j++) {
			int gn = n0 + tn + j;
			if (gn < Ncol)
				conv_store(y, bias, res, acc[i][j], gm, gn, M, ohw, relu);
		}
	}
}

// conv_tf32: TF32 tensor cores (sm_80+), wmma m16n16k8. Block: TC_THREADS
// threads (4 warps), a TC_BM×TC_BN tile; warp w owns the 32×32 quarter
// (w/2, w%2) as 2×2 accumulator fragments. Operands are rounded to TF32
// (cvt.rna) as they are staged in shared memory; accumulation is FP32.
// Grid: (ceil(Ncol/BN), ceil(M/BM)).
#define TC_LDA (TC_BK + 4)
#define TC_LDB (TC_BN + 4)
#define TC_LDC (TC_BN + 4)
extern "C" __global__ void conv_tf32(const float *__restrict__ x, const float *__restrict__ wt,
                                     const float *__restrict__ bias, const float *__restrict__ res,
                                     float *__restrict__ y, int N, int C, int H, int W, int M,
                                     int KH, int KW, int S, int P, int OH, int OW, int relu)
{
	using namespace nvcuda;
	__shared__ __align__(32) float As[TC_BM * TC_LDA];
	__shared__ __align__(32) float Bs[TC_BK * TC_LDB];
	__shared__ __align__(32) float Cs[TC_BM * TC_LDC];
	const int Kd = C * KH * KW, ohw = OH * OW, Ncol = N * ohw;
	const int m0 = blockIdx.y * TC_BM, n0 = blockIdx.x * TC_BN;
	const int tid = threadIdx.x, warp = tid / 32;
	const int wm = (warp / 2) * 32, wn = (warp % 2) * 32;
	const col_t col = im2col_col(x, n0 + tid % TC_BN, Ncol, C, H, W, S, P, OW, ohw);
	wmma::fragment<wmma::accumulator, 16, 16, 8, float> c[2][2];
	for (int i = 0; i < 2; i++)
		for (int j = 0; j < 2; j++)
			wmma::fill_fragment(c[i][j], 0.f);
	for (int k0 = 0; k0 < Kd; k0 += TC_BK) {
		for (int i = 0; i < (TC_BM * TC_BK) / TC_THREADS; i++) {
			int e = tid + i * TC_THREADS;
			int mm = e / TC_BK, kk = e % TC_BK;
			int gm = m0 + mm, gk = k0 + kk;
			float v = (gm < M && gk < Kd) ? wt[(long long)gm * Kd + gk] : 0.f;
			As[mm * TC_LDA + kk] = wmma::__float_to_tf32(v);
		}
		for (int i = 0; i < (TC_BN * TC_BK) / TC_THREADS; i++) {
			int e = tid + i * TC_THREADS;
			int kk = e / TC_BN, nn = e % TC_BN;
			float v = im2col_at(col, k0 + kk, Kd, H, W, KH, KW);
			Bs[kk * TC_LDB + nn] = wmma::__float_to_tf32(v);
		}
		__syncthreads();
		for (int ks = 0; ks < TC_BK; ks += 8) {
			wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> a[2];
			wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::row_major> b[2];
			for (int i = 0; i < 2; i++)
				wmma::load_matrix_sync(a[i], As + (wm + 16 * i) * TC_LDA + ks, TC_LDA);
			for (int j = 0; j < 2; j++)
				wmma::load_matrix_sync(b[j], Bs + ks * TC_LDB + wn + 16 * j, TC_LDB);
			for (int i = 0; i < 2; i++)
				for (int j = 0; j < 2; j++)
					wmma::mma_sync(c[i][j], a[i], b[j], c[i][j]);
		}
		__syncthreads();
	}
	for (int i = 0; i < 2; i++)
		for (int j = 0; j < 2; j++)
			wmma::store_matrix_sync(Cs + (wm + 16 * i) * TC_LDC + wn + 16 * j, c[i][j], TC_LDC,
			                        wmma::mem_row_major);
	__syncthreads();
	for (int e = tid; e < TC_BM * TC_BN; e += TC_THREADS) {
		int mm = e / TC_BN, nn = e % TC_BN;
		int gm = m0 + mm, gn = n0 + nn;
		if (gm < M && gn < Ncol)
			conv_store(y, bias, res, Cs[mm * TC_LDC + nn], gm, gn, M, ohw, relu);
	}
}

// maxpool3s2: 3×3, stride 2, padding 1 (padding never wins). One thread per
// output; NaN propagates as in torch. Grid: ceil(N·C·OH·OW / ELEM_THREADS).
extern "C" __global__ void maxpool3s2(const float *__restrict__ x, float *__restrict__ y, int N,
                                      int C, int H, int W, int OH, int OW)
{
	long long i = (long long)blockIdx.x * ELEM_THREADS + threadIdx.x;
	long long total = (long long)N * C * OH * OW;
	if (i >= total)
		return;
	int ox = (int)(i % OW), oy = (int)((i / OW) % OH);
	long long nc = i / ((long long)OH * OW);
	const float *p = x + nc * H * W;
	// The centre tap (2·oy, 2·ox) is always inside the image.
	float m = p[(oy * 2) * W + ox * 2];
	for (int ky = 0; ky < 3; ky++) {
		int iy = oy * 2 - 1 + ky;
		if (iy < 0 || iy >= H)
			continue;
		for (int kx = 0; kx < 3; kx++) {
			int ix = ox * 2 - 1 + kx;
			if (ix < 0 || ix >= W)
				continue;
			float v = p[iy * W + ix];
			if (v > m || (v != v && m == m))
				m = v;
		}
	}
	y[i] = m;
}

// nearest_idx is torch's nearest index: floor(d · in/out) in float32,
// d/2 exactly when out = 2·in.
CANOPY_INLINE int nearest_idx(int d, int in, int out)
{
	if (out == 2 * in)
		return d >> 1;
	int v = (int)((float)d * ((float)in / (float)out));
	return v < in - 1 ? v : in - 1;
}

// upsample_add: lat += nearest-upsample(top) to lat's size (the FPN's top-down
// path). Grid: ceil(N·C·H·W / ELEM_THREADS).
extern "C" __global__ void upsample_add(float *__restrict__ lat, const float *__restrict__ top,
                                        int N, int C, int H, int W, int TH, int TW)
{
	long long i = (long long)blockIdx.x * ELEM_THREADS + threadIdx.x;
	long long total = (long long)N * C * H * W;
	if (i >= total)
		return;
	int xx = (int)(i % W), yy = (int)((i / W) % H);
	long long nc = i / ((long long)H * W);
	lat[i] += top[nc * TH * TW + nearest_idx(yy, TH, H) * TW + nearest_idx(xx, TW, W)];
}

// relu_copy: y = max(x, 0) (P7's input). Grid: ceil(n / ELEM_THREADS).
extern "C" __global__ void relu_copy(const float *__restrict__ x, float *__restrict__ y, long long n)
{
	long long i = (long long)blockIdx.x * ELEM_THREADS + threadIdx.x;
	if (i >= n)
		return;
	float v = x[i];
	y[i] = (v > 0.f || v != v) ? v : 0.f;
}
