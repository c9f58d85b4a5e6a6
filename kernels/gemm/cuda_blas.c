/* cuda_blas.c: opening cuBLAS and cuBLASLt on first use (cuda_blas.h). */
#include "kernels/gemm/cuda_blas.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/error.h"

recap__blas_api recap__blas;

#define STR_(x) #x
/* The text of x after macro expansion: the exported name of a cublas_v2.h alias
 * (cublasCreate -> "cublasCreate_v2"), the soname's major version. */
#define STR(x) STR_(x)

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static bool loaded;
static char load_error[1536];

/* Opens `soname` where cuda_blas.h says; on failure appends the places tried to `tried`. */
static void *open_library(const char *soname, char *tried, size_t size) {
  void *handle = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
  if (handle) return handle;
  const char *cuda = getenv("CUDA_PATH");
  char paths[2][PATH_MAX];
  int count = 0;
  if (cuda && *cuda) snprintf(paths[count++], PATH_MAX, "%s/lib64/%s", cuda, soname);
  snprintf(paths[count++], PATH_MAX, "/usr/local/cuda/lib64/%s", soname);
  for (int i = 0; i < count; ++i)
    if ((handle = dlopen(paths[i], RTLD_NOW | RTLD_LOCAL))) return handle;
  size_t used = strlen(tried);
  snprintf(tried + used, size - used, "%s%s (the loader's search path, %s%s/usr/local/cuda/lib64)",
           used ? "; " : "", soname, cuda && *cuda ? cuda : "", cuda && *cuda ? "/lib64, " : "");
  return NULL;
}

/* Every function of RECAP__BLAS_FUNCTIONS from the two open libraries; false, with
 * load_error naming the missing one, when one is not there. */
static bool resolve_all(void *lt, void *blas, recap__blas_api *out) {
  recap__blas_api api;
#define RESOLVE_(library, function)                                                              \
  *(void **)&api.function = dlsym(library, STR(function));                                       \
  if (!api.function) {                                                                           \
    snprintf(load_error, sizeof load_error,                                                      \
             "cuBLAS is not usable: %s has no %s (cuBLAS %d was expected)",                      \
             #library[0] == 'l' ? "libcublasLt" : "libcublas", STR(function), CUBLAS_VER_MAJOR); \
    return false;                                                                                \
  }
  RECAP__BLAS_FUNCTIONS(RESOLVE_)
#undef RESOLVE_
  *out = api;
  return true;
}

static void load(void) {
  char tried[1024] = "";
  /* cuBLASLt first: libcublas needs it, and finds it loaded by its soname. */
  void *lt = open_library("libcublasLt.so." STR(CUBLAS_VER_MAJOR), tried, sizeof tried);
  void *blas = lt ? open_library("libcublas.so." STR(CUBLAS_VER_MAJOR), tried, sizeof tried) : NULL;
  recap__blas_api api;
  if (!lt || !blas) {
    snprintf(load_error, sizeof load_error,
             "cuBLAS is not available: cannot open %s (put the CUDA toolkit's lib64 on "
             "LD_LIBRARY_PATH, or set CUDA_PATH)",
             tried);
  } else if (resolve_all(lt, blas, &api)) {
    /* Never closed: handles made from them live until their threads exit. */
    recap__blas = api;
    loaded = true;
    return;
  }
  if (blas) dlclose(blas);
  if (lt) dlclose(lt);
}

bool recap__blas_try_load(void) {
  pthread_once(&load_once, load);
  return loaded;
}

recap_status recap__blas_load(void) {
  if (recap__blas_try_load()) return RECAP_OK;
  return RECAP_FAIL(RECAP_STATUS_NOT_SUPPORTED, "%s", load_error);
}
