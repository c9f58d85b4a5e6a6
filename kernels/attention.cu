/*
 * attention.cu: the KV-cache append and attention over a cache, both reading their position or
 * length from device memory IN THE KERNEL, so a captured decode step replays correctly as the
 * position advances without any graph update.
 *
 * Attention is FUSED: one kernel computes softmax(q k^T * scale [+ causal mask]) v with an
 * online softmax, never materializing the [Sq, Sk] score matrix. Composed (GEMM, softmax, GEMM)
 * would need a workspace sized by Sk and three launches per step, and the valid length lives
 * in device memory, which a cuBLAS call cannot read: it would have to run over the whole
 * cache capacity with a mask. The fused kernel reads the length itself and touches only the
 * valid keys.
 *
 * Layout of the attention kernel: one block per (batch, head, query row) and per chunk of up
 * to 256 output dims (one chunk for Dh <= 256). The block's warps split the keys, each taking
 * kKeysPerStep consecutive keys per step (warp w takes keys kw..kw+k-1, then k(w + warps)...);
 * for each key the warp computes q . k with its lanes striding over Dh and a shuffle
 * reduction, then updates its running max, running sum and its chunk of the output
 * accumulator (DPL dims per lane, in registers). A decode step (few query rows) gets 16 warps
 * per block and four keys per step, so many independent loads and reductions are in flight
 * (measured on H100, B1 H32/8 Sk4096 Dh128 f16: 187 us, against 572 us with 4 warps and one
 * key per step); a prefill keeps 4 warps and one key per step. The warps' states are merged through
 * shared memory at the end. Any Sk works (keys are streamed), any Dh works (dims beyond one chunk
 * go to more blocks, each recomputing the scores). A decode step with few heads still fills few
 * SMs, and a prefill runs on CUDA cores, not tensor cores: a split over keys across blocks (which
 * needs a workspace) and an MMA-based kernel are the later optimizations.
 */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "kernels/cuda_common.cuh"
#include "kernels/cuda_ops.h"
#include "runtime/cuda_check.h"

namespace {

constexpr int kThreads = 256;
constexpr int kMaxWarps = 16;
/* Fewer query rows than this leave SMs idle: their blocks get kMaxWarps warps instead of 4. */
constexpr int64_t kFewRows = 264;
constexpr int kMaxDpl = 8; /* output dims per lane in registers: chunks of 256 dims */

/* ================================ kernels ================================================ */

/* cache[b, pos + t, h, :] = rows[b, t, h, :]: one thread per element of `rows`. The position
 * is read here, at execution time. A position that does not fit (pos < 0 or pos + T > Smax)
 * traps before anything is written by this thread: a sticky fault, as the host reference's
 * error is a sticky fault on the host backend. With real_ptr (optional), only batch rows
 * b < *real_ptr (clamped to [0, B]) are written: a bucket's padding rows leave the cache. */
template <typename T>
__global__ void kv_append_kernel(T *__restrict__ cache, recap__cuda_view4 cv,
                                 const T *__restrict__ rows, recap__cuda_view4 rv,
                                 const int32_t *__restrict__ pos_ptr,
                                 const int32_t *__restrict__ real_ptr) {
  const int64_t t_count = rv.shape[1], heads = rv.shape[2], dh = rv.shape[3];
  const int64_t batch = real_ptr ? min(max((int64_t)*real_ptr, (int64_t)0), rv.shape[0])
                                 : rv.shape[0];
  const int64_t n = batch * t_count * heads * dh;
  const int64_t pos = *pos_ptr;
  if (pos < 0 || pos + t_count > cv.shape[1]) __trap();
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    const int64_t d = i % dh, h = (i / dh) % heads, t = (i / (dh * heads)) % t_count,
                  b = i / (dh * heads * t_count);
    cache[b * cv.stride[0] + (pos + t) * cv.stride[1] + h * cv.stride[2] + d * cv.stride[3]] =
        rows[b * rv.stride[0] + t * rv.stride[1] + h * rv.stride[2] + d * rv.stride[3]];
  }
}

