//go:build !noblas

// canopy's C kernels (Winograd transforms, im2col, the convolution
// epilogue), each compiled three times from kernels_body.h: generic x86-64,
// AVX2+FMA and AVX-512 (F, BW, DQ, VL). canopy_simd_detect picks the widest
// clone the CPU runs; CANOPY_SIMD (wino.go) or SetSIMD forces one. All
// clones give the same bits (kernels_body.h), so the choice changes speed
// only.
#include "wino.h"
#include <math.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif
#include <stdlib.h>
#include <string.h>

// No clone may fuse a product into an add (cgo does not pass
// -ffp-contract=off, so the pragma says it).
#pragma GCC optimize("fp-contract=off")

// canopy_panel is the calling thread's buffer for Chain's packed panels of
// B (CANOPY_PANEL_BYTES, the largest clone's CH_KC × CH_NR floats),
// allocated on first use and freed when the thread exits; null if it
// cannot be had (Chain then reads B in place).
#include <pthread.h>
#define CANOPY_PANEL_BYTES (512 * 48 * sizeof(float))
static pthread_key_t canopy_panel_key;
static pthread_once_t canopy_panel_once = PTHREAD_ONCE_INIT;
static int canopy_panel_ok;
static void canopy_panel_init(void) { canopy_panel_ok = pthread_key_create(&canopy_panel_key, free) == 0; }
static float *canopy_panel(void) {
	pthread_once(&canopy_panel_once, canopy_panel_init);
	if (!canopy_panel_ok)
		return 0;
	float *p = pthread_getspecific(canopy_panel_key);
	if (!p) {
		p = aligned_alloc(64, CANOPY_PANEL_BYTES);
		if (p && pthread_setspecific(canopy_panel_key, p) != 0) {
			free(p);
			p = 0;
		}
	}
	return p;
}

#define K_(name, sfx) name##_##sfx
#define K2(name, sfx) K_(name, sfx)
#define K(name) K2(name, CANOPY_SFX)

#define CANOPY_SFX generic
#define CANOPY_VEC 0
#include "kernels_body.h"
#undef CANOPY_VEC
#undef CANOPY_SFX

#if defined(__x86_64__)
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#define CANOPY_SFX avx2
#define CANOPY_VEC 256
#include "kernels_body.h"
#undef CANOPY_VEC
#undef CANOPY_SFX
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,prefer-vector-width=512")
#define CANOPY_SFX avx512
#define CANOPY_VEC 512
#include "kernels_body.h"
#undef CANOPY_VEC
#undef CANOPY_SFX
#pragma GCC pop_options
#endif

int canopy_simd_detect(void) {
#if defined(__x86_64__)
	__builtin_cpu_init();
	if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
			__builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
		return CANOPY_SIMD_AVX512;
	if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
		return CANOPY_SIMD_AVX2;
#endif
	return CANOPY_SIMD_GENERIC;
}

#if defined(__x86_64__)
#define CANOPY_DISPATCH(lvl, name, ...) do { \
	switch (lvl) { \
	case CANOPY_SIMD_AVX512: name##_avx512(__VA_ARGS__); return; \
	case CANOPY_SIMD_AVX2: name##_avx2(__VA_ARGS__); return; \
	default: name##_generic(__VA_ARGS__); return; \
	} \
} while (0)
#else
#define CANOPY_DISPATCH(lvl, name, ...) name##_generic(__VA_ARGS__)
#endif

void canopy_wino_in(int lvl, const float *x, int c, int h, int w, int tw, int t0, int nb, float *v, long vs) {
	CANOPY_DISPATCH(lvl, wino_in, x, c, h, w, tw, t0, nb, v, vs);
}

void canopy_wino_out(int lvl, const float *m, long ms, int nb, int oc, int tw, int t0, int h, int w,
		const float *bias, const float *res, int relu, float *y) {
	CANOPY_DISPATCH(lvl, wino_out, m, ms, nb, oc, tw, t0, h, w, bias, res, relu, y);
}

