/*
 * shape.cu: the CUDA data-movement ops: the strided copy behind reshape, permute, transpose,
 * slice, split and copy; concat; fill; embedding (row gather); rotary position embedding.
 *
 * Copies move elements as raw 2-, 4- or 8-byte words, so one kernel serves every dtype. A copy
 * whose source view is dense is a flat copy of bytes: up to kKernelCopyMaxBytes a kernel moves
 * it (16-byte words when the pointers allow), above that one stream-ordered cudaMemcpyAsync
 * does (a memcpy node in a graph). Measured on an H100 (docs/perf/launch.md), a memcpy node
 * costs what a copy kernel does at 16 KiB and less from 256 KiB on, but it breaks the chain of
 * programmatic launches (cuda_common.cuh) on both its sides; a small copy is all latency, so
 * there the kernel wins.
 *
 * Any other copy is first simplified (size-1 dims dropped, neighbours that are one run in both
 * views merged), then:
 * - rows: the last dim is contiguous on both sides (slices, splits, concat slabs, permutes that
 *   keep the last dim): each thread moves words of up to 16 bytes within a row, the row's
 *   coordinates found once per word by multiply-high divisions (recap__fast_div);
 * - transpose: the destination's last dim is contiguous and the source's contiguous dim is
 *   another one: 32 x 32 tiles through shared memory, so that reads and writes are both
 *   coalesced;
 * - otherwise element by element, each thread decomposing its linear index over the view's
 *   (right-aligned, 4-D) shape.
 *
 * Every kernel starts with recap__pdl_begin and is launched through recap__cuda_launch.
 */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include <type_traits>

#include "kernels/cuda_common.cuh"
#include "kernels/cuda_ops.h"
#include "kernels/rope.h"
#include "runtime/cuda_check.h"

namespace {

constexpr int kThreads = 256;

/* Dense copies up to this size run as a kernel rather than a memcpy (see the top). */
constexpr size_t kKernelCopyMaxBytes = (size_t)64 << 10;

/* ================================ kernels ================================================ */

/* dst[k] (over dv, or dense when kDenseDst) = src[k over sv], for k < n. E is an unsigned
 * word of the element's size. */
template <typename E, bool kDenseDst>
__global__ void copy_kernel(const E *__restrict__ src, recap__cuda_view4 sv, E *__restrict__ dst,
                            recap__cuda_view4 dv, int64_t n) {
  recap__pdl_begin();
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; k < n; k += stride) {
    const E v = src[recap__view4_offset(sv, k)];
    if (kDenseDst)
      dst[k] = v;
    else
      dst[recap__view4_offset(dv, k)] = v;
  }
}

/* A copy simplified to 4 right-aligned dims (leading dims of size 1): element offsets in the
 * source (ss) and the destination (ds) of each coordinate. */
struct copy_dims {
  int64_t shape[4], ss[4], ds[4];
};

constexpr int kCopyUnroll = 4; /* words per thread in the rows kernel */

/* The rows kernel's geometry, in units of its word W: rows of `row` words (the last dim), the
 * three outer dims' sizes and strides. */
struct rows_geom {
  recap__fast_div row, d2, d1; /* divisors: words per row, shape[2], shape[1] */
  int64_t ss[3], ds[3];
};

/* Word u < n of the copy, row by row: row = u / words per row, split over the outer dims.
 * n < 2^31 (the launcher's condition), so 32-bit multiply-high divisions are exact. */
template <typename W>
__global__ void copy_rows_kernel(const W *__restrict__ src, W *__restrict__ dst, rows_geom g,
                                 uint32_t n) {
  recap__pdl_begin();
  const uint32_t first = blockIdx.x * blockDim.x * kCopyUnroll + threadIdx.x;
  W v[kCopyUnroll];
  int64_t doff[kCopyUnroll];
#pragma unroll
  for (int k = 0; k < kCopyUnroll; ++k) {
    const uint32_t u = first + k * blockDim.x;
    if (u < n) {
      const uint32_t row = recap__fast_div_q(g.row, u), c = u - row * g.row.d;
      const uint32_t r1 = recap__fast_div_q(g.d2, row), i2 = row - r1 * g.d2.d;
      const uint32_t i0 = recap__fast_div_q(g.d1, r1), i1 = r1 - i0 * g.d1.d;
      v[k] = src[i0 * g.ss[0] + i1 * g.ss[1] + i2 * g.ss[2] + c];
      doff[k] = i0 * g.ds[0] + i1 * g.ds[1] + i2 * g.ds[2] + c;
    }
  }
#pragma unroll
  for (int k = 0; k < kCopyUnroll; ++k)
    if (first + k * blockDim.x < n) dst[doff[k]] = v[k];
}

