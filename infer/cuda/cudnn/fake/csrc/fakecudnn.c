// fakecudnn.c: a fake libcudnn.so.9 for machines without a GPU. It exports
// the 15 functions of cuDNN 9's graph API, with the ABI and enum values of
// cudnn_graph.h (declared here, not copied), and computes over host
// memory, so canopy's GPU engine on the host shim (infer/cuda/hostkern)
// runs its convolutions through the same dlopen path as on a GPU.
//
// What it checks, as the documentation of the real library requires:
//   - descriptors are finalized once, with their required attributes, and
//     attributes are set only before finalization, with the right type;
//   - tensors are 4-d, fully packed NHWC (strides [HWC, 1, WC, C]), with a
//     byte alignment that is a power of two, and pointers aligned to it at
//     execution;
//   - a graph is one forward convolution followed by a chain of pointwise
//     ops (ADD of a bias [1,M,1,1] or of a tensor shaped like the output,
//     RELU_FWD), intermediates virtual, the last output not;
//   - GLOBAL_INDEX is within OPERATIONGRAPH_ENGINE_GLOBAL_COUNT, knob
//     choices are of a type the engine has and within its range, and the
//     engine supports the graph's data types;
//   - the workspace of a plan that needs one is given.
// Engines (the heuristic lists them in this order, the bad ones first, so
// that a filter that lets them through is caught):
//   3: NONDETERMINISTIC (its split of the reduction changes from call to
//      call);
//   2: TENSOR_CORE with knob SPLIT_K_SLC (1..4, the heuristic offers 2): the
//      reduction in that many slices, summed at the end;
//   1: TENSOR_CORE, knob TILE_SIZE (0..1, no effect on the bits): FP32 data
//      rounded to TF32 (cvt.rna), BF16 data as is, FP32 accumulation; its
//      k order descends for image n of a batch of N where n + N is odd, so
//      an image's bits depend on its slot and the batch size, as a real
//      engine's may (what global batching must make harmless);
//   0: FP32 only, no tensor cores: exact FP32 fused multiply-adds.
// Accumulation order otherwise: for each output, k = (kh, kw, c) ascending.
//
// Build: cc -shared -fPIC -O2 -o libcudnn.so.9 fakecudnn.c
// -DFAKE_VERSION=N changes cudnnGetVersion (tests build a wrong one);
// -DFAKE_OMIT_EXECUTE leaves cudnnBackendExecute out.
#pragma GCC optimize("fp-contract=off")
#if defined(__x86_64__)
#pragma GCC target("fma")
#endif
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef FAKE_VERSION
#define FAKE_VERSION 91900
#endif

#define EXPORT __attribute__((visibility("default")))

enum {
	ST_OK = 0,
	ST_NOT_INITIALIZED = 1001,
	ST_BAD_PARAM = 2000,
	ST_NULL = 2002,
	ST_MISALIGNED = 2003,
	ST_NOT_FINALIZED = 2004,
	ST_OUT_OF_BOUND = 2005,
	ST_NOT_SUPPORTED = 3000,
	ST_NOT_SUPPORTED_SHAPE = 3002,
	ST_LAYOUT = 3004,
	ST_INTERNAL = 4000,
	ST_EXEC = 5000,
};
enum { DT_FLOAT = 0, DT_BF16 = 9 };
enum {
	T_HANDLE = 0,
	T_DATA_TYPE = 1,
	T_BOOLEAN = 2,
	T_INT64 = 3,
	T_FLOAT = 4,
	T_DOUBLE = 5,
	T_VOID_PTR = 6,
	T_CONV_MODE = 7,
	T_HEUR_MODE = 8,
	T_KNOB_TYPE = 9,
	T_NUM_NOTE = 11,
	T_POINTWISE_MODE = 14,
	T_DESC = 15,
	T_CHAR = 24,
};
enum {
	D_POINTWISE = 0,
	D_CONV = 1,
	D_ENGINE = 2,
	D_ENGINECFG = 3,
	D_HEUR = 4,
	D_PLAN = 5,
	D_KNOB = 7,
	D_CONV_FWD = 10,
	D_PW_OP = 13,
	D_GRAPH = 15,
	D_PACK = 16,
	D_TENSOR = 17,
};
enum {
	A_PW_MODE = 0,
	A_PW_PREC = 1,
	A_CONV_COMP = 100,
	A_CONV_MODE = 101,
	A_CONV_DIL = 102,
	A_CONV_STRIDES = 103,
	A_CONV_POST = 104,
	A_CONV_PRE = 105,
	A_CONV_DIMS = 106,
	A_HEUR_MODE = 200,
	A_HEUR_GRAPH = 201,
	A_HEUR_RESULTS = 202,
	A_CFG_ENGINE = 300,
	A_CFG_KNOBS = 302,
	A_CFG_WS = 303,
	A_PLAN_HANDLE = 400,
	A_PLAN_CFG = 401,
	A_PLAN_WS = 402,
	A_PLAN_JSON = 405,
	A_KNOB_TYPE = 600,
	A_KNOB_VALUE = 601,
	A_FWD_ALPHA = 700,
	A_FWD_BETA = 701,
	A_FWD_CONV = 702,
	A_FWD_W = 703,
	A_FWD_X = 704,
	A_FWD_Y = 705,
	A_PWOP_DESC = 750,
	A_PWOP_X = 751,
	A_PWOP_B = 752,
	A_PWOP_Y = 753,
	A_GRAPH_HANDLE = 800,
	A_GRAPH_OPS = 801,
	A_GRAPH_COUNT = 802,
	A_T_ALIGN = 900,
	A_T_DTYPE = 901,
	A_T_DIMS = 902,
	A_T_STRIDES = 903,
	A_T_UID = 906,
	A_T_VIRTUAL = 907,
	A_PACK_UIDS = 1000,
	A_PACK_PTRS = 1001,
	A_PACK_WS = 1003,
	A_ENG_GRAPH = 1300,
	A_ENG_INDEX = 1301,
	A_ENG_NOTES = 1303,
};
enum { PW_ADD = 0, PW_RELU = 100 };
enum { NOTE_TC = 0, NOTE_NONDET = 4 };
enum { KNOB_TILE = 2, KNOB_SLC = 17 };
#define NENGINES 4
#define MAXATTR 24
#define MAXN 64

