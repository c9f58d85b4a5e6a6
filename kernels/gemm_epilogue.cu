/*
 * gemm_epilogue.cu: the part of a GEMM epilogue that cuBLASLt cannot fuse, applied in place
 * to the GEMM's contiguous output: bias (cuBLAS path only) and the activations cuBLASLt has no
 * epilogue for: gelu in its erf form (cuBLASLt's GELU is the tanh approximation), silu,
 * sigmoid and tanh. One extra pass over the output; math in f32 for every storage type, with
 * the same activation code as the host reference (recap__gemm_activate in gemm.h). The kernel
 * starts with recap__pdl_begin and is launched through recap__cuda_launch (cuda_common.cuh): it
 * waits for the GEMM before touching its output.
 */
#include <cuda_runtime.h>
#include <stdint.h>

#include "kernels/cuda_common.cuh"
#include "kernels/gemm.h"
#include "runtime/cuda_check.h"

namespace {

constexpr int kThreads = 256;

/* ================================ kernels ================================================ */

template <typename T>
__global__ void bias_act_kernel(T *out, const T *bias, int64_t total, int64_t cols,
                                recap_activation act) {
  recap__pdl_begin();
  const int64_t step = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += step) {
    float v = recap__to_float(out[i]);
    if (bias) v += recap__to_float(bias[i % cols]);
    out[i] = recap__from_float<T>(recap__gemm_activate(act, v));
  }
}

}  // namespace

/* ================================ launchers ============================================== */

extern "C" recap_status recap__cuda_gemm_bias_act(void *out, const void *bias, recap_dtype dtype,
                                                  int64_t rows, int64_t cols,
                                                  recap_activation act, void *cuda_stream) {
  recap__cuda_launch_range range("recap gemm epilogue");
  if (!out || rows < 1 || cols < 1 || !cuda_stream)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "gemm epilogue: bad arguments (out %p, %lld x %lld, stream %p)", out,
                      (long long)rows, (long long)cols, cuda_stream);
  const int64_t total = rows * cols;
  cudaStream_t stream = static_cast<cudaStream_t>(cuda_stream);
  return recap__cuda_dispatch_float(dtype, "gemm epilogue", [&](auto tag) -> recap_status {
    using T = decltype(tag);
    RECAP_CUDA_TRY(recap__cuda_launch(bias_act_kernel<T>, recap__cuda_grid_for(total, kThreads),
                                      kThreads, 0, stream, static_cast<T *>(out),
                                      static_cast<const T *>(bias), total, cols, act));
    return RECAP_OK;
  });
}
