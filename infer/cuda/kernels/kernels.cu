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

// ---------------------------------------------------------------------------
// The stages around the network (infer/retinanet/gpupost.go drives them):
// the transform, the postprocess and the losses. Each reproduces the CPU
// code's float32 and float64 operations one for one (transform.go,
// forward.go, nms.go, loss.go); neither compiler contracts a·b+c (gen.sh's
// --fmad=false, launch.cc's fp-contract=off), fmaf is the one rounding of
// the FMA instruction on both, and canopy_exp is the CPU code's exp
// (expd in infer/retinanet/expd.go), so the bits agree.

// go_max and go_min are Go's max and min on float32: NaN wins, and
// max(−0, +0) is +0, min(−0, +0) is −0.
CANOPY_INLINE float go_max(float a, float b)
{
	if (a != a || b != b)
		return a != a ? a : b;
	if (a == b)
		return copysignf(1.f, a) < 0.f ? b : a;
	return a > b ? a : b;
}
CANOPY_INLINE float go_min(float a, float b)
{
	if (a != a || b != b)
		return a != a ? a : b;
	if (a == b)
		return copysignf(1.f, a) < 0.f ? a : b;
	return a < b ? a : b;
}

// canopy_exp is e^x in float64, fdlibm's algorithm (argument reduction by
// k·ln 2 in two parts, a degree-5 Remez polynomial), operation for
// operation as expd in infer/retinanet/expd.go.
CANOPY_INLINE double canopy_exp(double x)
{
	const double ln2hi = 6.93147180369123816490e-01, ln2lo = 1.90821492927058770002e-10,
	             log2e = 1.44269504088896338700e+00;
	const double p1 = 1.66666666666666657415e-01, p2 = -2.77777777770155933842e-03,
	             p3 = 6.61375632143793436117e-05, p4 = -1.65339022054652515390e-06,
	             p5 = 4.13813679705723846039e-08;
	const double near0 = 1.0 / 268435456.0; // 2^−28
	if (x != x)
		return x;
	if (x > 7.09782712893383973096e+02)
		return x * 1e308 * 1e308; // +Inf
	if (x < -7.45133219101941108420e+02)
		return 0.0;
	if (-near0 < x && x < near0)
		return 1.0 + x;
	int k = 0;
	if (x < 0)
		k = (int)(log2e * x - 0.5);
	else if (x > 0)
		k = (int)(log2e * x + 0.5);
	double kd = (double)k;
	double hi = x - kd * ln2hi;
	double lo = kd * ln2lo;
	double r = hi - lo;
	double t = r * r;
	double c = r - t * (p1 + t * (p2 + t * (p3 + t * (p4 + t * p5))));
	double y = 1.0 - ((lo - (r * c) / (2.0 - c)) - hi);
	return ldexp(y, k);
}

// canopy_sigmoid is forward.go's sigmoid: 1/(1+e^−v) in float64, rounded
// to float32.
CANOPY_INLINE float canopy_sigmoid(float v) { return (float)(1.0 / (1.0 + canopy_exp(-(double)v))); }

// lin_t is one output coordinate's two source taps and their weights
// (transform.go's lin).
struct lin_t {
	int i0, i1;
	float l0, l1;
};

// lin_weight is transform.go's linearWeights for output coordinate d.
CANOPY_INLINE lin_t lin_weight(int d, int in, int out, int fma_index)
{
	float ratio = (float)in / (float)out;
	float src;
	if (fma_index) {
		src = fmaf(ratio, (float)d + 0.5f, -0.5f);
	} else {
		float t = ratio * ((float)d + 0.5f);
		src = t - 0.5f;
	}
	if (src < 0.f)
		src = 0.f;
	lin_t w;
	w.i0 = (int)src;
	w.i1 = w.i0 < in - 1 ? w.i0 + 1 : w.i0;
	w.l1 = go_min(go_max(src - (float)w.i0, 0.f), 1.f);
	w.l0 = 1.f - w.l1;
	return w;
}

// blend_px is BlendRule.blend: p00 = r0[i0], p01 = r0[i1], p10 = r1[i0],
// p11 = r1[i1]. rule: 0 fma, 1 no-fma, 2 fma-1t (retinanet.BlendRule).
CANOPY_INLINE float blend_px(int rule, float p00, float p01, float p10, float p11, lin_t a,
                             float h0, float h1)
{
	if (rule == 1) {
		float a00 = p00 * a.l0, a01 = p01 * a.l1, a10 = p10 * a.l0, a11 = p11 * a.l1;
		float t0 = a00 + a01, t1 = a10 + a11;
		float u0 = t0 * h0, u1 = t1 * h1;
		return u0 + u1;
	}
	if (rule == 2) {
		float w01 = h0 * a.l1, w00 = h0 * a.l0, w10 = h1 * a.l0, w11 = h1 * a.l1;
		float acc = p01 * w01;
		acc = fmaf(p00, w00, acc);
		acc = fmaf(p10, w10, acc);
		return fmaf(p11, w11, acc);
	}
	float b01 = p01 * a.l1, b11 = p11 * a.l1;
	float t0 = fmaf(p00, a.l0, b01);
	float t1 = fmaf(p10, a.l0, b11);
	float u1 = t1 * h1;
	return fmaf(t0, h0, u1);
}

// unit8 is imagefile's sample conversion: float32(float64(k)/255).
CANOPY_INLINE float unit8(unsigned char k) { return (float)((double)k / 255.0); }

// transform_img: one image's normalize, bilinear resize and zero padding
// (transform.go's normalizeResizePad) into dst + dst_off, a [3, PH, PW]
// slot of the batch. The source is CHW, 8-bit (src8, imagefile's samples)
// or float32 (src32, when src8 is null). Grid: ceil(3·PH·PW / ELEM_THREADS).
extern "C" __global__ void transform_img(const unsigned char *__restrict__ src8,
                                         const float *__restrict__ src32, float *__restrict__ dst,
                                         long long dst_off, int H, int W, int OH, int OW, int PH,
                                         int PW, float m0, float m1, float m2, float s0, float s1,
                                         float s2, int rule)
{
	long long i = (long long)blockIdx.x * ELEM_THREADS + threadIdx.x;
	long long plane = (long long)PH * PW;
	if (i >= 3 * plane)
		return;
	int c = (int)(i / plane);
	int y = (int)((i - c * plane) / PW), x = (int)(i % PW);
	float *out = dst + dst_off;
	if (y >= OH || x >= OW) {
		out[i] = 0.f;
		return;
	}
	float m = c == 0 ? m0 : (c == 1 ? m1 : m2);
	float s = c == 0 ? s0 : (c == 1 ? s1 : s2);
	long long base = (long long)c * H * W;
#define CANOPY_PX(j) ((src8 ? unit8(src8[base + (j)]) : src32[base + (j)]) - m) / s
	if (OH == H && OW == W) {
		out[i] = CANOPY_PX((long long)y * W + x);
		return;
	}
	lin_t wy = lin_weight(y, H, OH, rule == 2), wx = lin_weight(x, W, OW, rule == 2);
	long long r0 = (long long)wy.i0 * W, r1 = (long long)wy.i1 * W;
	float p00 = CANOPY_PX(r0 + wx.i0), p01 = CANOPY_PX(r0 + wx.i1);
	float p10 = CANOPY_PX(r1 + wx.i0), p11 = CANOPY_PX(r1 + wx.i1);
#undef CANOPY_PX
	out[i] = blend_px(rule, p00, p01, p10, p11, wx, wy.l0, wy.l1);
}