constexpr int kTile = 32, kTileRows = 8; /* transpose tiles, and the block's rows (32 x 8) */

/* The transpose kernel's geometry: dim p is contiguous in the source, dim 3 (the last) in the
 * destination; a and b are the two other (outer) dims, decomposed as z = ia * len_b + ib. */
struct transpose_geom {
  int64_t len_p, len_3, len_b, outer; /* outer = len_a * len_b */
  int64_t ss_3, ds_p;                 /* source stride of dim 3, destination stride of dim p */
  int64_t ss_a, ss_b, ds_a, ds_b;
};

/* Dims p and 3 are tiled; the outer dims run along grid.z. Threads read a tile with x along p
 * and write it with x along 3, through shared memory padded by a column against bank
 * conflicts. Blocks loop over tiles past the grid's y and z limits; every thread of a block
 * runs the same trips, so the barriers are uniform. */
template <typename E>
__global__ void copy_transpose_kernel(const E *__restrict__ src, E *__restrict__ dst,
                                      transpose_geom g) {
  recap__pdl_begin();
  __shared__ E tile[kTile][kTile + 1];
  const int64_t tiles_p = RECAP_CEIL_DIV(g.len_p, (int64_t)kTile);
  const int64_t j0 = (int64_t)blockIdx.x * kTile;
  const int tx = threadIdx.x, ty = threadIdx.y;
  for (int64_t z = blockIdx.z; z < g.outer; z += gridDim.z) {
    const int64_t ia = z / g.len_b, ib = z - ia * g.len_b;
    const E *s = src + ia * g.ss_a + ib * g.ss_b;
    E *d = dst + ia * g.ds_a + ib * g.ds_b;
    for (int64_t t = blockIdx.y; t < tiles_p; t += gridDim.y) {
      const int64_t i0 = t * kTile;
#pragma unroll
      for (int r = 0; r < kTile; r += kTileRows) {
        const int64_t i = i0 + tx, j = j0 + ty + r;
        if (i < g.len_p && j < g.len_3) tile[ty + r][tx] = s[i + j * g.ss_3];
      }
      __syncthreads();
#pragma unroll
      for (int r = 0; r < kTile; r += kTileRows) {
        const int64_t i = i0 + ty + r, j = j0 + tx;
        if (i < g.len_p && j < g.len_3) d[i * g.ds_p + j] = tile[tx][ty + r];
      }
      __syncthreads();
    }
  }
}

/* dst[k] = src[k] for k < n words of type W (a 16-, 8-, 4-, 2- or 1-byte word). */
template <typename W>
__global__ void flat_copy_kernel(const W *__restrict__ src, W *__restrict__ dst, int64_t n) {
  recap__pdl_begin();
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t k = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; k < n; k += stride)
    dst[k] = src[k];
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
  recap__pdl_begin();
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
  recap__pdl_begin();
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
 * `per_row`, else a start position (row s has pos[0] + s). cos and sin come from
 * kernels/rope.h, the host reference's own f32 steps, and so is the rotation. */
