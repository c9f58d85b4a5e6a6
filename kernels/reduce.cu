/*
 * reduce.cu: the CUDA row reductions over the last dimension: softmax (scale, causal mask),
 * layernorm, rmsnorm, sum and mean.
 *
 * Every kernel maps one ROW (the last dimension, D elements, stride 1) to one "group" of
 * threads: a warp for short rows, or long rows when there are many (8 rows per 256-thread
 * block, reductions by warp shuffles only, no shared memory or barriers), else a whole block
 * (warp shuffles, then one exchange through shared memory). Groups loop over rows with the grid's
 * stride, so a capped grid covers any number of rows. Rows may sit anywhere in a strided view
 * (their start is found by decomposing the row index over the leading dims); outputs are
 * contiguous.
 *
 * Numerics: all accumulation in f32. Softmax keeps a running (max, sum of exp) pair per thread
 * (online softmax), merges the pairs across the group, then writes exp(x - max) / sum: two
 * reads of the row and never an overflow. Layernorm is two-pass (mean, then the sum of squared
 * deviations, then the write), which avoids the cancellation of E[x^2] - E[x]^2 for rows with
 * a large mean. Re-reads of a row mostly hit L1/L2.
 *
 * Every kernel starts with recap__pdl_begin and is launched through recap__cuda_launch
 * (programmatic dependent launch, cuda_common.cuh).
 */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "kernels/cuda_common.cuh"
#include "kernels/cuda_ops.h"
#include "runtime/cuda_check.h"

namespace {

/* Rows up to kWarpRowMax elements go to one warp each. Longer rows go to a block each, unless
 * there are at least kManyRows of them and they are at most kWarpRowMaxManyRows long: then
 * warps still fill the GPU, and avoid the block's barriers (measured on H100: 4096 rows of
 * 4096 f16 run softmax at 1270 GB/s by warps against 760 GB/s by blocks). */
constexpr int kWarpRowMax = 1024;
constexpr int64_t kManyRows = 4096;
constexpr int kWarpRowMaxManyRows = 8192;
constexpr int kWarpRowThreads = 256; /* 8 rows per block in warp mode */
constexpr int kBlockRowThreads = 512;

/* ================================ kernels ================================================ */

/* Which rows a thread works on and how its group reduces. kBlock: the whole block is one
 * group; otherwise each warp is. All members of a group see the same row sequence, so the
 * barriers inside block reductions are reached uniformly. */
template <bool kBlock>
struct row_group {
  int64_t first_row, row_stride;
  int rank, size;

  __device__ __forceinline__ row_group() {
    if (kBlock) {
      first_row = blockIdx.x;
      row_stride = gridDim.x;
      rank = threadIdx.x;
      size = blockDim.x;
    } else {
      const int warps = blockDim.x >> 5;
      first_row = (int64_t)blockIdx.x * warps + (threadIdx.x >> 5);
      row_stride = (int64_t)gridDim.x * warps;
      rank = threadIdx.x & 31;
      size = 32;
    }
  }

  __device__ __forceinline__ float sum(float v, float *scratch) const {
    return kBlock ? recap__block_sum(v, scratch) : recap__warp_sum(v);
  }
};

/* Merges two online-softmax states (running max m, sum s of exp(x - m)). An empty state is
 * (-inf, 0); merging with it leaves the other unchanged and never computes inf - inf. */
__device__ __forceinline__ void softmax_merge(float &m, float &s, float m2, float s2) {
  const float mx = fmaxf(m, m2);
  if (mx == -INFINITY) return;
  s = s * expf(m - mx) + s2 * expf(m2 - mx);
  m = mx;
}

__device__ __forceinline__ void softmax_warp_merge(float &m, float &s) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, o);
    const float s2 = __shfl_xor_sync(0xffffffffu, s, o);
    softmax_merge(m, s, m2, s2);
  }
}

