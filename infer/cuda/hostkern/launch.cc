// launch.cc: runs kernels.cu on the host. A launch runs the grid's blocks
// one after another; a block's threads are coroutines switched round-robin
// at every __syncthreads, so every barrier is honoured and the block's
// shared memory (statics in the kernel) is the block's alone. A coroutine
// starts with setcontext on its own stack; after that, switches are
// _setjmp/_longjmp, which (unlike swapcontext) make no system call.
#undef _FORTIFY_SOURCE
// No contraction of a*b+c (cgo refuses -ffp-contract=off as a flag).
#pragma GCC optimize("fp-contract=off")
#if defined(__x86_64__)
// fmaf as one instruction, not a libm call (x86-64 CPUs since 2013 have FMA;
// cgo refuses -mfma as a flag). Only the test shim is built this way.
#pragma GCC target("fma")
#endif
#include <ucontext.h>
#include <setjmp.h>
#include <stdlib.h>
#include <vector>

#include "shim.h"

shim_dim3 blockIdx, threadIdx, blockDim, gridDim;

namespace {
const size_t kStack = 256 << 10;
jmp_buf sched;
std::vector<ucontext_t> ctx;
struct jbuf {
	jmp_buf b;
};
std::vector<jbuf> jb;
std::vector<char> started;
std::vector<char *> stacks;
std::vector<char> done;
int cur;
void (*body)(void *);
void *body_arg;

void trampoline()
{
	body(body_arg);
	done[cur] = 1;
	_longjmp(sched, 1); // never returns: the scheduler's frame is the live one
}

// run executes a grid. Kernels without __syncthreads (coop false) run
// their threads as plain calls, one after another.
void run(unsigned gx, unsigned gy, unsigned bx, void (*f)(void *), void *arg, bool coop)
{
	body = f;
	body_arg = arg;
	gridDim = {gx, gy, 1};
	blockDim = {bx, 1, 1};
	while (stacks.size() < bx)
		stacks.push_back((char *)malloc(kStack));
	ctx.resize(bx);
	jb.resize(bx);
	done.assign(bx, 0);
	started.assign(bx, 0);
	if (!coop) {
		for (unsigned y = 0; y < gy; y++)
			for (unsigned x = 0; x < gx; x++) {
				blockIdx = {x, y, 0};
				for (unsigned t = 0; t < bx; t++) {
					threadIdx = {t, 0, 0};
					f(arg);
				}
			}
		return;
	}
	for (unsigned y = 0; y < gy; y++)
		for (unsigned x = 0; x < gx; x++) {
			blockIdx = {x, y, 0};
			for (unsigned t = 0; t < bx; t++) {
				getcontext(&ctx[t]);
				ctx[t].uc_stack.ss_sp = stacks[t];
				ctx[t].uc_stack.ss_size = kStack;
				ctx[t].uc_link = nullptr;
				makecontext(&ctx[t], trampoline, 0);
				done[t] = 0;
				started[t] = 0;
			}
			for (bool live = true; live;) {
				live = false;
				for (unsigned t = 0; t < bx; t++) {
					if (done[t])
						continue;
					cur = (int)t;
					threadIdx = {t, 0, 0};
					if (!_setjmp(sched)) {
						if (!started[t]) {
							started[t] = 1;
							setcontext(&ctx[t]);
						}
						_longjmp(jb[t].b, 1);
					}
					live = live || !done[t];
				}
			}
		}
}

template <class F> void launch(unsigned gx, unsigned gy, unsigned bx, F f, bool coop = true)
{
	run(gx, gy, bx, [](void *p) { (*(F *)p)(); }, &f, coop);
}
} // namespace

void __syncthreads(void)
{
	if (!_setjmp(jb[cur].b))
		_longjmp(sched, 1);
}

#include "kernels.cu"

extern "C" {
#include "launch.h"

void hk_conv(int tf32, int gx, int gy, int bx, const float *x, const float *w, const float *b,
             const float *res, float *y, int N, int C, int H, int W, int M, int KH, int KW, int S,
             int P, int OH, int OW, int relu)
{
	launch(gx, gy, bx, [&] {
		if (tf32)
			conv_tf32(x, w, b, res, y, N, C, H, W, M, KH, KW, S, P, OH, OW, relu);
		else
			conv_f32(x, w, b, res, y, N, C, H, W, M, KH, KW, S, P, OH, OW, relu);
	});
}

void hk_maxpool3s2(int gx, int bx, const float *x, float *y, int N, int C, int H, int W, int OH,
                   int OW)
{
	launch(gx, 1, bx, [&] { maxpool3s2(x, y, N, C, H, W, OH, OW); }, false);
}

void hk_upsample_add(int gx, int bx, float *lat, const float *top, int N, int C, int H, int W,
                     int TH, int TW)
{
	launch(gx, 1, bx, [&] { upsample_add(lat, top, N, C, H, W, TH, TW); }, false);
}

void hk_relu_copy(int gx, int bx, const float *x, float *y, long long n)
{
	launch(gx, 1, bx, [&] { relu_copy(x, y, n); }, false);
}
}
