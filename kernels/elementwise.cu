/*
 * elementwise.cu: the CUDA unary ops (relu, gelu, gelu_tanh, silu, sigmoid, tanh, exp, neg,
 * scale, cast) and binary ops with numpy broadcasting (add, sub, mul, div).
 *
 * Dense kernels serve tensors whose operands are all contiguous (a binary operand may also be
 * one element, broadcast): 16-byte vector loads and stores, which is what saturates HBM on an
 * H100, kUnroll vectors per thread with every load issued before the first use (bytes in
 * flight hide the memory latency), and no loop: the grid covers the tensor, which keeps a
 * small kernel's critical path short (docs/perf/launch.md). A view that starts mid-vector is
 * still vectorized when every pointer is off by the same number of elements: a scalar head
 * brings them to the boundary together; a scalar tail finishes odd sizes. Pointers off by
 * different amounts use the same kernel with one-element "vectors".
 *
 * A binary op whose one operand is a dense row repeated along the leading dims (a bias [N]
 * over [M, N]) has a 2-D kernel: each thread owns one column vector, loads its piece of the
 * row once, and walks several rows, so no index is ever divided. Everything else (transposed
 * or sliced views, other broadcasts) goes to the strided kernels: each thread decomposes its
 * linear index over the (right-aligned, 4-D) shape, looping with the grid's stride so a capped
 * grid covers any size. Math is in f32 for every storage type.
 *
 * Every kernel starts with recap__pdl_begin and is launched through recap__cuda_launch
 * (programmatic dependent launch, cuda_common.cuh). Measurements: docs/perf/kernels.md.
 */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "kernels/cuda_common.cuh"
#include "kernels/cuda_ops.h"
#include "kernels/op_codes.h"
#include "runtime/cuda_check.h"

namespace {

constexpr int kThreads = 256;      /* strided kernels (grid-stride loops) */
constexpr int kDenseThreads = 128; /* dense and row kernels */
constexpr int kUnroll = 4;         /* vectors per thread in the dense kernels */
constexpr int kRowsPerThread = 4;  /* rows per thread (and per grid step) in the row kernel */

/* ================================ kernels ================================================ */

template <int Code>
__device__ __forceinline__ float unary_apply(float x, float scale) {
  if constexpr (Code == RECAP_UNARY_RELU) {
    return x > 0.0f ? x : 0.0f;
  } else if constexpr (Code == RECAP_UNARY_GELU) {
    return 0.5f * x * (1.0f + erff(x * 0.70710678118654752440f));
  } else if constexpr (Code == RECAP_UNARY_GELU_TANH) {
    const float inner = 0.79788456080286535588f * (x + 0.044715f * x * x * x);
    return 0.5f * x * (1.0f + tanhf(inner));
  } else if constexpr (Code == RECAP_UNARY_SILU) {
    return x / (1.0f + expf(-x));
  } else if constexpr (Code == RECAP_UNARY_SIGMOID) {
    return 1.0f / (1.0f + expf(-x));
  } else if constexpr (Code == RECAP_UNARY_TANH) {
    return tanhf(x);
  } else if constexpr (Code == RECAP_UNARY_EXP) {
    return expf(x);
  } else if constexpr (Code == RECAP_UNARY_NEG) {
    return -x;
  } else {
    static_assert(Code == RECAP_UNARY_SCALE, "unhandled unary code");
    return scale * x;
  }
}

/* One element of a unary op, through f32 (cast is a round trip through f32, exact for every
 * pair of float storage types). */
template <int Code, typename Tin, typename Tout>
__device__ __forceinline__ Tout unary_element(Tin x, float scale) {
  if constexpr (Code == RECAP_UNARY_CAST) {
    return recap__from_float<Tout>(recap__to_float(x));
  } else {
    return recap__from_float<Tout>(unary_apply<Code>(recap__to_float(x), scale));
  }
}

/* Dense layout (all the dense kernels): elements [0, head) and [head + nvec * VEC, n) are
 * scalars, the nvec vectors of VEC elements in between start at element `head`. Block b owns
 * vectors [b * blockDim * kUnroll, (b + 1) * blockDim * kUnroll), thread t of it every
 * blockDim-th from t (so each of its kUnroll loads is coalesced across the block); the grid's
 * first threads also do the head and the tail (fewer than VEC elements each). */
template <int Code, typename Tin, typename Tout, int VEC>
__global__ void unary_dense_kernel(const Tin *__restrict__ x, Tout *__restrict__ y, int64_t head,
                                   int64_t nvec, int64_t n, float scale) {
  recap__pdl_begin();
  using VI = recap__vec<Tin, VEC>;
  using VO = recap__vec<Tout, VEC>;
  const VI *xv = reinterpret_cast<const VI *>(x + head);
  VO *yv = reinterpret_cast<VO *>(y + head);
  const int64_t first = (int64_t)blockIdx.x * blockDim.x * kUnroll + threadIdx.x;
  VI in[kUnroll];
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int64_t i = first + (int64_t)u * blockDim.x;
    if (i < nvec) in[u] = xv[i];
  }
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int64_t i = first + (int64_t)u * blockDim.x;
    if (i < nvec) {
      VO out;
#pragma unroll
      for (int k = 0; k < VEC; ++k) out.v[k] = unary_element<Code, Tin, Tout>(in[u].v[k], scale);
      yv[i] = out;
    }
  }
  if (VEC > 1) {
    const int64_t tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t tail = head + nvec * VEC + tid;
    if (tid < head) y[tid] = unary_element<Code, Tin, Tout>(x[tid], scale);
    if (tail < n) y[tail] = unary_element<Code, Tin, Tout>(x[tail], scale);
  }
}

