// shim.c: see shim.h.
#define _GNU_SOURCE
#include "shim.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *cdn_names[15] = {
	"cudnnCreate",
	"cudnnDestroy",
	"cudnnSetStream",
	"cudnnGetVersion",
	"cudnnGetErrorString",
	"cudnnGetLastErrorString",
	"cudnnBackendCreateDescriptor",
	"cudnnBackendDestroyDescriptor",
	"cudnnBackendSetAttribute",
	"cudnnBackendGetAttribute",
	"cudnnBackendInitialize",
	"cudnnBackendFinalize",
	"cudnnBackendExecute",
	"cudnnBackendPopulateCudaGraph",
	"cudnnBackendUpdateCudaGraph",
};

cdn_lib *cdn_open(const char *path, char *err, size_t errlen)
{
	// RTLD_LOCAL: cuDNN's symbols stay out of the global namespace;
	// libcudnn.so.9 opens its sub-libraries itself (RPATH $ORIGIN).
	void *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!dl) {
		const char *e = dlerror();
		snprintf(err, errlen, "%s", e ? e : "dlopen failed");
		return NULL;
	}
	cdn_lib *l = calloc(1, sizeof *l);
	if (!l) {
		dlclose(dl);
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	l->dl = dl;
	void **slot = (void **)&l->create;
	for (int i = 0; i < 15; i++) {
		dlerror();
		void *f = dlsym(dl, cdn_names[i]);
		if (!f) {
			snprintf(err, errlen, "no symbol %s (not a cuDNN 9 library)", cdn_names[i]);
			dlclose(dl);
			free(l);
			return NULL;
		}
		slot[i] = f;
	}
	// libcudnn.so.9 is a loader: on its first call it opens
	// libcudnn_graph.so.9 (next to it, RPATH $ORIGIN, or on the loader
	// path) and aborts the process when that fails. Check first.
	char dir[4096];
	cdn_origin(l, dir, sizeof dir);
	char *slash = strrchr(dir, '/');
	void *sub = NULL;
	if (slash) {
		snprintf(slash + 1, sizeof dir - (slash + 1 - dir), "libcudnn_graph.so.9");
		sub = dlopen(dir, RTLD_LAZY | RTLD_LOCAL);
	}
	if (!sub)
		sub = dlopen("libcudnn_graph.so.9", RTLD_LAZY | RTLD_LOCAL);
	if (!sub) {
		snprintf(err, errlen, "its sub-library libcudnn_graph.so.9 is neither next to it nor on the loader path "
				      "(an incomplete cuDNN install; cuDNN would abort the process)");
		dlclose(dl);
		free(l);
		return NULL;
	}
	l->sub = sub;
	return l;
}

void cdn_close(cdn_lib *l)
{
	if (!l)
		return;
	dlclose(l->sub);
	dlclose(l->dl);
	free(l);
}

void cdn_origin(cdn_lib *l, char *out, size_t outlen)
{
	Dl_info info;
	out[0] = 0;
	if (dladdr((void *)l->get_version, &info) && info.dli_fname)
		snprintf(out, outlen, "%s", info.dli_fname);
}

size_t cdn_version(cdn_lib *l) { return l->get_version(); }

void cdn_error(cdn_lib *l, cdn_status s, char *out, size_t outlen)
{
	const char *name = l->get_error_string(s);
	char last[512];
	last[0] = 0;
	l->get_last_error_string(last, sizeof last);
	snprintf(out, outlen, "%s%s%s", name ? name : "unknown status", last[0] ? ": " : "", last);
}

cdn_status cdn_create(cdn_lib *l, cdn_handle *h) { return l->create(h); }
cdn_status cdn_destroy(cdn_lib *l, cdn_handle h) { return l->destroy(h); }
cdn_status cdn_set_stream(cdn_lib *l, cdn_handle h, uintptr_t s) { return l->set_stream(h, (cdn_stream)s); }
cdn_status cdn_create_desc(cdn_lib *l, int type, cdn_desc *d) { return l->create_desc(type, d); }
cdn_status cdn_destroy_desc(cdn_lib *l, cdn_desc d) { return l->destroy_desc(d); }
cdn_status cdn_set(cdn_lib *l, cdn_desc d, int name, int type, int64_t n, const void *v)
{
	return l->set_attr(d, name, type, n, v);
}
cdn_status cdn_get(cdn_lib *l, cdn_desc d, int name, int type, int64_t want, int64_t *got, void *v)
{
	return l->get_attr(d, name, type, want, got, v);
}
cdn_status cdn_finalize(cdn_lib *l, cdn_desc d) { return l->finalize(d); }
cdn_status cdn_execute(cdn_lib *l, cdn_handle h, cdn_desc plan, cdn_desc pack)
{
	return l->execute(h, plan, pack);
}
