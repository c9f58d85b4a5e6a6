/* versions.c: the versions of the CUDA runtime, driver and BLAS libraries recap runs with. */
#include "runtime/versions.h"

#include <stdatomic.h>
#include <string.h>

#include "runtime/error.h"

#if RECAP_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

typedef void (*blas_version_query)(int *cublas, int *cublaslt);
static _Atomic(blas_version_query) blas_query;

void recap__set_blas_version_query(void (*query)(int *cublas, int *cublaslt)) {
  atomic_store(&blas_query, query);
}

recap_status recap_library_versions_get(recap_library_versions *out) {
  RECAP_CHECK_ARG(out);
  recap_library_versions v;
  memset(&v, 0, sizeof v);
#if RECAP_WITH_CUDA
  /* Neither call needs a device; without a driver, cudaDriverGetVersion reports 0. A failure
   * leaves the version at 0, which is what the field means ("absent"). */
  if (cudaRuntimeGetVersion(&v.runtime_version) != cudaSuccess) {
    (void)cudaGetLastError();
    v.runtime_version = 0;
  }
  if (cudaDriverGetVersion(&v.driver_version) != cudaSuccess) {
    (void)cudaGetLastError();
    v.driver_version = 0;
  }
#endif
  blas_version_query query = atomic_load(&blas_query);
  if (query) query(&v.cublas_version, &v.cublaslt_version);
  *out = v;
  return RECAP_OK;
}