static __thread char last_err[512];

static int fail(int st, const char *fmt, const char *a)
{
	snprintf(last_err, sizeof last_err, fmt, a ? a : "");
	return st;
}

typedef struct attr {
	int name, type;
	int64_t n;
	void *v;
} attr;

typedef struct desc desc;
struct desc {
	uint32_t magic;
	int type;
	bool final;
	int nattr;
	attr a[MAXATTR];
	// derived at finalization
	int64_t dims[4], uid, align;
	int dtype;
	bool virt;
	int pwmode;
	int64_t stride[2], pad[2];
	desc *x, *w, *y, *b, *conv, *pw;  // ops
	desc *ops[MAXN];                  // graph
	int nops;
	desc *graph;                      // engine, heur
	int64_t index;                    // engine
	int knobtype;                     // knob choice
	int64_t knobval;
	desc *engine;                     // cfg
	int64_t slc, tile;                // cfg knobs
	desc *cfg;                        // plan
	int64_t ws;                       // plan
	int64_t uids[MAXN];               // pack
	void *ptrs[MAXN];
	int nptr;
	void *wsp;
};
#define MAGIC 0xc0ffee42u

typedef struct handle {
	uint32_t magic;
	void *stream;
} handle;

static desc *D(void *p) { return p && ((desc *)p)->magic == MAGIC ? (desc *)p : NULL; }

static attr *find(desc *d, int name)
{
	for (int i = 0; i < d->nattr; i++)
		if (d->a[i].name == name)
			return &d->a[i];
	return NULL;
}

static size_t tsize(int type)
{
	switch (type) {
	case T_BOOLEAN:
	case T_CHAR:
		return 1;
	case T_INT64:
	case T_DOUBLE:
	case T_VOID_PTR:
	case T_HANDLE:
	case T_DESC:
		return 8;
	default:
		return 4;
	}
}

// The type each attribute must be set with.
static int want_type(int name)
{
	switch (name) {
	case A_PW_MODE:
		return T_POINTWISE_MODE;
	case A_PW_PREC:
	case A_CONV_COMP:
	case A_T_DTYPE:
		return T_DATA_TYPE;
	case A_CONV_MODE:
		return T_CONV_MODE;
	case A_HEUR_MODE:
		return T_HEUR_MODE;
	case A_KNOB_TYPE:
		return T_KNOB_TYPE;
	case A_T_VIRTUAL:
		return T_BOOLEAN;
	case A_PACK_PTRS:
	case A_PACK_WS:
		return T_VOID_PTR;
	case A_PLAN_HANDLE:
	case A_GRAPH_HANDLE:
		return T_HANDLE;
	case A_FWD_ALPHA:
	case A_FWD_BETA:
		return -1; // FLOAT or DOUBLE
	case A_FWD_CONV:
	case A_FWD_W:
	case A_FWD_X:
	case A_FWD_Y:
	case A_PWOP_DESC:
	case A_PWOP_X:
	case A_PWOP_B:
	case A_PWOP_Y:
	case A_GRAPH_OPS:
	case A_HEUR_GRAPH:
	case A_ENG_GRAPH:
	case A_CFG_ENGINE:
	case A_CFG_KNOBS:
	case A_PLAN_CFG:
		return T_DESC;
	case A_PLAN_JSON:
		return T_CHAR;
	default:
		return T_INT64;
	}
}

EXPORT size_t cudnnGetVersion(void) { return FAKE_VERSION; }

EXPORT const char *cudnnGetErrorString(int s)
{
	switch (s) {
	case ST_OK:
		return "CUDNN_STATUS_SUCCESS";
	case ST_BAD_PARAM:
		return "CUDNN_STATUS_BAD_PARAM";
	case ST_NULL:
		return "CUDNN_STATUS_BAD_PARAM_NULL_POINTER";
	case ST_MISALIGNED:
		return "CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER";
	case ST_NOT_FINALIZED:
		return "CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED";
	case ST_OUT_OF_BOUND:
		return "CUDNN_STATUS_BAD_PARAM_OUT_OF_BOUND";
	case ST_NOT_SUPPORTED:
		return "CUDNN_STATUS_NOT_SUPPORTED";
	case ST_NOT_SUPPORTED_SHAPE:
		return "CUDNN_STATUS_NOT_SUPPORTED_SHAPE";
	case ST_LAYOUT:
		return "CUDNN_STATUS_NOT_SUPPORTED_LAYOUT";
	case ST_EXEC:
		return "CUDNN_STATUS_EXECUTION_FAILED";
	}
	return "CUDNN_STATUS_INTERNAL_ERROR";
}

EXPORT void cudnnGetLastErrorString(char *msg, size_t n)
{
	if (msg && n) {
		snprintf(msg, n, "%s", last_err);
		last_err[0] = 0;
	}
}

EXPORT int cudnnCreate(void **h)
{
	if (!h)
		return fail(ST_NULL, "cudnnCreate: null handle pointer%s", NULL);
	handle *p = calloc(1, sizeof *p);
	p->magic = MAGIC;
	*h = p;
	return ST_OK;
}

EXPORT int cudnnDestroy(void *h)
{
	handle *p = h;
	if (!p || p->magic != MAGIC)
		return fail(ST_BAD_PARAM, "cudnnDestroy: not a handle%s", NULL);
	p->magic = 0;
	free(p);
	return ST_OK;
}

EXPORT int cudnnSetStream(void *h, void *s)
{
	handle *p = h;
	if (!p || p->magic != MAGIC)
		return fail(ST_BAD_PARAM, "cudnnSetStream: not a handle%s", NULL);
	p->stream = s;
	return ST_OK;
}

