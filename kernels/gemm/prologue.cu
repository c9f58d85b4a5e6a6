/*
 * prologue.cu: a linear's prologue (gemm.h) written out as a matrix: P(x) [m, k] contiguous,
 * for the paths that cannot compute it as they load x (every path but the skinny kernel:
 * prefill and large decode batches, f32, shapes the skinny kernel leaves to cuBLASLt). One
 * launch, as the unfolded rmsnorm was, so folding never adds work there.
 *
 * rms_norm: one block per row; each thread sums the squares of a strided set of the row's
 * elements in f32, the block reduces them in a fixed tree (deterministic, so graph replays are
 * bit-identical), and every element is written as x * rsqrt(ss / k + eps) * g, rounded once.
 * The norm is the only prologue on CUDA: the gated unit's kernel (one thread per element) gave
 * different bits from run to run on the H100 and was removed; choose.c refuses a linear with
 * `glu` (docs/SERVING.md, "Prologue folds").
 */
#include <cuda_runtime.h>
#include <stdint.h>

#include "kernels/cuda_common.cuh"
#include "kernels/gemm/gemm.h"
#include "runtime/cuda_check.h"

namespace {

constexpr int kThreads = 256;

/* ================================ kernels ================================================ */

template <typename T>
__global__ void __launch_bounds__(kThreads)
    rms_rows_kernel(const T *x, int64_t ldx, const T *g, T *dst, int64_t k, float eps) {
  recap__pdl_begin();
  __shared__ float part[kThreads];
  const T *row = x + (int64_t)blockIdx.x * ldx;
  float ss = 0.0f;
  for (int64_t j = threadIdx.x; j < k; j += kThreads) {
    const float v = recap__to_float(row[j]);
    ss = fmaf(v, v, ss);
  }
  part[threadIdx.x] = ss;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if ((int)threadIdx.x < half) part[threadIdx.x] += part[threadIdx.x + half];
    __syncthreads();
  }
  const float inv = rsqrtf(part[0] / (float)k + eps);
  T *out = dst + (int64_t)blockIdx.x * k;
  for (int64_t j = threadIdx.x; j < k; j += kThreads)
    out[j] = recap__from_float<T>(recap__to_float(row[j]) * inv * recap__to_float(g[j]));
}

}  // namespace

/* ================================ launcher =============================================== */

extern "C" recap_status recap__cuda_gemm_prologue(const recap__gemm_plan *p, void *dst,
                                                  void *cuda_stream) {
  recap__cuda_launch_range range("recap gemm prologue");
  if (p && p->prologue == RECAP__GEMM_PROLOGUE_GLU)
    return RECAP_FAIL(RECAP_STATUS_NOT_SUPPORTED,
                      "gemm prologue: the gated unit (glu) has no CUDA kernel (docs/SERVING.md, "
                      "\"Prologue folds\")");
  if (!p || !dst || !p->a || p->prologue != RECAP__GEMM_PROLOGUE_RMS_NORM || !p->norm_weight ||
      p->m < 1 || p->k < 1 || p->m > INT32_MAX)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "gemm prologue: no norm prologue, or an unbound or empty plan");
  cudaStream_t stream = static_cast<cudaStream_t>(cuda_stream);
  return recap__cuda_dispatch_float(p->dtype, "gemm prologue", [&](auto tag) -> recap_status {
    using T = decltype(tag);
    const T *x = static_cast<const T *>(p->a);
    T *out = static_cast<T *>(dst);
    RECAP_CUDA_TRY(recap__cuda_launch(rms_rows_kernel<T>, dim3((unsigned)p->m), dim3(kThreads), 0,
                                      stream, x, p->a_rs, static_cast<const T *>(p->norm_weight),
                                      out, p->k, (float)p->eps));
    return RECAP_OK;
  });
}
