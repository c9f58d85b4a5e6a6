/*
 * attention.cu: the KV-cache append and attention over a cache, both reading their position or
 * length from device memory IN THE KERNEL, so a captured decode step replays correctly as the
 * position advances without any graph update.
 *
 * Attention is FUSED: one kernel computes softmax(q k^T * scale [+ causal mask]) v with an
 * online softmax, never materializing the [Sq, Sk] score matrix. Composed (GEMM, softmax, GEMM)
 * would need a workspace sized by Sk and three launches per step, and the valid length lives
 * in device memory, which a cuBLAS call cannot read: it would have to run over the whole
 * cache capacity with a mask. The fused kernels read the length themselves and touch only the
 * valid keys. Three kernels, chosen by shape (docs/perf/attention.md has the measurements):
 *
 * - flash_kernel (f16/bf16, Dh 64 or 128, Sq >= 16, 16-byte aligned rows): tensor cores. One
 *   block of 4 warps per (batch, head, tile of 64 query rows), each warp owning 16 rows. K and
 *   V tiles of 64 keys stream through shared memory by cp.async, double buffered; S = Q K^T and
 *   O += P V are mma.sync m16n8k16 with f32 accumulators, P rounded to the input type between
 *   them; the softmax is online, in registers, in base 2 on the special-function unit. Causal
 *   key tiles past the tile's last query are never loaded, a warp skips what its rows do not
 *   see (whole tiles, or the upper half of the diagonal one), and only tiles that straddle the
 *   diagonal or the length are masked. The output leaves through shared memory in 16-byte
 *   rows. Short causal grids run the heads' last query tiles first (launch_flash).
 * - attention_kernel split over keys (decode: few query rows, many keys, sm_90): one block per
 *   (query row, key split, dim chunk); the splits of a row form a thread-block CLUSTER, and the
 *   first block merges the others' partial (max, sum, accumulator) through distributed shared
 *   memory. No workspace, no second launch: B*H rows alone fill a fraction of the SMs.
 * - attention_kernel unsplit: everything else (f32, other head dims, odd strides, sm_80).
 *
 * Layout of attention_kernel: one block per query row and per chunk of up to 256 output dims
 * (one chunk for Dh <= 256), and per key split when split. The block's warps split the keys,
 * each taking kKeysPerStep consecutive keys per step (warp w takes keys kw..kw+k-1, then
 * k(w + warps)...); for each key the warp computes q . k with its lanes striding over Dh and a
 * shuffle reduction, then updates its running max, running sum and its chunk of the output
 * accumulator (DPL dims per lane, in registers). A decode step (few query rows) takes four keys
 * per step, so many independent loads and reductions are in flight, with 16 warps per block
 * unsplit (measured on H100, B1 H32/8 Sk4096 Dh128 f16: 187 us, against 572 us with 4 warps
 * and one key per step) and kSplitWarps when split; other shapes keep 4 warps and one key per
 * step. The warps' states are merged
 * through shared memory at the end. Any Sk works (keys are streamed), any Dh works (dims beyond
 * one chunk go to more blocks, each recomputing the scores).
 *
 * flash_kernel and the unsplit attention_kernel launch with programmatic dependent launch
 * (recap__cuda_launch, cuda_common.cuh) and wait in recap__pdl_begin before touching memory:
 * in a graph their launch overlaps the end of the GEMM that produced q, k and v. The split
 * kernel keeps a plain cluster launch (its recap__pdl_begin then returns at once).
 */
#include <cooperative_groups.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <type_traits>

#include "kernels/cuda_common.cuh"
#include "kernels/cuda_ops.h"
#include "runtime/cuda_check.h"
#include "runtime/env.h"

namespace {

constexpr int kThreads = 256;
constexpr int kMaxWarps = 16;
/* Fewer query rows than this leave SMs idle: their blocks get kMaxWarps warps instead of 4. */
constexpr int64_t kFewRows = 264;
constexpr int kMaxDpl = 8; /* output dims per lane in registers: chunks of 256 dims */
/* Key splits of one query row: one cluster, at most the portable cluster size. */
constexpr int kMaxSplits = 8;
/* A split gets at least this many keys: fewer would spend more on the merge than they save. */
constexpr int64_t kMinKeysPerSplit = 128;
/* Warps of a split block (a row's keys are spread over the cluster already). Measured on H100,
 * decode B8 H8 Dh64 over 1024 keys, 8 splits: 4 warps 16.5 us, 8 warps 20.6 us, 16 warps 29.4. */
constexpr int kSplitWarps = 4;

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
  const int64_t batch =
      real_ptr ? min(max((int64_t)*real_ptr, (int64_t)0), rv.shape[0]) : rv.shape[0];
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
  /* The output [B, H, Sq, Dh], last-dim stride 1, any other strides: the planner makes it a
   * view of the [B, Sq, H, Dh] tensor its permute produces, so that permute costs nothing. */
  recap__cuda_view4 o;
  const int32_t *len;      /* valid key count in device memory, or NULL for Sk */
  int64_t heads, kv_group; /* query head h reads kv head h / kv_group */
  float scale;
  bool causal;
  /* flash_kernel only: the output's rows are 16-byte aligned (pointer and strides). */
  bool o_vec16;
  /* flash_kernel only: grid (H, B, query tiles) instead of (query tiles, H, B) (launch_flash
   * says when). */
  bool tiles_outer;
};