static const int known_types[] = {D_POINTWISE, D_CONV, D_ENGINE, D_ENGINECFG, D_HEUR, D_PLAN,
				  D_KNOB, D_CONV_FWD, D_PW_OP, D_GRAPH, D_PACK, D_TENSOR};

EXPORT int cudnnBackendCreateDescriptor(int type, void **out)
{
	bool ok = false;
	for (size_t i = 0; i < sizeof known_types / sizeof known_types[0]; i++)
		ok |= known_types[i] == type;
	if (!out)
		return fail(ST_NULL, "create: null%s", NULL);
	if (!ok)
		return fail(ST_NOT_SUPPORTED, "create: descriptor type not in the fake%s", NULL);
	desc *d = calloc(1, sizeof *d);
	d->magic = MAGIC;
	d->type = type;
	*out = d;
	return ST_OK;
}

EXPORT int cudnnBackendDestroyDescriptor(void *p)
{
	desc *d = D(p);
	if (!d)
		return fail(ST_BAD_PARAM, "destroy: not a descriptor%s", NULL);
	for (int i = 0; i < d->nattr; i++)
		free(d->a[i].v);
	d->magic = 0;
	free(d);
	return ST_OK;
}

EXPORT int cudnnBackendInitialize(void *p) { return D(p) ? ST_OK : ST_BAD_PARAM; }

EXPORT int cudnnBackendSetAttribute(void *p, int name, int type, int64_t n, const void *v)
{
	desc *d = D(p);
	if (!d)
		return fail(ST_BAD_PARAM, "set: not a descriptor%s", NULL);
	if (d->final)
		return fail(ST_BAD_PARAM, "set: descriptor already finalized%s", NULL);
	if (n < 0 || n > MAXN || (n > 0 && !v))
		return fail(ST_BAD_PARAM, "set: bad element count or null array%s", NULL);
	int want = want_type(name);
	if (want >= 0 ? type != want : (type != T_FLOAT && type != T_DOUBLE)) {
		char b[64];
		snprintf(b, sizeof b, "%d (type %d)", name, type);
		return fail(ST_BAD_PARAM, "set: attribute %s has the wrong type", b);
	}
	attr *a = find(d, name);
	if (!a) {
		if (d->nattr == MAXATTR)
			return fail(ST_BAD_PARAM, "set: too many attributes%s", NULL);
		a = &d->a[d->nattr++];
	}
	free(a->v);
	a->name = name;
	a->type = type;
	a->n = n;
	a->v = malloc(n * tsize(type) + 1);
	memcpy(a->v, v, n * tsize(type));
	return ST_OK;
}

static int64_t i64(desc *d, int name, int i, int64_t def)
{
	attr *a = find(d, name);
	return a && i < a->n ? ((int64_t *)a->v)[i] : def;
}

static int i32(desc *d, int name, int def)
{
	attr *a = find(d, name);
	return a && a->n >= 1 ? ((int *)a->v)[0] : def;
}

static desc *dsc(desc *d, int name, int i)
{
	attr *a = find(d, name);
	return a && i < a->n ? D(((void **)a->v)[i]) : NULL;
}

#define REQ(d, name, what)                                                                         \
	do {                                                                                       \
		if (!find(d, name))                                                                \
			return fail(ST_BAD_PARAM, "finalize: required attribute %s not set", what); \
	} while (0)

static bool is_final(desc *d, int type) { return d && d->final && d->type == type; }

static int fin_tensor(desc *d)
{
	REQ(d, A_T_DTYPE, "TENSOR_DATA_TYPE");
	REQ(d, A_T_DIMS, "TENSOR_DIMENSIONS");
	REQ(d, A_T_STRIDES, "TENSOR_STRIDES");
	REQ(d, A_T_UID, "TENSOR_UNIQUE_ID");
	REQ(d, A_T_ALIGN, "TENSOR_BYTE_ALIGNMENT");
	if (find(d, A_T_DIMS)->n != 4 || find(d, A_T_STRIDES)->n != 4)
		return fail(ST_NOT_SUPPORTED, "tensor: the fake supports 4-d tensors only%s", NULL);
	d->dtype = i32(d, A_T_DTYPE, -1);
	if (d->dtype != DT_FLOAT && d->dtype != DT_BF16)
		return fail(ST_NOT_SUPPORTED, "tensor: data type not FLOAT or BFLOAT16%s", NULL);
	for (int i = 0; i < 4; i++) {
		d->dims[i] = i64(d, A_T_DIMS, i, 0);
		if (d->dims[i] < 1)
			return fail(ST_BAD_PARAM, "tensor: a dimension below 1%s", NULL);
	}
	int64_t n = d->dims[0], c = d->dims[1], h = d->dims[2], w = d->dims[3];
	(void)n;
	int64_t want[4] = {h * w * c, 1, w * c, c};
	for (int i = 0; i < 4; i++)
		if (i64(d, A_T_STRIDES, i, 0) != want[i])
			return fail(ST_LAYOUT, "tensor: strides are not fully packed NHWC%s", NULL);
	d->uid = i64(d, A_T_UID, 0, 0);
	d->align = i64(d, A_T_ALIGN, 0, 0);
	int64_t es = d->dtype == DT_BF16 ? 2 : 4;
	if (d->align < es || (d->align & (d->align - 1)))
		return fail(ST_BAD_PARAM, "tensor: byte alignment not a power of two at least the element size%s", NULL);
	attr *v = find(d, A_T_VIRTUAL);
	d->virt = v && v->n == 1 && *(bool *)v->v;
	return ST_OK;
}