template <typename T>
__global__ void rope_kernel(const T *x, recap__cuda_view4 xv, const int32_t *__restrict__ pos,
                            bool per_row, T *out, recap__rope_freqs freqs) {
  recap__pdl_begin();
  const int64_t seq = xv.shape[1], heads = xv.shape[2], dh = xv.shape[3], half = dh / 2;
  const int64_t n = xv.shape[0] * seq * heads * half;
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t p = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; p < n; p += stride) {
    const int64_t i = p % half, row = p / half; /* row over (b, s, h) */
    const int64_t h = row % heads, s = (row / heads) % seq, b = row / (heads * seq);
    const int64_t position = per_row ? (int64_t)pos[s] : (int64_t)pos[0] + s;
    if (position < 0) __trap();
    float cf, sf, o1, o2;
    recap__rope_cos_sin(&freqs, i, dh, position, &cf, &sf);
    const int64_t base = b * xv.stride[0] + s * xv.stride[1] + h * xv.stride[2];
    recap__rope_rotate(recap__to_float(x[base + i * xv.stride[3]]),
                       recap__to_float(x[base + (i + half) * xv.stride[3]]), cf, sf, &o1, &o2);
    out[row * dh + i] = recap__from_float<T>(o1);
    out[row * dh + i + half] = recap__from_float<T>(o2);
  }
}

/* ================================ launchers ============================================== */

/* Copies `bytes` bytes from src to dst (distinct, dense) on the stream: a kernel in the widest
 * word that the pointers and the size allow, or a memcpy above kKernelCopyMaxBytes. */
recap_status copy_flat(const void *src, void *dst, size_t bytes, cudaStream_t stream) {
  if (bytes > kKernelCopyMaxBytes) {
    RECAP_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream));
    return RECAP_OK;
  }
  const uintptr_t align = (uintptr_t)src | (uintptr_t)dst | (uintptr_t)bytes;
  auto launch = [&](auto word) -> cudaError_t {
    using W = decltype(word);
    const int64_t words = (int64_t)(bytes / sizeof(W));
    return recap__cuda_launch(flat_copy_kernel<W>, recap__cuda_grid_for(words, kThreads), kThreads,
                              0, stream, static_cast<const W *>(src), static_cast<W *>(dst), words);
  };
  if (align % 16 == 0)
    RECAP_CUDA_TRY(launch(uint4{}));
  else if (align % 8 == 0)
    RECAP_CUDA_TRY(launch(uint64_t{}));
  else if (align % 4 == 0)
    RECAP_CUDA_TRY(launch(uint32_t{}));
  else if (align % 2 == 0)
    RECAP_CUDA_TRY(launch(uint16_t{}));
  else
    RECAP_CUDA_TRY(launch((unsigned char)0));
  return RECAP_OK;
}

/* The copy of view src into view dst (same element count; dst dense over any shape, or
 * dst with src's shape), simplified: dims of size 1 dropped, and each dim merged into the one
 * before it when the two are one run in both views. Right-aligned to 4 dims. */
copy_dims simplify_copy(const recap_tensor *src, const recap_tensor *dst) {
  int64_t ds[RECAP_MAX_DIMS];
  if (recap__tensor_is_contiguous(dst)) {
    int64_t stride = 1;
    for (int d = src->ndim - 1; d >= 0; --d) {
      ds[d] = stride;
      stride *= src->shape[d];
    }
  } else {
    for (int d = 0; d < src->ndim; ++d) ds[d] = dst->strides[d];
  }
  copy_dims m;
  int nd = 0;
  for (int d = 0; d < src->ndim; ++d) {
    if (src->shape[d] == 1) continue;
    if (nd > 0 && m.ss[nd - 1] == src->shape[d] * src->strides[d] &&
        m.ds[nd - 1] == src->shape[d] * ds[d]) {
      m.shape[nd - 1] *= src->shape[d];
      m.ss[nd - 1] = src->strides[d];
      m.ds[nd - 1] = ds[d];
      continue;
    }
    m.shape[nd] = src->shape[d];
    m.ss[nd] = src->strides[d];
    m.ds[nd] = ds[d];
    ++nd;
  }
  copy_dims c;
  const int lead = 4 - nd;
  for (int d = 0; d < 4; ++d) {
    c.shape[d] = d < lead ? 1 : m.shape[d - lead];
    c.ss[d] = d < lead ? 0 : m.ss[d - lead];
    c.ds[d] = d < lead ? 0 : m.ds[d - lead];
  }
  return c;
}