/* The valid length, read once by each block; out of [0, Sk] is a device fault. */
__device__ __forceinline__ int64_t read_length(const attention_params &p) {
  const int64_t sk = p.k.shape[2];
  const int64_t len = p.len ? (int64_t)*p.len : sk;
  if (len < 0 || len > sk) __trap();
  return len;
}

/* Unsplit: blockIdx.x is the query row over (b, h, i), blockIdx.y the chunk of 32 * DPL output
 * dims. kSplit: blockIdx.x is the key split (the cluster spans gridDim.x), blockIdx.y the row,
 * blockIdx.z the chunk. blockDim.x / 32 warps (at most kMaxWarps) split the block's keys; each
 * warp takes kKeysPerStep consecutive keys per step, so their loads and shuffle reductions
 * overlap. */
template <typename T, int DPL, int kKeysPerStep, bool kSplit>
__global__ void __launch_bounds__(kMaxWarps * 32)
    attention_kernel(const T *__restrict__ q, const T *__restrict__ k, const T *__restrict__ v,
                     T *__restrict__ out, attention_params p) {
  recap__pdl_begin();
  extern __shared__ float smem[];
  const int64_t sq = p.q.shape[2], dh = p.q.shape[3];
  const int64_t row = kSplit ? blockIdx.y : blockIdx.x;
  const int64_t i = row % sq, h = (row / sq) % p.heads, b = row / (sq * p.heads),
                hk = h / p.kv_group;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const int64_t chunk0 = (int64_t)(kSplit ? blockIdx.z : blockIdx.y) * 32 * DPL;

  float *q_s = smem;          /* [dh] */
  float *m_s = q_s + dh;      /* [warps] */
  float *l_s = m_s + warps;   /* [warps] */
  float *acc_s = l_s + warps; /* [warps][32 * DPL] */

  const int64_t len = read_length(p);
  int64_t kend = len;
  if (p.causal) {
    const int64_t last = len - sq + i; /* query i's absolute position */
    kend = last + 1 < kend ? last + 1 : kend;
  }
  if (kend < 0) kend = 0;
  int64_t kbeg = 0;
  if (kSplit) {
    /* Split s takes keys [s * per, (s + 1) * per): the length is known only here. */
    const int64_t per = (kend + gridDim.x - 1) / gridDim.x;
    kbeg = (int64_t)blockIdx.x * per;
    kend = kbeg + per < kend ? kbeg + per : kend;
  }

  const T *qr = q + b * p.q.stride[0] + h * p.q.stride[1] + i * p.q.stride[2];
  for (int64_t d = threadIdx.x; d < dh; d += blockDim.x) q_s[d] = recap__to_float(qr[d]);
  __syncthreads();

  const T *kb = k + b * p.k.stride[0] + hk * p.k.stride[1];
  const T *vb = v + b * p.v.stride[0] + hk * p.v.stride[1];
  const int64_t ks = p.k.stride[2], vs = p.v.stride[2];
  /* One chunk (Dh <= 32 * DPL, chunk0 == 0): a lane's dims of q . k are its own output dims,
   * so every K and V load of a step is independent of the others and of the scores, and all
   * are issued together: one memory round trip per step, not one per load (measured on H100,
   * decode B8 H8 Dh64 over 1024 keys, 8 splits of 16 warps: 38 us with the loads inside the
   * dot-product loop, 29-31 us hoisted; docs/perf/attention.md). */
  const bool one_chunk = dh <= 32 * DPL;
  float q_r[DPL];
#pragma unroll
  for (int t = 0; t < DPL; ++t) q_r[t] = lane + 32 * t < dh ? q_s[lane + 32 * t] : 0.0f;
  float m = -INFINITY, l = 0.0f, acc[DPL];
#pragma unroll
  for (int t = 0; t < DPL; ++t) acc[t] = 0.0f;

  for (int64_t j0 = kbeg + (int64_t)warp * kKeysPerStep; j0 < kend;
       j0 += (int64_t)warps * kKeysPerStep) {
    float score[kKeysPerStep], v_r[kKeysPerStep][DPL];
    if (one_chunk) {
      float k_r[kKeysPerStep][DPL];
#pragma unroll
      for (int u = 0; u < kKeysPerStep; ++u) {
        /* Keys past kend are clamped to a valid row and weighted 0 below. */
        const int64_t j = j0 + u < kend ? j0 + u : j0;
#pragma unroll
        for (int t = 0; t < DPL; ++t) {
          const int64_t d = lane + 32 * t;
          k_r[u][t] = d < dh ? recap__to_float(kb[j * ks + d]) : 0.0f;
          v_r[u][t] = d < dh ? recap__to_float(vb[j * vs + d]) : 0.0f;
        }
      }
#pragma unroll
      for (int u = 0; u < kKeysPerStep; ++u) {
        float dot = 0.0f;
#pragma unroll
        for (int t = 0; t < DPL; ++t) dot += q_r[t] * k_r[u][t];
        score[u] = dot;
      }
    } else {
#pragma unroll
      for (int u = 0; u < kKeysPerStep; ++u) {
        const int64_t j = j0 + u < kend ? j0 + u : j0;
        const T *kr = kb + j * ks;
        float dot = 0.0f;
        for (int64_t d = lane; d < dh; d += 32) dot += q_s[d] * recap__to_float(kr[d]);
        score[u] = dot;
#pragma unroll
        for (int t = 0; t < DPL; ++t) {
          const int64_t d = chunk0 + lane + 32 * t;
          v_r[u][t] = d < dh ? recap__to_float(vb[j * vs + d]) : 0.0f;
        }
      }
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
      float a = acc[t] * alpha;
#pragma unroll
      for (int u = 0; u < kKeysPerStep; ++u) a += pj[u] * v_r[u][t];
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
  T *orow = out + b * p.o.stride[0] + h * p.o.stride[1] + i * p.o.stride[2];
  if (!kSplit) {
    /* No visible key (kend <= 0) leaves l_all == 0: the output row is zeros. */
    const float inv = l_all > 0.0f ? 1.0f / l_all : 0.0f;
    for (int c = threadIdx.x; c < 32 * DPL; c += blockDim.x) {
      const int64_t d = chunk0 + c;
      if (d >= dh) break;
      float o = 0.0f;
      for (int w = 0; w < warps; ++w)
        if (m_s[w] != -INFINITY) o += acc_s[w * 32 * DPL + c] * expf(m_s[w] - m_all);
      orow[d] = recap__from_float<T>(o * inv);
    }
    return;
  }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  /* This block's partial state (max, sum, unnormalized accumulator) for the cluster: part[0],
   * part[1], part[2 + c]. The first block of the cluster reads every block's through
   * distributed shared memory and writes the row; the second cluster barrier keeps the other
   * blocks' shared memory alive until it has. */
  float *part = acc_s + warps * 32 * DPL;
  if (threadIdx.x == 0) {
    part[0] = m_all;
    part[1] = l_all;
  }
  for (int c = threadIdx.x; c < 32 * DPL; c += blockDim.x) {
    float o = 0.0f;
    for (int w = 0; w < warps; ++w)
      if (m_s[w] != -INFINITY) o += acc_s[w * 32 * DPL + c] * expf(m_s[w] - m_all);
    part[2 + c] = o;
  }
  cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
  cluster.sync();
  if (cluster.block_rank() == 0) {
    /* Every thread reads every split's (max, sum), then every split's accumulator for its
     * dim: independent remote loads, issued together rather than one round trip each. */
    const unsigned splits = cluster.num_blocks();
    float m_r[kMaxSplits], w_r[kMaxSplits];
    float m_top = -INFINITY;
#pragma unroll
    for (int r = 0; r < kMaxSplits; ++r) {
      m_r[r] = (unsigned)r < splits ? cluster.map_shared_rank(part, r)[0] : -INFINITY;
      m_top = fmaxf(m_top, m_r[r]);
    }
    float l_top = 0.0f;
#pragma unroll
    for (int r = 0; r < kMaxSplits; ++r) {
      /* A split that saw no key has m == -inf, sum 0 and accumulator 0: weight 0. */
      w_r[r] = m_r[r] == -INFINITY ? 0.0f : expf(m_r[r] - m_top);
      if ((unsigned)r < splits) l_top += w_r[r] * cluster.map_shared_rank(part, r)[1];
    }
    /* No visible key in any split leaves l_top == 0: the output row is zeros. */
    const float inv = l_top > 0.0f ? 1.0f / l_top : 0.0f;
    for (int c = threadIdx.x; c < 32 * DPL; c += blockDim.x) {
      const int64_t d = chunk0 + c;
      if (d >= dh) break;
      float o = 0.0f;
#pragma unroll
      for (int r = 0; r < kMaxSplits; ++r)
        if ((unsigned)r < splits) o += w_r[r] * cluster.map_shared_rank(part, r)[2 + c];
      orow[d] = recap__from_float<T>(o * inv);
    }
  }
  cluster.sync();
#else
  /* The launcher splits only on devices with clusters (sm_90 and later). */
  __trap();
#endif
}

/* ---- flash_kernel: tensor-core attention for prefill ----------------------------------- */

constexpr int kFlashRows = 64; /* query rows per block: 16 per warp */
constexpr int kFlashKeys = 64; /* keys per shared-memory tile */
constexpr int kFlashWarps = 4;
constexpr int kFlashThreads = kFlashWarps * 32;
/* Sequence positions in flash_kernel are ints, sums of two of them included. */
constexpr int64_t kFlashMaxSeq = (int64_t)1 << 29;

/* Shared-memory rows are padded by 16 bytes: eight ldmatrix row addresses 16 * (Dh + 8) bytes
 * apart then fall in eight different 16-byte bank groups instead of one. */
template <int DH>
constexpr int flash_row() {
  return DH + 8;
}

/* The Q tile, then `stages` (K tile, V tile) pairs, 16-bit elements: one stage when the keys
 * fit in one tile (nothing to prefetch), else two. */
template <int DH>
constexpr size_t flash_smem_bytes(int stages) {
  return (size_t)(kFlashRows + stages * 2 * kFlashKeys) * flash_row<DH>() * 2;
}

__device__ __forceinline__ uint32_t smem_u32(const void *p) {
  return (uint32_t)__cvta_generic_to_shared(p);
}

/* 16 bytes global -> shared, bypassing L1; !valid writes 16 zero bytes and reads nothing. */
__device__ __forceinline__ void cp_async16(uint32_t dst, const void *src, bool valid) {
  const int bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes)
               : "memory");
}

