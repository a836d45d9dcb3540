// nhwc.cu: the data-movement kernels of the cuDNN path (infer/cuda/cudnn
// runs the convolutions there, in NHWC): layout changes at the network's
// ends, and the FPN's max-pool, top-down add and ReLU in NHWC, each over
// FP32 or BF16 activations (bf16 != 0: 16-bit storage, FP32 arithmetic,
// rounded to nearest even on store, as PyTorch's autocast stores them).
//
// Every output is one thread's, with no reduction across threads, so the
// host shim runs each kernel as a loop over the outputs (nhwc.cc in
// infer/cuda/hostkern): same function, same bits. Its own module
// (nhwc.fatbin), so it builds apart from kernels.cu.
#ifdef __CUDACC__
#define NHWC_FN __device__ __forceinline__
#else
#include <math.h>
#include <stdint.h>
#include <string.h>
#define NHWC_FN static inline
#endif

#define NHWC_THREADS 256

typedef unsigned short bf16_t;

NHWC_FN float bf2f(bf16_t b)
{
	union {
		unsigned u;
		float f;
	} v;
	v.u = (unsigned)b << 16;
	return v.f;
}

NHWC_FN bf16_t f2bf(float f)
{
	union {
		unsigned u;
		float f;
	} v;
	v.f = f;
	if ((v.u & 0x7fffffffu) > 0x7f800000u)
		return (bf16_t)((v.u >> 16) | 0x40); // NaN stays NaN (quiet)
	v.u += 0x7fffu + ((v.u >> 16) & 1u);
	return (bf16_t)(v.u >> 16);
}

NHWC_FN float ld(const void *p, long long i, int bf16)
{
	return bf16 ? bf2f(((const bf16_t *)p)[i]) : ((const float *)p)[i];
}

NHWC_FN void st(void *p, long long i, float v, int bf16)
{
	if (bf16)
		((bf16_t *)p)[i] = f2bf(v);
	else
		((float *)p)[i] = v;
}

// to_nhwc: y[n,h,w,c] = x[n,c,h,w]; i indexes y.
NHWC_FN void to_nhwc_at(long long i, const float *x, void *y, int N, int C, int H, int W, int bf16)
{
	int c = (int)(i % C);
	long long p = i / C; // (n, h, w)
	long long hw = (long long)H * W;
	long long n = p / hw, s = p % hw;
	st(y, i, x[(n * C + c) * hw + s], bf16);
}

// to_nchw: y[n,c,h,w] = x[n,h,w,c]; i indexes y.
NHWC_FN void to_nchw_at(long long i, const void *x, float *y, int N, int C, int H, int W, int bf16)
{
	long long hw = (long long)H * W;
	long long s = i % hw, nc = i / hw;
	int c = (int)(nc % C);
	long long n = nc / C;
	y[i] = ld(x, (n * hw + s) * C + c, bf16);
}

// maxpool3s2_nhwc: 3×3, stride 2, padding 1, NaN propagating (as the NCHW
// kernel); i indexes y [N,OH,OW,C].
NHWC_FN void maxpool_at(long long i, const void *x, void *y, int N, int C, int H, int W, int OH, int OW, int bf16)
{
	int c = (int)(i % C);
	long long p = i / C;
	int ox = (int)(p % OW), oy = (int)((p / OW) % OH);
	long long n = p / ((long long)OH * OW);
	const long long base = n * H * W;
	float m = ld(x, (base + (long long)(oy * 2) * W + ox * 2) * C + c, bf16);
	for (int ky = 0; ky < 3; ky++) {
		int iy = oy * 2 - 1 + ky;
		if (iy < 0 || iy >= H)
			continue;
		for (int kx = 0; kx < 3; kx++) {
			int ix = ox * 2 - 1 + kx;
			if (ix < 0 || ix >= W)
				continue;
			float v = ld(x, (base + (long long)iy * W + ix) * C + c, bf16);
			if (v > m || (v != v && m == m))
				m = v;
		}
	}
	st(y, i, m, bf16);
}

// nhwc_nearest is torch's nearest index (as nearest_idx in kernels.cu).
NHWC_FN int nhwc_nearest(int d, int in, int out)
{
	if (out == 2 * in)
		return d >> 1;
	int v = (int)((float)d * ((float)in / (float)out));
	return v < in - 1 ? v : in - 1;
}

// upsample_add_nhwc: lat += nearest-upsample(top); i indexes lat [N,H,W,C].
NHWC_FN void upsample_add_at(long long i, void *lat, const void *top, int N, int C, int H, int W, int TH, int TW, int bf16)
{
	int c = (int)(i % C);
	long long p = i / C;
	int xx = (int)(p % W), yy = (int)((p / W) % H);
	long long n = p / ((long long)H * W);
	long long t = ((n * TH + nhwc_nearest(yy, TH, H)) * TW + nhwc_nearest(xx, TW, W)) * C + c;
	st(lat, i, ld(lat, i, bf16) + ld(top, t, bf16), bf16);
}

// relu_copy_any: y = max(x, 0), NaN kept.
NHWC_FN void relu_at(long long i, const void *x, void *y, int bf16)
{
	float v = ld(x, i, bf16);
	st(y, i, (v > 0.f || v != v) ? v : 0.f, bf16);
}

#ifdef __CUDACC__
#define NHWC_INDEX                                                                  \
	long long i = (long long)blockIdx.x * NHWC_THREADS + threadIdx.x;            \
	if (i >= total)                                                              \
		return;

extern "C" __global__ void to_nhwc(const float *x, void *y, int N, int C, int H, int W, int bf16)
{
	long long total = (long long)N * C * H * W;
	NHWC_INDEX
	to_nhwc_at(i, x, y, N, C, H, W, bf16);
}

extern "C" __global__ void to_nchw(const void *x, float *y, int N, int C, int H, int W, int bf16)
{
	long long total = (long long)N * C * H * W;
	NHWC_INDEX
	to_nchw_at(i, x, y, N, C, H, W, bf16);
}

extern "C" __global__ void maxpool3s2_nhwc(const void *x, void *y, int N, int C, int H, int W, int OH, int OW, int bf16)
{
	long long total = (long long)N * C * OH * OW;
	NHWC_INDEX
	maxpool_at(i, x, y, N, C, H, W, OH, OW, bf16);
}

extern "C" __global__ void upsample_add_nhwc(void *lat, const void *top, int N, int C, int H, int W, int TH, int TW, int bf16)
{
	long long total = (long long)N * C * H * W;
	NHWC_INDEX
	upsample_add_at(i, lat, top, N, C, H, W, TH, TW, bf16);
}

extern "C" __global__ void relu_copy_any(const void *x, void *y, long long total, int bf16)
{
	NHWC_INDEX
	relu_at(i, x, y, bf16);
}
#endif