// The postprocess (forward.go's levelCandidates and finish, nms.go's
// batchedNMS) for a batch of images. A level's candidates are sorted by a
// 64-bit key, (0x7fffffff − score bits) << 32 | index: ascending keys are
// descending scores, ties by index, as levelCandidates sorts them (scores
// are ≥ 0, so their bits order as the values). Keys live in segments of S
// (a power of two ≥ every level's A·K·gh·gw), one per (image, level).
// POST_CAND: floats per candidate (box[4], score, label).
#define POST_LEVELS 5
#define POST_CAND 6
#define POST_NO_KEY 0xffffffffffffffffull

// post_keys: level L's keys (sigmoid above thresh) or POST_NO_KEY, for
// every slot of the n segments (n·S threads). cls is the level's
// [n, A·K, hw] head output.
extern "C" __global__ void post_keys(const float *__restrict__ cls,
                                     unsigned long long *__restrict__ keys, int n, int AK, int K,
                                     int hw, int S, int L, float thresh)
{
	long long i = (long long)blockIdx.x * ELEM_THREADS + threadIdx.x;
	if (i >= (long long)n * S)
		return;
	int img = (int)(i / S), e = (int)(i % S);
	unsigned long long key = POST_NO_KEY;
	if (e < AK * hw) {
		int loc = e / AK, ak = e % AK; // e = (loc·A + a)·K + k; ak = a·K + k
		float s = canopy_sigmoid(cls[((long long)img * AK + ak) * hw + loc]);
		if (s > thresh) {
			unsigned int bits;
			memcpy(&bits, &s, 4);
			key = ((unsigned long long)(0x7fffffffu - bits) << 32) | (unsigned int)e;
		}
	}
	keys[((long long)img * POST_LEVELS + L) * S + e] = key;
}

// bitonic_step is one compare-exchange step (stage k, distance j) of a
// bitonic sort of every S-long segment of keys, ascending. total threads.
extern "C" __global__ void bitonic_step(unsigned long long *__restrict__ keys, long long total,
                                        int S, int j, int k)
{
	long long i = (long long)blockIdx.x * ELEM_THREADS + threadIdx.x;
	if (i >= total)
		return;
	long long l = i ^ j;
	if (l <= i)
		return;
	int up = ((int)(i & (S - 1)) & k) == 0;
	unsigned long long a = keys[i], b = keys[l];
	if ((a > b) == (up != 0)) {
		keys[i] = b;
		keys[l] = a;
	}
}

// post_decode: the first topk keys of level L's segments decoded into
// candidates cand[img][L·topk + r] (POST_CAND floats; score −Inf for none):
// the anchor (cells: the 5 levels' 9 cell anchors, 4 floats each; shift
// x·(pw/gw), y·(ph/gh)), BoxCoder's decoding with dw, dh clamped to clip,
// the box clipped to the resized size (imgp[img] = H, W, rh, rw).
// n·topk threads.
extern "C" __global__ void post_decode(const unsigned long long *__restrict__ keys,
                                       const float *__restrict__ reg, const float *__restrict__ cells,
                                       const float *__restrict__ imgp, float *__restrict__ cand,
                                       int n, int topk, int S, int L, int K, int gh, int gw, int ph,
                                       int pw, float clip)
{
	long long i = (long long)blockIdx.x * ELEM_THREADS + threadIdx.x;
	if (i >= (long long)n * topk)
		return;
	int img = (int)(i / topk), r = (int)(i % topk);
	float *c = cand + ((long long)img * POST_LEVELS * topk + (long long)L * topk + r) * POST_CAND;
	unsigned long long key = r < S ? keys[((long long)img * POST_LEVELS + L) * S + r] : POST_NO_KEY;
	if (key == POST_NO_KEY) {
		c[0] = c[1] = c[2] = c[3] = 0.f;
		c[4] = -INFINITY;
		c[5] = 0.f;
		return;
	}
	unsigned int bits = 0x7fffffffu - (unsigned int)(key >> 32);
	int idx = (int)(key & 0xffffffffu);
	float score;
	memcpy(&score, &bits, 4);
	int ai = idx / K, label = idx % K;
	int loc = ai / 9, a = ai % 9;
	int y = loc / gw, x = loc % gw, hw = gh * gw;
	float sy = (float)(y * (ph / gh)), sx = (float)(x * (pw / gw));
	const float *cc = cells + (L * 9 + a) * 4;
	float an0 = sx + cc[0], an1 = sy + cc[1], an2 = sx + cc[2], an3 = sy + cc[3];
	const float *d = reg + (long long)img * 9 * 4 * hw;
	float d0 = d[(a * 4 + 0) * hw + loc], d1 = d[(a * 4 + 1) * hw + loc];
	float d2 = d[(a * 4 + 2) * hw + loc], d3 = d[(a * 4 + 3) * hw + loc];
	float aw = an2 - an0, ah = an3 - an1;
	float haw = 0.5f * aw, hah = 0.5f * ah;
	float cx = an0 + haw, cy = an1 + hah;
	float dw = go_min(d2, clip), dh = go_min(d3, clip);
	float ox = d0 * aw, oy = d1 * ah;
	float pcx = ox + cx, pcy = oy + cy;
	float ew = (float)canopy_exp((double)dw), eh = (float)canopy_exp((double)dh);
	float pwid = ew * aw, phei = eh * ah;
	float hw2 = 0.5f * pwid, hh2 = 0.5f * phei;
	float Wd = (float)(int)imgp[img * 4 + 3], Hd = (float)(int)imgp[img * 4 + 2];
	c[0] = go_min(go_max(pcx - hw2, 0.f), Wd);
	c[1] = go_min(go_max(pcy - hh2, 0.f), Hd);
	c[2] = go_min(go_max(pcx + hw2, 0.f), Wd);
	c[3] = go_min(go_max(pcy + hh2, 0.f), Hd);
	c[4] = score;
	c[5] = (float)label;
}