/* rows_view: the input's view with the last dimension dropped (shape 1), so its offset of
 * linear index r is the start of row r. rows_per_matrix and causal_shift implement the causal
 * mask: row r is row i = r % rows_per_matrix of its matrix and sees columns
 * j < i + causal_shift + 1 (causal_shift = cols - rows). */
template <typename T, bool kBlock>
__global__ void softmax_kernel(const T *__restrict__ x, recap__cuda_view4 rows_view,
                               T *__restrict__ y, int64_t num_rows, int64_t d, float scale,
                               bool causal, int64_t rows_per_matrix, int64_t causal_shift) {
  recap__pdl_begin();
  __shared__ float scratch_m[32], scratch_s[32];
  const row_group<kBlock> g;
  for (int64_t r = g.first_row; r < num_rows; r += g.row_stride) {
    const T *xr = x + recap__view4_offset(rows_view, r);
    T *yr = y + r * d;
    int64_t limit = d;
    if (causal) {
      const int64_t visible = r % rows_per_matrix + causal_shift + 1;
      limit = visible < 0 ? 0 : (visible < d ? visible : d);
    }
    float m = -INFINITY, s = 0.0f;
    for (int64_t j = g.rank; j < limit; j += g.size) {
      const float v = recap__to_float(xr[j]) * scale;
      if (v > m) {
        s = s * expf(m - v) + 1.0f;
        m = v;
      } else {
        s += expf(v - m);
      }
    }
    softmax_warp_merge(m, s);
    if (kBlock) {
      const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
      if (lane == 0) {
        scratch_m[warp] = m;
        scratch_s[warp] = s;
      }
      __syncthreads();
      m = lane < warps ? scratch_m[lane] : -INFINITY;
      s = lane < warps ? scratch_s[lane] : 0.0f;
      softmax_warp_merge(m, s);
      __syncthreads();
    }
    /* limit == 0 (every element masked) leaves s == 0: the row is all zeros. */
    const float inv = s > 0.0f ? 1.0f / s : 0.0f;
    for (int64_t j = g.rank; j < d; j += g.size) {
      const float p = j < limit ? expf(recap__to_float(xr[j]) * scale - m) * inv : 0.0f;
      yr[j] = recap__from_float<T>(p);
    }
  }
}

/* LayerNorm (bias may be NULL) and RMSNorm (kRms: no mean, no bias). */
template <typename T, bool kBlock, bool kRms>
__global__ void norm_kernel(const T *__restrict__ x, recap__cuda_view4 rows_view,
                            const T *__restrict__ weight, const T *__restrict__ bias,
                            T *__restrict__ y, int64_t num_rows, int64_t d, float eps) {
  recap__pdl_begin();
  __shared__ float scratch[32];
  const row_group<kBlock> g;
  const float inv_d = 1.0f / (float)d;
  for (int64_t r = g.first_row; r < num_rows; r += g.row_stride) {
    const T *xr = x + recap__view4_offset(rows_view, r);
    T *yr = y + r * d;
    float mean = 0.0f;
    if (!kRms) {
      float acc = 0.0f;
      for (int64_t j = g.rank; j < d; j += g.size) acc += recap__to_float(xr[j]);
      mean = g.sum(acc, scratch) * inv_d;
    }
    float sq = 0.0f;
    for (int64_t j = g.rank; j < d; j += g.size) {
      const float c = recap__to_float(xr[j]) - mean;
      sq += c * c;
    }
    const float rstd = 1.0f / sqrtf(g.sum(sq, scratch) * inv_d + eps);
    for (int64_t j = g.rank; j < d; j += g.size) {
      float v = (recap__to_float(xr[j]) - mean) * rstd * recap__to_float(weight[j]);
      if (!kRms && bias) v += recap__to_float(bias[j]);
      yr[j] = recap__from_float<T>(v);
    }
  }
}

