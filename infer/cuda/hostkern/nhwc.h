// nhwc.h: the host shim's launcher of kernels/nhwc.cu (nhwc.cc); op is a
// cuda.NHWCOp. For op 3 (upsample-add) x is the lateral map written in
// place, y the top, (OH, OW) the top's size.
void hk_nhwc(int op, const void *x, void *y, int N, int C, int H, int W, int OH, int OW, int bf16);