// post_count is the number of level L's candidates (of topk, sorted by
// descending score, the missing last) whose score is above s (or, with
// ge, at least s).
CANOPY_INLINE int post_count(const float *cl, int topk, float s, int ge)
{
	int lo = 0, hi = topk;
	while (lo < hi) {
		int mid = (lo + hi) / 2;
		float v = cl[(long long)mid * POST_CAND + 4];
		if (ge ? v >= s : v > s)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

// post_pos is where post_merge puts level L's candidate r (score s) in
// the sorted list.
CANOPY_INLINE int post_pos(const float *base, int topk, int L, int r, float s)
{
	int pos = r;
	for (int M = 0; M < POST_LEVELS; M++)
		if (M != L)
			pos += post_count(base + (long long)M * topk * POST_CAND, topk, s, M < L);
	return pos;
}

// post_merge: the levels' candidates merged into one list per image,
// sorted[img][pos], in batchedNMS's order: descending score, ties by level
// and then by the level's order (a stable sort of the concatenation).
// n·5·topk threads.
extern "C" __global__ void post_merge(const float *__restrict__ cand, float *__restrict__ sorted,
                                      int n, int topk)
{
	long long i = (long long)blockIdx.x * ELEM_THREADS + threadIdx.x;
	if (i >= (long long)n * POST_LEVELS * topk)
		return;
	int img = (int)(i / ((long long)POST_LEVELS * topk));
	int q = (int)(i % ((long long)POST_LEVELS * topk));
	int L = q / topk, r = q % topk;
	const float *base = cand + (long long)img * POST_LEVELS * topk * POST_CAND;
	const float *c = base + (long long)q * POST_CAND;
	float s = c[4];
	if (s == -INFINITY)
		return;
	int pos = post_pos(base, topk, L, r, s);
	float *o = sorted + ((long long)img * POST_LEVELS * topk + pos) * POST_CAND;
	for (int j = 0; j < POST_CAND; j++)
		o[j] = c[j];
}

// post_nms_prep: per image (n threads), meta[img] = {count, mx, offset}:
// the candidates' count, and, when batchedNMS uses the coordinate offset
// (count·4 ≤ 4000), the largest coordinate mx (from 0).
extern "C" __global__ void post_nms_prep(const float *__restrict__ cand, float *__restrict__ meta,
                                         int n, int topk)
{
	long long img = (long long)blockIdx.x * ELEM_THREADS + threadIdx.x;
	if (img >= n)
		return;
	const float *base = cand + img * POST_LEVELS * topk * POST_CAND;
	int cnt = 0;
	for (int L = 0; L < POST_LEVELS; L++)
		cnt += post_count(base + (long long)L * topk * POST_CAND, topk, -INFINITY, 0);
	float mx = 0.f;
	int offset = cnt * 4 <= 4000;
	if (offset) {
		for (int L = 0; L < POST_LEVELS; L++)
			for (int r = 0; r < topk; r++) {
				const float *c = base + ((long long)L * topk + r) * POST_CAND;
				if (c[4] == -INFINITY)
					break;
				for (int j = 0; j < 4; j++)
					mx = go_max(mx, c[j]);
			}
	}
	meta[img * 3 + 0] = (float)cnt;
	meta[img * 3 + 1] = mx;
	meta[img * 3 + 2] = (float)offset;
}

// nms_box is candidate c's box as batchedNMS compares it: shifted by
// label·(mx+1) in the offset mode.
CANOPY_INLINE void nms_box(const float *c, int offset, float mx, float *b)
{
	float off = 0.f;
	if (offset) {
		float m1 = mx + 1.f;
		off = c[5] * m1;
	}
	for (int j = 0; j < 4; j++)
		b[j] = offset ? c[j] + off : c[j];
}

// post_nms_mask: bit j%64 of mask[img][i][j/64] is set when the sorted
// candidate j > i would be suppressed by i (nms.go: IoU in float32 above
// thr; in the per-label mode only within a label). n·N·W threads (N =
// 5·topk candidates, W = ceil(N/64) words).
extern "C" __global__ void post_nms_mask(const float *__restrict__ sorted,
                                         const float *__restrict__ meta,
                                         unsigned long long *__restrict__ mask, int n, int N, int W,
                                         double thr)
{
	long long t = (long long)blockIdx.x * ELEM_THREADS + threadIdx.x;
	if (t >= (long long)n * N * W)
		return;
	int img = (int)(t / ((long long)N * W));
	int i = (int)((t / W) % N), w = (int)(t % W);
	int cnt = (int)meta[img * 3], offset = meta[img * 3 + 2] != 0.f;
	float mx = meta[img * 3 + 1];
	unsigned long long bits = 0;
	const float *base = sorted + (long long)img * N * POST_CAND;
	if (i < cnt) {
		float bi[4];
		nms_box(base + (long long)i * POST_CAND, offset, mx, bi);
		float ai = (bi[2] - bi[0]) * (bi[3] - bi[1]);
		float li = base[(long long)i * POST_CAND + 5];
		for (int b = 0; b < 64; b++) {
			int j = w * 64 + b;
			if (j <= i || j >= cnt)
				continue;
			const float *cj = base + (long long)j * POST_CAND;
			if (!offset && cj[5] != li)
				continue;
			float bj[4];
			nms_box(cj, offset, mx, bj);
			float aj = (bj[2] - bj[0]) * (bj[3] - bj[1]);
			float iw = go_max(0.f, go_min(bi[2], bj[2]) - go_max(bi[0], bj[0]));
			float ih = go_max(0.f, go_min(bi[3], bj[3]) - go_max(bi[1], bj[1]));
			float inter = iw * ih;
			float uni = ai + aj;
			uni = uni - inter;
			float iou = inter / uni;
			if ((double)iou > thr)
				bits |= 1ull << b;
		}
	}
	mask[t] = bits;
}

// The per-label mode's final order (nms.go's batchedNMS): the survivors
// taken in index order (the concatenation of the levels), then ordered by
// torch's unstable descending sort, which libstdc++'s std::sort makes: an
// introsort whose ties come out as its comparisons leave them
// (torchsort.go's torchSortDesc, step for step). The ranges are sorted
// independently, so an explicit stack in place of the recursion changes
// nothing; its depths strictly decrease upwards, so it holds at most
// 2·⌊log₂ n⌋ + 1 ranges.
#define TS_THRESHOLD 16

// ts_less: a before b (torch's comparator: NaN first, then greater).
CANOPY_INLINE int ts_less(const float *base, int a, int b)
{
	float x = base[(long long)a * POST_CAND + 4], y = base[(long long)b * POST_CAND + 4];
	return (x != x && y == y) || x > y;
}

CANOPY_INLINE void ts_swap(int *idx, int i, int j)
{
	int t = idx[i];
	idx[i] = idx[j];
	idx[j] = t;
}

CANOPY_INLINE void ts_median_to_first(const float *base, int *idx, int result, int a, int b, int c)
{
	if (ts_less(base, idx[a], idx[b])) {
		if (ts_less(base, idx[b], idx[c]))
			ts_swap(idx, result, b);
		else if (ts_less(base, idx[a], idx[c]))
			ts_swap(idx, result, c);
		else
			ts_swap(idx, result, a);
	} else if (ts_less(base, idx[a], idx[c]))
		ts_swap(idx, result, a);
	else if (ts_less(base, idx[b], idx[c]))
		ts_swap(idx, result, c);
	else
		ts_swap(idx, result, b);
}

CANOPY_INLINE int ts_partition_pivot(const float *base, int *idx, int first, int last)
{
	int mid = first + (last - first) / 2;
	ts_median_to_first(base, idx, first, first + 1, mid, last - 1);
	int lo = first + 1, hi = last;
	for (;;) {
		while (ts_less(base, idx[lo], idx[first]))
			lo++;
		hi--;
		while (ts_less(base, idx[first], idx[hi]))
			hi--;
		if (lo >= hi)
			return lo;
		ts_swap(idx, lo, hi);
		lo++;
	}
}

CANOPY_INLINE void ts_adjust_heap(const float *base, int *idx, int first, int hole, int n, int x)
{
	int top = hole, child = hole;
	while (child < (n - 1) / 2) {
		child = 2 * (child + 1);
		if (ts_less(base, idx[first + child], idx[first + child - 1]))
			child--;
		idx[first + hole] = idx[first + child];
		hole = child;
	}
	if ((n & 1) == 0 && child == (n - 2) / 2) {
		child = 2 * (child + 1);
		idx[first + hole] = idx[first + child - 1];
		hole = child - 1;
	}
	int parent = (hole - 1) / 2;
	while (hole > top && ts_less(base, idx[first + parent], x)) {
		idx[first + hole] = idx[first + parent];
		hole = parent;
		parent = (hole - 1) / 2;
	}
	idx[first + hole] = x;
}

CANOPY_INLINE void ts_heap_sort(const float *base, int *idx, int first, int last)
{
	int n = last - first;
	for (int parent = (n - 2) / 2; parent >= 0; parent--)
		ts_adjust_heap(base, idx, first, parent, n, idx[first + parent]);
	for (int end = last - 1; end - first > 0; end--) {
		int x = idx[end];
		idx[end] = idx[first];
		ts_adjust_heap(base, idx, first, 0, end - first, x);
	}
}

CANOPY_INLINE void ts_linear_insert(const float *base, int *idx, int last)
{
	int x = idx[last];
	while (ts_less(base, x, idx[last - 1])) {
		idx[last] = idx[last - 1];
		last--;
	}
	idx[last] = x;
}

CANOPY_INLINE void ts_insertion(const float *base, int *idx, int first, int last)
{
	for (int i = first + 1; i < last; i++) {
		if (ts_less(base, idx[i], idx[first])) {
			int x = idx[i];
			for (int k = i; k > first; k--)
				idx[k] = idx[k - 1];
			idx[first] = x;
		} else
			ts_linear_insert(base, idx, i);
	}
}

// torch_sort_desc orders idx[0..n) (positions in base) as torchSortDesc.
CANOPY_INLINE void torch_sort_desc(const float *base, int *idx, int n)
{
	if (n <= 1)
		return;
	int lg = 0;
	while ((1u << (lg + 1)) <= (unsigned)n)
		lg++;
	int sf[66], sl[66], sd[66];
	int top = 0;
	sf[0] = 0;
	sl[0] = n;
	sd[0] = 2 * lg;
	top = 1;
	while (top > 0) {
		top--;
		int first = sf[top], last = sl[top], depth = sd[top];
		while (last - first > TS_THRESHOLD) {
			if (depth == 0) {
				ts_heap_sort(base, idx, first, last);
				break;
			}
			depth--;
			int cut = ts_partition_pivot(base, idx, first, last);
			sf[top] = cut;
			sl[top] = last;
			sd[top] = depth;
			top++;
			last = cut;
		}
	}
	if (n <= TS_THRESHOLD) {
		ts_insertion(base, idx, 0, n);
		return;
	}
	ts_insertion(base, idx, 0, TS_THRESHOLD);
	for (int i = TS_THRESHOLD; i < n; i++)
		ts_linear_insert(base, idx, i);
}

// post_nms_scan: per image (n threads), the greedy NMS over the mask in
// score order; out[img] = count, then dets detections of POST_CAND floats,
// the boxes scaled back to the original image (imgp: H, W, rh, rw).
// removed: n·W words of scratch. In the offset mode the survivors are in
// score order and the scan stops at dets kept; in the per-label mode every
// survivor is found, and then ordered as batchedNMS orders them (index
// order, then torch_sort_desc) in ord (n·N ints of scratch) before the
// first dets are taken. cand: the unmerged candidates (post_decode).
extern "C" __global__ void post_nms_scan(const float *__restrict__ sorted,
                                         const float *__restrict__ meta,
                                         const unsigned long long *__restrict__ mask,
                                         unsigned long long *__restrict__ removed,
                                         const float *__restrict__ imgp, float *__restrict__ out,
                                         int n, int N, int W, int dets,
                                         const float *__restrict__ cand, int *__restrict__ ord,
                                         int topk)
{
	long long img = (long long)blockIdx.x * ELEM_THREADS + threadIdx.x;
	if (img >= n)
		return;
	int cnt = (int)meta[img * 3], offset = meta[img * 3 + 2] != 0.f;
	unsigned long long *rm = removed + img * W;
	for (int w = 0; w < W; w++)
		rm[w] = 0;
	const float *base = sorted + img * N * POST_CAND;
	const unsigned long long *mk = mask + img * N * W;
	float *o = out + img * (1 + (long long)dets * POST_CAND);
	float H = (float)(int)imgp[img * 4], Wd = (float)(int)imgp[img * 4 + 1];
	float rh = (float)(int)imgp[img * 4 + 2], rw = (float)(int)imgp[img * 4 + 3];
	float ry = H / rh, rx = Wd / rw;
	int *od = ord + img * N;
	int kept = 0;
	for (int i = 0; i < cnt && (!offset || kept < dets); i++) {
		if (rm[i / 64] >> (i % 64) & 1)
			continue;
		od[kept++] = i;
		for (int w = i / 64; w < W; w++)
			rm[w] |= mk[(long long)i * W + w];
	}
	if (!offset) {
		// the survivors in index order: level by level, each level's rank
		const float *cb = cand + img * (long long)POST_LEVELS * topk * POST_CAND;
		int m = 0;
		for (int L = 0; L < POST_LEVELS; L++)
			for (int r = 0; r < topk; r++) {
				float s = cb[((long long)L * topk + r) * POST_CAND + 4];
				if (s == -INFINITY)
					break;
				int pos = post_pos(cb, topk, L, r, s);
				if (!(rm[pos / 64] >> (pos % 64) & 1))
					od[m++] = pos;
			}
		torch_sort_desc(base, od, m);
		kept = m < dets ? m : dets;
	}
	for (int k = 0; k < kept; k++) {
		const float *c = base + (long long)od[k] * POST_CAND;
		float *d = o + 1 + (long long)k * POST_CAND;
		d[0] = c[0] * rx;
		d[1] = c[1] * ry;
		d[2] = c[2] * rx;
		d[3] = c[3] * ry;
		d[4] = c[4];
		d[5] = c[5];
	}
	o[0] = (float)kept;
}

// ---------------------------------------------------------------------------
// The validation losses (loss.go's lossAcc) for a batch: the anchors of all
// levels concatenated (level, location, cell anchor), lv[L] = {gh, gw,
// first anchor}, the truth boxes on the resized image gt[img][g] = {box,
// label} (gtn[img] of them). match holds a truth index, LOSS_BG or
// LOSS_SKIP per anchor.
#define LOSS_BG -1
#define LOSS_SKIP -2

// fill_u32: p[0..n) = v.
extern "C" __global__ void fill_u32(unsigned int *__restrict__ p, long long n, unsigned int v)
{
	long long i = (long long)blockIdx.x * ELEM_THREADS + threadIdx.x;
	if (i < n)
		p[i] = v;
}

// loss_anchor is anchor i of the concatenation (loss.go's anchorAt).
CANOPY_INLINE void loss_anchor(const float *cells, const float *lv, int i, int ph, int pw, float *an)
{
	int L = 0;
	while (L < 4 && i >= (int)lv[(L + 1) * 3 + 2])
		L++;
	int gh = (int)lv[L * 3], gw = (int)lv[L * 3 + 1];
	int local = i - (int)lv[L * 3 + 2];
	int loc = local / 9, a = local % 9;
	int y = loc / gw, x = loc % gw;
	float sy = (float)(y * (ph / gh)), sx = (float)(x * (pw / gw));
	const float *cc = cells + (L * 9 + a) * 4;
	an[0] = sx + cc[0];
	an[1] = sy + cc[1];
	an[2] = sx + cc[2];
	an[3] = sy + cc[3];
}

// loss_iou is loss.go's iou: box_iou of one pair in float32.
CANOPY_INLINE float loss_iou(const float *b, const float *an)
{
	float w = go_max(go_min(b[2], an[2]) - go_max(b[0], an[0]), 0.f);
	float h = go_max(go_min(b[3], an[3]) - go_max(b[1], an[1]), 0.f);
	float inter = w * h;
	float a1 = (b[2] - b[0]) * (b[3] - b[1]);
	float a2 = (an[2] - an[0]) * (an[3] - an[1]);
	float u = a1 + a2;
	u = u - inter;
	return inter / u;
}

// loss_match: per anchor (n·NA threads), its best truth (the first on a
// tie; 0 when it overlaps none) in arg, the thresholds' match, and each
// truth's best IoU in gtbest (float bits; IoUs are ≥ 0, so the bits order
// as the values and the maximum does not depend on the order).
extern "C" __global__ void loss_match(const float *__restrict__ gt, const float *__restrict__ gtn,
                                      const float *__restrict__ cells, const float *__restrict__ lv,
                                      int *__restrict__ match, int *__restrict__ arg,
                                      unsigned int *__restrict__ gtbest, int n, int NA, int G,
                                      int ph, int pw)
{
	long long t = (long long)blockIdx.x * ELEM_THREADS + threadIdx.x;
	if (t >= (long long)n * NA)
		return;
	int img = (int)(t / NA), i = (int)(t % NA);
	float an[4];
	loss_anchor(cells, lv, i, ph, pw, an);
	int cnt = (int)gtn[img], best_g = 0;
	float best = 0.f;
	for (int g = 0; g < cnt; g++) {
		const float *b = gt + ((long long)img * G + g) * 5;
		float v = loss_iou(b, an);
		if (v > best) {
			best = v;
			best_g = g;
		}
		if (v > 0.f) {
			unsigned int bits;
			memcpy(&bits, &v, 4);
			atomicMax(gtbest + (long long)img * G + g, bits);
		}
	}
	arg[t] = best_g;
	match[t] = best < 0.4f ? LOSS_BG : (best < 0.5f ? LOSS_SKIP : best_g);
}

// loss_lowq: the low-quality rule (n·NA threads): an anchor at a truth's
// best IoU (or at 0 when that truth overlaps no anchor) gets its own best
// truth back; fg[img] counts the foreground anchors.
extern "C" __global__ void loss_lowq(const float *__restrict__ gt, const float *__restrict__ gtn,
                                     const float *__restrict__ cells, const float *__restrict__ lv,
                                     int *__restrict__ match, const int *__restrict__ arg,
                                     const unsigned int *__restrict__ gtbest,
                                     unsigned int *__restrict__ fg, int n, int NA, int G, int ph,
                                     int pw)
{
	long long t = (long long)blockIdx.x * ELEM_THREADS + threadIdx.x;
	if (t >= (long long)n * NA)
		return;
	int img = (int)(t / NA), i = (int)(t % NA);
	float an[4];
	loss_anchor(cells, lv, i, ph, pw, an);
	int cnt = (int)gtn[img];
	int m = match[t];
	for (int g = 0; g < cnt; g++) {
		unsigned int bits = gtbest[(long long)img * G + g];
		float top;
		memcpy(&top, &bits, 4);
		float v = loss_iou(gt + ((long long)img * G + g) * 5, an);
		if (v == top)
			m = arg[t];
	}
	match[t] = m;
	if (m >= 0)
		atomicAdd(fg + img, 1u);
}

// go_maxd is Go's max on float64 (NaN wins).
CANOPY_INLINE double go_maxd(double a, double b)
{
	if (a != a || b != b)
		return a != a ? a : b;
	return a > b ? a : b;
}

// focal_term is loss.go's focal: sigmoid_focal_loss of one logit in
// float64 (α 0.25, γ 2).
CANOPY_INLINE double focal_term(float x32, int pos)
{
	double x = (double)x32;
	double e = canopy_exp(-fabs(x));
	double l = log1p(e);
	double p = 1.0 / (1.0 + e), q = e / (1.0 + e);
	if (x < 0) {
		double s = p;
		p = q;
		q = s;
	}
	if (pos) {
		double ce = go_maxd(-x, 0.0) + l;
		return 0.25 * ce * q * q;
	}
	double ce = go_maxd(x, 0.0) + l;
	return 0.75 * ce * p * p;
}

// loss_sums: level L's per-channel sums (n·(A·K + A·4) threads): channel
// ch < A·K is the classification channel a·K+k (focal terms over the
// locations in order, ignored anchors left out), then the regression
// channel a·4+j (|delta − encoded target| of the foreground anchors).
// sums[img][L][ch], float64, with CH = A·K + A·4 channels per level.
extern "C" __global__ void loss_sums(const float *__restrict__ cls, const float *__restrict__ reg,
                                     const float *__restrict__ gt, const float *__restrict__ cells,
                                     const float *__restrict__ lv, const int *__restrict__ match,
                                     double *__restrict__ sums, int n, int NA, int G, int K, int L,
                                     int ph, int pw)
{
	int AK = 9 * K, CH = AK + 36;
	long long t = (long long)blockIdx.x * ELEM_THREADS + threadIdx.x;
	if (t >= (long long)n * CH)
		return;
	int img = (int)(t / CH), ch = (int)(t % CH);
	int gh = (int)lv[L * 3], gw = (int)lv[L * 3 + 1], start = (int)lv[L * 3 + 2];
	int hw = gh * gw;
	const int *mt = match + (long long)img * NA + start;
	double s = 0.0;
	if (ch < AK) {
		int a = ch / K, k = ch % K;
		const float *x = cls + ((long long)img * AK + ch) * hw;
		for (int loc = 0; loc < hw; loc++) {
			int m = mt[loc * 9 + a];
			if (m == LOSS_SKIP)
				continue;
			int pos = m >= 0 && (int)gt[((long long)img * G + m) * 5 + 4] == k;
			s += focal_term(x[loc], pos);
		}
	} else {
		int c = ch - AK, a = c / 4, j = c % 4;
		const float *d = reg + ((long long)img * 36 + c) * hw;
		for (int loc = 0; loc < hw; loc++) {
			int m = mt[loc * 9 + a];
			if (m < 0)
				continue;
			float an[4];
			loss_anchor(cells, lv, start + loc * 9 + a, ph, pw, an);
			const float *g = gt + ((long long)img * G + m) * 5;
			float ew = an[2] - an[0], eh = an[3] - an[1];
			float hew = 0.5f * ew, heh = 0.5f * eh;
			float ecx = an[0] + hew, ecy = an[1] + heh;
			float gw2 = g[2] - g[0], gh2 = g[3] - g[1];
			float hgw = 0.5f * gw2, hgh = 0.5f * gh2;
			float gcx = g[0] + hgw, gcy = g[1] + hgh;
			float tj;
			if (j == 0)
				tj = (gcx - ecx) / ew;
			else if (j == 1)
				tj = (gcy - ecy) / eh;
			else if (j == 2)
				tj = (float)log((double)(gw2 / ew));
			else
				tj = (float)log((double)(gh2 / eh));
			s += (double)fabsf(d[loc] - tj);
		}
	}
	sums[((long long)img * 5 + L) * CH + ch] = s;
}

// loss_final: per image (n threads), the sums added in loss.go's order
// (level by level, classification channels then regression channels) and
// divided by max(1, foreground) in float32: out[img] = {classification,
// box regression, foreground}.
extern "C" __global__ void loss_final(const double *__restrict__ sums,
                                      const unsigned int *__restrict__ fg, float *__restrict__ out,
                                      int n, int K)
{
	long long img = (long long)blockIdx.x * ELEM_THREADS + threadIdx.x;
	if (img >= n)
		return;
	int AK = 9 * K, CH = AK + 36;
	double c = 0.0, r = 0.0;
	for (int L = 0; L < 5; L++) {
		const double *s = sums + (img * 5 + L) * CH;
		for (int ch = 0; ch < AK; ch++)
			c += s[ch];
		for (int ch = AK; ch < CH; ch++)
			r += s[ch];
	}
	unsigned int f = fg[img];
	float d = (float)(f > 1u ? f : 1u);
	out[img * 3] = (float)c / d;
	out[img * 3 + 1] = (float)r / d;
	out[img * 3 + 2] = (float)f;
}

// ---------------------------------------------------------------------------
// TreeFormer (infer/treeformer's GPU runner, gpu.go): the point model's
// layers beyond its convolutions. Each is one thread per output (or per
// row of a row reduction), reduced in a fixed order, and is the CPU
// kernel's operation sequence (infer/treeformer/kernels.go,
// infer/gemm/kernels_body.h), so on the host shim each gives the CPU's
// bits (tested), and on a GPU too but for tf_ca_gate's exp (the CUDA
// libm's, within one ulp of double).
//
// Layout: a map of C channels over P positions is NCHW (element (c, p) at
// c·P + p: canopy's exact kernels) or NHWC, token-major (p·C + c: the
// cuDNN path, and the transformer's N×C tokens); nhwc says which.

CANOPY_INLINE long long tf_at(int nhwc, int c, long long p, int C, long long P)
{
	return nhwc ? p * C + c : (long long)c * P + p;
}

// tf_split is output i's channel and position in a map of C channels over
// P positions.
CANOPY_INLINE void tf_split(long long i, int C, long long P, int nhwc, int *c, long long *p)
{
	if (nhwc) {
		*p = i / C;
		*c = (int)(i - *p * C);
	} else {
		*c = (int)(i / P);
		*p = i - (long long)*c * P;
	}
}

CANOPY_INLINE double tf_from_bits(unsigned long long b)
{
#ifdef __CUDACC__
	return __longlong_as_double((long long)b);
#else
	double d;
	memcpy(&d, &b, 8);
	return d;
#endif
}

CANOPY_INLINE unsigned long long tf_to_bits(double d)
{
#ifdef __CUDACC__
	return (unsigned long long)__double_as_longlong(d);
#else
	unsigned long long b;
	memcpy(&b, &d, 8);
	return b;
#endif
}

// tf_exp is infer/gemm's exp_fast: n = floor(x·log2e + 0.5), r = x − n·ln2,
// Taylor to degree 8, times 2ⁿ from the bits of n + 1023 + 1.5·2⁵²; 0 below
// −708, +∞ above 709.
CANOPY_INLINE double tf_exp(double x)
{
	double xc = x < -708.0 ? -708.0 : (x > 709.0 ? 709.0 : x);
	double n = floor(xc * 1.4426950408889634 + 0.5);
	double r = xc - n * 0.69314718055994529;
	double p = 1 + r * (1 + r * (1.0 / 2 + r * (1.0 / 6 + r * (1.0 / 24 + r * (1.0 / 120 + r * (1.0 / 720 + r * (1.0 / 5040 + r * (1.0 / 40320))))))));
	double m = n + 1023.0 + 6755399441055744.0;
	double s = tf_from_bits(tf_to_bits(m) << 52);
	double v = p * s;
	v = x < -708.0 ? 0.0 : v;
	return x > 709.0 ? tf_from_bits(0x7ff0000000000000ull) : v;
}

// tf_gelu is infer/gemm's gelu1: erf by Abramowitz–Stegun 7.1.26 in double.
CANOPY_INLINE float tf_gelu(float xf)
{
	double v = xf;
	double z = fabs(v) * 0.70710678118654757;
	double t = 1 / (1 + 0.3275911 * z);
	double erfc = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429)))) * tf_exp(-z * z);
	double g = v < 0 ? (0.5 * v) * erfc : (0.5 * v) * (2 - erfc);
	return (float)g;
}

