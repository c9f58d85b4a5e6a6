/*
 * tune_check.cu: the checks the GEMM tuner (choose.c) runs on each candidate's output: the
 * largest |x| of the default's output (the scale of the absolute tolerance), then a count of
 * the elements where a candidate disagrees with the default. Both stay on the device, so a
 * 4096 x 4096 output costs two passes over memory instead of copies to the host.
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
__global__ void maxabs_kernel(const T *x, int64_t count, unsigned *max_bits) {
  recap__pdl_begin();
  float m = 0.0f;
  const int64_t step = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += step) {
    const float v = fabsf(recap__to_float(x[i]));
    if (v > m && isfinite(v)) m = v; /* NaN and inf say nothing about the scale */
  }
  for (int offset = 16; offset > 0; offset >>= 1)
    m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, offset));
  /* Non-negative floats order like their bit patterns. */
  if ((threadIdx.x & 31) == 0) atomicMax(max_bits, __float_as_uint(m));
}

template <typename T>
__global__ void compare_kernel(const T *ref, const T *got, int64_t count, const unsigned *max_bits,
                               float rtol, float atol_frac, unsigned long long *mismatches) {
  recap__pdl_begin();
  const float atol = atol_frac * __uint_as_float(*max_bits);
  unsigned bad = 0;
  const int64_t step = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += step) {
    const float r = recap__to_float(ref[i]), g = recap__to_float(got[i]);
    bool ok;
    if (isnan(r) || isnan(g)) ok = isnan(r) && isnan(g);
    else if (isinf(r) || isinf(g)) ok = r == g;
    else ok = fabsf(r - g) <= rtol * fmaxf(fabsf(r), fabsf(g)) + atol;
    bad += ok ? 0u : 1u;
  }
  for (int offset = 16; offset > 0; offset >>= 1) bad += __shfl_xor_sync(0xffffffffu, bad, offset);
  if ((threadIdx.x & 31) == 0 && bad) atomicAdd(mismatches, (unsigned long long)bad);
}

}  // namespace

/* ================================ launchers ============================================== */

extern "C" recap_status recap__cuda_gemm_tune_maxabs(const void *x, recap_dtype dtype,
                                                     int64_t count, unsigned *max_bits,
                                                     void *cuda_stream) {
  recap__cuda_launch_range range("recap gemm tune maxabs");
  if (!x || count < 1 || !max_bits || !cuda_stream)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "gemm tune: bad arguments to maxabs");
  cudaStream_t stream = static_cast<cudaStream_t>(cuda_stream);
  return recap__cuda_dispatch_float(dtype, "gemm tune maxabs", [&](auto tag) -> recap_status {
    using T = decltype(tag);
    RECAP_CUDA_TRY(recap__cuda_launch(maxabs_kernel<T>, recap__cuda_grid_for(count, kThreads),
                                      kThreads, 0, stream, static_cast<const T *>(x), count,
                                      max_bits));
    return RECAP_OK;
  });
}

extern "C" recap_status recap__cuda_gemm_tune_compare(const void *ref, const void *got,
                                                      recap_dtype dtype, int64_t count,
                                                      const unsigned *max_bits, float rtol,
                                                      float atol_frac,
                                                      unsigned long long *mismatches,
                                                      void *cuda_stream) {
  recap__cuda_launch_range range("recap gemm tune compare");
  if (!ref || !got || count < 1 || !max_bits || !mismatches || !cuda_stream)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "gemm tune: bad arguments to compare");
  cudaStream_t stream = static_cast<cudaStream_t>(cuda_stream);
  return recap__cuda_dispatch_float(dtype, "gemm tune compare", [&](auto tag) -> recap_status {
    using T = decltype(tag);
    RECAP_CUDA_TRY(recap__cuda_launch(compare_kernel<T>, recap__cuda_grid_for(count, kThreads),
                                      kThreads, 0, stream, static_cast<const T *>(ref),
                                      static_cast<const T *>(got), count, max_bits, rtol,
                                      atol_frac, mismatches));
    return RECAP_OK;
  });
}