__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

/* Waits until at most N of this thread's committed groups are still in flight. */
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

/* c += a b for one m16n8k16 tile: a 16x16 row-major, b 16x8 column-major, c f32. */
__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1, __half) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1, __nv_bfloat16) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* Two floats rounded to T, packed low (x) then high (y): the register layout mma expects. */
__device__ __forceinline__ uint32_t pack2(float x, float y, __half) {
  const __half2 h = __floats2half2_rn(x, y);
  return *reinterpret_cast<const uint32_t *>(&h);
}

__device__ __forceinline__ uint32_t pack2(float x, float y, __nv_bfloat16) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(x, y);
  return *reinterpret_cast<const uint32_t *>(&h);
}

/* 2^x on the special-function unit alone (ex2.approx.ftz, relative error ~2^-22, 2^-inf = 0):
 * exp2f adds a range fix for denormal results, which a softmax weight can drop. */
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

/* One warp's step over one K/V tile for its 16 query rows, in mma's fragment layout (lane
 * g = lane / 4, t = lane % 4 holds rows g and g + 8, columns 2t, 2t + 1 of every 8-wide tile):
 * S = Q K^T over the tile's first 8 NTA keys (NTA < 8 when the warp's rows see none past
 * them), scale to log2 units, mask keys k >= vis[r] of row r where `masked`, the online
 * softmax update of m_run, l_run (l_run a per-lane partial sum) and o, then O += P V. The Q
 * fragments are qf when held (QF = Dh / 16), else read from shared memory at q_addr. */