/* Sum of each row, times `factor` (1 for sum, 1/D for mean). */
template <typename T, bool kBlock>
__global__ void sum_kernel(const T *__restrict__ x, recap__cuda_view4 rows_view, T *__restrict__ y,
                           int64_t num_rows, int64_t d, float factor) {
  recap__pdl_begin();
  __shared__ float scratch[32];
  const row_group<kBlock> g;
  for (int64_t r = g.first_row; r < num_rows; r += g.row_stride) {
    const T *xr = x + recap__view4_offset(rows_view, r);
    float acc = 0.0f;
    for (int64_t j = g.rank; j < d; j += g.size) acc += recap__to_float(xr[j]);
    acc = g.sum(acc, scratch);
    if (g.rank == 0) y[r] = recap__from_float<T>(acc * factor);
  }
}

/* ================================ launchers ============================================== */

/* The row geometry of a last-dimension reduction over `x`. */
struct rows_info {
  recap__cuda_view4 rows_view;
  int64_t num_rows, d;
  bool block_mode;
  unsigned grid, threads;
};

recap_status rows_setup(const recap_op_call *call, const recap_tensor *x, rows_info *out) {
  const char *name = call->def->name;
  if (x->ndim < 1 || x->ndim > RECAP_MAX_DIMS)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "op '%s': input has %d dims", name, x->ndim);
  out->d = x->shape[x->ndim - 1];
  if (out->d > 1 && x->strides[x->ndim - 1] != 1)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "op '%s': the last dimension must have stride 1 (has %lld)", name,
                      (long long)x->strides[x->ndim - 1]);
  out->num_rows = out->d > 0 ? recap__tensor_numel(x) / out->d : 0;
  out->rows_view = recap__cuda_view4_of(x);
  out->rows_view.shape[3] = 1;
  out->rows_view.stride[3] = 0;
  out->block_mode =
      out->d > kWarpRowMax && !(out->num_rows >= kManyRows && out->d <= kWarpRowMaxManyRows);
  if (out->block_mode) {
    out->threads = kBlockRowThreads;
    out->grid = recap__cuda_grid_for(out->num_rows, 1);
  } else {
    out->threads = kWarpRowThreads;
    out->grid = recap__cuda_grid_for(out->num_rows, kWarpRowThreads / 32);
  }
  return RECAP_OK;
}

recap_status check_same(const recap_op_call *call, const recap_tensor *x, const recap_tensor *y) {
  if (x->dtype != y->dtype || recap__tensor_numel(x) != recap__tensor_numel(y) ||
      !recap__tensor_is_contiguous(y))
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "op '%s': the output must be contiguous with the input's size and dtype",
                      call->def->name);
  return RECAP_OK;
}

/* A parameter vector (weight, bias): D elements, contiguous, the input's dtype. */
recap_status check_param(const recap_op_call *call, const recap_tensor *p, const recap_tensor *x,
                         int64_t d, const char *which) {
  if (p->dtype != x->dtype || recap__tensor_numel(p) != d || !recap__tensor_is_contiguous(p))
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "op '%s': %s must be %lld contiguous elements of the input's dtype",
                      call->def->name, which, (long long)d);
  return RECAP_OK;
}

}  // namespace

extern "C" recap_status recap__cuda_softmax(const recap_op_call *call, void *cuda_stream) {
  recap__cuda_launch_range range(call->def->name);
  const recap_tensor *x = &call->inputs[0], *y = &call->outputs[0];
  rows_info ri = {};
  RECAP_TRY(rows_setup(call, x, &ri));
  RECAP_TRY(check_same(call, x, y));
  if (ri.num_rows == 0) return RECAP_OK;
  const float scale = call->attrs.scale != 0.0 ? (float)call->attrs.scale : 1.0f;
  const bool causal = call->attrs.causal != 0;
  const int64_t rows_per_matrix = x->ndim >= 2 ? x->shape[x->ndim - 2] : 1;
  const int64_t causal_shift = ri.d - rows_per_matrix;
  cudaStream_t stream = static_cast<cudaStream_t>(cuda_stream);
  return recap__cuda_dispatch_float(x->dtype, call->def->name, [&](auto tag) {
    using T = decltype(tag);
    const T *xp = static_cast<const T *>(x->data);
    T *yp = static_cast<T *>(y->data);
    RECAP_CUDA_TRY(
        recap__cuda_launch(ri.block_mode ? softmax_kernel<T, true> : softmax_kernel<T, false>,
                           ri.grid, ri.threads, 0, stream, xp, ri.rows_view, yp, ri.num_rows, ri.d,
                           scale, causal, rows_per_matrix, causal_shift));
    return RECAP_OK;
  });
}