struct attention_params {
  recap__cuda_view4 q, k, v; /* [B, H, Sq, Dh] and [B, Hkv, Sk, Dh]; last-dim stride 1 */
  const int32_t *len;        /* valid key count in device memory, or NULL for Sk */
  int64_t heads, kv_group;   /* query head h reads kv head h / kv_group */
  float scale;
  bool causal;
};

/* blockIdx.x: query row over (b, h, i); blockIdx.y: which chunk of 32 * DPL output dims.
 * blockDim.x / 32 warps (at most kMaxWarps) split the keys; each warp takes kKeysPerStep
 * consecutive keys per step, so their loads and shuffle reductions overlap. */
template <typename T, int DPL, int kKeysPerStep>
__global__ void __launch_bounds__(kMaxWarps * 32)
    attention_kernel(const T *__restrict__ q, const T *__restrict__ k, const T *__restrict__ v,
                     T *__restrict__ out, attention_params p) {
  extern __shared__ float smem[];
  const int64_t sq = p.q.shape[2], sk = p.k.shape[2], dh = p.q.shape[3];
  const int64_t i = blockIdx.x % sq, h = (blockIdx.x / sq) % p.heads,
                b = blockIdx.x / (sq * p.heads), hk = h / p.kv_group;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const int64_t chunk0 = (int64_t)blockIdx.y * 32 * DPL;

  float *q_s = smem;          /* [dh] */
  float *m_s = q_s + dh;      /* [warps] */
  float *l_s = m_s + warps;   /* [warps] */
  float *acc_s = l_s + warps; /* [warps][32 * DPL] */

  const int64_t len = p.len ? (int64_t)*p.len : sk;
  if (len < 0 || len > sk) __trap();
  int64_t kend = len;
  if (p.causal) {
    const int64_t last = len - sq + i; /* query i's absolute position */
    kend = last + 1 < kend ? last + 1 : kend;
  }

  const T *qr = q + b * p.q.stride[0] + h * p.q.stride[1] + i * p.q.stride[2];
  for (int64_t d = threadIdx.x; d < dh; d += blockDim.x) q_s[d] = recap__to_float(qr[d]);
  __syncthreads();

  const T *kb = k + b * p.k.stride[0] + hk * p.k.stride[1];
  const T *vb = v + b * p.v.stride[0] + hk * p.v.stride[1];
  float m = -INFINITY, l = 0.0f, acc[DPL];
#pragma unroll
  for (int t = 0; t < DPL; ++t) acc[t] = 0.0f;

  for (int64_t j0 = (int64_t)warp * kKeysPerStep; j0 < kend; j0 += (int64_t)warps * kKeysPerStep) {
    float score[kKeysPerStep];
#pragma unroll
    for (int u = 0; u < kKeysPerStep; ++u) {
      /* Keys past kend are clamped to a valid row and weighted 0 below. */
      const int64_t j = j0 + u < kend ? j0 + u : j0;
      const T *kr = kb + j * p.k.stride[2];
      float dot = 0.0f;
      for (int64_t d = lane; d < dh; d += 32) dot += q_s[d] * recap__to_float(kr[d]);
      score[u] = dot;
    }
    float m_new = m;
#pragma unroll
    for (int u = 0; u < kKeysPerStep; ++u) {
      score[u] = j0 + u < kend ? recap__warp_sum(score[u]) * p.scale : -INFINITY;
      m_new = fmaxf(m_new, score[u]);
    }
    const float alpha = expf(m - m_new); /* 0 on the first step (m == -inf) */
    float pj[kKeysPerStep];
    l *= alpha;
#pragma unroll
    for (int u = 0; u < kKeysPerStep; ++u) {
      pj[u] = expf(score[u] - m_new); /* 0 for keys past kend */
      l += pj[u];
    }
    m = m_new;
#pragma unroll
    for (int t = 0; t < DPL; ++t) {
      const int64_t d = chunk0 + lane + 32 * t;
      float a = acc[t] * alpha;
      if (d < dh) {
#pragma unroll
        for (int u = 0; u < kKeysPerStep; ++u) {
          const int64_t j = j0 + u < kend ? j0 + u : j0;
          a += pj[u] * recap__to_float(vb[j * p.v.stride[2] + d]);
        }
      }
      acc[t] = a;
    }
  }

  if (lane == 0) {
    m_s[warp] = m;
    l_s[warp] = l;
  }
#pragma unroll
  for (int t = 0; t < DPL; ++t) acc_s[warp * 32 * DPL + lane + 32 * t] = acc[t];
  __syncthreads();

  float m_all = -INFINITY;
  for (int w = 0; w < warps; ++w) m_all = fmaxf(m_all, m_s[w]);
  float l_all = 0.0f;
  for (int w = 0; w < warps; ++w)
    l_all += m_s[w] == -INFINITY ? 0.0f : l_s[w] * expf(m_s[w] - m_all);
  /* No visible key (kend <= 0) leaves l_all == 0: the output row is zeros. */
  const float inv = l_all > 0.0f ? 1.0f / l_all : 0.0f;
  T *orow = out + ((b * p.heads + h) * sq + i) * dh;
  for (int c = threadIdx.x; c < 32 * DPL; c += blockDim.x) {
    const int64_t d = chunk0 + c;
    if (d >= dh) break;
    float o = 0.0f;
    for (int w = 0; w < warps; ++w)
      if (m_s[w] != -INFINITY) o += acc_s[w * 32 * DPL + c] * expf(m_s[w] - m_all);
    orow[d] = recap__from_float<T>(o * inv);
  }
}