// tf_layernorm: LayerNorm over the C channels of each of P positions (one
// thread per position; y may be x): mean and biased variance summed in
// double in channel order (two passes), rstd = 1/√(var + eps), then
// (float)((x − mean)·rstd)·g + b in float.
extern "C" __global__ void tf_layernorm(const float *x, float *y, const float *__restrict__ g,
                                        const float *__restrict__ b, int P, int C, int nhwc, double eps)
{
	long long p = (long long)blockIdx.x * ELEM_THREADS + threadIdx.x;
	if (p >= P)
		return;
	double s = 0;
	for (int c = 0; c < C; c++)
		s += (double)x[tf_at(nhwc, c, p, C, P)];
	double mean = s / (double)C;
	double q = 0;
	for (int c = 0; c < C; c++) {
		double d = (double)x[tf_at(nhwc, c, p, C, P)] - mean;
		q += d * d;
	}
	double rstd = 1 / sqrt(q / (double)C + eps);
	for (int c = 0; c < C; c++) {
		long long i = tf_at(nhwc, c, p, C, P);
		float n = (float)(((double)x[i] - mean) * rstd);
		float v = n * g[c];
		y[i] = v + b[c];
	}
}

// tf_dwconv_gelu: the Mix-FFN's depthwise 3×3 convolution (zero padding 1)
// of an H×W map of C channels, the taps in (ky, kx) order added to the bias
// one product at a time, then GELU. w is tap-major [9][C]. One thread per
// output.
extern "C" __global__ void tf_dwconv_gelu(const float *__restrict__ x, float *__restrict__ y,
                                          const float *__restrict__ w, const float *__restrict__ b,
                                          int H, int W, int C, int nhwc)
{
	long long i = (long long)blockIdx.x * ELEM_THREADS + threadIdx.x;
	long long P = (long long)H * W;
	if (i >= P * C)
		return;
	int c;
	long long p;
	tf_split(i, C, P, nhwc, &c, &p);
	int yy = (int)(p / W), xx = (int)(p - (long long)yy * W);
	float acc = b[c];
	for (int ky = 0; ky < 3; ky++) {
		int sy = yy + ky - 1;
		if (sy < 0 || sy >= H)
			continue;
		for (int kx = 0; kx < 3; kx++) {
			int sx = xx + kx - 1;
			if (sx < 0 || sx >= W)
				continue;
			float prod = w[(ky * 3 + kx) * C + c] * x[tf_at(nhwc, c, (long long)sy * W + sx, C, P)];
			acc = acc + prod;
		}
	}
	y[i] = tf_gelu(acc);
}