template <int Code, typename Tin, typename Tout>
__global__ void unary_strided_kernel(const Tin *__restrict__ x, recap__cuda_view4 xv,
                                     Tout *__restrict__ y, recap__cuda_view4 yv, int64_t n,
                                     float scale) {
  recap__pdl_begin();
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
    y[recap__view4_offset(yv, i)] =
        unary_element<Code, Tin, Tout>(x[recap__view4_offset(xv, i)], scale);
}

template <int Code>
__device__ __forceinline__ float binary_apply(float a, float b) {
  if constexpr (Code == RECAP_BINARY_ADD) {
    return a + b;
  } else if constexpr (Code == RECAP_BINARY_SUB) {
    return a - b;
  } else if constexpr (Code == RECAP_BINARY_MUL) {
    return a * b;
  } else {
    static_assert(Code == RECAP_BINARY_DIV, "unhandled binary code");
    return a / b;
  }
}

/* Which binary operands are dense arrays in the dense kernel; a broadcast one is element 0. */
enum binary_mode { kBothDense, kScalarB, kScalarA };

/* The dense layout of unary_dense_kernel; in kScalarB (kScalarA) mode b (a) is one element. */
template <int Code, typename T, int VEC, int kMode>
__global__ void binary_dense_kernel(const T *__restrict__ a, const T *__restrict__ b,
                                    T *__restrict__ y, int64_t head, int64_t nvec, int64_t n) {
  recap__pdl_begin();
  using V = recap__vec<T, VEC>;
  const V *av = reinterpret_cast<const V *>(a + head);
  const V *bv = reinterpret_cast<const V *>(b + head);
  V *yv = reinterpret_cast<V *>(y + head);
  /* The broadcast element, read once per thread. */
  const float sa = kMode == kScalarA ? recap__to_float(a[0]) : 0.0f;
  const float sb = kMode == kScalarB ? recap__to_float(b[0]) : 0.0f;
  const int64_t first = (int64_t)blockIdx.x * blockDim.x * kUnroll + threadIdx.x;
  V in0[kUnroll], in1[kUnroll];
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int64_t i = first + (int64_t)u * blockDim.x;
    if (i < nvec) {
      if (kMode != kScalarA) in0[u] = av[i];
      if (kMode != kScalarB) in1[u] = bv[i];
    }
  }
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int64_t i = first + (int64_t)u * blockDim.x;
    if (i < nvec) {
      V out;
#pragma unroll
      for (int k = 0; k < VEC; ++k) {
        const float fa = kMode == kScalarA ? sa : recap__to_float(in0[u].v[k]);
        const float fb = kMode == kScalarB ? sb : recap__to_float(in1[u].v[k]);
        out.v[k] = recap__from_float<T>(binary_apply<Code>(fa, fb));
      }
      yv[i] = out;
    }
  }
  if (VEC > 1) {
    const int64_t tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t tail = head + nvec * VEC + tid;
    auto one = [&](int64_t e) {
      const float fa = kMode == kScalarA ? sa : recap__to_float(a[e]);
      const float fb = kMode == kScalarB ? sb : recap__to_float(b[e]);
      y[e] = recap__from_float<T>(binary_apply<Code>(fa, fb));
    };
    if (tid < head) one(tid);
    if (tail < n) one(tail);
  }
}

