/*
 * epilogue.cu: the part of a GEMM epilogue that cuBLASLt cannot fuse, applied in place
 * to the GEMM's contiguous output: bias (cuBLAS path only), the activations cuBLASLt has no
 * epilogue for: gelu in its erf form (cuBLASLt's GELU is the tanh approximation), silu,
 * sigmoid and tanh, and a linear's residual where it must come after the activation or the
 * GEMM ran elsewhere (cuBLAS). One extra pass over the output; math in f32
 * for every storage type, with the activation code of the host reference (recap__gemm_activate
 * in gemm.h; its erf gelu has a cheaper device form there, as accurate as erff), rounded once
 * at the end. The kernels
 * start with recap__pdl_begin and are launched through recap__cuda_launch (cuda_common.cuh):
 * they wait for the GEMM before touching its output.
 *
 * The pass is memory-bound, so the common case moves 16 bytes per load and store (8 halves or
 * 4 floats per thread, one vector each, no loop) with the activation a template parameter:
 * ncu showed the element-wise version at 22 us for 4M f16 elements (2-byte accesses, a 64-bit
 * modulo and a switch per element) where a bandwidth-bound pass takes ~6 us. (Two or four
 * vectors a thread measured slower, and with erff the gelu pass was bound by its
 * instructions, not by memory: docs/perf/kernels.md.) Outputs whose row length or addresses
 * are not multiples of 16 bytes take the element-wise kernel.
 */
#include <cuda_runtime.h>
#include <stdint.h>

#include "kernels/cuda_common.cuh"
#include "kernels/gemm/gemm.h"
#include "runtime/cuda_check.h"

namespace {

constexpr int kThreads = 256;

/* ================================ kernels ================================================ */

/* kN elements of T in one 16-byte register group. */
template <typename T>
union vec16 {
  static constexpr int kN = 16 / sizeof(T);
  uint4 raw;
  T v[kN];
};

/* The activation as the vector pass computes it. For 16-bit storage, silu and sigmoid take
 * the hardware exponential and a fast division (about 4 instructions instead of about 25 for
 * expf and an IEEE division): their error, a few f32 ulps, is far below the output's own
 * rounding (2^-9 relative for bf16, 2^-12 for f16), and with the exact forms the pass was
 * bound by its instructions, not by memory (`recap bench-gemm`: Llama 3 8B gate_up, 1024 x
 * 28672, bias + silu: 89 us for the pass against PyTorch's 39; docs/perf/gemm_sweep.md). f32
 * outputs keep the host reference's forms. Limits: x = +-inf gives x's limit (0 or x for
 * silu, 0 or 1 for sigmoid) except silu(-inf), NaN as in the exact form; NaN stays NaN. */
template <typename T, recap__activation kAct>
__device__ __forceinline__ float activate_vec(float x) {
  if (sizeof(T) == 2 && kAct == RECAP_ACT_SILU) return __fdividef(x, 1.0f + __expf(-x));
  if (sizeof(T) == 2 && kAct == RECAP_ACT_SIGMOID) return __frcp_rn(1.0f + __expf(-x));
  return recap__gemm_activate(kAct, x);
}

/* One 16-byte vector per thread. The vector never straddles a row (cols % kN == 0), so its
 * bias is the one vector at column (first element % cols). */
template <typename T, recap__activation kAct>
__global__ void bias_act_vec_kernel(T *out, const T *bias, const T *residual, int64_t vectors,
                                    int64_t cols) {
  recap__pdl_begin();
  constexpr int kN = vec16<T>::kN;
  const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= vectors) return;
  uint4 *where = reinterpret_cast<uint4 *>(out) + i;
  vec16<T> x, b, r;
  x.raw = *where;
  if (bias) b.raw = __ldg(reinterpret_cast<const uint4 *>(bias + (i * kN) % cols));
  if (residual) r.raw = __ldg(reinterpret_cast<const uint4 *>(residual) + i);
#pragma unroll
  for (int j = 0; j < kN; ++j) {
    float f = recap__to_float(x.v[j]);
    if (bias) f += recap__to_float(b.v[j]);
    f = activate_vec<T, kAct>(f);
    if (residual) f += recap__to_float(r.v[j]);
    x.v[j] = recap__from_float<T>(f);
  }
  *where = x.raw;
}

