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
#include <stdint.h>
#include <string.h>
#include <type_traits>
#include <utility>

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

#include "kernels_cu.h" // kernels.cu (a link, so that go build sees it change)

namespace {
// from_slot converts an 8-byte argument slot (cuda.Slots) to the kernel's
// parameter type.
template <class T> T from_slot(uint64_t v)
{
	if constexpr (std::is_pointer_v<T>) {
		return reinterpret_cast<T>((uintptr_t)v);
	} else if constexpr (std::is_same_v<T, float>) {
		uint32_t u = (uint32_t)v;
		float f;
		memcpy(&f, &u, 4);
		return f;
	} else if constexpr (std::is_same_v<T, double>) {
		double f;
		memcpy(&f, &v, 8);
		return f;
	} else {
		return (T)v; // int: the low 4 bytes; long long: all 8
	}
}

template <class... A, size_t... I>
void call_slots(void (*k)(A...), const uint64_t *s, std::index_sequence<I...>)
{
	k(from_slot<A>(s[I])...);
}

template <class... A> constexpr int arity(void (*)(A...)) { return sizeof...(A); }

template <class... A> void call_all(void (*k)(A...), const uint64_t *s)
{
	call_slots(k, s, std::index_sequence_for<A...>{});
}

// run_kernel launches K over the grid; Coop: the kernel uses __syncthreads.
template <auto K, bool Coop> void run_kernel(unsigned gx, unsigned gy, unsigned bx, const uint64_t *s)
{
	launch(gx, gy, bx, [&] { call_all(K, s); }, Coop);
}

struct entry {
	const char *name;
	int nargs;
	void (*run)(unsigned, unsigned, unsigned, const uint64_t *);
};

// kernels_by_name: the kernels Launch reaches (cuda.Device.Launch).
#define CANOPY_ENTRY(k, coop) {#k, arity(k), run_kernel<k, coop>}
const entry kernels_by_name[] = {
	CANOPY_ENTRY(transform_img, false),
	CANOPY_ENTRY(post_keys, false),
	CANOPY_ENTRY(bitonic_step, false),
	CANOPY_ENTRY(post_decode, false),
	CANOPY_ENTRY(post_merge, false),
	CANOPY_ENTRY(post_nms_prep, false),
	CANOPY_ENTRY(post_nms_mask, false),
	CANOPY_ENTRY(post_nms_scan, false),
	CANOPY_ENTRY(fill_u32, false),
	CANOPY_ENTRY(loss_match, false),
	CANOPY_ENTRY(loss_lowq, false),
	CANOPY_ENTRY(loss_sums, false),
	CANOPY_ENTRY(loss_final, false),
	CANOPY_ENTRY(tf_layernorm, false),
	CANOPY_ENTRY(tf_dwconv_gelu, false),
	CANOPY_ENTRY(tf_gemm, false),
	CANOPY_ENTRY(tf_softmax, false),
	CANOPY_ENTRY(tf_upsample2, false),
	CANOPY_ENTRY(tf_chan_mean, false),
	CANOPY_ENTRY(tf_ca_gate, false),
	CANOPY_ENTRY(tf_scale_chan, false),
	CANOPY_ENTRY(tf_add, false),
	CANOPY_ENTRY(crop_hpass, false),
	CANOPY_ENTRY(crop_vpass, false),
	CANOPY_ENTRY(crop_pool, false),
	CANOPY_ENTRY(crop_fc, false),
	CANOPY_ENTRY(crop_softmax, false),
};
#undef CANOPY_ENTRY
} // namespace

extern "C" {
#include "launch.h"

int hk_check(const char *name, int nargs)
{
	for (const entry &e : kernels_by_name)
		if (strcmp(e.name, name) == 0)
			return e.nargs == nargs ? 0 : -2;
	return -1;
}

int hk_launch(const char *name, int gx, int gy, int bx, const unsigned long long *args, int nargs)
{
	for (const entry &e : kernels_by_name)
		if (strcmp(e.name, name) == 0) {
			if (e.nargs != nargs)
				return -2;
			e.run((unsigned)gx, (unsigned)gy, (unsigned)bx, (const uint64_t *)args);
			return 0;
		}
	return -1;
}

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