static int fin_conv(desc *d)
{
	REQ(d, A_CONV_COMP, "CONVOLUTION_COMP_TYPE");
	REQ(d, A_CONV_MODE, "CONVOLUTION_CONV_MODE");
	REQ(d, A_CONV_DIMS, "CONVOLUTION_SPATIAL_DIMS");
	REQ(d, A_CONV_DIL, "CONVOLUTION_DILATIONS");
	REQ(d, A_CONV_STRIDES, "CONVOLUTION_FILTER_STRIDES");
	REQ(d, A_CONV_PRE, "CONVOLUTION_PRE_PADDINGS");
	REQ(d, A_CONV_POST, "CONVOLUTION_POST_PADDINGS");
	if (i64(d, A_CONV_DIMS, 0, 0) != 2)
		return fail(ST_NOT_SUPPORTED, "convolution: 2 spatial dims only%s", NULL);
	if (i32(d, A_CONV_COMP, -1) != DT_FLOAT)
		return fail(ST_NOT_SUPPORTED, "convolution: compute type must be FLOAT%s", NULL);
	if (i32(d, A_CONV_MODE, -1) != 1)
		return fail(ST_NOT_SUPPORTED, "convolution: the fake computes CROSS_CORRELATION only%s", NULL);
	for (int i = 0; i < 2; i++) {
		if (i64(d, A_CONV_DIL, i, 0) != 1)
			return fail(ST_NOT_SUPPORTED, "convolution: dilation 1 only%s", NULL);
		d->stride[i] = i64(d, A_CONV_STRIDES, i, 0);
		d->pad[i] = i64(d, A_CONV_PRE, i, -1);
		if (d->stride[i] < 1 || d->pad[i] < 0 || i64(d, A_CONV_POST, i, -1) != d->pad[i])
			return fail(ST_BAD_PARAM, "convolution: bad stride or padding%s", NULL);
	}
	return ST_OK;
}

static bool same_dims(desc *a, desc *b)
{
	return !memcmp(a->dims, b->dims, sizeof a->dims);
}

static int fin_fwd(desc *d)
{
	REQ(d, A_FWD_X, "OPERATION_CONVOLUTION_FORWARD_X");
	REQ(d, A_FWD_W, "OPERATION_CONVOLUTION_FORWARD_W");
	REQ(d, A_FWD_Y, "OPERATION_CONVOLUTION_FORWARD_Y");
	REQ(d, A_FWD_CONV, "OPERATION_CONVOLUTION_FORWARD_CONV_DESC");
	REQ(d, A_FWD_ALPHA, "OPERATION_CONVOLUTION_FORWARD_ALPHA");
	REQ(d, A_FWD_BETA, "OPERATION_CONVOLUTION_FORWARD_BETA");
	d->x = dsc(d, A_FWD_X, 0), d->w = dsc(d, A_FWD_W, 0), d->y = dsc(d, A_FWD_Y, 0);
	d->conv = dsc(d, A_FWD_CONV, 0);
	if (!is_final(d->x, D_TENSOR) || !is_final(d->w, D_TENSOR) || !is_final(d->y, D_TENSOR) ||
	    !is_final(d->conv, D_CONV))
		return fail(ST_NOT_FINALIZED, "convolution forward: operands must be finalized tensors%s", NULL);
	attr *al = find(d, A_FWD_ALPHA), *be = find(d, A_FWD_BETA);
	double alpha = al->type == T_FLOAT ? *(float *)al->v : *(double *)al->v;
	double beta = be->type == T_FLOAT ? *(float *)be->v : *(double *)be->v;
	if (alpha != 1 || beta != 0)
		return fail(ST_NOT_SUPPORTED, "convolution forward: alpha 1, beta 0 only%s", NULL);
	desc *x = d->x, *w = d->w, *y = d->y, *c = d->conv;
	int64_t oh = (x->dims[2] + 2 * c->pad[0] - w->dims[2]) / c->stride[0] + 1;
	int64_t ow = (x->dims[3] + 2 * c->pad[1] - w->dims[3]) / c->stride[1] + 1;
	if (w->dims[1] != x->dims[1] || y->dims[0] != x->dims[0] || y->dims[1] != w->dims[0] ||
	    y->dims[2] != oh || y->dims[3] != ow)
		return fail(ST_BAD_PARAM, "convolution forward: X, W and Y shapes disagree%s", NULL);
	if (x->dtype != w->dtype)
		return fail(ST_NOT_SUPPORTED, "convolution forward: X and W of different types%s", NULL);
	if (y->dtype != DT_FLOAT)
		return fail(ST_NOT_SUPPORTED, "convolution forward: the fake accumulates into a FLOAT Y%s", NULL);
	return ST_OK;
}

static int fin_pw(desc *d)
{
	REQ(d, A_PW_MODE, "POINTWISE_MODE");
	REQ(d, A_PW_PREC, "POINTWISE_MATH_PREC");
	d->pwmode = i32(d, A_PW_MODE, -1);
	if (d->pwmode != PW_ADD && d->pwmode != PW_RELU)
		return fail(ST_NOT_SUPPORTED, "pointwise: the fake has ADD and RELU_FWD only%s", NULL);
	if (i32(d, A_PW_PREC, -1) != DT_FLOAT)
		return fail(ST_NOT_SUPPORTED, "pointwise: math precision FLOAT only%s", NULL);
	return ST_OK;
}

static int fin_pwop(desc *d)
{
	REQ(d, A_PWOP_DESC, "OPERATION_POINTWISE_PW_DESCRIPTOR");
	REQ(d, A_PWOP_X, "OPERATION_POINTWISE_XDESC");
	REQ(d, A_PWOP_Y, "OPERATION_POINTWISE_YDESC");
	d->pw = dsc(d, A_PWOP_DESC, 0), d->x = dsc(d, A_PWOP_X, 0), d->y = dsc(d, A_PWOP_Y, 0);
	d->b = dsc(d, A_PWOP_B, 0);
	if (!is_final(d->pw, D_POINTWISE) || !is_final(d->x, D_TENSOR) || !is_final(d->y, D_TENSOR))
		return fail(ST_NOT_FINALIZED, "pointwise op: operands must be finalized%s", NULL);
	if (!same_dims(d->x, d->y))
		return fail(ST_BAD_PARAM, "pointwise op: X and Y shapes disagree%s", NULL);
	if (d->pw->pwmode == PW_ADD) {
		if (!is_final(d->b, D_TENSOR))
			return fail(ST_BAD_PARAM, "pointwise ADD: BDESC required%s", NULL);
		desc *b = d->b;
		bool bias = b->dims[0] == 1 && b->dims[1] == d->y->dims[1] && b->dims[2] == 1 && b->dims[3] == 1;
		if (!bias && !same_dims(b, d->y))
			return fail(ST_BAD_PARAM, "pointwise ADD: B neither [1,C,1,1] nor shaped like Y%s", NULL);
	} else if (d->b) {
		return fail(ST_BAD_PARAM, "pointwise RELU: no BDESC%s", NULL);
	}
	return ST_OK;
}