/* y[r, c] = op(full[r, c], row[c]) (op(row[c], full[r, c]) when kRowIsA) for r < rows and
 * c < cols = cvecs * VEC: the operand `row` repeats along the leading dims (a bias). Thread
 * (x, y) of the 2-D grid owns column vector x and kRowsPerThread consecutive rows per grid
 * step: it loads its piece of the row once and divides no index. */
template <int Code, typename T, int VEC, bool kRowIsA>
__global__ void binary_row_kernel(const T *__restrict__ full, const T *__restrict__ row,
                                  T *__restrict__ y, int64_t rows, int64_t cvecs) {
  recap__pdl_begin();
  using V = recap__vec<T, VEC>;
  const int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= cvecs) return;
  const V rv = reinterpret_cast<const V *>(row)[c];
  float rf[VEC];
#pragma unroll
  for (int k = 0; k < VEC; ++k) rf[k] = recap__to_float(rv.v[k]);
  const V *fv = reinterpret_cast<const V *>(full);
  V *yv = reinterpret_cast<V *>(y);
  const int64_t step = (int64_t)gridDim.y * blockDim.y * kRowsPerThread;
  for (int64_t r0 = ((int64_t)blockIdx.y * blockDim.y + threadIdx.y) * kRowsPerThread; r0 < rows;
       r0 += step) {
    V in[kRowsPerThread];
#pragma unroll
    for (int u = 0; u < kRowsPerThread; ++u)
      if (r0 + u < rows) in[u] = fv[(r0 + u) * cvecs + c];
#pragma unroll
    for (int u = 0; u < kRowsPerThread; ++u) {
      if (r0 + u < rows) {
        V out;
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
          const float f = recap__to_float(in[u].v[k]);
          out.v[k] = recap__from_float<T>(kRowIsA ? binary_apply<Code>(rf[k], f)
                                                  : binary_apply<Code>(f, rf[k]));
        }
        yv[(r0 + u) * cvecs + c] = out;
      }
    }
  }
}

/* av, bv and yv carry the output's shape (stride 0 along the inputs' broadcast dimensions);
 * the linear index is decomposed once and applied to all three strides. */
template <int Code, typename T>
__global__ void binary_strided_kernel(const T *__restrict__ a, recap__cuda_view4 av,
                                      const T *__restrict__ b, recap__cuda_view4 bv,
                                      T *__restrict__ y, recap__cuda_view4 yv, int64_t n) {
  recap__pdl_begin();
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    int64_t rem = i, ao = 0, bo = 0, yo = 0;
#pragma unroll
    for (int d = 3; d > 0; --d) {
      const int64_t q = rem / yv.shape[d], c = rem - q * yv.shape[d];
      ao += c * av.stride[d];
      bo += c * bv.stride[d];
      yo += c * yv.stride[d];
      rem = q;
    }
    ao += rem * av.stride[0];
    bo += rem * bv.stride[0];
    yo += rem * yv.stride[0];
    y[yo] =
        recap__from_float<T>(binary_apply<Code>(recap__to_float(a[ao]), recap__to_float(b[bo])));
  }
}

/* ================================ launchers ============================================== */

/* The dense layout's head for pointers `p[i]` to elements of `size[i]` bytes: the number of
 * elements after which every pointer sits on a VEC-element boundary (so a vector of Tin is
 * 16-byte aligned and every other vector is aligned to its own size), or -1 when the pointers
 * disagree on where that is (or one is not aligned to its element). */
template <int VEC, int N>
int64_t dense_head(const void *const (&p)[N], const size_t (&size)[N]) {
  int64_t phase = -1;
  for (int i = 0; i < N; ++i) {
    const uintptr_t a = (uintptr_t)p[i];
    if (a % size[i] != 0) return -1;
    const int64_t ph = (int64_t)((a / size[i]) % VEC);
    if (phase >= 0 && ph != phase) return -1;
    phase = ph;
  }
  return (VEC - phase) % VEC;
}