/* LayerNorm and RMSNorm share the launcher; kRms selects the kernel and the inputs. */
template <bool kRms>
static recap_status launch_norm(const recap_op_call *call, void *cuda_stream) {
  recap__cuda_launch_range range(call->def->name);
  const recap_tensor *x = &call->inputs[0], *y = &call->outputs[0];
  rows_info ri = {};
  RECAP_TRY(rows_setup(call, x, &ri));
  RECAP_TRY(check_same(call, x, y));
  RECAP_TRY(check_param(call, &call->inputs[1], x, ri.d, "weight"));
  const bool has_bias = !kRms && call->num_inputs > 2;
  if (has_bias) RECAP_TRY(check_param(call, &call->inputs[2], x, ri.d, "bias"));
  if (ri.num_rows == 0) return RECAP_OK;
  const float eps = (float)call->attrs.eps;
  cudaStream_t stream = static_cast<cudaStream_t>(cuda_stream);
  return recap__cuda_dispatch_float(x->dtype, call->def->name, [&](auto tag) {
    using T = decltype(tag);
    const T *xp = static_cast<const T *>(x->data);
    const T *w = static_cast<const T *>(call->inputs[1].data);
    const T *b = has_bias ? static_cast<const T *>(call->inputs[2].data) : nullptr;
    T *yp = static_cast<T *>(y->data);
    RECAP_CUDA_TRY(recap__cuda_launch(
        ri.block_mode ? norm_kernel<T, true, kRms> : norm_kernel<T, false, kRms>, ri.grid,
        ri.threads, 0, stream, xp, ri.rows_view, w, b, yp, ri.num_rows, ri.d, eps));
    return RECAP_OK;
  });
}

extern "C" recap_status recap__cuda_layernorm(const recap_op_call *call, void *cuda_stream) {
  return launch_norm<false>(call, cuda_stream);
}

extern "C" recap_status recap__cuda_rmsnorm(const recap_op_call *call, void *cuda_stream) {
  return launch_norm<true>(call, cuda_stream);
}

extern "C" recap_status recap__cuda_reduce_last(const recap_op_call *call, void *cuda_stream) {
  recap__cuda_launch_range range(call->def->name);
  const recap_tensor *x = &call->inputs[0], *y = &call->outputs[0];
  rows_info ri = {};
  RECAP_TRY(rows_setup(call, x, &ri));
  if (y->dtype != x->dtype || recap__tensor_numel(y) != ri.num_rows ||
      !recap__tensor_is_contiguous(y))
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "op '%s': the output must be %lld contiguous elements of the input's dtype",
                      call->def->name, (long long)ri.num_rows);
  if (call->def->code != 0 && call->def->code != 1)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "op '%s': unknown reduction code %d",
                      call->def->name, call->def->code);
  if (ri.num_rows == 0) return RECAP_OK;
  const float factor = call->def->code == 1 ? 1.0f / (float)ri.d : 1.0f;
  cudaStream_t stream = static_cast<cudaStream_t>(cuda_stream);
  return recap__cuda_dispatch_float(x->dtype, call->def->name, [&](auto tag) {
    using T = decltype(tag);
    const T *xp = static_cast<const T *>(x->data);
    T *yp = static_cast<T *>(y->data);
    RECAP_CUDA_TRY(recap__cuda_launch(ri.block_mode ? sum_kernel<T, true> : sum_kernel<T, false>,
                                      ri.grid, ri.threads, 0, stream, xp, ri.rows_view, yp,
                                      ri.num_rows, ri.d, factor));
    return RECAP_OK;
  });
}