template <typename T, int DH, int NTA, int QF>
__device__ __forceinline__ void flash_tile(const uint32_t (&qf)[QF][4], uint32_t q_addr,
                                           const T *tk, const T *tv, int lane, bool masked,
                                           const int (&vis)[2], float scale_log2,
                                           float (&o)[DH / 8][4], float (&m_run)[2],
                                           float (&l_run)[2]) {
  constexpr int LD = flash_row<DH>();
  constexpr int KSTEPS = DH / 16;
  const int t4 = lane & 3;
  /* S = Q K^T: K rows are B's columns, so plain ldmatrix gives B fragments of two 8-key tiles
   * at once (matrices: keys +0 dims +0, keys +0 dims +8, keys +8 dims +0, +8 +8). */
  float s[NTA][4];
#pragma unroll
  for (int n = 0; n < NTA; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) s[n][e] = 0.0f;
#pragma unroll
  for (int ks2 = 0; ks2 < KSTEPS; ++ks2) {
    uint32_t a[4];
    if constexpr (QF == KSTEPS) {
#pragma unroll
      for (int i = 0; i < 4; ++i) a[i] = qf[ks2][i];
    } else {
      ldmatrix_x4(a, q_addr + ks2 * 32);
    }
#pragma unroll
    for (int np = 0; np < NTA / 2; ++np) {
      uint32_t bk[4];
      ldmatrix_x4(bk, smem_u32(tk + (np * 16 + (lane & 7) + (lane >> 4) * 8) * LD + ks2 * 16 +
                               ((lane >> 3) & 1) * 8));
      mma16816(s[2 * np], a, bk[0], bk[1], T{});
      mma16816(s[2 * np + 1], a, bk[2], bk[3], T{});
    }
  }

  float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
  for (int n = 0; n < NTA; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      float x = s[n][e] * scale_log2;
      if (masked && n * 8 + 2 * t4 + (e & 1) >= vis[e >> 1]) x = -INFINITY;
      s[n][e] = x;
      mx[e >> 1] = fmaxf(mx[e >> 1], x);
    }
  float base[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    /* The four lanes of a quad hold one row between them. */
    mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
    mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
    const float m_new = fmaxf(m_run[r], mx[r]);
    /* A row with no visible key yet keeps m == -inf: exponents against 0 give p = 0. */
    base[r] = m_new == -INFINITY ? 0.0f : m_new;
    const float alpha = fast_exp2(m_run[r] - base[r]);
    m_run[r] = m_new;
    l_run[r] *= alpha;
#pragma unroll
    for (int n = 0; n < DH / 8; ++n) {
      o[n][2 * r] *= alpha;
      o[n][2 * r + 1] *= alpha;
    }
  }
#pragma unroll
  for (int n = 0; n < NTA; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float pe = fast_exp2(s[n][e] - base[e >> 1]);
      s[n][e] = pe;
      l_run[e >> 1] += pe;
    }

#pragma unroll
  for (int j = 0; j < NTA / 2; ++j) {
    /* O += P V: the S accumulators of 8-key tiles 2j and 2j + 1 are exactly the A fragment of
     * keys 16j..16j+15. V rows are B's rows, so ldmatrix.trans gives its fragments (matrices:
     * keys +0 dims +0, keys +8 dims +0, keys +0 dims +8, keys +8 dims +8). */
    uint32_t a[4];
    a[0] = pack2(s[2 * j][0], s[2 * j][1], T{});
    a[1] = pack2(s[2 * j][2], s[2 * j][3], T{});
    a[2] = pack2(s[2 * j + 1][0], s[2 * j + 1][1], T{});
    a[3] = pack2(s[2 * j + 1][2], s[2 * j + 1][3], T{});
#pragma unroll
    for (int dp = 0; dp < DH / 16; ++dp) {
      uint32_t bv[4];
      ldmatrix_x4_trans(bv, smem_u32(tv + (j * 16 + (lane & 15)) * LD + dp * 16 + (lane >> 4) * 8));
      mma16816(o[2 * dp], a, bv[0], bv[1], T{});
      mma16816(o[2 * dp + 1], a, bv[2], bv[3], T{});
    }
  }
}

