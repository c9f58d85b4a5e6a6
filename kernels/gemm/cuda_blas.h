/*
 * cuda_blas.h: the cuBLAS and cuBLASLt functions the GEMM module calls, resolved at run time
 * (internal; CUDA builds only).
 *
 * recap does not link libcublas and libcublasLt: mapped into a process they take about 220 MB,
 * which every recap process paid (`recap ops` included) whether it ran a GEMM or not. They are
 * opened on first use instead, when a thread first needs GEMM handles on a CUDA device (or
 * when recap_library_versions_get asks their versions):
 *
 *   RECAP_TRY(recap__blas_load());                       // once per process; cheap after
 *   RECAP_CUBLAS_TRY(recap__blas.cublasLtCreate(&lt));
 *
 * Each member of recap__blas has the name and the type of the library function it points at
 * (the names cublas_v2.h maps cublasCreate & co. to included), so a call reads like the direct
 * one. cuBLASLt's descriptor *Init functions are inline wrappers in its header; their
 * _internal targets are here, taking the descriptor's size.
 *
 * Where the libraries are looked for, in order: the dynamic loader's own search by soname
 * (LD_LIBRARY_PATH, the ld.so cache), then $CUDA_PATH/lib64 and /usr/local/cuda/lib64. The
 * sonames are those of the cuBLAS major version recap was built against.
 */
#ifndef RECAP_KERNELS_CUDA_BLAS_H
#define RECAP_KERNELS_CUDA_BLAS_H

#include <cublasLt.h>
#include <cublas_v2.h>
#include <stdbool.h>

#include "include/recap.h"

#ifdef __cplusplus
extern "C" {
#endif

/* XX(library, function): every function recap__blas holds; library is blas or lt. */
#define RECAP__BLAS_FUNCTIONS(XX)               \
  XX(blas, cublasCreate)                        \
  XX(blas, cublasDestroy)                       \
  XX(blas, cublasSetStream)                     \
  XX(blas, cublasSetWorkspace)                  \
  XX(blas, cublasSetMathMode)                   \
  XX(blas, cublasGetProperty)                   \
  XX(blas, cublasGemmEx)                        \
  XX(blas, cublasGemmStridedBatchedEx)          \
  XX(lt, cublasLtCreate)                        \
  XX(lt, cublasLtDestroy)                       \
  XX(lt, cublasLtGetVersion)                    \
  XX(lt, cublasLtMatmulDescInit_internal)       \
  XX(lt, cublasLtMatmulDescSetAttribute)        \
  XX(lt, cublasLtMatrixLayoutInit_internal)     \
  XX(lt, cublasLtMatrixLayoutSetAttribute)      \
  XX(lt, cublasLtMatmulPreferenceInit_internal) \
  XX(lt, cublasLtMatmulPreferenceSetAttribute)  \
  XX(lt, cublasLtMatmulAlgoGetHeuristic)        \
  XX(lt, cublasLtMatmulAlgoCheck)               \
  XX(lt, cublasLtMatmulAlgoConfigGetAttribute)  \
  XX(lt, cublasLtMatmulAlgoConfigSetAttribute)  \
  XX(lt, cublasLtMatmulAlgoCapGetAttribute)     \
  XX(lt, cublasLtMatmul)

typedef struct {
#define RECAP__BLAS_MEMBER_(library, function) __typeof__(function) *function;
  RECAP__BLAS_FUNCTIONS(RECAP__BLAS_MEMBER_)
#undef RECAP__BLAS_MEMBER_
} recap__blas_api;

/* Filled by the first successful recap__blas_load; all NULL before. */
extern recap__blas_api recap__blas;

/* Opens both libraries and resolves every function, once per process (thread-safe). On
 * failure RECAP_STATUS_NOT_SUPPORTED naming what was tried, and every later call fails the
 * same way. */
recap_status recap__blas_load(void);
/* The same without recording a failure: whether the functions are usable. */
bool recap__blas_try_load(void);

#ifdef __cplusplus
}
#endif

#endif