/* The rows kernel in the widest word (16, 8 or 4 bytes, else the element) that the row
 * length, the outer strides and both pointers allow. */
recap_status copy_rows(const copy_dims &c, const void *src, void *dst, size_t elem,
                       cudaStream_t stream) {
  size_t word = elem;
  for (size_t w = 16; w > elem; w /= 2) {
    bool ok = (c.shape[3] * elem) % w == 0 && (uintptr_t)src % w == 0 && (uintptr_t)dst % w == 0;
    for (int d = 0; d < 3 && ok; ++d)
      ok = c.shape[d] == 1 || ((c.ss[d] * elem) % w == 0 && (c.ds[d] * elem) % w == 0);
    if (ok) {
      word = w;
      break;
    }
  }
  const int64_t per_elem = (int64_t)(word / elem);
  rows_geom g;
  g.row = recap__fast_div_make((uint32_t)(c.shape[3] / per_elem));
  g.d2 = recap__fast_div_make((uint32_t)c.shape[2]);
  g.d1 = recap__fast_div_make((uint32_t)c.shape[1]);
  for (int d = 0; d < 3; ++d) {
    g.ss[d] = c.ss[d] / per_elem;
    g.ds[d] = c.ds[d] / per_elem;
  }
  const int64_t n = c.shape[0] * c.shape[1] * c.shape[2] * c.shape[3] / per_elem;
  unsigned grid;
  RECAP_TRY(recap__cuda_grid_cover(RECAP_CEIL_DIV(n, (int64_t)kCopyUnroll), kThreads, &grid));
  auto launch = [&](auto w) {
    using W = decltype(w);
    return recap__cuda_launch(copy_rows_kernel<W>, grid, kThreads, 0, stream,
                              static_cast<const W *>(src), static_cast<W *>(dst), g, (uint32_t)n);
  };
  switch (word) {
    case 16:
      RECAP_CUDA_TRY(launch(uint4{}));
      break;
    case 8:
      RECAP_CUDA_TRY(launch(uint2{}));
      break;
    case 4:
      RECAP_CUDA_TRY(launch(uint32_t{}));
      break;
    default:
      RECAP_CUDA_TRY(launch(uint16_t{}));
      break;
  }
  return RECAP_OK;
}

/* Copies the n elements of view `src` into the elements of view `dst` (same element count,
 * both row-major over their own shapes; a dense dst is read as flat; a strided dst has src's
 * shape). */