/* grid (query tiles, H, B), or (H, B, query tiles) with p.tiles_outer; kFlashThreads threads.
 * Warp w owns rows q0 + 16w .. q0 + 16w + 15. Key tiles stream through shared memory by
 * cp.async, the next one loading while the current one is computed. Query i of the Sq is at
 * absolute position len - Sq + i; with causal it sees keys j <= that position, and always
 * j < len. Causal key tiles past the block's last query are never loaded, a warp skips the
 * tiles (and the upper half of a tile) that none of its rows sees, and only tiles that
 * straddle a row's limit are masked. */
template <typename T, int DH>
__global__ void __launch_bounds__(kFlashThreads, DH == 64 ? 4 : 1)
    flash_kernel(const T *__restrict__ q, const T *__restrict__ k, const T *__restrict__ v,
                 T *__restrict__ out, attention_params p) {
  constexpr int LD = flash_row<DH>();
  constexpr int CHUNKS = DH / 8;        /* 16-byte pieces of a row */
  constexpr int TILE = kFlashKeys * LD; /* elements of one K or V tile */
  extern __shared__ __align__(16) unsigned char flash_smem[];
  T *s_q = reinterpret_cast<T *>(flash_smem);
  T *s_kv = s_q + kFlashRows * LD; /* [stage][K, V][kFlashKeys][LD] */

  /* Everything up to recap__pdl_begin reads only parameters and registers, so in a graph it
   * overlaps the end of the kernel that produced q, k and v. Positions fit an int
   * (flash_fits): only addresses need 64 bits, and registers are what limits how many blocks
   * are resident. */
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t4 = lane & 3;
  const int sq = (int)p.q.shape[2];
  /* Causal tiles late in the sequence have the most keys: start them first. */
  const int tile_n = p.tiles_outer ? gridDim.z : gridDim.x;
  const int tile_i = p.tiles_outer ? blockIdx.z : blockIdx.x;
  const int tile = p.causal ? tile_n - 1 - tile_i : tile_i;
  const int q0 = tile * kFlashRows, wq0 = q0 + 16 * warp;
  /* 32-bit division: heads fit a grid dimension (65535). */
  const int h = p.tiles_outer ? blockIdx.x : blockIdx.y;
  const int64_t b = p.tiles_outer ? blockIdx.y : blockIdx.z;
  const int hk = h / (int)p.kv_group;
  const T *qb = q + b * p.q.stride[0] + h * p.q.stride[1];
  const T *kb = k + b * p.k.stride[0] + hk * p.k.stride[1];
  const T *vb = v + b * p.v.stride[0] + hk * p.v.stride[1];
  const int64_t qs = p.q.stride[2], kst = p.k.stride[2], vst = p.v.stride[2];
  /* Loads: thread tid moves 16-byte piece tid % CHUNKS of rows tid / CHUNKS + i STEP. Trip
   * counts and slots are compile-time constants, so the address arithmetic is a few
   * instructions per piece (general loops spent most of a short block's instructions there). */
  constexpr int STEP = kFlashThreads / CHUNKS;
  static_assert(kFlashThreads % CHUNKS == 0 && kFlashKeys % STEP == 0 && kFlashRows % STEP == 0,
                "a pass of the block's threads covers whole rows of a tile");
  const int prow = tid / CHUNKS, px = tid % CHUNKS * 8;
  /* ldmatrix x4 lane address of the warp's 16x16 Q tiles: row lane % 16, column half
   * lane / 16. At Dh 64 the Q fragments are read from shared memory at each tile rather than
   * held, 16 registers fewer (more resident blocks); at Dh 128 they are held (QF = 8): blocks
   * are bound by shared memory there, and a long sequence would pay the reloads on every tile
   * (measured 3% slower at Sq = Sk = 1024). */
  const uint32_t q_addr = smem_u32(s_q + (warp * 16 + (lane & 15)) * LD + (lane >> 4) * 8);
  constexpr int QF = DH == 128 ? DH / 16 : 1;
  uint32_t qf[QF][4];
  const float scale_log2 = p.scale * 1.4426950408889634f; /* exp(x) = exp2(x log2 e) */

  recap__pdl_begin();
  const int len = (int)read_length(p);
  /* Keys any row of the block sees: [0, kend); keys the warp's rows see: [0, wend), and keys
   * below wfull are seen by all of them. A warp whose rows all lie past Sq sees none. */
  int kend = len, wend = len, wfull = len;
  if (p.causal) {
    kend = min(len, len - sq + min(q0 + kFlashRows, sq));
    wend = min(len, len - sq + min(wq0 + 16, sq));
    wfull = min(len, len - sq + wq0 + 1);
  }
  if (kend < 0) kend = 0;
  if (wq0 >= sq) wend = 0;
  const int tiles = (kend + kFlashKeys - 1) / kFlashKeys;

  auto load_kv = [&](int kt, int stage) {
    T *dk = s_kv + stage * 2 * TILE + prow * LD + px;
#pragma unroll
    for (int i = 0; i < kFlashKeys / STEP; ++i) {
      const int n = kt * kFlashKeys + prow + i * STEP;
      const bool ok = n < kend;
      cp_async16(smem_u32(dk + i * STEP * LD), kb + (ok ? n * kst : 0) + px, ok);
      cp_async16(smem_u32(dk + TILE + i * STEP * LD), vb + (ok ? n * vst : 0) + px, ok);
    }
  };
  /* Rows past Sq and keys past kend are zero-filled: masked scores must meet finite V. With no
   * key to see, nothing is loaded: the output rows are zeros, staged through the Q tile, and a
   * load by another warp's thread must not land there afterwards. */
  if (tiles > 0) {
#pragma unroll
    for (int i = 0; i < kFlashRows / STEP; ++i) {
      const int r = prow + i * STEP;
      const bool ok = q0 + r < sq;
      cp_async16(smem_u32(s_q + r * LD + px), qb + (ok ? (q0 + r) * qs : 0) + px, ok);
    }
    load_kv(0, 0);
  }
  cp_async_commit();

  int lim[2]; /* keys j < lim[r] are visible to row g + 8r */
  for (int r = 0; r < 2; ++r) {
    const int qi = wq0 + g + 8 * r;
    lim[r] = p.causal ? min(len, len - sq + qi + 1) : len;
  }
  float o[DH / 8][4];
#pragma unroll
  for (int n = 0; n < DH / 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) o[n][e] = 0.0f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};

  for (int kt = 0; kt < tiles; ++kt) {
    if (kt + 1 < tiles) {
      load_kv(kt + 1, (kt + 1) & 1);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    if (QF > 1 && kt == 0) {
#pragma unroll
      for (int ks2 = 0; ks2 < QF; ++ks2) ldmatrix_x4(qf[ks2], q_addr + ks2 * 32);
    }
    const int n0 = kt * kFlashKeys;
    if (n0 < wend) {
      const T *tk = s_kv + (kt & 1) * 2 * TILE;
      const bool masked = n0 + kFlashKeys > wfull;
      int vis[2];
#pragma unroll
      for (int i = 0; i < 2; ++i) vis[i] = max(min(lim[i] - n0, kFlashKeys), -1);
      /* The diagonal tile of the warps whose rows see at most half of it: half the work. */
      if (wend - n0 > kFlashKeys / 2)
        flash_tile<T, DH, kFlashKeys / 8>(qf, q_addr, tk, tk + TILE, lane, masked, vis, scale_log2,
                                          o, m_run, l_run);
      else
        flash_tile<T, DH, kFlashKeys / 16>(qf, q_addr, tk, tk + TILE, lane, true, vis, scale_log2,
                                           o, m_run, l_run);
    }
    /* The next iteration's loads overwrite the stage just read. */
    if (kt + 1 < tiles) __syncthreads();
  }
  cp_async_wait<0>();

  T *ob = out + b * p.o.stride[0] + h * p.o.stride[1];
  const int64_t os = p.o.stride[2];
  float inv[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float l = l_run[r];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    /* No visible key leaves l == 0: the output row is zeros. */
    inv[r] = l > 0.0f ? 1.0f / l : 0.0f;
  }
  if (p.o_vec16) {
    /* Through the warp's own rows of the Q tile (no other warp reads them) and out in 16-byte
     * pieces, a row per CHUNKS lanes: whole 32-byte sectors and a quarter of the stores,
     * where the fragments' 4-byte pairs would write half sectors. */
    T *stage = s_q + warp * 16 * LD;
    /* The warp's last ldmatrix reads of these rows come first for every lane: compute-sanitizer
     * racecheck reported each lane's stage writes against the other lanes' reads (264 hazard
     * warnings on the H100) without this. */
    __syncwarp();
#pragma unroll
    for (int r = 0; r < 2; ++r)
#pragma unroll
      for (int n = 0; n < DH / 8; ++n)
        *reinterpret_cast<uint32_t *>(stage + (g + 8 * r) * LD + n * 8 + 2 * t4) =
            pack2(o[n][2 * r] * inv[r], o[n][2 * r + 1] * inv[r], T{});
    __syncwarp();
#pragma unroll
    for (int c = lane; c < 16 * CHUNKS; c += 32) {
      const int row = c / CHUNKS, x = c % CHUNKS;
      if (wq0 + row < sq)
        *reinterpret_cast<uint4 *>(ob + (wq0 + row) * os + x * 8) =
            *reinterpret_cast<const uint4 *>(stage + row * LD + x * 8);
    }
    return;
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int qi = wq0 + g + 8 * r;
    if (qi >= sq) continue;
#pragma unroll
    for (int n = 0; n < DH / 8; ++n)
      *reinterpret_cast<uint32_t *>(ob + qi * os + n * 8 + 2 * t4) =
          pack2(o[n][2 * r] * inv[r], o[n][2 * r + 1] * inv[r], T{});
  }
}