// tf_gemm: c[bt][i][j] = Σ_k a[ao + bt·ab + i·ai + k·ak] · b[bo + bt·bb +
// k·bk + j·bj] over a batch of bt (the attention's heads), for i < M, j <
// N, written at c[co + bt·cb + i·ci + j·cj]: one thread per output, fmaf
// from 0 in k order. (Offsets, not offset pointers: a launch's pointers
// are whole allocations.)
extern "C" __global__ void tf_gemm(const float *__restrict__ a, const float *__restrict__ b,
                                   float *__restrict__ c, int batch, int M, int N, int K,
                                   long long ao, long long ab, long long ai, long long ak,
                                   long long bo, long long bb, long long bk, long long bj,
                                   long long co, long long cb, long long ci, long long cj)
{
	long long t = (long long)blockIdx.x * ELEM_THREADS + threadIdx.x;
	if (t >= (long long)batch * M * N)
		return;
	long long j = t % N, r = t / N;
	long long i = r % M, bt = r / M;
	const float *pa = a + ao + bt * ab + i * ai;
	const float *pb = b + bo + bt * bb + j * bj;
	float s = 0.f;
	for (int k = 0; k < K; k++)
		s = fmaf(pa[k * ak], pb[k * bk], s);
	c[co + bt * cb + i * ci + j * cj] = s;
}