template <int Code, typename Tin, typename Tout>
recap_status launch_unary(const recap_tensor *x, const recap_tensor *y, int64_t n, float scale,
                          cudaStream_t stream) {
  if (recap__tensor_is_contiguous(x) && recap__tensor_is_contiguous(y)) {
    constexpr int VEC = 16 / sizeof(Tin);
    const void *p[2] = {x->data, y->data};
    const size_t size[2] = {sizeof(Tin), sizeof(Tout)};
    const Tin *xp = static_cast<const Tin *>(x->data);
    Tout *yp = static_cast<Tout *>(y->data);
    int64_t head = dense_head<VEC>(p, size), nvec = n;
    if (head >= 0) {
      head = head > n ? n : head;
      nvec = (n - head) / VEC;
    }
    unsigned grid;
    RECAP_TRY(recap__cuda_grid_cover(RECAP_CEIL_DIV(nvec, (int64_t)kUnroll), kDenseThreads, &grid));
    if (head >= 0)
      RECAP_CUDA_TRY(recap__cuda_launch(unary_dense_kernel<Code, Tin, Tout, VEC>, grid,
                                        kDenseThreads, 0, stream, xp, yp, head, nvec, n, scale));
    else
      RECAP_CUDA_TRY(recap__cuda_launch(unary_dense_kernel<Code, Tin, Tout, 1>, grid, kDenseThreads,
                                        0, stream, xp, yp, (int64_t)0, n, n, scale));
  } else {
    RECAP_CUDA_TRY(recap__cuda_launch(
        unary_strided_kernel<Code, Tin, Tout>, recap__cuda_grid_for(n, kThreads), kThreads, 0,
        stream, static_cast<const Tin *>(x->data), recap__cuda_view4_of(x),
        static_cast<Tout *>(y->data), recap__cuda_view4_of(y), n, scale));
  }
  return RECAP_OK;
}

/* Whether `row` is dense and its shape, leading 1s dropped, is the trailing dims of `y`: then
 * element i of y pairs with element i % numel(row) of it. */
bool is_row_of(const recap_tensor *row, const recap_tensor *y) {
  if (!recap__tensor_is_contiguous(row)) return false;
  int first = 0;
  while (first < row->ndim && row->shape[first] == 1) ++first;
  const int len = row->ndim - first;
  if (len > y->ndim) return false;
  for (int d = 0; d < len; ++d)
    if (row->shape[first + d] != y->shape[y->ndim - len + d]) return false;
  return true;
}

/* The dense kernel in `kMode` over n elements of y (and of whichever operands are dense). */
template <int Code, typename T, int kMode>
recap_status launch_binary_dense(const T *a, const T *b, T *y, int64_t n, cudaStream_t stream) {
  constexpr int VEC = 16 / sizeof(T);
  /* The broadcast operand's one element takes no part in the alignment. */
  const void *p[2] = {kMode == kScalarA ? b : a, y};
  const void *p3[3] = {a, b, y};
  const size_t size[2] = {sizeof(T), sizeof(T)}, size3[3] = {sizeof(T), sizeof(T), sizeof(T)};
  int64_t head = kMode == kBothDense ? dense_head<VEC>(p3, size3) : dense_head<VEC>(p, size);
  int64_t nvec = n;
  if (head >= 0) {
    head = head > n ? n : head;
    nvec = (n - head) / VEC;
  }
  unsigned grid;
  RECAP_TRY(recap__cuda_grid_cover(RECAP_CEIL_DIV(nvec, (int64_t)kUnroll), kDenseThreads, &grid));
  if (head >= 0)
    RECAP_CUDA_TRY(recap__cuda_launch(binary_dense_kernel<Code, T, VEC, kMode>, grid, kDenseThreads,
                                      0, stream, a, b, y, head, nvec, n));
  else
    RECAP_CUDA_TRY(recap__cuda_launch(binary_dense_kernel<Code, T, 1, kMode>, grid, kDenseThreads,
                                      0, stream, a, b, y, (int64_t)0, n, n));
  return RECAP_OK;
}

/* The row kernel: `row` (cols elements) repeats over the rows of the dense `full` and y. */
template <int Code, typename T, bool kRowIsA>
recap_status launch_binary_row(const T *full, const T *row, T *y, int64_t n, int64_t cols,
                               cudaStream_t stream) {
  constexpr int VEC = 16 / sizeof(T);
  const bool vectorize = cols % VEC == 0 && ((uintptr_t)full & 15u) == 0 &&
                         ((uintptr_t)row & 15u) == 0 && ((uintptr_t)y & 15u) == 0;
  const int64_t cvecs = vectorize ? cols / VEC : cols, rows = n / cols;
  /* Threads along x cover the column vectors (a warp at least, so loads stay coalesced), the
   * rest of the block's kDenseThreads go along y. */
  int bx = kDenseThreads;
  while (bx > 32 && bx / 2 >= cvecs) bx /= 2;
  const int by = kDenseThreads / bx;
  const int64_t gx = RECAP_CEIL_DIV(cvecs, (int64_t)bx);
  int64_t gy = RECAP_CEIL_DIV(rows, (int64_t)by * kRowsPerThread);
  if (gx > INT32_MAX)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "rows of %lld elements are too long",
                      (long long)cols);
  if (gy > kRecapMaxGridBlocks) gy = kRecapMaxGridBlocks; /* the kernel loops over the rest */
  const dim3 grid((unsigned)gx, (unsigned)gy), block((unsigned)bx, (unsigned)by);
  if (vectorize)
    RECAP_CUDA_TRY(recap__cuda_launch(binary_row_kernel<Code, T, VEC, kRowIsA>, grid, block, 0,
                                      stream, full, row, y, rows, cvecs));
  else
    RECAP_CUDA_TRY(recap__cuda_launch(binary_row_kernel<Code, T, 1, kRowIsA>, grid, block, 0,
                                      stream, full, row, y, rows, cvecs));
  return RECAP_OK;
}

