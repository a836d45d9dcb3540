// nhwc.cc: the cuDNN path's data-movement kernels (kernels/nhwc.cu) on the
// host. Each output is one thread's with no cross-thread reduction, so a
// loop over the outputs is the launch.
#pragma GCC optimize("fp-contract=off")
#include "nhwc.cu"

extern "C" {
#include "nhwc.h"

void hk_nhwc(int op, const void *x, void *y, int N, int C, int H, int W, int OH, int OW, int bf16)
{
	long long total;
	switch (op) {
	case 0:
		total = (long long)N * C * H * W;
		for (long long i = 0; i < total; i++)
			to_nhwc_at(i, (const float *)x, y, N, C, H, W, bf16);
		break;
	case 1:
		total = (long long)N * C * H * W;
		for (long long i = 0; i < total; i++)
			to_nchw_at(i, x, (float *)y, N, C, H, W, bf16);
		break;
	case 2:
		total = (long long)N * C * OH * OW;
		for (long long i = 0; i < total; i++)
			maxpool_at(i, x, y, N, C, H, W, OH, OW, bf16);
		break;
	case 3:
		total = (long long)N * C * H * W;
		for (long long i = 0; i < total; i++)
			upsample_add_at(i, (void *)x, y, N, C, H, W, OH, OW, bf16);
		break;
	case 4:
		total = (long long)N * C * H * W;
		for (long long i = 0; i < total; i++)
			relu_at(i, x, y, bf16);
		break;
	}
}
}