// tf_softmax: each of rows rows of n contiguous values divided by scale in
// float, then infer/gemm's softmax_row: exp(x − max) (the difference in
// float), the double sum in order, each times 1/sum. One thread per row.
extern "C" __global__ void tf_softmax(float *__restrict__ s, long long rows, int n, float scale)
{
	long long r = (long long)blockIdx.x * ELEM_THREADS + threadIdx.x;
	if (r >= rows)
		return;
	float *x = s + r * n;
	for (int k = 0; k < n; k++)
		x[k] = x[k] / scale;
	float m = x[0];
	for (int k = 0; k < n; k++)
		m = x[k] > m ? x[k] : m;
	for (int k = 0; k < n; k++)
		x[k] = (float)tf_exp((double)(x[k] - m));
	double sum = 0;
	for (int k = 0; k < n; k++)
		sum += (double)x[k];
	double inv = 1 / sum;
	for (int k = 0; k < n; k++)
		x[k] = (float)((double)x[k] * inv);
}

// tf_align_tap is bilinear align_corners' source tap of output d of a
// side in → out: src = ((float)(in−1)/(float)(out−1))·d in float, i0 =
// ⌊src⌋, i1 = i0+1 clamped, λ = src − i0.
CANOPY_INLINE void tf_align_tap(int d, int in, int out, int *i0, int *i1, float *l)
{
	float scale = out > 1 ? (float)(in - 1) / (float)(out - 1) : 0.f;
	float src = scale * (float)d;
	int k = (int)src;
	k = k < in - 1 ? k : in - 1;
	*i0 = k;
	*i1 = k + 1 < in - 1 ? k + 1 : in - 1;
	*l = src - (float)k;
}

