// shim.h: what kernels.cu needs from CUDA, for the host C++ compiler
// (infer/cuda/hostkern). Threads of a block are coroutines that the launcher
// in hostkern runs round-robin: __syncthreads switches to the next thread,
// so a block's shared memory (function statics: one block runs at a time)
// sees the same barrier order as on the GPU. A wmma fragment holds the
// whole tile (warp-uniform calls give every thread the same
// answer), and only lane 0 of each warp does the work: the kernel never
// reads a fragment's elements, so the other lanes' copies are never used);
// mma_sync accumulates with fmaf in k order, so the TF32 kernel
// agrees with the GPU to rounding, not to the bit. fmaf and the FP32
// kernel's k order are the GPU's, so conv_f32 agrees bit for bit.
#ifndef CANOPY_SHIM_H
#define CANOPY_SHIM_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#define CANOPY_INLINE static inline
#define __global__
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))

struct shim_dim3 {
	unsigned x, y, z;
};
extern shim_dim3 blockIdx, threadIdx, blockDim, gridDim;
void __syncthreads(void);

// Atomics: the shim runs one thread at a time, so a plain update is atomic.
inline unsigned atomicMax(unsigned *p, unsigned v)
{
	unsigned o = *p;
	if (v > o)
		*p = v;
	return o;
}
inline unsigned atomicAdd(unsigned *p, unsigned v)
{
	unsigned o = *p;
	*p = o + v;
	return o;
}

namespace nvcuda {
namespace wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
namespace precision {
struct tf32 {};
}
enum layout_t { mem_row_major };

template <class Use, int M, int N, int K, class T, class L = void> struct fragment;
template <int M, int N, int K> struct fragment<matrix_a, M, N, K, precision::tf32, row_major> {
	enum { R = M, C = K };
	float x[M * K];
};
template <int M, int N, int K> struct fragment<matrix_b, M, N, K, precision::tf32, row_major> {
	enum { R = K, C = N };
	float x[K * N];
};
template <int M, int N, int K> struct fragment<accumulator, M, N, K, float, void> {
	enum { R = M, C = N };
	float x[M * N];
};

// lane0 is true in the thread that carries its warp's wmma work.
inline bool lane0() { return threadIdx.x % 32 == 0; }

template <class F> inline void fill_fragment(F &f, float v)
{
	if (!lane0())
		return;
	for (int i = 0; i < F::R * F::C; i++)
		f.x[i] = v;
}
template <class F> inline void load_matrix_sync(F &f, const float *p, unsigned ld)
{
	if (!lane0())
		return;
	for (int r = 0; r < F::R; r++)
		for (int c = 0; c < F::C; c++)
			f.x[r * F::C + c] = p[r * ld + c];
}
template <int M, int N, int K>
inline void mma_sync(fragment<accumulator, M, N, K, float> &d,
                     const fragment<matrix_a, M, N, K, precision::tf32, row_major> &a,
                     const fragment<matrix_b, M, N, K, precision::tf32, row_major> &b,
                     const fragment<accumulator, M, N, K, float> &c)
{
	if (!lane0())
		return;
	float out[M * N];
	for (int i = 0; i < M; i++)
		for (int j = 0; j < N; j++) {
			float s = c.x[i * N + j];
			for (int k = 0; k < K; k++)
				s = fmaf(a.x[i * K + k], b.x[k * N + j], s);
			out[i * N + j] = s;
		}
	memcpy(d.x, out, sizeof out);
}
template <int M, int N, int K>
inline void store_matrix_sync(float *p, const fragment<accumulator, M, N, K, float> &f, unsigned ld,
                              layout_t)
{
	if (!lane0())
		return;
	for (int r = 0; r < M; r++)
		for (int c = 0; c < N; c++)
			p[r * ld + c] = f.x[r * N + c];
}
// __float_to_tf32 is cvt.rna.tf32.f32: round to 10 mantissa bits, ties away
// from zero; Inf and NaN pass through.
inline float __float_to_tf32(float v)
{
	uint32_t u;
	memcpy(&u, &v, 4);
	if ((u & 0x7f800000u) != 0x7f800000u)
		u = (u + 0x1000u) & 0xffffe000u;
	memcpy(&v, &u, 4);
	return v;
}
} // namespace wmma
} // namespace nvcuda

#endif