template <int Code, typename T>
recap_status launch_binary(const recap_tensor *a, const recap_tensor *b, const recap_tensor *y,
                           int64_t n, cudaStream_t stream) {
  const bool y_dense = recap__tensor_is_contiguous(y);
  const bool a_dense = y_dense && recap__tensor_numel(a) == n && recap__tensor_is_contiguous(a);
  const bool b_dense = y_dense && recap__tensor_numel(b) == n && recap__tensor_is_contiguous(b);
  const T *ap = static_cast<const T *>(a->data), *bp = static_cast<const T *>(b->data);
  T *yp = static_cast<T *>(y->data);
  if (a_dense && b_dense) return launch_binary_dense<Code, T, kBothDense>(ap, bp, yp, n, stream);
  /* A one-element operand: a scalar, broadcast without any index arithmetic. */
  if (a_dense && recap__tensor_numel(b) == 1)
    return launch_binary_dense<Code, T, kScalarB>(ap, bp, yp, n, stream);
  if (b_dense && recap__tensor_numel(a) == 1)
    return launch_binary_dense<Code, T, kScalarA>(ap, bp, yp, n, stream);
  /* A bias-like operand: the common broadcast, without per-element index arithmetic. */
  if (a_dense && is_row_of(b, y))
    return launch_binary_row<Code, T, false>(ap, bp, yp, n, recap__tensor_numel(b), stream);
  if (b_dense && is_row_of(a, y))
    return launch_binary_row<Code, T, true>(bp, ap, yp, n, recap__tensor_numel(a), stream);
  const recap__cuda_view4 yv = recap__cuda_view4_of(y);
  recap__cuda_view4 av = recap__cuda_view4_of(a), bv = recap__cuda_view4_of(b);
  for (int d = 0; d < 4; ++d) {
    if (av.shape[d] != yv.shape[d]) av.stride[d] = 0;
    if (bv.shape[d] != yv.shape[d]) bv.stride[d] = 0;
    av.shape[d] = bv.shape[d] = yv.shape[d];
  }
  RECAP_CUDA_TRY(recap__cuda_launch(binary_strided_kernel<Code, T>,
                                    recap__cuda_grid_for(n, kThreads), kThreads, 0, stream, ap, av,
                                    bp, bv, yp, yv, n));
  return RECAP_OK;
}

/* Broadcasting rule (numpy): right-aligned, each input dimension equals the output's or is 1. */
recap_status check_broadcast(const recap_tensor *in, const recap_tensor *out, const char *name,
                             const char *which) {
  if (in->ndim > out->ndim)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "op '%s': input %s has %d dims, output %d",
                      name, which, in->ndim, out->ndim);
  for (int d = 1; d <= in->ndim; ++d) {
    const int64_t s = in->shape[in->ndim - d], o = out->shape[out->ndim - d];
    if (s != o && s != 1)
      return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                        "op '%s': input %s does not broadcast to the output (dim -%d: %lld vs "
                        "%lld)",
                        name, which, d, (long long)s, (long long)o);
  }
  return RECAP_OK;
}

}  // namespace

