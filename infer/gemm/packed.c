//go:build !noblas

// canopy's packed-weight SGEMM, C (m×n) = A (m×k) · B (k×n), row-major,
// for the convolutions whose weights are fixed for the whole run: A is
// packed once (Pack, packed.go) into panels of CANOPY_PR rows, each panel
// k columns of CANOPY_PR values, so the kernel reads the weights in order
// and never repacks them (OpenBLAS packs A again on every call, which
// costs a third of the time of a 256×256·256×48 product). B is read in
// place (its rows at stride ldb).
//
// Every element of C is one chain of fused multiply-adds, c = 0, then
// c = fma(a[p], b[p], c) for p = 0..k-1 in order, in the AVX2 and AVX-512
// clones alike, so they give the same bits, whatever the blocking. The
// generic clone (CPUs without FMA) multiplies and adds separately: its
// bits differ by rounding.
#include "wino.h"
#include <string.h>

// The generic clone must not fuse either (see kernels.c).
#pragma GCC optimize("fp-contract=off")

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#define PR CANOPY_PR

static void sgemm_packed_generic(int m, int n, int k, const float *ap, const float *b, long ldb, float *c, long ldc) {
	float acc[PR][64];
	for (int j0 = 0; j0 < n; j0 += 64) {
		int nj = n - j0 < 64 ? n - j0 : 64;
		for (int p = 0; p * PR < m; p++) {
			const float *a = ap + (long)p * k * PR;
			for (int i = 0; i < PR; i++)
				for (int j = 0; j < nj; j++)
					acc[i][j] = 0;
			for (int q = 0; q < k; q++) {
				const float *bq = b + (long)q * ldb + j0;
				for (int i = 0; i < PR; i++) {
					float ai = a[(long)q * PR + i];
					for (int j = 0; j < nj; j++) {
						float t = ai * bq[j];
						acc[i][j] = acc[i][j] + t;
					}
				}
			}
			int rows = m - p * PR < PR ? m - p * PR : PR;
			for (int i = 0; i < rows; i++)
				memcpy(c + (long)(p * PR + i) * ldc + j0, acc[i], sizeof(float) * nj);
		}
	}
}

#if defined(__x86_64__)
// AVX-512: an 8×48 tile of C in 24 registers; the last tile of a row of
// panels is masked.
__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,fma")))
static void tile8x48(int k, const float *a, const float *b, long ldb, float *c, long ldc, int rows,
		__mmask16 m0, __mmask16 m1, __mmask16 m2) {
	__m512 z = _mm512_setzero_ps();
	__m512 c00 = z, c01 = z, c02 = z, c10 = z, c11 = z, c12 = z, c20 = z, c21 = z, c22 = z, c30 = z, c31 = z, c32 = z,
	       c40 = z, c41 = z, c42 = z, c50 = z, c51 = z, c52 = z, c60 = z, c61 = z, c62 = z, c70 = z, c71 = z, c72 = z;
	for (int q = 0; q < k; q++) {
		const float *bq = b + (long)q * ldb;
		__m512 b0 = _mm512_maskz_loadu_ps(m0, bq), b1 = _mm512_maskz_loadu_ps(m1, bq + 16), b2 = _mm512_maskz_loadu_ps(m2, bq + 32);
		const float *aq = a + (long)q * PR;
		__m512 x;
#define ROW(i, r0, r1, r2) x = _mm512_set1_ps(aq[i]); \
		r0 = _mm512_fmadd_ps(x, b0, r0); r1 = _mm512_fmadd_ps(x, b1, r1); r2 = _mm512_fmadd_ps(x, b2, r2);
		ROW(0, c00, c01, c02) ROW(1, c10, c11, c12) ROW(2, c20, c21, c22) ROW(3, c30, c31, c32)
		ROW(4, c40, c41, c42) ROW(5, c50, c51, c52) ROW(6, c60, c61, c62) ROW(7, c70, c71, c72)
#undef ROW
	}
	__m512 cs[8][3] = {{c00, c01, c02}, {c10, c11, c12}, {c20, c21, c22}, {c30, c31, c32},
		{c40, c41, c42}, {c50, c51, c52}, {c60, c61, c62}, {c70, c71, c72}};
	for (int i = 0; i < rows; i++) {
		float *ci = c + (long)i * ldc;
		_mm512_mask_storeu_ps(ci, m0, cs[i][0]);
		_mm512_mask_storeu_ps(ci + 16, m1, cs[i][1]);
		_mm512_mask_storeu_ps(ci + 32, m2, cs[i][2]);
	}
}

