/*
 * shape.cu: the CUDA data-movement ops: the strided copy behind reshape, permute, transpose,
 * slice, split and copy; concat; fill; embedding (row gather); rotary position embedding.
 *
 * Copies move elements as raw 2-, 4- or 8-byte words, so one kernel serves every dtype. A copy
 * whose source view is dense becomes one stream-ordered cudaMemcpyAsync (capturable as a
 * memcpy node, and at copy-engine speed); any other view is gathered element by element, each
 * thread decomposing its linear index over the view's (right-aligned, 4-D) shape. That gather
 * reads transposed views uncoalesced; a tiled transpose is a later optimization.
 */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include <type_traits>

#include "kernels/cuda_common.cuh"
#include "kernels/cuda_ops.h"
#include "runtime/cuda_check.h"

namespace {

constexpr int kThreads = 256;

/* ================================ kernels ================================================ */

/* dst[k] (over dv, or dense when kDenseDst) = src[k over sv], for k < n. E is an unsigned
 * word of the element's size. */
template <typename E, bool kDenseDst>
__global__ void copy_kernel(const E *__restrict__ src, recap__cuda_view4 sv, E *__restrict__ dst,
                            recap__cuda_view4 dv, int64_t n) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; k < n; k += stride) {
    const E v = src[recap__view4_offset(sv, k)];
    if (kDenseDst)
      dst[k] = v;
    else
      dst[recap__view4_offset(dv, k)] = v;
  }
}

template <typename T>
__device__ __forceinline__ T fill_value(double value) {
  if constexpr (std::is_integral<T>::value)
    return (T)value;
  else
    return recap__from_float<T>((float)value);
}

/* Fills n elements; 16-byte stores when `vectorize` (the pointer is 16-byte aligned). */
template <typename T>
__global__ void fill_kernel(T *__restrict__ y, int64_t n, double value, bool vectorize) {
  constexpr int VEC = 16 / sizeof(T);
  const T v = fill_value<T>(value);
  const int64_t tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  const int64_t nvec = vectorize ? n / VEC : 0;
  recap__vec<T, VEC> pack;
#pragma unroll
  for (int k = 0; k < VEC; ++k) pack.v[k] = v;
  recap__vec<T, VEC> *yv = reinterpret_cast<recap__vec<T, VEC> *>(y);
  for (int64_t i = tid; i < nvec; i += stride) yv[i] = pack;
  for (int64_t i = nvec * VEC + tid; i < n; i += stride) y[i] = v;
}

/* out[row, c] = table[ids[row], c] for row < rows, c < d. An id outside [0, vocab) traps:
 * reading out of bounds would be silent corruption, and the trap is a sticky fault, as the
 * host reference's error is on the host backend. */
template <typename T>
__global__ void embedding_kernel(const T *__restrict__ table, int64_t table_row_stride,
                                 int64_t table_col_stride, int64_t vocab, const void *ids,
                                 recap_dtype ids_dtype, recap__cuda_view4 ids_view,
                                 T *__restrict__ out, int64_t rows, int64_t d) {
  const int64_t n = rows * d;
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    const int64_t row = i / d, c = i - row * d;
    const int64_t id = recap__load_index(ids, ids_dtype, recap__view4_offset(ids_view, row));
    if (id < 0 || id >= vocab) __trap();
    out[i] = table[id * table_row_stride + c * table_col_stride];
  }
}

/* Rotary embedding, rotate-half form: one thread per (b, s, h, i < half) pair. x is viewed as
 * [B, S, H, Dh] (B = 1 for a 3-D input); out is contiguous. positions: per row s when
 * `per_row`, else a start position (row s has pos[0] + s). The angle and its cosine and sine
 * are computed in double, as the host reference does: positions reach thousands of radians,
 * where a float angle is off by ~1e-4. */
template <typename T>
__global__ void rope_kernel(const T *x, recap__cuda_view4 xv, const int32_t *__restrict__ pos,
                            bool per_row, T *out, double base) {
  const int64_t seq = xv.shape[1], heads = xv.shape[2], dh = xv.shape[3], half = dh / 2;
  const int64_t n = xv.shape[0] * seq * heads * half;
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t p = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; p < n; p += stride) {
    const int64_t i = p % half, row = p / half; /* row over (b, s, h) */
    const int64_t h = row % heads, s = (row / heads) % seq, b = row / (heads * seq);
    const int64_t position = per_row ? (int64_t)pos[s] : (int64_t)pos[0] + s;
    if (position < 0) __trap();
    const double inv_freq = pow(base, -(double)(2 * i) / (double)dh);
    double sn, cs;
    sincos((double)position * inv_freq, &sn, &cs);
    const int64_t base = b * xv.stride[0] + s * xv.stride[1] + h * xv.stride[2];
    const double x0 = recap__to_float(x[base + i * xv.stride[3]]);
    const double x1 = recap__to_float(x[base + (i + half) * xv.stride[3]]);
    out[row * dh + i] = recap__from_float<T>((float)(x0 * cs - x1 * sn));
    out[row * dh + i + half] = recap__from_float<T>((float)(x1 * cs + x0 * sn));
  }
}