/* ================================ launchers ============================================== */

template <typename T, int DPL>
recap_status launch_attention(const recap_op_call *call, const attention_params &p,
                              cudaStream_t stream) {
  const int64_t dh = p.q.shape[3];
  const int64_t rows = p.q.shape[0] * p.heads * p.q.shape[2];
  /* Few query rows (decode) with many keys: more warps per block and four keys per warp step
   * keep more loads in flight. With many rows the GPU is full anyway, and one key per step
   * measured faster (fewer registers, no wasted work at the causal edge). */
  const bool decode = rows < kFewRows && p.k.shape[2] >= 256;
  const int warps = decode ? kMaxWarps : 4;
  const size_t smem = sizeof(float) * ((size_t)dh + 2 * warps + (size_t)warps * 32 * DPL);
  /* 48 KiB is the default dynamic shared memory limit: Dh up to ~11000 fits. */
  if (smem > 48 * 1024 || rows > INT32_MAX)
    return RECAP_FAIL(RECAP_STATUS_NOT_SUPPORTED,
                      "op '%s': head dim %lld or %lld query rows exceed the CUDA kernel's limits",
                      call->def->name, (long long)dh, (long long)rows);
  const dim3 grid((unsigned)rows, (unsigned)RECAP_CEIL_DIV(dh, (int64_t)32 * DPL));
  const T *q = static_cast<const T *>(call->inputs[0].data);
  const T *k = static_cast<const T *>(call->inputs[1].data);
  const T *v = static_cast<const T *>(call->inputs[2].data);
  T *out = static_cast<T *>(call->outputs[0].data);
  if (decode)
    attention_kernel<T, DPL, 4><<<grid, warps * 32, smem, stream>>>(q, k, v, out, p);
  else
    attention_kernel<T, DPL, 1><<<grid, warps * 32, smem, stream>>>(q, k, v, out, p);
  RECAP_CUDA_TRY(cudaGetLastError());
  return RECAP_OK;
}

}  // namespace