template <typename T>
__global__ void bias_act_kernel(T *out, const T *bias, const T *residual, int64_t total,
                                int64_t cols, recap__activation act) {
  recap__pdl_begin();
  const int64_t step = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += step) {
    float v = recap__to_float(out[i]);
    if (bias) v += recap__to_float(bias[i % cols]);
    v = recap__gemm_activate(act, v);
    if (residual) v += recap__to_float(residual[i]);
    out[i] = recap__from_float<T>(v);
  }
}

/* A gated output's pairing: one output element per thread, act(gate) * up in f32 with the
 * host reference's activation (as the `expr` kernel it replaces computes it), rounded once. */
template <typename T, recap__activation kAct>
__global__ void gated_kernel(T *out, const T *product, int64_t total, int64_t half) {
  recap__pdl_begin();
  const int64_t step = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += step) {
    const int64_t r = i / half, c = i - r * half;
    const float g = recap__to_float(product[2 * half * r + c]);
    const float u = recap__to_float(product[2 * half * r + half + c]);
    out[i] = recap__from_float<T>(recap__gemm_activate(kAct, g) * u);
  }
}

template <typename T, recap__activation kAct>
recap_status launch_vec(T *out, const T *bias, const T *residual, int64_t total, int64_t cols,
                        cudaStream_t stream) {
  const int64_t vectors = total / vec16<T>::kN;
  unsigned grid;
  RECAP_TRY(recap__cuda_grid_cover(vectors, kThreads, &grid));
  RECAP_CUDA_TRY(recap__cuda_launch(bias_act_vec_kernel<T, kAct>, grid, kThreads, 0, stream, out,
                                    bias, residual, vectors, cols));
  return RECAP_OK;
}

bool aligned16(const void *p) {
  return ((uintptr_t)p & 15u) == 0;
}

}  // namespace

/* ================================ launchers ============================================== */

extern "C" recap_status recap__cuda_gemm_bias_act(void *out, const void *bias, const void *residual,
                                                  recap_dtype dtype, int64_t rows, int64_t cols,
                                                  recap__activation act, void *cuda_stream) {
  recap__cuda_launch_range range("recap gemm epilogue");
  if (!out || rows < 1 || cols < 1 || !cuda_stream)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "gemm epilogue: bad arguments (out %p, %lld x %lld, stream %p)", out,
                      (long long)rows, (long long)cols, cuda_stream);
  const int64_t total = rows * cols;
  cudaStream_t stream = static_cast<cudaStream_t>(cuda_stream);
  return recap__cuda_dispatch_float(dtype, "gemm epilogue", [&](auto tag) -> recap_status {
    using T = decltype(tag);
    T *o = static_cast<T *>(out);
    const T *b = static_cast<const T *>(bias);
    const T *r = static_cast<const T *>(residual);
    if (cols % vec16<T>::kN == 0 && aligned16(out) && (!bias || aligned16(bias)) &&
        (!residual || aligned16(residual))) {
      recap_status st = RECAP_OK;
      if (recap__with_activation(act, [&](auto a) {
            st = launch_vec<T, decltype(a)::value>(o, b, r, total, cols, stream);
          }))
        return st;
    }
    RECAP_CUDA_TRY(recap__cuda_launch(bias_act_kernel<T>, recap__cuda_grid_for(total, kThreads),
                                      kThreads, 0, stream, o, b, r, total, cols, act));
    return RECAP_OK;
  });
}

extern "C" recap_status recap__cuda_gemm_gated(void *out, const void *product, recap_dtype dtype,
                                               int64_t rows, int64_t half, recap__activation act,
                                               void *cuda_stream) {
  recap__cuda_launch_range range("recap gemm gated");
  if (!out || !product || rows < 1 || half < 1 || !cuda_stream)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "gemm gated output: bad arguments (out %p, product %p, %lld x %lld, stream "
                      "%p)",
                      out, product, (long long)rows, (long long)half, cuda_stream);
  const int64_t total = rows * half;
  cudaStream_t stream = static_cast<cudaStream_t>(cuda_stream);
  return recap__cuda_dispatch_float(dtype, "gemm gated output", [&](auto tag) -> recap_status {
    using T = decltype(tag);
    cudaError_t launched = cudaSuccess;
    if (!recap__with_activation(act, [&](auto a) {
          launched = recap__cuda_launch(gated_kernel<T, decltype(a)::value>,
                                        recap__cuda_grid_for(total, kThreads), kThreads, 0, stream,
                                        static_cast<T *>(out), static_cast<const T *>(product),
                                        total, half);
        }))
      return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "gemm gated output: unknown activation %d",
                        (int)act);
    RECAP_CUDA_TRY(launched);
    return RECAP_OK;
  });
}