/* ================================ launchers ============================================== */

/* Copies the n elements of view `src` into the elements of view `dst` (same element count,
 * both row-major over their own shapes; a dense dst is read as flat). */
recap_status copy_view(const recap_tensor *src, const recap_tensor *dst, int64_t n,
                       cudaStream_t stream) {
  const size_t elem = recap_dtype_size(src->dtype);
  const bool dense_dst = recap__tensor_is_contiguous(dst);
  if (dense_dst && recap__tensor_is_contiguous(src)) {
    if (src->data != dst->data)
      RECAP_CUDA_TRY(cudaMemcpyAsync(dst->data, src->data, (size_t)n * elem,
                                     cudaMemcpyDeviceToDevice, stream));
    return RECAP_OK;
  }
  const recap__cuda_view4 sv = recap__cuda_view4_of(src), dv = recap__cuda_view4_of(dst);
  const unsigned grid = recap__cuda_grid_for(n, kThreads);
  auto launch = [&](auto word) {
    using E = decltype(word);
    const E *s = static_cast<const E *>(src->data);
    E *d = static_cast<E *>(dst->data);
    if (dense_dst)
      copy_kernel<E, true><<<grid, kThreads, 0, stream>>>(s, sv, d, dv, n);
    else
      copy_kernel<E, false><<<grid, kThreads, 0, stream>>>(s, sv, d, dv, n);
  };
  switch (elem) {
    case 2:
      launch(uint16_t{});
      break;
    case 4:
      launch(uint32_t{});
      break;
    case 8:
      launch(uint64_t{});
      break;
    default:
      return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "strided copy: bad element size %zu", elem);
  }
  RECAP_CUDA_TRY(cudaGetLastError());
  return RECAP_OK;
}

}  // namespace

extern "C" recap_status recap__cuda_copy_strided(const recap_op_call *call, void *cuda_stream) {
  recap__cuda_launch_range range(call->def->name);
  cudaStream_t stream = static_cast<cudaStream_t>(cuda_stream);
  for (int o = 0; o < call->num_outputs; ++o) {
    recap_tensor view;
    RECAP_TRY(recap__view_for_copy(call, o, &view));
    const recap_tensor *out = &call->outputs[o];
    const int64_t n = recap__tensor_numel(out);
    if (recap__tensor_numel(&view) != n || view.dtype != out->dtype ||
        !recap__tensor_is_contiguous(out))
      return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                        "op '%s': output %d must be contiguous with its source's size and dtype",
                        call->def->name, o);
    if (n == 0) continue;
    RECAP_TRY(copy_view(&view, out, n, stream));
  }
  return RECAP_OK;
}

extern "C" recap_status recap__cuda_concat(const recap_op_call *call, void *cuda_stream) {
  recap__cuda_launch_range range(call->def->name);
  const recap_tensor *out = &call->outputs[0];
  const int dim = (int)call->attrs.dim;
  if (dim < 0 || dim >= out->ndim || !recap__tensor_is_contiguous(out))
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "op '%s': needs a contiguous output and dim in [0, %d) (got %d)",
                      call->def->name, out->ndim, dim);
  cudaStream_t stream = static_cast<cudaStream_t>(cuda_stream);
  /* Each input goes to the output's slab [start, start + size) along dim: a strided view of
   * the output with the input's shape and the output's strides. */
  int64_t start = 0;
  for (int i = 0; i < call->num_inputs; ++i) {
    const recap_tensor *in = &call->inputs[i];
    if (in->ndim != out->ndim || in->dtype != out->dtype ||
        start + in->shape[dim] > out->shape[dim])
      return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                        "op '%s': input %d does not fit the output along dim %d", call->def->name,
                        i, dim);
    recap_tensor slab = *out;
    for (int d = 0; d < out->ndim; ++d) slab.shape[d] = in->shape[d];
    slab.data = static_cast<char *>(out->data) +
                (size_t)(start * out->strides[dim]) * recap_dtype_size(out->dtype);
    const int64_t n = recap__tensor_numel(in);
    if (n > 0) RECAP_TRY(copy_view(in, &slab, n, stream));
    start += in->shape[dim];
  }
  if (start != out->shape[dim])
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "op '%s': inputs cover %lld of the output's %lld along dim %d",
                      call->def->name, (long long)start, (long long)out->shape[dim], dim);
  return RECAP_OK;
}