static int fin_graph(desc *d)
{
	REQ(d, A_GRAPH_HANDLE, "OPERATIONGRAPH_HANDLE");
	REQ(d, A_GRAPH_OPS, "OPERATIONGRAPH_OPS");
	handle *h = *(handle **)find(d, A_GRAPH_HANDLE)->v;
	if (!h || h->magic != MAGIC)
		return fail(ST_BAD_PARAM, "graph: not a handle%s", NULL);
	attr *a = find(d, A_GRAPH_OPS);
	d->nops = a->n;
	for (int i = 0; i < a->n; i++) {
		d->ops[i] = dsc(d, A_GRAPH_OPS, i);
		if (!d->ops[i] || !d->ops[i]->final)
			return fail(ST_NOT_FINALIZED, "graph: an op is not finalized%s", NULL);
	}
	// One convolution, then pointwise ops, each on the previous output;
	// intermediates virtual, the last output not.
	if (d->nops < 1 || d->ops[0]->type != D_CONV_FWD)
		return fail(ST_NOT_SUPPORTED, "graph: the fake runs a convolution first%s", NULL);
	desc *prev = d->ops[0]->y;
	for (int i = 1; i < d->nops; i++) {
		desc *op = d->ops[i];
		if (op->type != D_PW_OP)
			return fail(ST_NOT_SUPPORTED, "graph: only pointwise ops after the convolution%s", NULL);
		if (op->x != prev && op->b != prev)
			return fail(ST_NOT_SUPPORTED, "graph: a pointwise op does not consume the previous output%s", NULL);
		if (!prev->virt)
			return fail(ST_BAD_PARAM, "graph: an intermediate output is not virtual%s", NULL);
		desc *other = op->x == prev ? op->b : op->x;
		if (other && other->virt)
			return fail(ST_BAD_PARAM, "graph: a virtual input that no op produces%s", NULL);
		prev = op->y;
	}
	if (prev->virt)
		return fail(ST_BAD_PARAM, "graph: the last output is virtual%s", NULL);
	if (d->ops[0]->x->virt || d->ops[0]->w->virt)
		return fail(ST_BAD_PARAM, "graph: X or W virtual%s", NULL);
	return ST_OK;
}

static int graph_dtype(desc *g) { return g->ops[0]->x->dtype; }

static bool engine_supports(int64_t idx, desc *g) { return !(idx == 0 && graph_dtype(g) != DT_FLOAT); }

static int fin_engine(desc *d)
{
	REQ(d, A_ENG_GRAPH, "ENGINE_OPERATION_GRAPH");
	REQ(d, A_ENG_INDEX, "ENGINE_GLOBAL_INDEX");
	d->graph = dsc(d, A_ENG_GRAPH, 0);
	if (!is_final(d->graph, D_GRAPH))
		return fail(ST_NOT_FINALIZED, "engine: graph not finalized%s", NULL);
	d->index = i64(d, A_ENG_INDEX, 0, -1);
	if (d->index < 0 || d->index >= NENGINES)
		return fail(ST_OUT_OF_BOUND, "engine: GLOBAL_INDEX out of [0, ENGINE_GLOBAL_COUNT)%s", NULL);
	if (!engine_supports(d->index, d->graph))
		return fail(ST_NOT_SUPPORTED, "engine: does not support the graph's data type%s", NULL);
	return ST_OK;
}

static int fin_knob(desc *d)
{
	REQ(d, A_KNOB_TYPE, "KNOB_CHOICE_KNOB_TYPE");
	REQ(d, A_KNOB_VALUE, "KNOB_CHOICE_KNOB_VALUE");
	d->knobtype = i32(d, A_KNOB_TYPE, -1);
	d->knobval = i64(d, A_KNOB_VALUE, 0, 0);
	return ST_OK;
}

static int fin_cfg(desc *d)
{
	REQ(d, A_CFG_ENGINE, "ENGINECFG_ENGINE");
	d->engine = dsc(d, A_CFG_ENGINE, 0);
	if (!is_final(d->engine, D_ENGINE))
		return fail(ST_NOT_FINALIZED, "engine config: engine not finalized%s", NULL);
	d->slc = 1, d->tile = 0;
	attr *a = find(d, A_CFG_KNOBS);
	for (int i = 0; a && i < a->n; i++) {
		desc *k = dsc(d, A_CFG_KNOBS, i);
		if (!is_final(k, D_KNOB))
			return fail(ST_NOT_FINALIZED, "engine config: knob choice not finalized%s", NULL);
		int64_t e = d->engine->index;
		if (k->knobtype == KNOB_SLC && e == 2) {
			if (k->knobval < 1 || k->knobval > 4)
				return fail(ST_BAD_PARAM, "engine config: SPLIT_K_SLC out of its range 1..4%s", NULL);
			d->slc = k->knobval;
		} else if (k->knobtype == KNOB_TILE && e == 1) {
			if (k->knobval < 0 || k->knobval > 1)
				return fail(ST_BAD_PARAM, "engine config: TILE_SIZE out of its range 0..1%s", NULL);
			d->tile = k->knobval;
		} else {
			return fail(ST_NOT_SUPPORTED, "engine config: a knob type this engine does not have%s", NULL);
		}
	}
	return ST_OK;
}

