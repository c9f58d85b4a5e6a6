/*
 * cuda_check.h: the checking macros for CUDA, cuBLAS and driver API calls (internal; CUDA
 * builds only).
 *
 * Each macro evaluates a call once; on failure it maps the library's error to a recap_status,
 * records "<expr> failed: <error name> (<error text>) [device N]" (with the function and
 * file:line in front under RECAP_ERROR_LOCATIONS=1: recap__fail_at), and RETURNS that status
 * from the enclosing function. Nothing aborts. The _GOTO forms set a status variable and jump to the function's one cleanup label.
 *
 *   recap_status copy(void *dst, const void *src, size_t n, cudaStream_t s) {
 *     RECAP_CUDA_TRY(cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, s));
 *     return RECAP_OK;
 *   }
 *
 *   recap_status st = RECAP_OK;
 *   RECAP_CUDA_TRY_GOTO(st, cudaEventCreate(&e), fail);
 *   ...
 * fail:
 *   cudaEventDestroy(e);
 *   return st;
 *
 * A failing CUDA runtime call also leaves its error in cudart's per-thread "last error"; the
 * failure path clears it (cudaGetLastError), so a later launch check does not report it a
 * second time. Sticky faults (illegal address, trap) cannot be cleared: every later call on
 * the context fails with them, and they map to RECAP_STATUS_DEVICE_ERROR.
 *
 * RECAP_CUBLAS_TRY needs <cublas_api.h> (or cublas_v2.h / cublasLt.h) included at the use site;
 * RECAP_CU_TRY needs <cuda.h>. This header needs only the runtime API.
 */
#ifndef RECAP_RUNTIME_CUDA_CHECK_H
#define RECAP_RUNTIME_CUDA_CHECK_H

#include <cuda_runtime_api.h>
#include <stdint.h>

#include "runtime/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The recap_status for a CUDA runtime error (cudaSuccess -> RECAP_OK). Pure; never fails. */
recap_status recap__cuda_status(cudaError_t error);
/* The recap_status for a cublasStatus_t (passed as int so that this header does not need
 * cuBLAS): ALLOC_FAILED -> OUT_OF_MEMORY, NOT_SUPPORTED -> NOT_SUPPORTED, others ->
 * LIBRARY_ERROR. */
recap_status recap__cublas_status(int status);
/* The recap_status for a CUresult (passed as int so that this header does not need cuda.h);
 * the driver's codes are mapped like the runtime's. */
recap_status recap__cu_status(int result);

/* Records the failure of `expr` and returns its mapped status; clears cudart's last error.
 * Used by the macros below. */
recap_status recap__cuda_fail_at(cudaError_t error, const char *expr, const char *file, int line,
                                 const char *func);
/* As above for cuBLAS (the status is named without calling into cuBLAS). */
recap_status recap__cublas_fail_at(int status, const char *expr, const char *file, int line,
                                   const char *func);
/* As above for the driver API; the error's name comes from cuGetErrorName, found through
 * cudaGetDriverEntryPointByVersion (recap does not link libcuda). */
recap_status recap__cu_fail_at(int result, const char *expr, const char *file, int line,
                               const char *func);

/* A counter that advances each time a checked call is refused because a capture is under way
 * (RECAP_STATUS_ILLEGAL_DURING_CAPTURE), and the message of the latest such refusal. The CUDA
 * backend uses them to name the illegal call when a capture ends invalidated. */
uint64_t recap__cuda_refusal_count(void);
/* Copies the latest refusal's message into buf (always NUL-terminated) and returns the counter
 * value it belongs to (0 if none). */
uint64_t recap__cuda_last_refusal(char *buf, size_t size);

#define RECAP_CUDA_TRY(expr)                                                            \
  do {                                                                                  \
    cudaError_t recap_cuda_err_ = (expr);                                               \
    if (recap_cuda_err_ != cudaSuccess)                                                 \
      return recap__cuda_fail_at(recap_cuda_err_, #expr, __FILE__, __LINE__, __func__); \
  } while (0)

#define RECAP_CUDA_TRY_GOTO(st, expr, label)                                            \
  do {                                                                                  \
    cudaError_t recap_cuda_err_ = (expr);                                               \
    if (recap_cuda_err_ != cudaSuccess) {                                               \
      (st) = recap__cuda_fail_at(recap_cuda_err_, #expr, __FILE__, __LINE__, __func__); \
      goto label;                                                                       \
    }                                                                                   \
  } while (0)

#define RECAP_CUBLAS_TRY(expr)                                                            \
  do {                                                                                    \
    cublasStatus_t recap_cublas_st_ = (expr);                                             \
    if (recap_cublas_st_ != CUBLAS_STATUS_SUCCESS)                                        \
      return recap__cublas_fail_at((int)recap_cublas_st_, #expr, __FILE__, __LINE__,     \
                                   __func__);                                             \
  } while (0)

#define RECAP_CUBLAS_TRY_GOTO(st, expr, label)                                            \
  do {                                                                                    \
    cublasStatus_t recap_cublas_st_ = (expr);                                             \
    if (recap_cublas_st_ != CUBLAS_STATUS_SUCCESS) {                                      \
      (st) = recap__cublas_fail_at((int)recap_cublas_st_, #expr, __FILE__, __LINE__,      \
                                   __func__);                                             \
      goto label;                                                                         \
    }                                                                                     \
  } while (0)

#define RECAP_CU_TRY(expr)                                                               \
  do {                                                                                   \
    CUresult recap_cu_res_ = (expr);                                                     \
    if (recap_cu_res_ != CUDA_SUCCESS)                                                   \
      return recap__cu_fail_at((int)recap_cu_res_, #expr, __FILE__, __LINE__, __func__); \
  } while (0)

#define RECAP_CU_TRY_GOTO(st, expr, label)                                               \
  do {                                                                                   \
    CUresult recap_cu_res_ = (expr);                                                     \
    if (recap_cu_res_ != CUDA_SUCCESS) {                                                 \
      (st) = recap__cu_fail_at((int)recap_cu_res_, #expr, __FILE__, __LINE__, __func__); \
      goto label;                                                                        \
    }                                                                                    \
  } while (0)

#ifdef __cplusplus
}
#endif

#endif