extern "C" recap_status recap__cuda_fill(const recap_op_call *call, void *cuda_stream) {
  recap__cuda_launch_range range(call->def->name);
  const recap_tensor *out = &call->outputs[0];
  if (!recap__tensor_is_contiguous(out))
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "op '%s': the output must be contiguous",
                      call->def->name);
  const int64_t n = recap__tensor_numel(out);
  if (n == 0) return RECAP_OK;
  cudaStream_t stream = static_cast<cudaStream_t>(cuda_stream);
  return recap__cuda_dispatch_any(out->dtype, call->def->name, [&](auto tag) {
    using T = decltype(tag);
    constexpr int VEC = 16 / sizeof(T);
    const bool vectorize = ((uintptr_t)out->data & 15u) == 0;
    const unsigned grid =
        recap__cuda_grid_for(vectorize ? RECAP_CEIL_DIV(n, (int64_t)VEC) : n, kThreads);
    fill_kernel<T><<<grid, kThreads, 0, stream>>>(static_cast<T *>(out->data), n, call->attrs.value,
                                                  vectorize);
    RECAP_CUDA_TRY(cudaGetLastError());
    return RECAP_OK;
  });
}

extern "C" recap_status recap__cuda_embedding(const recap_op_call *call, void *cuda_stream) {
  recap__cuda_launch_range range(call->def->name);
  const recap_tensor *table = &call->inputs[0], *ids = &call->inputs[1], *out = &call->outputs[0];
  if (table->ndim != 2 || (ids->dtype != RECAP_DTYPE_I32 && ids->dtype != RECAP_DTYPE_I64) ||
      out->dtype != table->dtype || !recap__tensor_is_contiguous(out))
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "op '%s': needs a 2-D table, i32/i64 ids and a contiguous output of the "
                      "table's dtype",
                      call->def->name);
  const int64_t d = table->shape[1], rows = recap__tensor_numel(ids);
  if (recap__tensor_numel(out) != rows * d)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "op '%s': the output must hold %lld rows of %lld", call->def->name,
                      (long long)rows, (long long)d);
  if (rows * d == 0) return RECAP_OK;
  cudaStream_t stream = static_cast<cudaStream_t>(cuda_stream);
  const recap__cuda_view4 idsv = recap__cuda_view4_of(ids);
  return recap__cuda_dispatch_float(table->dtype, call->def->name, [&](auto tag) {
    using T = decltype(tag);
    embedding_kernel<T><<<recap__cuda_grid_for(rows * d, kThreads), kThreads, 0, stream>>>(
        static_cast<const T *>(table->data), table->strides[0], table->strides[1], table->shape[0],
        ids->data, ids->dtype, idsv, static_cast<T *>(out->data), rows, d);
    RECAP_CUDA_TRY(cudaGetLastError());
    return RECAP_OK;
  });
}

extern "C" recap_status recap__cuda_rope(const recap_op_call *call, void *cuda_stream) {
  recap__cuda_launch_range range(call->def->name);
  const recap_tensor *x = &call->inputs[0], *pos = &call->inputs[1], *out = &call->outputs[0];
  const char *name = call->def->name;
  if ((x->ndim != 3 && x->ndim != 4) || x->shape[x->ndim - 1] % 2 != 0)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "op '%s': x must be [B, S, H, Dh] or [S, H, Dh] with Dh even", name);
  const recap__cuda_view4 xv = recap__cuda_view4_of(x);
  const int64_t seq = xv.shape[1], npos = recap__tensor_numel(pos);
  if (pos->dtype != RECAP_DTYPE_I32 || !recap__tensor_is_contiguous(pos) ||
      (npos != seq && npos != 1))
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "op '%s': positions must be contiguous i32 [S] or [1] (S = %lld)", name,
                      (long long)seq);
  if (out->dtype != x->dtype || recap__tensor_numel(out) != recap__tensor_numel(x) ||
      !recap__tensor_is_contiguous(out))
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "op '%s': the output must be contiguous with x's size and dtype", name);
  if (call->attrs.rope_base <= 0)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "op '%s': rope_base must be positive", name);
  const int64_t pairs = recap__tensor_numel(x) / 2;
  if (pairs == 0) return RECAP_OK;
  const bool per_row = npos == seq;
  cudaStream_t stream = static_cast<cudaStream_t>(cuda_stream);
  return recap__cuda_dispatch_float(x->dtype, name, [&](auto tag) {
    using T = decltype(tag);
    rope_kernel<T><<<recap__cuda_grid_for(pairs, kThreads), kThreads, 0, stream>>>(
        static_cast<const T *>(x->data), xv, static_cast<const int32_t *>(pos->data), per_row,
        static_cast<T *>(out->data), (double)call->attrs.rope_base);
    RECAP_CUDA_TRY(cudaGetLastError());
    return RECAP_OK;
  });
}