static int64_t out_elems(desc *g)
{
	desc *y = g->ops[0]->y;
	return y->dims[0] * y->dims[1] * y->dims[2] * y->dims[3];
}

static int fin_plan(desc *d)
{
	REQ(d, A_PLAN_HANDLE, "EXECUTION_PLAN_HANDLE");
	REQ(d, A_PLAN_CFG, "EXECUTION_PLAN_ENGINE_CONFIG");
	d->cfg = dsc(d, A_PLAN_CFG, 0);
	if (!is_final(d->cfg, D_ENGINECFG))
		return fail(ST_NOT_FINALIZED, "plan: engine config not finalized%s", NULL);
	desc *e = d->cfg->engine;
	d->ws = e->index == 1 ? 1024 : e->index == 2 ? d->cfg->slc * out_elems(e->graph) * 4 : 0;
	return ST_OK;
}

static int fin_heur(desc *d)
{
	REQ(d, A_HEUR_GRAPH, "ENGINEHEUR_OPERATION_GRAPH");
	REQ(d, A_HEUR_MODE, "ENGINEHEUR_MODE");
	d->graph = dsc(d, A_HEUR_GRAPH, 0);
	if (!is_final(d->graph, D_GRAPH))
		return fail(ST_NOT_FINALIZED, "heuristics: graph not finalized%s", NULL);
	return ST_OK;
}

static int fin_pack(desc *d)
{
	REQ(d, A_PACK_UIDS, "VARIANT_PACK_UNIQUE_IDS");
	REQ(d, A_PACK_PTRS, "VARIANT_PACK_DATA_POINTERS");
	REQ(d, A_PACK_WS, "VARIANT_PACK_WORKSPACE");
	attr *u = find(d, A_PACK_UIDS), *p = find(d, A_PACK_PTRS);
	if (u->n != p->n)
		return fail(ST_BAD_PARAM, "variant pack: as many unique ids as pointers%s", NULL);
	d->nptr = u->n;
	memcpy(d->uids, u->v, u->n * 8);
	memcpy(d->ptrs, p->v, p->n * 8);
	d->wsp = *(void **)find(d, A_PACK_WS)->v;
	return ST_OK;
}

EXPORT int cudnnBackendFinalize(void *p)
{
	desc *d = D(p);
	if (!d)
		return fail(ST_BAD_PARAM, "finalize: not a descriptor%s", NULL);
	if (d->final)
		return fail(ST_BAD_PARAM, "finalize: already finalized%s", NULL);
	int st;
	switch (d->type) {
	case D_TENSOR:
		st = fin_tensor(d);
		break;
	case D_CONV:
		st = fin_conv(d);
		break;
	case D_CONV_FWD:
		st = fin_fwd(d);
		break;
	case D_POINTWISE:
		st = fin_pw(d);
		break;
	case D_PW_OP:
		st = fin_pwop(d);
		break;
	case D_GRAPH:
		st = fin_graph(d);
		break;
	case D_ENGINE:
		st = fin_engine(d);
		break;
	case D_KNOB:
		st = fin_knob(d);
		break;
	case D_ENGINECFG:
		st = fin_cfg(d);
		break;
	case D_PLAN:
		st = fin_plan(d);
		break;
	case D_HEUR:
		st = fin_heur(d);
		break;
	case D_PACK:
		st = fin_pack(d);
		break;
	default:
		st = fail(ST_NOT_SUPPORTED, "finalize: descriptor type%s", NULL);
	}
	if (st == ST_OK)
		d->final = true;
	return st;
}

// The heuristic's list, best first: (engine, knob type, knob value).
static int heur_list(desc *g, int64_t out[][3])
{
	int n = 0;
	int64_t all[NENGINES][3] = {{3, -1, 0}, {2, KNOB_SLC, 2}, {1, KNOB_TILE, 1}, {0, -1, 0}};
	for (int i = 0; i < NENGINES; i++)
		if (engine_supports(all[i][0], g))
			memcpy(out[n++], all[i], sizeof all[i]);
	return n;
}

// fill makes the caller's fresh descriptor d a finalized copy-by-value of
// the given attributes (the real library fills the descriptors it is
// handed; it does not hand out its own).
static int fill_engine(desc *d, desc *g, int64_t idx)
{
	if (!d || d->type != D_ENGINE || d->final)
		return fail(ST_BAD_PARAM, "get: want a fresh ENGINE descriptor%s", NULL);
	void *gp = g;
	cudnnBackendSetAttribute(d, A_ENG_GRAPH, T_DESC, 1, &gp);
	cudnnBackendSetAttribute(d, A_ENG_INDEX, T_INT64, 1, &idx);
	return cudnnBackendFinalize(d);
}

