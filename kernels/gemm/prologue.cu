/*
 * prologue.cu: a linear's prologue (gemm.h) written out as a matrix: P(x) [m, k] contiguous,
 * for the paths that cannot compute it as they load x (every path but the skinny kernel:
 * prefill and large decode batches, f32, shapes the skinny kernel leaves to cuBLASLt). One
 * launch, as the unfolded rmsnorm or gated unit was, so folding never adds work there.
 *
 * rms_norm: one block per row; each thread sums the squares of a strided set of the row's
 * elements in f32, the block reduces them in a fixed tree (deterministic, so graph replays are
 * bit-identical), and every element is written as x * rsqrt(ss / k + eps) * g, rounded once.
 * glu: one thread per element, glu(gate) * up in f32, rounded once.
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

template <typename T>
__global__ void __launch_bounds__(kThreads)
    glu_kernel(const T *x, int64_t ldx, int64_t up, T *dst, int64_t m, int64_t k,
               recap__activation act) {
  recap__pdl_begin();
  const int64_t i = (int64_t)blockIdx.x * kThreads + threadIdx.x;
  if (i >= m * k) return;
  const int64_t r = i / k, c = i % k;
  const T *row = x + r * ldx;
  dst[i] = recap__from_float<T>(recap__gemm_activate(act, recap__to_float(row[c])) *
                                recap__to_float(row[up + c]));
}

}  // namespace

/* ================================ launcher =============================================== */

extern "C" recap_status recap__cuda_gemm_prologue(const recap__gemm_plan *p, void *dst,
                                                  void *cuda_stream) {
  recap__cuda_launch_range range("recap gemm prologue");
  if (!p || !dst || !p->a || p->prologue == RECAP__GEMM_PROLOGUE_NONE || p->m < 1 || p->k < 1 ||
      p->m > INT32_MAX || (p->prologue == RECAP__GEMM_PROLOGUE_RMS_NORM && !p->norm_weight))
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "gemm prologue: no prologue, or an unbound or empty plan");
  cudaStream_t stream = static_cast<cudaStream_t>(cuda_stream);
  return recap__cuda_dispatch_float(p->dtype, "gemm prologue", [&](auto tag) -> recap_status {
    using T = decltype(tag);
    const T *x = static_cast<const T *>(p->a);
    T *out = static_cast<T *>(dst);
    if (p->prologue == RECAP__GEMM_PROLOGUE_RMS_NORM) {
      RECAP_CUDA_TRY(recap__cuda_launch(rms_rows_kernel<T>, dim3((unsigned)p->m), dim3(kThreads), 0,
                                        stream, x, p->a_rs, static_cast<const T *>(p->norm_weight),
                                        out, p->k, p->eps));
    } else {
      const int64_t blocks = RECAP_CEIL_DIV(p->m * p->k, (int64_t)kThreads);
      RECAP_CUDA_TRY(recap__cuda_launch(glu_kernel<T>, dim3((unsigned)blocks), dim3(kThreads), 0,
                                        stream, x, p->a_rs, p->up_offset, out, p->m, p->k, p->glu));
    }
    return RECAP_OK;
  });
}