static __mmask16 lanes16(int n) { return n >= 16 ? (__mmask16)0xffff : n <= 0 ? 0 : (__mmask16)((1u << n) - 1); }

__attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,fma")))
static void sgemm_packed_avx512(int m, int n, int k, const float *ap, const float *b, long ldb, float *c, long ldc) {
	for (int j = 0; j < n; j += 48) {
		int r = n - j;
		__mmask16 m0 = lanes16(r), m1 = lanes16(r - 16), m2 = lanes16(r - 32);
		for (int p = 0; p * PR < m; p++) {
			int rows = m - p * PR < PR ? m - p * PR : PR;
			tile8x48(k, ap + (long)p * k * PR, b + j, ldb, c + (long)p * PR * ldc + j, ldc, rows, m0, m1, m2);
		}
	}
}

// AVX2: a 4×24 tile in 12 registers, each panel of 8 rows in two halves.
__attribute__((target("avx2,fma")))
static void tile4x24(int k, const float *a, const float *b, long ldb, float *c, long ldc, int rows,
		__m256i m0, __m256i m1, __m256i m2) {
	__m256 z = _mm256_setzero_ps();
	__m256 c00 = z, c01 = z, c02 = z, c10 = z, c11 = z, c12 = z, c20 = z, c21 = z, c22 = z, c30 = z, c31 = z, c32 = z;
	for (int q = 0; q < k; q++) {
		const float *bq = b + (long)q * ldb;
		__m256 b0 = _mm256_maskload_ps(bq, m0), b1 = _mm256_maskload_ps(bq + 8, m1), b2 = _mm256_maskload_ps(bq + 16, m2);
		const float *aq = a + (long)q * PR;
		__m256 x;
#define ROW(i, r0, r1, r2) x = _mm256_broadcast_ss(aq + i); \
		r0 = _mm256_fmadd_ps(x, b0, r0); r1 = _mm256_fmadd_ps(x, b1, r1); r2 = _mm256_fmadd_ps(x, b2, r2);
		ROW(0, c00, c01, c02) ROW(1, c10, c11, c12) ROW(2, c20, c21, c22) ROW(3, c30, c31, c32)
#undef ROW
	}
	__m256 cs[4][3] = {{c00, c01, c02}, {c10, c11, c12}, {c20, c21, c22}, {c30, c31, c32}};
	for (int i = 0; i < rows; i++) {
		float *ci = c + (long)i * ldc;
		_mm256_maskstore_ps(ci, m0, cs[i][0]);
		_mm256_maskstore_ps(ci + 8, m1, cs[i][1]);
		_mm256_maskstore_ps(ci + 16, m2, cs[i][2]);
	}
}

__attribute__((target("avx2,fma")))
static __m256i lanes8(int n) {
	int v[8];
	for (int i = 0; i < 8; i++)
		v[i] = i < n ? -1 : 0;
	return _mm256_loadu_si256((const __m256i *)v);
}

__attribute__((target("avx2,fma")))
static void sgemm_packed_avx2(int m, int n, int k, const float *ap, const float *b, long ldb, float *c, long ldc) {
	for (int j = 0; j < n; j += 24) {
		int r = n - j;
		__m256i m0 = lanes8(r), m1 = lanes8(r - 8), m2 = lanes8(r - 16);
		for (int p = 0; p * PR < m; p++) {
			const float *a = ap + (long)p * k * PR;
			for (int h = 0; h < PR && p * PR + h < m; h += 4) {
				int rows = m - p * PR - h < 4 ? m - p * PR - h : 4;
				tile4x24(k, a + h, b + j, ldb, c + (long)(p * PR + h) * ldc + j, ldc, rows, m0, m1, m2);
			}
		}
	}
}
#endif

void canopy_sgemm_packed(int lvl, int m, int n, int k, const float *ap, const float *b, long ldb, float *c, long ldc) {
	if (m <= 0 || n <= 0)
		return;
#if defined(__x86_64__)
	if (lvl == CANOPY_SIMD_AVX512) {
		sgemm_packed_avx512(m, n, k, ap, b, ldb, c, ldc);
		return;
	}
	if (lvl == CANOPY_SIMD_AVX2) {
		sgemm_packed_avx2(m, n, k, ap, b, ldb, c, ldc);
		return;
	}
#endif
	sgemm_packed_generic(m, n, k, ap, b, ldb, c, ldc);
}