EXPORT int cudnnBackendGetAttribute(void *const p, int name, int type, int64_t want, int64_t *got, void *out)
{
	desc *d = D(p);
	if (!d)
		return fail(ST_BAD_PARAM, "get: not a descriptor%s", NULL);
	if (!d->final)
		return fail(ST_NOT_FINALIZED, "get: descriptor not finalized%s", NULL);
	if (!got && !out)
		return fail(ST_NULL, "get: no output%s", NULL);
	int64_t n = 0;
	if (d->type == D_HEUR && name == A_HEUR_RESULTS) {
		if (type != T_DESC)
			return fail(ST_BAD_PARAM, "get: ENGINEHEUR_RESULTS is descriptors%s", NULL);
		int64_t list[NENGINES][3];
		n = heur_list(d->graph, list);
		for (int64_t i = 0; out && i < want && i < n; i++) {
			desc *cfg = D(((void **)out)[i]);
			if (!cfg || cfg->type != D_ENGINECFG || cfg->final)
				return fail(ST_BAD_PARAM, "get: want fresh ENGINECFG descriptors%s", NULL);
			void *eng;
			cudnnBackendCreateDescriptor(D_ENGINE, &eng);
			int st = fill_engine(eng, d->graph, list[i][0]);
			if (st)
				return st;
			cudnnBackendSetAttribute(cfg, A_CFG_ENGINE, T_DESC, 1, &eng);
			if (list[i][1] >= 0) {
				void *k;
				cudnnBackendCreateDescriptor(D_KNOB, &k);
				int kt = list[i][1];
				cudnnBackendSetAttribute(k, A_KNOB_TYPE, T_KNOB_TYPE, 1, &kt);
				cudnnBackendSetAttribute(k, A_KNOB_VALUE, T_INT64, 1, &list[i][2]);
				cudnnBackendFinalize(k);
				cudnnBackendSetAttribute(cfg, A_CFG_KNOBS, T_DESC, 1, &k);
			}
			if ((st = cudnnBackendFinalize(cfg)))
				return st;
			// (the fake leaks the engine and knob it made: tests are short)
		}
	} else if (d->type == D_ENGINECFG && name == A_CFG_ENGINE) {
		n = 1;
		if (out && want >= 1) {
			desc *e = D(((void **)out)[0]);
			int st = fill_engine(e, d->engine->graph, d->engine->index);
			if (st)
				return st;
		}
	} else if (d->type == D_ENGINECFG && name == A_CFG_KNOBS) {
		attr *a = find(d, A_CFG_KNOBS);
		n = a ? a->n : 0;
		for (int64_t i = 0; out && i < want && i < n; i++) {
			desc *k = D(((void **)out)[i]), *src = dsc(d, A_CFG_KNOBS, i);
			if (!k || k->type != D_KNOB || k->final)
				return fail(ST_BAD_PARAM, "get: want fresh KNOB_CHOICE descriptors%s", NULL);
			cudnnBackendSetAttribute(k, A_KNOB_TYPE, T_KNOB_TYPE, 1, &src->knobtype);
			cudnnBackendSetAttribute(k, A_KNOB_VALUE, T_INT64, 1, &src->knobval);
			cudnnBackendFinalize(k);
		}
	} else if (d->type == D_ENGINE && name == A_ENG_NOTES) {
		if (type != T_NUM_NOTE)
			return fail(ST_BAD_PARAM, "get: ENGINE_NUMERICAL_NOTE has type NUMERICAL_NOTE%s", NULL);
		int notes[2], k = 0;
		if (d->index >= 1)
			notes[k++] = NOTE_TC;
		if (d->index == 3)
			notes[k++] = NOTE_NONDET;
		n = k;
		for (int i = 0; out && i < want && i < k; i++)
			((int *)out)[i] = notes[i];
	} else if (d->type == D_ENGINE && name == A_ENG_INDEX) {
		n = 1;
		if (out && want >= 1)
			*(int64_t *)out = d->index;
	} else if (d->type == D_KNOB && (name == A_KNOB_TYPE || name == A_KNOB_VALUE)) {
		n = 1;
		if (out && want >= 1) {
			if (name == A_KNOB_TYPE)
				*(int *)out = d->knobtype;
			else
				*(int64_t *)out = d->knobval;
		}
	} else if (d->type == D_GRAPH && name == A_GRAPH_COUNT) {
		n = 1;
		if (out && want >= 1)
			*(int64_t *)out = NENGINES;
	} else if (d->type == D_PLAN && name == A_PLAN_WS) {
		if (type != T_INT64)
			return fail(ST_BAD_PARAM, "get: WORKSPACE_SIZE is INT64%s", NULL);
		n = 1;
		if (out && want >= 1)
			*(int64_t *)out = d->ws;
	} else if (d->type == D_PLAN && name == A_PLAN_JSON) {
		char js[256];
		snprintf(js, sizeof js, "{\"fake\":true,\"engine\":%lld,\"split_k_slc\":%lld,\"tile\":%lld}",
			 (long long)d->cfg->engine->index, (long long)d->cfg->slc, (long long)d->cfg->tile);
		n = strlen(js) + 1;
		if (out)
			memcpy(out, js, n < want ? n : want);
	} else {
		return fail(ST_NOT_SUPPORTED, "get: attribute not in the fake%s", NULL);
	}
	if (got)
		*got = n;
	return ST_OK;
}

static float tf32(float v)
{
	uint32_t u;
	memcpy(&u, &v, 4);
	if ((u & 0x7f800000u) != 0x7f800000u)
		u = (u + 0x1000u) & 0xffffe000u;
	memcpy(&v, &u, 4);
	return v;
}

static float bf2f(uint16_t b)
{
	uint32_t u = (uint32_t)b << 16;
	float v;
	memcpy(&v, &u, 4);
	return v;
}

static uint16_t f2bf(float v)
{
	uint32_t u;
	memcpy(&u, &v, 4);
	if ((u & 0x7fffffffu) > 0x7f800000u)
		return (u >> 16) | 0x40; // quiet NaN
	u += 0x7fffu + ((u >> 16) & 1);  // round to nearest even
	return u >> 16;
}