void canopy_wino4_in(int lvl, const float *x, int c, long cs, int h, int w, int tw, int t0, int nb, float *v, long vs, long ldv) {
	CANOPY_DISPATCH(lvl, wino4_in, x, c, cs, h, w, tw, t0, nb, v, vs, ldv);
}

void canopy_wino4_out(int lvl, const float *m, long ms, long ldm, int nb, int oc, int tw, int t0, int h, int w, long cs,
		const float *bias, const float *res, int relu, float *y) {
	CANOPY_DISPATCH(lvl, wino4_out, m, ms, ldm, nb, oc, tw, t0, h, w, cs, bias, res, relu, y);
}

void canopy_epilogue(int lvl, float *y, long ldy, int rows, int cols, const float *bias, const float *res, long ldr, int relu) {
	CANOPY_DISPATCH(lvl, epilogue, y, ldy, rows, cols, bias, res, ldr, relu);
}

void canopy_im2col(int lvl, const float *x, int cin, long cs, int h, int w, int kh, int kw, int stride, int pad, int ow, int j0, int nb, float *col, long ldc) {
	CANOPY_DISPATCH(lvl, im2col, x, cin, cs, h, w, kh, kw, stride, pad, ow, j0, nb, col, ldc);
}

void canopy_maxpool(int lvl, const float *src, int h, int w, float *tmp, float *dst) {
	CANOPY_DISPATCH(lvl, maxpool, src, h, w, tmp, dst);
}

void canopy_resize_fma(int lvl, const float *r0, const float *r1, const int *i0, const int *i1,
		const float *l0, const float *l1, float h0, float h1, int n, float *out) {
	CANOPY_DISPATCH(lvl, resize_fma, r0, r1, i0, i1, l0, l1, h0, h1, n, out);
}

void canopy_chain(int lvl, int m, int n, int k, const float *a, long lda, const float *b, long ldb, float *c, long ldc,
		const float *bias, const float *res, long ldr, int relu) {
	CANOPY_DISPATCH(lvl, chain, m, n, k, a, lda, b, ldb, c, ldc, bias, res, ldr, relu);
}

void canopy_gelu_row(int lvl, float *x, int n) { CANOPY_DISPATCH(lvl, gelu_row, x, n); }

void canopy_softmax_row(int lvl, float *x, int n) { CANOPY_DISPATCH(lvl, softmax_row, x, n); }

void canopy_dwconv_gelu_row(int lvl, const float *x, int h, int wd, int c, const float *w, const float *b, int y, float *out) {
	CANOPY_DISPATCH(lvl, dwconv_gelu_row, x, h, wd, c, w, b, y, out);
}

void canopy_wino4_in_l(int lvl, const float *x, int c, int h, int w, int n, int j0, int nb, float *v, long vs, long ldv) {
	CANOPY_DISPATCH(lvl, wino4_in_l, x, c, h, w, n, j0, nb, v, vs, ldv);
}

void canopy_wino4_out_l(int lvl, const float *m, long ms, long ldm, int j0, int nb, int oc, int h, int w, int n,
		const float *bias, const float *res, int relu, float *y) {
	CANOPY_DISPATCH(lvl, wino4_out_l, m, ms, ldm, j0, nb, oc, h, w, n, bias, res, relu, y);
}

void canopy_im2col_l(int lvl, const float *x, int cin, int h, int w, int n, int kh, int kw, int stride, int pad, int ow, int j0, int nb, float *col, long ldc) {
	CANOPY_DISPATCH(lvl, im2col_l, x, cin, h, w, n, kh, kw, stride, pad, ow, j0, nb, col, ldc);
}

void canopy_maxpool_l(int lvl, const float *src, int h, int w, int n, float *tmp, float *dst) {
	CANOPY_DISPATCH(lvl, maxpool_l, src, h, w, n, tmp, dst);
}