/* ================================ launchers ============================================== */

/* Tuning switches, read at each launch (a captured graph keeps what it captured), for timing
 * variants in one process (docs/perf/attention.md): RECAP_ATTENTION_SPLIT_WARPS=w (4, 8 or
 * 16) sets the warps of a split decode block; RECAP_ATTENTION_SPLITS=s (1, 2, 4 or 8) caps the
 * splits of a row (1: never split); RECAP_ATTENTION_TILES_OUTER, a boolean switch (env.h),
 * forces flash_kernel's grid order (launch_flash). Other values are ignored. */
int env_pow2(const char *name, int lo, int hi, int fallback) {
  const char *v = getenv(name);
  if (!v) return fallback;
  const int n = atoi(v);
  return n >= lo && n <= hi && (n & (n - 1)) == 0 ? n : fallback;
}

template <typename T, int DPL>
recap_status launch_attention(const recap__op_call *call, const attention_params &p,
                              const recap__cuda_device_facts &dev, cudaStream_t stream) {
  const int64_t dh = p.q.shape[3], sk = p.k.shape[2];
  const int64_t rows = p.q.shape[0] * p.heads * p.q.shape[2];
  const int64_t chunks = RECAP_CEIL_DIV(dh, (int64_t)32 * DPL);
  /* Few query rows (decode) with many keys: more warps per block and four keys per warp step
   * keep more loads in flight. With many rows the GPU is full anyway, and one key per step
   * measured faster (fewer registers, no wasted work at the causal edge). */
  const bool decode = rows < kFewRows && sk >= 256;
  int warps = decode ? kMaxWarps : 4;
  /* Decode rows alone fill a fraction of the SMs: split each row's keys over a cluster of
   * blocks, enough for about four blocks per SM. */
  int64_t splits = 1;
  if (decode && dev.major >= 9) {
    splits = RECAP_CEIL_DIV((int64_t)4 * dev.sms, rows * chunks);
    const int64_t by_keys = RECAP_CEIL_DIV(sk, kMinKeysPerSplit);
    if (splits > by_keys) splits = by_keys;
    const int most = env_pow2("RECAP_ATTENTION_SPLITS", 1, kMaxSplits, kMaxSplits);
    if (splits > most) splits = most;
    /* Power-of-two cluster sizes only: every such size up to 8 is portable. */
    while (splits & (splits - 1)) splits &= splits - 1;
    /* Split blocks are many: fewer warps each let all of them be resident at once. */
    if (splits > 1) warps = env_pow2("RECAP_ATTENTION_SPLIT_WARPS", 4, kMaxWarps, kSplitWarps);
  }
  const size_t part = splits > 1 ? sizeof(float) * (2 + 32 * (size_t)DPL) : 0;
  const size_t smem = sizeof(float) * ((size_t)dh + 2 * warps + (size_t)warps * 32 * DPL) + part;
  /* 48 KiB is the default dynamic shared memory limit: Dh up to ~11000 fits. */
  if (smem > 48 * 1024 || rows > INT32_MAX)
    return RECAP_FAIL(RECAP_STATUS_NOT_SUPPORTED,
                      "op '%s': head dim %lld or %lld query rows exceed the CUDA kernel's limits",
                      call->def->name, (long long)dh, (long long)rows);
  const T *q = static_cast<const T *>(call->inputs[0].data);
  const T *k = static_cast<const T *>(call->inputs[1].data);
  const T *v = static_cast<const T *>(call->inputs[2].data);
  T *out = static_cast<T *>(call->outputs[0].data);
  if (splits > 1) {
    /* rows < kFewRows: the row index fits grid.y. */
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3((unsigned)splits, (unsigned)rows, (unsigned)chunks);
    config.blockDim = dim3((unsigned)warps * 32);
    config.dynamicSmemBytes = smem;
    config.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = (unsigned)splits;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    config.attrs = attr;
    config.numAttrs = 1;
    RECAP_CUDA_TRY(cudaLaunchKernelEx(&config, attention_kernel<T, DPL, 4, true>, q, k, v, out, p));
  } else {
    const dim3 grid((unsigned)rows, (unsigned)chunks);
    if (decode)
      RECAP_CUDA_TRY(recap__cuda_launch(attention_kernel<T, DPL, 4, false>, grid,
                                        dim3((unsigned)warps * 32), smem, stream, q, k, v, out, p));
    else
      RECAP_CUDA_TRY(recap__cuda_launch(attention_kernel<T, DPL, 1, false>, grid,
                                        dim3((unsigned)warps * 32), smem, stream, q, k, v, out, p));
    return RECAP_OK;
  }
  RECAP_CUDA_TRY(cudaGetLastError());
  return RECAP_OK;
}

