void canopy_wino_in(const float *x, int c, int h, int w, int tw, int t0, int nb, float *v, long vs);
void canopy_wino_out(const float *m, long ms, int nb, int oc, int tw, int t0, int h, int w,
		const float *bias, const float *res, int relu, float *y);
void canopy_epilogue(float *y, long ldy, int rows, int cols, const float *bias, const float *res, long ldr, int relu);
void canopy_im2col(const float *x, int cin, int h, int w, int kh, int kw, int stride, int pad, int ow, int j0, int nb, float *col);
