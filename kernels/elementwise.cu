/*
 * elementwise.cu: the CUDA unary ops (relu, gelu, gelu_tanh, silu, sigmoid, tanh, exp, neg,
 * scale, cast) and binary ops with numpy broadcasting (add, sub, mul, div).
 *
 * Each family has a contiguous kernel for dense tensors: every thread moves 16 bytes of input
 * (one vector load) when the pointers are aligned, which is what saturates HBM on an H100, and
 * the grid covers the tensor with one such piece per thread. A strided kernel serves everything
 * else (views from transposes or slices, broadcast operands with stride 0): each thread
 * decomposes its linear index over the (right-aligned, 4-D) shape, looping with the grid's
 * stride so a capped grid covers any size. Binary ops also have a row kernel for the common
 * bias-like broadcast (one operand repeats along the leading dims), which needs only a modulo
 * per element. Math is in f32 for every storage type.
 *
 * Every kernel starts with recap__pdl_begin and is launched through recap__cuda_launch
 * (programmatic dependent launch, cuda_common.cuh).
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
constexpr int kDenseThreads = 128; /* the one-piece-per-thread dense kernels */

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

/* The dense kernels below give each thread one piece of work and no loop: thread i < nvec
 * moves vector i (16 bytes of input, VEC elements), thread nvec + j moves element
 * nvec * VEC + j of the scalar tail (nvec = 0 when the pointers are not aligned for vectors:
 * then every element is tail). The launcher sizes the grid to cover all of it. Against a
 * grid-stride loop over 64-bit indices this is a shorter path per thread, which is what a
 * link of a chain of small kernels waits on (docs/perf/launch.md: 0.90 us against 1.04 us
 * per graph node for 4096 floats, with programmatic launches). */
template <int Code, typename Tin, typename Tout>
__global__ void unary_contiguous_kernel(const Tin *__restrict__ x, Tout *__restrict__ y,
                                        int64_t nvec, int64_t n, float scale) {
  recap__pdl_begin();
  constexpr int VEC = 16 / sizeof(Tin);
  const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < nvec) {
    const recap__vec<Tin, VEC> in = reinterpret_cast<const recap__vec<Tin, VEC> *>(x)[i];
    recap__vec<Tout, VEC> out;
#pragma unroll
    for (int k = 0; k < VEC; ++k) out.v[k] = unary_element<Code, Tin, Tout>(in.v[k], scale);
    reinterpret_cast<recap__vec<Tout, VEC> *>(y)[i] = out;
  } else if (const int64_t e = nvec * VEC + (i - nvec); e < n) {
    y[e] = unary_element<Code, Tin, Tout>(x[e], scale);
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

template <int Code, typename T>
__global__ void binary_contiguous_kernel(const T *__restrict__ a, const T *__restrict__ b,
                                         T *__restrict__ y, int64_t nvec, int64_t n) {
  recap__pdl_begin();
  constexpr int VEC = 16 / sizeof(T);
  const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < nvec) {
    const recap__vec<T, VEC> x0 = reinterpret_cast<const recap__vec<T, VEC> *>(a)[i];
    const recap__vec<T, VEC> x1 = reinterpret_cast<const recap__vec<T, VEC> *>(b)[i];
    recap__vec<T, VEC> out;
#pragma unroll
    for (int k = 0; k < VEC; ++k)
      out.v[k] = recap__from_float<T>(
          binary_apply<Code>(recap__to_float(x0.v[k]), recap__to_float(x1.v[k])));
    reinterpret_cast<recap__vec<T, VEC> *>(y)[i] = out;
  } else if (const int64_t e = nvec * VEC + (i - nvec); e < n) {
    y[e] = recap__from_float<T>(binary_apply<Code>(recap__to_float(a[e]), recap__to_float(b[e])));
  }
}

/* One operand (kRowIsB: b, else a) is a dense vector of `nrow` elements repeated along the
 * leading dims (a bias); the other operand and y are dense. Work as in the dense kernels;
 * vectors only when nrow is a multiple of VEC, so that a vector never wraps around the row. */