bool aligned16(const void *ptr) {
  return ((uintptr_t)ptr & 15u) == 0;
}

/* The tensor-core kernel needs 16-bit elements, a head dim it was built for, query rows enough
 * to use its 64-row tiles, sequences whose positions fit its ints, 16-byte aligned input rows
 * (cp.async moves 16 bytes: pointers and strides in multiples of 8 elements), output rows it
 * can store in 4-byte pairs (pointer 4-byte aligned, even strides) and grid.y/z room. Anything
 * else takes attention_kernel, which reads and writes single elements at any strides. */
bool flash_fits(const recap_tensor *q, const recap_tensor *k, const recap_tensor *v,
                const recap_tensor *out, const recap__cuda_device_facts &dev) {
  if (dev.major < 8 || (q->dtype != RECAP_DTYPE_F16 && q->dtype != RECAP_DTYPE_BF16)) return false;
  const int64_t dh = q->shape[3];
  if ((dh != 64 && dh != 128) || q->shape[2] < 16 || q->shape[0] > 65535 || q->shape[1] > 65535)
    return false;
  if (q->shape[2] > kFlashMaxSeq || k->shape[2] > kFlashMaxSeq) return false;
  const recap_tensor *in[3] = {q, k, v};
  for (int t = 0; t < 3; ++t) {
    if (!aligned16(in[t]->data)) return false;
    for (int d = 0; d < 3; ++d)
      if (in[t]->strides[d] % 8 != 0) return false;
  }
  for (int d = 0; d < 3; ++d)
    if (out->strides[d] % 2 != 0) return false;
  return ((uintptr_t)out->data & 3u) == 0;
}