recap_status copy_view(const recap_tensor *src, const recap_tensor *dst, int64_t n,
                       cudaStream_t stream) {
  const size_t elem = recap_dtype_size(src->dtype);
  if (elem != 2 && elem != 4 && elem != 8)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "strided copy: bad element size %zu", elem);
  const bool dense_dst = recap__tensor_is_contiguous(dst);
  if (dense_dst && recap__tensor_is_contiguous(src)) {
    if (src->data != dst->data)
      RECAP_TRY(copy_flat(src->data, dst->data, (size_t)n * elem, stream));
    return RECAP_OK;
  }
  const copy_dims c = simplify_copy(src, dst);
  if (c.shape[0] * c.shape[1] * c.shape[2] == 1 && c.ss[3] == 1 && c.ds[3] == 1)
    return copy_flat(src->data, dst->data, (size_t)n * elem, stream); /* one run after all */
  /* The rows kernel's 32-bit indices: every word index (and so every dim) below 2^31. */
  if (c.ss[3] == 1 && c.ds[3] == 1 && n < INT32_MAX)
    return copy_rows(c, src->data, dst->data, elem, stream);
  int p = -1;
  for (int d = 0; d < 3; ++d)
    if (c.shape[d] > 1 && c.ss[d] == 1) p = d;
  auto launch = [&](auto word) -> cudaError_t {
    using E = decltype(word);
    const E *s = static_cast<const E *>(src->data);
    E *d = static_cast<E *>(dst->data);
    if (c.ds[3] == 1 && p >= 0) {
      const int a = p == 0 ? 1 : 0, b = p == 2 ? 1 : 2;
      transpose_geom g;
      g.len_p = c.shape[p];
      g.len_3 = c.shape[3];
      g.len_b = c.shape[b];
      g.outer = c.shape[a] * c.shape[b];
      g.ss_3 = c.ss[3];
      g.ds_p = c.ds[p];
      g.ss_a = c.ss[a];
      g.ss_b = c.ss[b];
      g.ds_a = c.ds[a];
      g.ds_b = c.ds[b];
      const int64_t tiles_p = RECAP_CEIL_DIV(g.len_p, (int64_t)kTile);
      const dim3 grid((unsigned)RECAP_CEIL_DIV(g.len_3, (int64_t)kTile),
                      (unsigned)(tiles_p < kRecapMaxGridBlocks ? tiles_p : kRecapMaxGridBlocks),
                      (unsigned)(g.outer < kRecapMaxGridBlocks ? g.outer : kRecapMaxGridBlocks));
      return recap__cuda_launch(copy_transpose_kernel<E>, grid, dim3(kTile, kTileRows), 0, stream,
                                s, d, g);
    }
    const recap__cuda_view4 sv = recap__cuda_view4_of(src), dv = recap__cuda_view4_of(dst);
    const unsigned grid = recap__cuda_grid_for(n, kThreads);
    if (dense_dst)
      return recap__cuda_launch(copy_kernel<E, true>, grid, kThreads, 0, stream, s, sv, d, dv, n);
    return recap__cuda_launch(copy_kernel<E, false>, grid, kThreads, 0, stream, s, sv, d, dv, n);
  };
  switch (elem) {
    case 2:
      RECAP_CUDA_TRY(launch(uint16_t{}));
      break;
    case 4:
      RECAP_CUDA_TRY(launch(uint32_t{}));
      break;
    default:
      RECAP_CUDA_TRY(launch(uint64_t{}));
      break;
  }
  return RECAP_OK;
}

}  // namespace

extern "C" recap_status recap__cuda_copy_strided(const recap__op_call *call, void *cuda_stream) {
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

extern "C" recap_status recap__cuda_concat(const recap__op_call *call, void *cuda_stream) {
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

extern "C" recap_status recap__cuda_fill(const recap__op_call *call, void *cuda_stream) {
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
    RECAP_CUDA_TRY(recap__cuda_launch(fill_kernel<T>, grid, kThreads, 0, stream,
                                      static_cast<T *>(out->data), n, call->attrs.value,
                                      vectorize));
    return RECAP_OK;
  });
}

extern "C" recap_status recap__cuda_embedding(const recap__op_call *call, void *cuda_stream) {
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
    RECAP_CUDA_TRY(recap__cuda_launch(embedding_kernel<T>, recap__cuda_grid_for(rows * d, kThreads),
                                      kThreads, 0, stream, static_cast<const T *>(table->data),
                                      table->strides[0], table->strides[1], table->shape[0],
                                      static_cast<const void *>(ids->data), ids->dtype, idsv,
                                      static_cast<T *>(out->data), rows, d));
    return RECAP_OK;
  });
}

extern "C" recap_status recap__cuda_rope(const recap__op_call *call, void *cuda_stream) {
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
  const recap__rope_freqs freqs = recap__rope_freqs_of(&call->attrs);
  if (!(freqs.theta > 1.0f))
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "op '%s': theta must be > 1", name);
  const int64_t pairs = recap__tensor_numel(x) / 2;
  if (pairs == 0) return RECAP_OK;
  const bool per_row = npos == seq;
  cudaStream_t stream = static_cast<cudaStream_t>(cuda_stream);
  return recap__cuda_dispatch_float(x->dtype, name, [&](auto tag) {
    using T = decltype(tag);
    RECAP_CUDA_TRY(recap__cuda_launch(rope_kernel<T>, recap__cuda_grid_for(pairs, kThreads),
                                      kThreads, 0, stream, static_cast<const T *>(x->data), xv,
                                      static_cast<const int32_t *>(pos->data), per_row,
                                      static_cast<T *>(out->data), freqs));
    return RECAP_OK;
  });
}
