// shim.h: canopy's own declarations of the cuDNN 9 graph (backend) API it
// calls, and the loader that finds them in a libcudnn.so.9 at run time
// (dlopen/dlsym: no link-time dependency on cuDNN). The types are opaque
// pointers and int enums; the enum values canopy uses are in consts.go.
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef int cdn_status;
typedef void *cdn_desc;
typedef void *cdn_handle;
typedef void *cdn_stream;

// The 15 functions, in the order of cdn_names.
typedef struct cdn_lib {
	void *dl, *sub;
	cdn_status (*create)(cdn_handle *);
	cdn_status (*destroy)(cdn_handle);
	cdn_status (*set_stream)(cdn_handle, cdn_stream);
	size_t (*get_version)(void);
	const char *(*get_error_string)(cdn_status);
	void (*get_last_error_string)(char *, size_t);
	cdn_status (*create_desc)(int, cdn_desc *);
	cdn_status (*destroy_desc)(cdn_desc);
	cdn_status (*set_attr)(cdn_desc, int, int, int64_t, const void *);
	cdn_status (*get_attr)(cdn_desc, int, int, int64_t, int64_t *, void *);
	cdn_status (*initialize)(cdn_desc);
	cdn_status (*finalize)(cdn_desc);
	cdn_status (*execute)(cdn_handle, cdn_desc, cdn_desc);
	cdn_status (*populate_graph)(cdn_handle, cdn_desc, cdn_desc, void *);
	cdn_status (*update_graph)(cdn_handle, cdn_desc, cdn_desc, void *);
} cdn_lib;

// cdn_open loads path (a file name or a bare soname the loader searches)
// and resolves all 15 functions. On failure it returns NULL and writes why
// into err.
cdn_lib *cdn_open(const char *path, char *err, size_t errlen);
void cdn_close(cdn_lib *l);
// cdn_origin writes the file the loader actually opened for l (dladdr).
void cdn_origin(cdn_lib *l, char *out, size_t outlen);

// Thin calls through the table (cgo cannot call function pointers).
size_t cdn_version(cdn_lib *l);
void cdn_error(cdn_lib *l, cdn_status s, char *out, size_t outlen);
cdn_status cdn_create(cdn_lib *l, cdn_handle *h);
cdn_status cdn_destroy(cdn_lib *l, cdn_handle h);
cdn_status cdn_set_stream(cdn_lib *l, cdn_handle h, uintptr_t s);
cdn_status cdn_create_desc(cdn_lib *l, int type, cdn_desc *d);
cdn_status cdn_destroy_desc(cdn_lib *l, cdn_desc d);
cdn_status cdn_set(cdn_lib *l, cdn_desc d, int name, int type, int64_t n, const void *v);
cdn_status cdn_get(cdn_lib *l, cdn_desc d, int name, int type, int64_t want, int64_t *got, void *v);
cdn_status cdn_finalize(cdn_lib *l, cdn_desc d);
cdn_status cdn_execute(cdn_lib *l, cdn_handle h, cdn_desc plan, cdn_desc pack);