template <typename T, int DH>
recap_status launch_flash(const recap__op_call *call, const attention_params &p,
                          const recap__cuda_device_facts &dev, cudaStream_t stream) {
  const size_t smem = flash_smem_bytes<DH>(p.k.shape[2] > kFlashKeys ? 2 : 1);
  /* Over the default 48 KiB (Dh 128): the kernel must opt in, to its largest use (a captured
   * launch keeps its size); allowed during a capture. */
  constexpr size_t most = flash_smem_bytes<DH>(2);
  if (most > 48 * 1024)
    RECAP_CUDA_TRY(cudaFuncSetAttribute(flash_kernel<T, DH>,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, (int)most));
  const int64_t tiles = RECAP_CEIL_DIV(p.q.shape[2], (int64_t)kFlashRows);
  const recap_tensor *out = &call->outputs[0];
  attention_params pf = p;
  pf.o_vec16 = aligned16(out->data) && out->strides[0] % 8 == 0 && out->strides[1] % 8 == 0 &&
               out->strides[2] % 8 == 0;
  /* A causal grid of about one wave (a short sequence) runs every head's last query tile
   * first, then the ones before: blocks with the most keys then spread over the SMs instead
   * of pairing up on some of them as the (tiles, H, B) order does (measured at B8 H16 S128:
   * 6.7 us against 7.0). Otherwise a head's tiles stay together, where they meet its keys and
   * values in the L2; tiles of equal work gain nothing from the other order. */
  const int64_t blocks = tiles * p.heads * p.q.shape[0];
  pf.tiles_outer = p.causal && blocks <= (int64_t)4 * dev.sms;
  const int order = recap__env_bool("RECAP_ATTENTION_TILES_OUTER", -1);
  if (order >= 0) pf.tiles_outer = order == 1;
  if (pf.tiles_outer && tiles > 65535) pf.tiles_outer = false;
  const dim3 grid = pf.tiles_outer
                        ? dim3((unsigned)p.heads, (unsigned)p.q.shape[0], (unsigned)tiles)
                        : dim3((unsigned)tiles, (unsigned)p.heads, (unsigned)p.q.shape[0]);
  RECAP_CUDA_TRY(recap__cuda_launch(
      flash_kernel<T, DH>, grid, dim3(kFlashThreads), smem, stream,
      static_cast<const T *>(call->inputs[0].data), static_cast<const T *>(call->inputs[1].data),
      static_cast<const T *>(call->inputs[2].data), static_cast<T *>(out->data), pf));
  return RECAP_OK;
}

}  // namespace

extern "C" recap_status recap__cuda_kv_append(const recap__op_call *call, void *cuda_stream) {
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

extern "C" recap_status recap__cuda_attention(const recap__op_call *call, void *cuda_stream) {
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
  ok = ok && out->ndim == 4;
  for (int d = 0; ok && d < 4; ++d) ok = out->shape[d] == q->shape[d];
  ok = ok && (dh == 1 || out->strides[3] == 1);
  if (!ok)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "op '%s': needs q [B, H, Sq, Dh], k and v [B, Hkv, Sk, Dh] with H %% Hkv "
                      "== 0, last dims of stride 1, and an output shaped like q whose last dim "
                      "has stride 1",
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
  p.o = recap__cuda_view4_of(out);
  p.len = len ? static_cast<const int32_t *>(len->data) : nullptr;
  p.heads = heads;
  p.kv_group = heads / kv_heads;
  p.scale = call->attrs.scale != 0.0 ? (float)call->attrs.scale : (float)(1.0 / sqrt((double)dh));
  p.causal = call->attrs.causal != 0;
  p.o_vec16 = false;
  p.tiles_outer = false;
  cudaStream_t stream = static_cast<cudaStream_t>(cuda_stream);
  recap__cuda_device_facts dev;
  RECAP_TRY(recap__cuda_current_facts(&dev));
  const bool flash = flash_fits(q, k, v, out, dev);
  return recap__cuda_dispatch_float(q->dtype, name, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same<T, float>::value) {
      if (flash && dh == 64) return launch_flash<T, 64>(call, p, dev, stream);
      if (flash && dh == 128) return launch_flash<T, 128>(call, p, dev, stream);
    }
    if (dh <= 32) return launch_attention<T, 1>(call, p, dev, stream);
    if (dh <= 64) return launch_attention<T, 2>(call, p, dev, stream);
    if (dh <= 128) return launch_attention<T, 4>(call, p, dev, stream);
    return launch_attention<T, kMaxDpl>(call, p, dev, stream);
  });
}
