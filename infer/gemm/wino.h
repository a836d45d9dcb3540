enum { CANOPY_SIMD_GENERIC = 0, CANOPY_SIMD_AVX2 = 1, CANOPY_SIMD_AVX512 = 2 };
int canopy_simd_detect(void);
void canopy_wino_in(int lvl, const float *x, int c, int h, int w, int tw, int t0, int nb, float *v, long vs);
void canopy_wino_out(int lvl, const float *m, long ms, int nb, int oc, int tw, int t0, int h, int w,
		const float *bias, const float *res, int relu, float *y);
void canopy_wino4_in(int lvl, const float *x, int c, long cs, int h, int w, int tw, int t0, int nb, float *v, long vs, long ldv);
void canopy_wino4_out(int lvl, const float *m, long ms, long ldm, int nb, int oc, int tw, int t0, int h, int w, long cs,
		const float *bias, const float *res, int relu, float *y);
void canopy_epilogue(int lvl, float *y, long ldy, int rows, int cols, const float *bias, const float *res, long ldr, int relu);
void canopy_im2col(int lvl, const float *x, int cin, long cs, int h, int w, int kh, int kw, int stride, int pad, int ow, int j0, int nb, float *col, long ldc);
void canopy_maxpool(int lvl, const float *src, int h, int w, float *tmp, float *dst);
void canopy_resize_fma(int lvl, const float *r0, const float *r1, const int *i0, const int *i1,
		const float *l0, const float *l1, float h0, float h1, int n, float *out);
void canopy_chain(int lvl, int m, int n, int k, const float *a, long lda, const float *b, long ldb, float *c, long ldc,
		const float *bias, const float *res, long ldr, int relu);
void canopy_gelu_row(int lvl, float *x, int n);
void canopy_softmax_row(int lvl, float *x, int n);
void canopy_dwconv_gelu_row(int lvl, const float *x, int h, int wd, int c, const float *w, const float *b, int y, float *out);
void canopy_wino4_in_l(int lvl, const float *x, int c, int h, int w, int n, int j0, int nb, float *v, long vs, long ldv);
void canopy_wino4_out_l(int lvl, const float *m, long ms, long ldm, int j0, int nb, int oc, int h, int w, int n,
		const float *bias, const float *res, int relu, float *y);
void canopy_im2col_l(int lvl, const float *x, int cin, int h, int w, int n, int kh, int kw, int stride, int pad, int ow, int j0, int nb, float *col, long ldc);
void canopy_maxpool_l(int lvl, const float *src, int h, int w, int n, float *tmp, float *dst);