// tf_upsample2: bilinear ×2 with align_corners of an H×W map of C
// channels into 2H×2W (same layout): out = h0·(w0·a + w1·b) + h1·(w0·c +
// w1·d), each product rounded. One thread per output.
extern "C" __global__ void tf_upsample2(const float *__restrict__ x, float *__restrict__ y, int C,
                                        int H, int W, int nhwc)
{
	long long i = (long long)blockIdx.x * ELEM_THREADS + threadIdx.x;
	int OH = 2 * H, OW = 2 * W;
	long long OP = (long long)OH * OW, P = (long long)H * W;
	if (i >= OP * C)
		return;
	int c;
	long long p;
	tf_split(i, C, OP, nhwc, &c, &p);
	int oy = (int)(p / OW), ox = (int)(p - (long long)oy * OW);
	int y0, y1, x0, x1;
	float ly, lx;
	tf_align_tap(oy, H, OH, &y0, &y1, &ly);
	tf_align_tap(ox, W, OW, &x0, &x1, &lx);
	float h0 = 1 - ly, w0 = 1 - lx;
	float ta = w0 * x[tf_at(nhwc, c, (long long)y0 * W + x0, C, P)];
	float tb = lx * x[tf_at(nhwc, c, (long long)y0 * W + x1, C, P)];
	float a = ta + tb;
	float tc = w0 * x[tf_at(nhwc, c, (long long)y1 * W + x0, C, P)];
	float td = lx * x[tf_at(nhwc, c, (long long)y1 * W + x1, C, P)];
	float bb = tc + td;
	float u = h0 * a, v = ly * bb;
	y[i] = u + v;
}

// tf_chan_mean: each channel's mean over the P positions, summed in double
// in position order, divided in double and rounded once. One thread per
// channel.
extern "C" __global__ void tf_chan_mean(const float *__restrict__ x, float *__restrict__ mean, int C,
                                        long long P, int nhwc)
{
	long long c = (long long)blockIdx.x * ELEM_THREADS + threadIdx.x;
	if (c >= C)
		return;
	double s = 0;
	for (long long p = 0; p < P; p++)
		s += (double)x[tf_at(nhwc, (int)c, p, C, P)];
	mean[c] = (float)(s / (double)P);
}

// tf_ca_gate: the channel attention's gate of channel c,
// sigmoid(fc2[c]·relu(fc1·mean)), each dot product in float one product
// at a time in order, the sigmoid 1/(1 + exp(−s)) in double rounded once.
// fc1 is [R][C], fc2 [C][R]. One thread per channel (each recomputes the
// R hidden values: R·C products, small beside the map it gates).
extern "C" __global__ void tf_ca_gate(const float *__restrict__ mean, const float *__restrict__ fc1,
                                      const float *__restrict__ fc2, float *__restrict__ gate, int C,
                                      int R)
{
	long long c = (long long)blockIdx.x * ELEM_THREADS + threadIdx.x;
	if (c >= C)
		return;
	float s = 0.f;
	for (int r = 0; r < R; r++) {
		float m = 0.f;
		for (int k = 0; k < C; k++) {
			float prod = fc1[(long long)r * C + k] * mean[k];
			m = m + prod;
		}
		m = m > 0.f ? m : 0.f;
		float prod = fc2[c * R + r] * m;
		s = s + prod;
	}
	gate[c] = (float)(1 / (1 + exp(-(double)s)));
}

// tf_scale_chan: y = gate[c]·x over a map of C channels and P positions.
extern "C" __global__ void tf_scale_chan(const float *__restrict__ x, const float *__restrict__ gate,
                                         float *__restrict__ y, int C, long long P, int nhwc)
{
	long long i = (long long)blockIdx.x * ELEM_THREADS + threadIdx.x;
	if (i >= P * C)
		return;
	int c = nhwc ? (int)(i % C) : (int)(i / P);
	y[i] = gate[c] * x[i];
}

// tf_add: y += x over n values.
extern "C" __global__ void tf_add(float *__restrict__ y, const float *__restrict__ x, long long n)
{
	long long i = (long long)blockIdx.x * ELEM_THREADS + threadIdx.x;
	if (i < n)
		y[i] = y[i] + x[i];
}

// The crop classifier (infer/crop/gpu.go): each crop cut from its source
// image on the device, normalized and resized as infer/crop's Transform
// (torch's antialiased bilinear resize: the width pass, then the height
// pass, each a tap sum in tapSum's order), then, after the ResNet body,
// the global average pool, fc and softmax in float64 as the CPU engine's
// forward (model.go), and the argmax. A pass that keeps its side runs
// with identity taps (one tap of weight 1: the value itself, as skipping
// it). Taps: ints [min[out], size[out]] at taps + taps_off, weights
// [out · stride] at wts + wts_off (aaAxis's, made on the host).

