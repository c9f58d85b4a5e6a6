/* load_after_stub.c: a host program that loads another cuBLAS (the stub) into the global
 * namespace first, then librecap.so.0 with dlopen, and checks that recap works on the host
 * backend without binding to the stub (tests/shared_library_load_test.sh builds and runs it).
 * Usage: load_after_stub STUB.so LIBRECAP.so */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "recap.h"

#define LOAD(lib, name)                                               \
  name##_fn name = (name##_fn)dlsym(lib, #name);                      \
  if (!name) {                                                        \
    fprintf(stderr, "FAIL: librecap.so does not export %s\n", #name); \
    return 1;                                                         \
  }

typedef const char *(*recap_version_fn)(void);
typedef recap_status (*recap_library_versions_get_fn)(recap_library_versions *);
typedef recap_status (*recap_pipeline_create_string_fn)(const char *, size_t, const char *,
                                                        const recap_pipeline_options *,
                                                        recap_pipeline **);
typedef recap_status (*recap_pipeline_run_fn)(recap_pipeline *, int64_t);
typedef recap_status (*recap_pipeline_copy_out_fn)(recap_pipeline *, const char *, void *, size_t,
                                                   int64_t);
typedef recap_status (*recap_pipeline_destroy_fn)(recap_pipeline *);
typedef const char *(*recap_last_error_fn)(void);

/* y = x @ w^T: the op that would use cuBLAS on a GPU; here the host backend computes it. */
static const char SPEC[] =
    "name: gemm\n"
    "device: host\n"
    "dtype: f32\n"
    "tensors:\n"
    "  x: {shape: [2, 4], role: input, init: ones}\n"
    "  w: {shape: [3, 4], role: param, init: value, value: 0.5}\n"
    "ops:\n"
    "  - {op: linear, in: [x, w], out: y}\n"
    "outputs: [y]\n";

int main(int argc, char **argv) {
  if (argc != 3) return 2;
  void *stub = dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL);
  if (!stub) {
    fprintf(stderr, "FAIL: cannot load the stub: %s\n", dlerror());
    return 1;
  }
  int *stub_calls = (int *)dlsym(stub, "stub_calls");
  void *lib = dlopen(argv[2], RTLD_NOW | RTLD_LOCAL);
  if (!lib || !stub_calls) {
    fprintf(stderr, "FAIL: cannot load librecap.so after the stub: %s\n", dlerror());
    return 1;
  }
  LOAD(lib, recap_version);
  LOAD(lib, recap_library_versions_get);
  LOAD(lib, recap_pipeline_create_string);
  LOAD(lib, recap_pipeline_run);
  LOAD(lib, recap_pipeline_copy_out);
  LOAD(lib, recap_pipeline_destroy);
  LOAD(lib, recap_last_error);
  if (strcmp(recap_version(), RECAP_VERSION_STRING) != 0) {
    fprintf(stderr, "FAIL: the library is %s, the header %s\n", recap_version(),
            RECAP_VERSION_STRING);
    return 1;
  }
  recap_library_versions v;
  if (recap_library_versions_get(&v) != RECAP_OK) return 1;
  /* A CUDA build opens the toolkit's libcublasLt.so.13 by its own soname (when it finds it);
   * either way never the stub's .so.12. */
  if (v.cublaslt_version == 120999 || v.cublas_version == 120000) {
    fprintf(stderr, "FAIL: recap reports the stub's cuBLAS version\n");
    return 1;
  }
  recap_pipeline_options o = RECAP_PIPELINE_OPTIONS_INIT;
  o.override_device = 1;
  o.device = (recap_device){RECAP_BACKEND_HOST, 0};
  recap_pipeline *p = NULL;
  float y[6] = {0};
  recap_status st = recap_pipeline_create_string(SPEC, sizeof SPEC - 1, "gemm.yaml", &o, &p);
  if (st == RECAP_OK) st = recap_pipeline_run(p, 0);
  if (st == RECAP_OK) st = recap_pipeline_copy_out(p, "y", y, sizeof y, 0);
  if (st != RECAP_OK) {
    fprintf(stderr, "FAIL: the pipeline: %s\n", recap_last_error());
    return 1;
  }
  recap_pipeline_destroy(p);
  for (int i = 0; i < 6; i++)
    if (y[i] != 2.0f) {
      fprintf(stderr, "FAIL: y[%d] = %g, expected 2\n", i, y[i]);
      return 1;
    }
  if (*stub_calls != 0) {
    fprintf(stderr, "FAIL: recap called the stub cuBLAS %d times\n", *stub_calls);
    return 1;
  }
  printf(
      "librecap.so %s ran a GEMM on the host next to another cuBLAS without touching it "
      "(cuBLASLt %d as recap sees it)\n",
      recap_version(), v.cublaslt_version);
  return 0;
}
