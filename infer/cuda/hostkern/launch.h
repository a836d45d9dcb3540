// launch.h: the host shim's launchers (launch.cc), one per kernel, each
// taking the grid and block the Go side computed (infer/cuda/kernels).
void hk_conv(int tf32, int gx, int gy, int bx, const float *x, const float *w, const float *b,
             const float *res, float *y, int N, int C, int H, int W, int M, int KH, int KW, int S,
             int P, int OH, int OW, int relu);
void hk_maxpool3s2(int gx, int bx, const float *x, float *y, int N, int C, int H, int W, int OH,
                   int OW);
void hk_upsample_add(int gx, int bx, float *lat, const float *top, int N, int C, int H, int W,
                     int TH, int TW);
void hk_relu_copy(int gx, int bx, const float *x, float *y, long long n);
// hk_launch runs the kernel called name with 8-byte argument slots
// (cuda.Slots): 0, or −1 for an unknown kernel, −2 for a wrong argument
// count.
int hk_launch(const char *name, int gx, int gy, int bx, const unsigned long long *args, int nargs);
// hk_check is hk_launch's answer without the launch.
int hk_check(const char *name, int nargs);