extern "C" recap_status recap__cuda_kv_append(const recap_op_call *call, void *cuda_stream) {
  recap__cuda_launch_range range(call->def->name);
  const recap_tensor *cache = &call->inputs[0], *rows = &call->inputs[1], *pos = &call->inputs[2];
  const recap_tensor *out = &call->outputs[0];
  const char *name = call->def->name;
  if (cache->ndim != 4 || rows->ndim != 4 || rows->dtype != cache->dtype ||
      rows->shape[0] != cache->shape[0] || rows->shape[2] != cache->shape[2] ||
      rows->shape[3] != cache->shape[3] || rows->shape[1] > cache->shape[1])
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "op '%s': needs cache [B, Smax, H, Dh] and rows [B, T, H, Dh] of one "
                      "dtype with T <= Smax",
                      name);
  if (pos->dtype != RECAP_DTYPE_I32 || recap__tensor_numel(pos) != 1 || !pos->data)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "op '%s': the position must be one i32 in device memory", name);
  const recap_tensor *real = call->num_inputs > 3 ? &call->inputs[3] : NULL;
  if (real && (real->dtype != RECAP_DTYPE_I32 || recap__tensor_numel(real) != 1 || !real->data))
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "op '%s': the row count must be one i32 in device memory", name);
  /* The op writes the persistent cache in place; an output elsewhere would be left unwritten
   * outside the appended rows. */
  if (out->data != cache->data)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "op '%s': the output must be the cache itself (same data pointer)", name);
  const int64_t n = recap__tensor_numel(rows);
  if (n == 0) return RECAP_OK;
  cudaStream_t stream = static_cast<cudaStream_t>(cuda_stream);
  return recap__cuda_dispatch_float(cache->dtype, name, [&](auto tag) {
    using T = decltype(tag);
    kv_append_kernel<T><<<recap__cuda_grid_for(n, kThreads), kThreads, 0, stream>>>(
        static_cast<T *>(out->data), recap__cuda_view4_of(out), static_cast<const T *>(rows->data),
        recap__cuda_view4_of(rows), static_cast<const int32_t *>(pos->data),
        real ? static_cast<const int32_t *>(real->data) : nullptr);
    RECAP_CUDA_TRY(cudaGetLastError());
    return RECAP_OK;
  });
}

extern "C" recap_status recap__cuda_attention(const recap_op_call *call, void *cuda_stream) {
  recap__cuda_launch_range range(call->def->name);
  const recap_tensor *q = &call->inputs[0], *k = &call->inputs[1], *v = &call->inputs[2];
  const recap_tensor *out = &call->outputs[0];
  const char *name = call->def->name;
  if (q->ndim != 4 || k->ndim != 4 || v->ndim != 4 || k->dtype != q->dtype ||
      v->dtype != q->dtype || out->dtype != q->dtype)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "op '%s': q, k, v and the output must be 4-D of one dtype", name);
  const int64_t batch = q->shape[0], heads = q->shape[1], dh = q->shape[3];
  const int64_t kv_heads = k->shape[1], sk = k->shape[2];
  bool ok = k->shape[0] == batch && v->shape[0] == batch && v->shape[1] == kv_heads &&
            v->shape[2] == sk && k->shape[3] == dh && v->shape[3] == dh && kv_heads > 0 &&
            heads % kv_heads == 0;
  ok = ok && (dh == 1 || (q->strides[3] == 1 && k->strides[3] == 1 && v->strides[3] == 1));
  ok = ok && recap__tensor_is_contiguous(out) && recap__tensor_numel(out) == recap__tensor_numel(q);
  if (!ok)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "op '%s': needs q [B, H, Sq, Dh], k and v [B, Hkv, Sk, Dh] with H %% Hkv "
                      "== 0, last dims of stride 1, and a contiguous output like q",
                      name);
  const recap_tensor *len = call->num_inputs > 3 ? &call->inputs[3] : NULL;
  if (len && (len->dtype != RECAP_DTYPE_I32 || recap__tensor_numel(len) != 1 || !len->data))
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "op '%s': the length must be one i32 in device memory", name);
  if (recap__tensor_numel(q) == 0) return RECAP_OK;

  attention_params p;
  p.q = recap__cuda_view4_of(q);
  p.k = recap__cuda_view4_of(k);
  p.v = recap__cuda_view4_of(v);
  p.len = len ? static_cast<const int32_t *>(len->data) : nullptr;
  p.heads = heads;
  p.kv_group = heads / kv_heads;
  p.scale = call->attrs.scale != 0.0 ? (float)call->attrs.scale : (float)(1.0 / sqrt((double)dh));
  p.causal = call->attrs.causal != 0;
  cudaStream_t stream = static_cast<cudaStream_t>(cuda_stream);
  return recap__cuda_dispatch_float(q->dtype, name, [&](auto tag) {
    using T = decltype(tag);
    if (dh <= 32) return launch_attention<T, 1>(call, p, stream);
    if (dh <= 64) return launch_attention<T, 2>(call, p, stream);
    if (dh <= 128) return launch_attention<T, 4>(call, p, stream);
    return launch_attention<T, kMaxDpl>(call, p, stream);
  });
}