static float load(const void *p, int dtype, int64_t i)
{
	return dtype == DT_BF16 ? bf2f(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

static void *ptr_of(desc *pack, int64_t uid)
{
	for (int i = 0; i < pack->nptr; i++)
		if (pack->uids[i] == uid)
			return pack->ptrs[i];
	return NULL;
}

static int nondet_calls;

#ifndef FAKE_OMIT_EXECUTE
EXPORT
#else
static
#endif
int cudnnBackendExecute(void *hp, void *planp, void *packp)
{
	handle *h = hp;
	desc *plan = D(planp), *pack = D(packp);
	if (!h || h->magic != MAGIC)
		return fail(ST_BAD_PARAM, "execute: not a handle%s", NULL);
	if (!is_final(plan, D_PLAN) || !is_final(pack, D_PACK))
		return fail(ST_NOT_FINALIZED, "execute: plan and variant pack must be finalized%s", NULL);
	desc *g = plan->cfg->engine->graph;
	desc *conv = g->ops[0];
	// Every non-virtual tensor needs an aligned pointer.
	desc *ts[MAXN];
	int nt = 0;
	ts[nt++] = conv->x, ts[nt++] = conv->w;
	for (int i = 1; i < g->nops; i++) {
		if (g->ops[i]->b)
			ts[nt++] = g->ops[i]->b;
		ts[nt++] = g->ops[i]->y;
	}
	for (int i = 0; i < nt; i++) {
		if (ts[i]->virt)
			continue;
		void *p = ptr_of(pack, ts[i]->uid);
		char b[64];
		snprintf(b, sizeof b, "%lld", (long long)ts[i]->uid);
		if (!p)
			return fail(ST_NULL, "execute: no pointer for tensor uid %s", b);
		if ((uintptr_t)p % ts[i]->align)
			return fail(ST_MISALIGNED, "execute: tensor uid %s misaligned", b);
	}
	if (plan->ws > 0 && !pack->wsp)
		return fail(ST_NULL, "execute: the plan needs a workspace and none was given%s", NULL);
	if (plan->ws > 0)
		memset(pack->wsp, 0, plan->ws); // a short workspace shows under ASan/valgrind
	int64_t eng = plan->cfg->engine->index;
	int64_t slc = eng == 2 ? plan->cfg->slc : eng == 3 ? 1 + nondet_calls++ % 3 : 1;
	bool round = eng >= 1 && conv->x->dtype == DT_FLOAT;
	desc *X = conv->x, *W = conv->w, *Y = conv->y, *C = conv->conv;
	int64_t N = X->dims[0], Cc = X->dims[1], H = X->dims[2], Wd = X->dims[3];
	int64_t M = W->dims[0], KH = W->dims[2], KW = W->dims[3], OH = Y->dims[2], OW = Y->dims[3];
	const void *x = ptr_of(pack, X->uid), *w = ptr_of(pack, W->uid);
	int64_t K = KH * KW * Cc, per = (K + slc - 1) / slc;
	// The operands as the engine reads them (FP32, TF32-rounded or BF16),
	// W transposed to [k][m] so that the M accumulators of one output
	// pixel advance together (each still sums its own k in order).
	float *xf = malloc(sizeof(float) * N * H * Wd * Cc), *wf = malloc(sizeof(float) * K * M);
	float *acc = malloc(sizeof(float) * M), *total = malloc(sizeof(float) * M);
	if (!xf || !wf || !acc || !total) {
		free(xf), free(wf), free(acc), free(total);
		return fail(ST_EXEC, "execute: out of host memory%s", NULL);
	}
	for (int64_t i = 0; i < N * H * Wd * Cc; i++) {
		float a = load(x, X->dtype, i);
		xf[i] = round ? tf32(a) : a;
	}
	for (int64_t m = 0; m < M; m++)
		for (int64_t k = 0; k < K; k++) {
			float b = load(w, W->dtype, m * K + k);
			wf[k * M + m] = round ? tf32(b) : b;
		}
	for (int64_t n = 0; n < N; n++)
		for (int64_t oy = 0; oy < OH; oy++)
			for (int64_t ox = 0; ox < OW; ox++) {
				// k = (kh, kw, c) ascending; slice s holds k in
				// [s·per, (s+1)·per), summed alone, the slices then
				// added in order.
				int64_t s = 0;
				for (int64_t m = 0; m < M; m++)
					acc[m] = 0, total[m] = 0;
				// Engine 1 is slot- and batch-size-dependent, as
				// real engines can be: k descends where n + N is odd.
				bool rev = eng == 1 && ((n + N) & 1);
				for (int64_t j = 0; j < K; j++) {
					if (j == (s + 1) * per) {
						for (int64_t m = 0; m < M; m++)
							total[m] = s == 0 ? acc[m] : total[m] + acc[m], acc[m] = 0;
						s++;
					}
					int64_t k = rev ? K - 1 - j : j;
					int64_t kh = k / (KW * Cc), kw = k / Cc % KW, c = k % Cc;
					int64_t iy = oy * C->stride[0] - C->pad[0] + kh, ix = ox * C->stride[1] - C->pad[1] + kw;
					if (iy < 0 || iy >= H || ix < 0 || ix >= Wd)
						continue;
					const float a = xf[((n * H + iy) * Wd + ix) * Cc + c], *wp = wf + k * M;
					for (int64_t m = 0; m < M; m++)
						acc[m] = fmaf(a, wp[m], acc[m]);
				}
				for (int64_t m = 0; m < M; m++) {
					float v = s == 0 ? acc[m] : total[m] + acc[m];
					int64_t yi = ((n * OH + oy) * OW + ox) * M + m;
					desc *out = Y;
					for (int i = 1; i < g->nops; i++) {
						desc *op = g->ops[i];
						if (op->pw->pwmode == PW_RELU) {
							v = v > 0 ? v : 0;
						} else {
							desc *b = op->b == out ? op->x : op->b;
							const void *bp = ptr_of(pack, b->uid);
							// A [1,M,1,1] bias (when Y is [1,M,1,1]
							// too, both readings index the same).
							bool bias = b->dims[0] == 1 && b->dims[2] == 1 && b->dims[3] == 1;
							v = v + load(bp, b->dtype, bias ? m : yi);
						}
						out = op->y;
					}
					void *yp = ptr_of(pack, out->uid);
					if (out->dtype == DT_BF16)
						((uint16_t *)yp)[yi] = f2bf(v);
					else
						((float *)yp)[yi] = v;
				}
			}
	free(xf), free(wf), free(acc), free(total);
	return ST_OK;
}

EXPORT int cudnnBackendPopulateCudaGraph(void *h, void *plan, void *pack, void *graph)
{
	(void)h, (void)plan, (void)pack, (void)graph;
	return fail(ST_NOT_SUPPORTED, "the fake has no CUDA graphs%s", NULL);
}

EXPORT int cudnnBackendUpdateCudaGraph(void *h, void *plan, void *pack, void *graph)
{
	(void)h, (void)plan, (void)pack, (void)graph;
	return fail(ST_NOT_SUPPORTED, "the fake has no CUDA graphs%s", NULL);
}