extern "C" recap_status recap__cuda_unary(const recap__op_call *call, void *cuda_stream) {
  recap__cuda_launch_range range(call->def->name);
  const recap_tensor *x = &call->inputs[0], *y = &call->outputs[0];
  const int code = call->def->code;
  const int64_t n = recap__tensor_numel(y);
  if (call->num_inputs != 1 || call->num_outputs != 1 || x->ndim != y->ndim ||
      recap__tensor_numel(x) != n)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "op '%s': expects one input and one output of the same shape",
                      call->def->name);
  for (int d = 0; d < x->ndim; ++d)
    if (x->shape[d] != y->shape[d])
      return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "op '%s': input and output shapes differ",
                        call->def->name);
  if (code != RECAP_UNARY_CAST && x->dtype != y->dtype)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "op '%s': output dtype %s differs from input %s", call->def->name,
                      recap_dtype_name(y->dtype), recap_dtype_name(x->dtype));
  if (n == 0) return RECAP_OK;
  cudaStream_t stream = static_cast<cudaStream_t>(cuda_stream);
  const float scale = (float)call->attrs.scale;
  const char *name = call->def->name;

  if (code == RECAP_UNARY_CAST) {
    return recap__cuda_dispatch_float(x->dtype, name, [&](auto in_tag) {
      using Tin = decltype(in_tag);
      return recap__cuda_dispatch_float(y->dtype, name, [&](auto out_tag) {
        using Tout = decltype(out_tag);
        return launch_unary<RECAP_UNARY_CAST, Tin, Tout>(x, y, n, scale, stream);
      });
    });
  }
  return recap__cuda_dispatch_float(x->dtype, name, [&](auto tag) -> recap_status {
    using T = decltype(tag);
    switch (code) {
      case RECAP_UNARY_RELU:
        return launch_unary<RECAP_UNARY_RELU, T, T>(x, y, n, scale, stream);
      case RECAP_UNARY_GELU:
        return launch_unary<RECAP_UNARY_GELU, T, T>(x, y, n, scale, stream);
      case RECAP_UNARY_GELU_TANH:
        return launch_unary<RECAP_UNARY_GELU_TANH, T, T>(x, y, n, scale, stream);
      case RECAP_UNARY_SILU:
        return launch_unary<RECAP_UNARY_SILU, T, T>(x, y, n, scale, stream);
      case RECAP_UNARY_SIGMOID:
        return launch_unary<RECAP_UNARY_SIGMOID, T, T>(x, y, n, scale, stream);
      case RECAP_UNARY_TANH:
        return launch_unary<RECAP_UNARY_TANH, T, T>(x, y, n, scale, stream);
      case RECAP_UNARY_EXP:
        return launch_unary<RECAP_UNARY_EXP, T, T>(x, y, n, scale, stream);
      case RECAP_UNARY_NEG:
        return launch_unary<RECAP_UNARY_NEG, T, T>(x, y, n, scale, stream);
      case RECAP_UNARY_SCALE:
        return launch_unary<RECAP_UNARY_SCALE, T, T>(x, y, n, scale, stream);
      default:
        return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "op '%s': unknown unary code %d", name,
                          code);
    }
  });
}

extern "C" recap_status recap__cuda_binary(const recap__op_call *call, void *cuda_stream) {
  recap__cuda_launch_range range(call->def->name);
  const recap_tensor *a = &call->inputs[0], *b = &call->inputs[1], *y = &call->outputs[0];
  const char *name = call->def->name;
  const int code = call->def->code;
  if (call->num_inputs != 2 || call->num_outputs != 1)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "op '%s': expects two inputs and one output",
                      name);
  if (a->dtype != y->dtype || b->dtype != y->dtype)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "op '%s': inputs (%s, %s) and output (%s) must share one dtype", name,
                      recap_dtype_name(a->dtype), recap_dtype_name(b->dtype),
                      recap_dtype_name(y->dtype));
  RECAP_TRY(check_broadcast(a, y, name, "a"));
  RECAP_TRY(check_broadcast(b, y, name, "b"));
  const int64_t n = recap__tensor_numel(y);
  if (n == 0) return RECAP_OK;
  cudaStream_t stream = static_cast<cudaStream_t>(cuda_stream);
  return recap__cuda_dispatch_float(y->dtype, name, [&](auto tag) -> recap_status {
    using T = decltype(tag);
    switch (code) {
      case RECAP_BINARY_ADD:
        return launch_binary<RECAP_BINARY_ADD, T>(a, b, y, n, stream);
      case RECAP_BINARY_SUB:
        return launch_binary<RECAP_BINARY_SUB, T>(a, b, y, n, stream);
      case RECAP_BINARY_MUL:
        return launch_binary<RECAP_BINARY_MUL, T>(a, b, y, n, stream);
      case RECAP_BINARY_DIV:
        return launch_binary<RECAP_BINARY_DIV, T>(a, b, y, n, stream);
      default:
        return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "op '%s': unknown binary code %d", name,
                          code);
    }
  });
}