template <int Code, typename T, bool kRowIsB>
__global__ void binary_row_kernel(const T *__restrict__ full, const T *__restrict__ row,
                                  T *__restrict__ y, int64_t nvec, int64_t n, int64_t nrow) {
  recap__pdl_begin();
  constexpr int VEC = 16 / sizeof(T);
  const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < nvec) {
    const recap__vec<T, VEC> x0 = reinterpret_cast<const recap__vec<T, VEC> *>(full)[i];
    const recap__vec<T, VEC> x1 =
        reinterpret_cast<const recap__vec<T, VEC> *>(row)[i % (nrow / VEC)];
    recap__vec<T, VEC> out;
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
      const float f = recap__to_float(x0.v[k]), r = recap__to_float(x1.v[k]);
      out.v[k] =
          recap__from_float<T>(kRowIsB ? binary_apply<Code>(f, r) : binary_apply<Code>(r, f));
    }
    reinterpret_cast<recap__vec<T, VEC> *>(y)[i] = out;
  } else if (const int64_t e = nvec * VEC + (i - nvec); e < n) {
    const float f = recap__to_float(full[e]), r = recap__to_float(row[e % nrow]);
    y[e] = recap__from_float<T>(kRowIsB ? binary_apply<Code>(f, r) : binary_apply<Code>(r, f));
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

bool aligned16(const void *p) {
  return ((uintptr_t)p & 15u) == 0;
}

template <int Code, typename Tin, typename Tout>
recap_status launch_unary(const recap_tensor *x, const recap_tensor *y, int64_t n, float scale,
                          cudaStream_t stream) {
  if (recap__tensor_is_contiguous(x) && recap__tensor_is_contiguous(y)) {
    constexpr int VEC = 16 / sizeof(Tin);
    const bool vectorize = aligned16(x->data) && ((uintptr_t)y->data % (sizeof(Tout) * VEC)) == 0;
    const int64_t nvec = vectorize ? n / VEC : 0;
    unsigned grid;
    RECAP_TRY(recap__cuda_grid_cover(nvec + (n - nvec * VEC), kDenseThreads, &grid));
    RECAP_CUDA_TRY(recap__cuda_launch(unary_contiguous_kernel<Code, Tin, Tout>, grid, kDenseThreads,
                                      0, stream, static_cast<const Tin *>(x->data),
                                      static_cast<Tout *>(y->data), nvec, n, scale));
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

template <int Code, typename T>
recap_status launch_binary(const recap_tensor *a, const recap_tensor *b, const recap_tensor *y,
                           int64_t n, cudaStream_t stream) {
  constexpr int VEC = 16 / sizeof(T);
  const bool y_dense = recap__tensor_is_contiguous(y);
  const bool a_dense = y_dense && recap__tensor_numel(a) == n && recap__tensor_is_contiguous(a);
  const bool b_dense = y_dense && recap__tensor_numel(b) == n && recap__tensor_is_contiguous(b);
  if (a_dense && b_dense) {
    const bool vectorize = aligned16(a->data) && aligned16(b->data) && aligned16(y->data);
    const int64_t nvec = vectorize ? n / VEC : 0;
    unsigned grid;
    RECAP_TRY(recap__cuda_grid_cover(nvec + (n - nvec * VEC), kDenseThreads, &grid));
    RECAP_CUDA_TRY(recap__cuda_launch(binary_contiguous_kernel<Code, T>, grid, kDenseThreads, 0,
                                      stream, static_cast<const T *>(a->data),
                                      static_cast<const T *>(b->data), static_cast<T *>(y->data),
                                      nvec, n));
  } else if ((a_dense && is_row_of(b, y)) || (b_dense && is_row_of(a, y))) {
    /* A bias-like operand: the common broadcast, without per-element index arithmetic. */
    const bool row_is_b = a_dense && is_row_of(b, y);
    const recap_tensor *full = row_is_b ? a : b, *row = row_is_b ? b : a;
    const int64_t nrow = recap__tensor_numel(row);
    const bool vectorize =
        aligned16(full->data) && aligned16(row->data) && aligned16(y->data) && nrow % VEC == 0;
    const int64_t nvec = vectorize ? n / VEC : 0;
    unsigned grid;
    RECAP_TRY(recap__cuda_grid_cover(nvec + (n - nvec * VEC), kDenseThreads, &grid));
    const T *fp = static_cast<const T *>(full->data), *rp = static_cast<const T *>(row->data);
    T *yp = static_cast<T *>(y->data);
    RECAP_CUDA_TRY(recap__cuda_launch(
        row_is_b ? binary_row_kernel<Code, T, true> : binary_row_kernel<Code, T, false>, grid,
        kDenseThreads, 0, stream, fp, rp, yp, nvec, n, nrow));
  } else {
    const recap__cuda_view4 yv = recap__cuda_view4_of(y);
    recap__cuda_view4 av = recap__cuda_view4_of(a), bv = recap__cuda_view4_of(b);
    for (int d = 0; d < 4; ++d) {
      if (av.shape[d] != yv.shape[d]) av.stride[d] = 0;
      if (bv.shape[d] != yv.shape[d]) bv.stride[d] = 0;
      av.shape[d] = bv.shape[d] = yv.shape[d];
    }
    RECAP_CUDA_TRY(
        recap__cuda_launch(binary_strided_kernel<Code, T>, recap__cuda_grid_for(n, kThreads),
                           kThreads, 0, stream, static_cast<const T *>(a->data), av,
                           static_cast<const T *>(b->data), bv, static_cast<T *>(y->data), yv, n));
  }
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

extern "C" recap_status recap__cuda_unary(const recap_op_call *call, void *cuda_stream) {
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

extern "C" recap_status recap__cuda_binary(const recap_op_call *call, void *cuda_stream) {
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