// crop_tap_sum is tapSum: the first product rounded, then `acc += v·w`
// (rounded product, rounded add) for the first 4·⌊(size−1)/4⌋ taps after
// it, fused multiply-adds for the rest (fma; none without it).
#define CROP_TAP_SUM(PX, sz, wt, fma, out)                                                     \
	do {                                                                                   \
		float acc_ = (PX(0)) * (wt)[0];                                                    \
		int vec_ = (fma) ? 1 + ((sz) - 1) / 4 * 4 : (sz);                                  \
		int j_ = 1;                                                                        \
		for (; j_ < vec_; j_++)                                                            \
			acc_ = acc_ + (PX(j_)) * (wt)[j_];                                         \
		for (; j_ < (sz); j_++)                                                            \
			acc_ = fmaf(PX(j_), (wt)[j_], acc_);                                       \
		out = acc_;                                                                        \
	} while (0)

// crop_hpass: one crop's window (x0, y0, w, h) of a [3, SH, SW] source
// (8-bit src8 or float32 src32 at src_off), normalized ((v − m)/s in
// float32, when norm) and resized in width to ow: tmp + tmp_off, [3, h,
// ow]. Grid: ceil(3·h·ow / ELEM_THREADS).
extern "C" __global__ void crop_hpass(const unsigned char *__restrict__ src8,
                                      const float *__restrict__ src32, long long src_off, int SW,
                                      int SH, int x0, int y0, int w, int h, int ow,
                                      const int *__restrict__ taps, long long taps_off,
                                      const float *__restrict__ wts, long long wts_off, int stride,
                                      float *__restrict__ tmp, long long tmp_off, float m0, float m1,
                                      float m2, float s0, float s1, float s2, int norm, int fma)
{
	long long i = (long long)blockIdx.x * ELEM_THREADS + threadIdx.x;
	if (i >= 3LL * h * ow)
		return;
	int c = (int)(i / ((long long)h * ow));
	int r = (int)((i / ow) % h), o = (int)(i % ow);
	const int *tp = taps + taps_off;
	int lo = tp[o], sz = tp[ow + o];
	if (sz <= 0 || lo < 0 || lo + sz > w) {
		tmp[tmp_off + i] = 0.f;
		return;
	}
	const float *wt = wts + wts_off + (long long)o * stride;
	float m = c == 0 ? m0 : (c == 1 ? m1 : m2);
	float s = c == 0 ? s0 : (c == 1 ? s1 : s2);
	long long base = src_off + ((long long)c * SH + y0 + r) * SW + x0 + lo;
#define CROP_RAW(j) (src8 ? unit8(src8[base + (j)]) : src32[base + (j)])
#define CROP_PX(j) (norm ? (CROP_RAW(j) - m) / s : CROP_RAW(j))
	float v;
	CROP_TAP_SUM(CROP_PX, sz, wt, fma, v);
#undef CROP_PX
#undef CROP_RAW
	tmp[tmp_off + i] = v;
}

// crop_vpass: the height pass of one crop, tmp + tmp_off [3, h, ow] to its
// slot dst + dst_off [3, oh, ow] of the batch. Grid: ceil(3·oh·ow /
// ELEM_THREADS).
extern "C" __global__ void crop_vpass(const float *__restrict__ tmp, long long tmp_off, int h,
                                      int ow, int oh, const int *__restrict__ taps,
                                      long long taps_off, const float *__restrict__ wts,
                                      long long wts_off, int stride, float *__restrict__ dst,
                                      long long dst_off, int fma)
{
	long long i = (long long)blockIdx.x * ELEM_THREADS + threadIdx.x;
	if (i >= 3LL * oh * ow)
		return;
	int c = (int)(i / ((long long)oh * ow));
	int r = (int)((i / ow) % oh), col = (int)(i % ow);
	const int *tp = taps + taps_off;
	int lo = tp[r], sz = tp[oh + r];
	if (sz <= 0 || lo < 0 || lo + sz > h) {
		dst[dst_off + i] = 0.f;
		return;
	}
	const float *wt = wts + wts_off + (long long)r * stride;
	const float *src = tmp + tmp_off + ((long long)c * h + lo) * ow + col;
#define CROP_COL(j) src[(long long)(j) * ow]
	float v;
	CROP_TAP_SUM(CROP_COL, sz, wt, fma, v);
#undef CROP_COL
	dst[dst_off + i] = v;
}
#undef CROP_TAP_SUM

// crop_pool: the global average pool of x [N, C, HW] (NCHW FP32): each
// channel's mean in float64, summed in order, rounded once. N·C threads.
extern "C" __global__ void crop_pool(const float *__restrict__ x, float *__restrict__ pooled, int N,
                                     int C, int HW)
{
	long long i = (long long)blockIdx.x * ELEM_THREADS + threadIdx.x;
	if (i >= (long long)N * C)
		return;
	const float *p = x + i * HW;
	double s = 0.0;
	for (int k = 0; k < HW; k++)
		s += (double)p[k];
	pooled[i] = (float)(s / (double)HW);
}

// crop_fc: logits [N, K] = fc(pooled [N, C]) with W [K, C], B [K]: the
// bias, then the products added in channel order, in float64, rounded
// once. N·K threads.
extern "C" __global__ void crop_fc(const float *__restrict__ pooled, const float *__restrict__ W,
                                   const float *__restrict__ B, float *__restrict__ logits, int N,
                                   int C, int K)
{
	long long i = (long long)blockIdx.x * ELEM_THREADS + threadIdx.x;
	if (i >= (long long)N * K)
		return;
	int n = (int)(i / K), k = (int)(i % K);
	const float *w = W + (long long)k * C, *p = pooled + (long long)n * C;
	double s = (double)B[k];
	for (int c = 0; c < C; c++)
		s += (double)w[c] * (double)p[c];
	logits[i] = (float)s;
}

// crop_softmax: per crop (N threads), the softmax of its K logits, exp(z −
// max)/Σ in float64 (canopy_exp), rounded once per class, then the argmax
// of the probabilities (the first of equal maxima) and its value: best
// [N, 2] = {class, probability}.
extern "C" __global__ void crop_softmax(const float *__restrict__ logits, float *__restrict__ probs,
                                        float *__restrict__ best, int N, int K)
{
	long long n = (long long)blockIdx.x * ELEM_THREADS + threadIdx.x;
	if (n >= N)
		return;
	const float *z = logits + n * K;
	float *p = probs + n * K;
	double m = -INFINITY;
	for (int k = 0; k < K; k++) {
		double v = (double)z[k];
		if (v != v || m != m)
			m = m != m ? m : v; // NaN wins, as math.Max
		else if (v > m)
			m = v;
	}
	double s = 0.0;
	for (int k = 0; k < K; k++)
		s += canopy_exp((double)z[k] - m);
	int b = 0;
	for (int k = 0; k < K; k++) {
		p[k] = (float)(canopy_exp((double)z[k] - m) / s);
		if (p[k] > p[b])
			b = k;
	}
	best[n * 2] = (float)b;
	best[n * 2 + 1] = p[b];
}
