/*
 * cuda_common.cuh: device helpers shared by the op kernels in kernels/ (internal; only the .cu
 * files include it).
 *
 * - Element access: f16/bf16/f32 storage is loaded as float and stored from float (round to
 *   nearest even, as kernels/half.h does on the host), so every kernel computes in f32.
 * - recap__cuda_view4: a recap_tensor's shape and strides right-aligned to 4 dimensions, so a
 *   kernel turns a linear element index into a strided offset the same way for any rank.
 * - Warp and block sums built on warp shuffles.
 * - recap__cuda_launch_range: the NVTX range every launcher opens (popped on return), and the
 *   launch-size helpers (CEIL_DIV, the grid cap of grid-stride kernels).
 *
 * Everything here is inline or a template, so each .cu file gets its own copy and no symbol
 * is defined twice when the files are linked together.
 */
#ifndef RECAP_KERNELS_CUDA_COMMON_CUH
#define RECAP_KERNELS_CUDA_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "include/recap.h"
#include "runtime/error.h"

#define RECAP_CEIL_DIV(a, b) (((a) + (b)-1) / (b))

/* Grid-stride kernels never need more blocks than this to fill a GPU (132 SMs x 16 resident
 * blocks of 256 threads is far below it); capping keeps grid.x within its limit for any n. */
constexpr int64_t kRecapMaxGridBlocks = 65535;

static inline unsigned recap__cuda_grid_for(int64_t work_items, int threads) {
  int64_t blocks = RECAP_CEIL_DIV(work_items, (int64_t)threads);
  if (blocks > kRecapMaxGridBlocks) blocks = kRecapMaxGridBlocks;
  if (blocks < 1) blocks = 1;
  return (unsigned)blocks;
}

/* Opens an NVTX range in recap's domain for the launcher's scope; every return path pops it. */
struct recap__cuda_launch_range {
  explicit recap__cuda_launch_range(const char *name) {
    recap_nvtx_range_push(name);
  }
  ~recap__cuda_launch_range() {
    recap_nvtx_range_pop();
  }
  recap__cuda_launch_range(const recap__cuda_launch_range &) = delete;
  recap__cuda_launch_range &operator=(const recap__cuda_launch_range &) = delete;
};

/* Calls fn(T{}) with T the storage type of a float dtype (float, __half, __nv_bfloat16), so a
 * launcher instantiates its kernel per dtype with one generic lambda. Other dtypes fail with
 * RECAP_STATUS_NOT_SUPPORTED naming `what`. */
template <typename Fn>
static recap_status recap__cuda_dispatch_float(recap_dtype dtype, const char *what, Fn &&fn) {
  switch (dtype) {
    case RECAP_DTYPE_F32:
      return fn(float{});
    case RECAP_DTYPE_F16:
      return fn(__half{});
    case RECAP_DTYPE_BF16:
      return fn(__nv_bfloat16{});
    default:
      return RECAP_FAIL(RECAP_STATUS_NOT_SUPPORTED, "%s: dtype %s is not supported on CUDA", what,
                        recap_dtype_name(dtype) ? recap_dtype_name(dtype) : "(invalid)");
  }
}

/* As above over all five dtypes (the two index types as int32_t and int64_t). */
template <typename Fn>
static recap_status recap__cuda_dispatch_any(recap_dtype dtype, const char *what, Fn &&fn) {
  switch (dtype) {
    case RECAP_DTYPE_I32:
      return fn(int32_t{});
    case RECAP_DTYPE_I64:
      return fn(int64_t{});
    default:
      return recap__cuda_dispatch_float(dtype, what, fn);
  }
}

/* ---- element loads and stores -------------------------------------------------------- */

__device__ __forceinline__ float recap__to_float(float v) {
  return v;
}
__device__ __forceinline__ float recap__to_float(__half v) {
  return __half2float(v);
}
__device__ __forceinline__ float recap__to_float(__nv_bfloat16 v) {
  return __bfloat162float(v);
}

template <typename T>
__device__ __forceinline__ T recap__from_float(float v);
template <>
__device__ __forceinline__ float recap__from_float<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __half recap__from_float<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 recap__from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

/* N elements moved by one load or store (16 bytes for the widest uses). */
template <typename T, int N>
struct alignas(sizeof(T) * N) recap__vec {
  T v[N];
};

/* An index (i32 or i64) read from device memory. */
__device__ __forceinline__ int64_t recap__load_index(const void *p, recap_dtype dtype, int64_t i) {
  return dtype == RECAP_DTYPE_I64 ? static_cast<const int64_t *>(p)[i]
                                  : (int64_t) static_cast<const int32_t *>(p)[i];
}

/* ---- strided views --------------------------------------------------------------------- */

/* A tensor's dims right-aligned to 4 (leading dims of size 1, stride 0). Plain data: passed to
 * kernels by value. */
struct recap__cuda_view4 {
  int64_t shape[4];
  int64_t stride[4];
};

static inline recap__cuda_view4 recap__cuda_view4_of(const recap_tensor *t) {
  recap__cuda_view4 v;
  const int lead = 4 - t->ndim;
  for (int d = 0; d < 4; ++d) {
    v.shape[d] = d < lead ? 1 : t->shape[d - lead];
    v.stride[d] = d < lead ? 0 : t->strides[d - lead];
  }
  return v;
}

/* The element offset of row-major linear index `i` of the view's shape. */
__device__ __forceinline__ int64_t recap__view4_offset(const recap__cuda_view4 &v, int64_t i) {
  int64_t off = 0;
  for (int d = 3; d > 0; --d) {
    const int64_t q = i / v.shape[d];
    off += (i - q * v.shape[d]) * v.stride[d];
    i = q;
  }
  return off + i * v.stride[0];
}

/* ---- reductions ------------------------------------------------------------------------- */

__device__ __forceinline__ float recap__warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

/* Sum over the whole block, returned to every thread. `scratch` holds 32 floats in shared
 * memory; the trailing barrier lets the caller reuse it for the next reduction. blockDim.x
 * must be a multiple of 32. */
__device__ __forceinline__ float recap__block_sum(float v, float *scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = recap__warp_sum(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : 0.0f;
  v = recap__warp_sum(v);
  __syncthreads();
  return v;
}

#endif
