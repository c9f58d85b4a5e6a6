/*
 * paged.cu: the paged serving ops on CUDA (kernels/paged.c defines them; cuda_ops.h states
 * what each computes and what a kernel does with bad metadata: it traps).
 *
 * Every kernel reads the step metadata `seqs` itself when it runs. The grids depend on shapes
 * only, so one captured graph serves every step, whatever its sequences, lengths and block
 * tables. A kernel finds the row that owns its token by scanning the rows (Bs is small: a few
 * loads per row, from L2), validating each row it reads.
 *
 * paged_attention (flash-decoding). One CTA of 4 warps (8 in a small grid: launch_attention)
 * serves one token, one KV head and all the query heads of that KV head's group (up to 8;
 * kernels/paged.h), so each key and value row is loaded once per group. Its keys may be split over
 * `splits` CTAs (a count fixed at launch from the shapes: enough CTAs to fill the GPU when tokens x
 * KV heads alone do not, as in decode). A split's key range is cut when the kernel runs from the
 * token's real key count: ceil(keys / splits), at least the plan's min_keys_per_split
 * (kernels/paged.h), so a short context leaves the last splits empty rather than
 * spreading a few keys thin. Inside a CTA the warps take steps of keys in turn; a key's row of Dh
 * elements is read as 16-byte vectors by LP = Dh * sizeof(T) / 16 lanes (up to 32), so a warp reads
 * 32 / LP keys per load and U such loads per step, all issued before any is used. Scores are
 * reduced over the LP lanes by shuffles, the softmax is online in base 2 (q is scaled by scale *
 * log2 e once) with f32 state, then the lanes that read different keys and the warps are merged.
 * Unsplit, the CTA writes the output row; split, it writes its partial (max, sum, unnormalized row)
 * to the workspace and counts itself in (the call state: a u32 per token, KV head and chunk), and
 * the last split to arrive merges the partials into the rows and sets the count back to 0 for the
 * next launch. Only the splits that hold keys take part (a short context fills the first
 * few; one alone writes the rows directly); the rest return at once. A separate combine
 * kernel did the merge before: one launch more per layer, which at decode costs more than the
 * merge itself.
 *
 * Prefill takes the same kernel: one CTA per (token, KV head), every token of a prompt chunk
 * reading its own prefix. Consecutive tokens of a row are consecutive CTAs, so the keys they
 * share come from L2, but each is read once per token: prefill costs O(T^2) L2 traffic and
 * CUDA-core FLOPs where a tiled kernel costs O(T). A faster prefill needs tiles of consecutive
 * query tokens of one row per CTA with tensor-core mma (as attention.cu's flash_kernel), and a
 * (row, tile) work list built on the device from `seqs` by a small kernel into the workspace,
 * its grid sized for the worst case (ceil(T / tile) + Bs tiles) with idle CTAs returning.
 *
 * paged_rope_attention (a RoPE layer's paged_rope_kv_write and paged_attention in one op): a
 * decode-shaped step runs the attention kernel with ROPE, which rotates its q in registers, has
 * one CTA per (token, KV head) write the pools' new rows, and reads the keys the step itself adds
 * from the step's k and v instead of the pools it is writing (the kernel's own comment says how);
 * a prefill chunk, or a grid the fused kernel's registers would cost a wave
 * (launch_attention), runs the two kernels, the rotated q through the op's workspace.
 *
 * All kernels launch with programmatic dependent launch (recap__cuda_launch) and start with
 * recap__pdl_begin.
 */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include <type_traits>

#include "kernels/cuda_common.cuh"
#include "kernels/cuda_ops.h"
#include "kernels/paged.h"
#include "kernels/rope.h"
#include "runtime/cuda_check.h"

namespace {

/* Threads of the small metadata kernels (seq_positions, seq_last_tokens). */
constexpr int kScanThreads = 256;
/* The largest head dim of the attention kernel: a lane then holds 8 f32 per head. */
constexpr int kMaxHeadDim = 256;
constexpr double kLog2e = 1.4426950408889634;

/* ================================ metadata ================================================ */

/* Where the metadata is and what bounds its rows must keep (cuda_ops.h). */
struct seq_meta {
  const int32_t *data;
  int rows, width;
  int64_t tokens;   /* T; -1: the op has none */
  int64_t capacity; /* MB * BS; -1: the op has no pool */
};

struct seq_row {
  int len, start, count;
};

/* Row r's step fields. Traps on a row no valid step has: counts outside 0 <= Q_LEN <= LEN,
 * tokens before 0 or past T, more keys than the block table holds. */
__device__ __forceinline__ seq_row load_row(const seq_meta &m, int r) {
  const int32_t *row = m.data + (int64_t)r * m.width;
  const seq_row s = {row[RECAP_SEQ_LEN], row[RECAP_SEQ_Q_START], row[RECAP_SEQ_Q_LEN]};
  bool bad = s.count < 0 || s.count > s.len || (m.capacity >= 0 && s.len > m.capacity);
  if (s.count > 0)
    bad = bad || s.start < 0 || (m.tokens >= 0 && (int64_t)s.start + s.count > m.tokens);
  if (bad) __trap();
  return s;
}

__device__ __forceinline__ bool owns(const seq_row &s, int64_t token) {
  return s.count > 0 && token >= s.start && token - s.start < s.count;
}

/* The row owning `token`, or -1 (padding), found by the CTA's threads together; every thread
 * of the CTA must call it, and gets the answer. Rows that are not packed may both claim a
 * token: it then goes to one of them. */
__device__ int find_owner(const seq_meta &m, int64_t token, int *s_owner) {
  if (threadIdx.x == 0) *s_owner = -1;
  __syncthreads();
  for (int r = threadIdx.x; r < m.rows; r += blockDim.x)
    if (owns(load_row(m, r), token)) *s_owner = r;
  __syncthreads();
  return *s_owner;
}

/* Block-table column `col` of a row: a block id of the pool, else a trap. */
__device__ __forceinline__ int64_t block_at(const int32_t *table, int64_t col, int64_t blocks) {
  const int32_t id = table[col];
  if (id < 0 || id >= blocks) __trap();
  return id;
}

/* ================================ kernels ================================================= */

/* One thread per token; the CTA's threads load the rows a chunk at a time into shared memory,
 * each validating the row it loads, and each thread looks for its token among them. */
__global__ void __launch_bounds__(kScanThreads) seq_positions_kernel(seq_meta m, int32_t *out) {
  recap__pdl_begin();
  __shared__ int s_start[kScanThreads], s_count[kScanThreads], s_first[kScanThreads];
  const int64_t token = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  int32_t pos = 0;
  for (int r0 = 0; r0 < m.rows; r0 += kScanThreads) {
    if (r0 + (int)threadIdx.x < m.rows) {
      const seq_row s = load_row(m, r0 + threadIdx.x);
      s_start[threadIdx.x] = s.start;
      s_count[threadIdx.x] = s.count;
      s_first[threadIdx.x] = s.len - s.count;
    }
    __syncthreads();
    const int n = min(kScanThreads, m.rows - r0);
    for (int k = 0; k < n; ++k)
      if (s_count[k] > 0 && token >= s_start[k] && token - s_start[k] < s_count[k])
        pos = s_first[k] + (int32_t)(token - s_start[k]);
    __syncthreads();
  }
  if (token < m.tokens) out[token] = pos;
}

__global__ void __launch_bounds__(kScanThreads) seq_last_tokens_kernel(seq_meta m, int32_t *out) {
  recap__pdl_begin();
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= m.rows) return;
  const seq_row s = load_row(m, r);
  out[r] = s.count > 0 ? (int32_t)((int64_t)s.start + s.count - 1) : 0;
}

/* Element strides of a pool [NB, BS, Hkv, Dh] (the last is 1) and of new [T, Hkv, Dh]. */
struct pool_strides {
  int64_t block, row, head;
};
struct token_strides {
  int64_t token, head;
};

/* One CTA per token; its threads copy the token's Hkv rows of Dh in chunks of N elements (16
 * bytes when the rows are aligned). A token no row owns writes nothing. */
template <typename T, int N>
__global__ void paged_kv_write_kernel(T *__restrict__ cache, pool_strides cs, int64_t block_size,
                                      int64_t num_blocks, const T *__restrict__ rows,
                                      token_strides rs, int kv_heads, int head_dim, seq_meta m) {
  recap__pdl_begin();
  __shared__ int s_owner;
  const int64_t token = blockIdx.x;
  const int r = find_owner(m, token, &s_owner);
  if (r < 0) return;
  const seq_row s = load_row(m, r);
  const int64_t pos = (int64_t)s.len - s.count + (token - s.start);
  const int32_t *table = m.data + (int64_t)r * m.width + RECAP_SEQ_BLOCKS;
  /* pos < LEN <= MB * BS (load_row): the column is in the row. */
  const int64_t block = block_at(table, pos / block_size, num_blocks);
  T *dst = cache + block * cs.block + pos % block_size * cs.row;
  const T *src = rows + token * rs.token;
  const int per_head = head_dim / N;
  for (int c = threadIdx.x; c < kv_heads * per_head; c += blockDim.x) {
    const int h = c / per_head, d = (c - h * per_head) * N;
    *reinterpret_cast<recap__vec<T, N> *>(dst + h * cs.head + d) =
        *reinterpret_cast<const recap__vec<T, N> *>(src + h * rs.head + d);
  }
}

struct rope_kv_params {
  seq_meta meta;
  token_strides q, k, v;
  pool_strides kc, vc;
  int64_t block_size, num_blocks;
  int heads, kv_heads, head_dim;
  int q_units, k_units, v_units; /* see paged_rope_kv_write_kernel */
  /* Pair i's inv_freq (recap__rope_inv_freq), computed once at launch on the host: the
   * reference's own bits, and no double-precision pow in every CTA. */
  float inv_freq[kMaxHeadDim / 2];
};

/* grid (T, chunks): a token's work is cut into units, one per thread, over as many CTAs as it
 * takes. A q or k unit is N pairs of one head (elements i..i+N-1 and the same + Dh / 2, a
 * 16-byte vector each when aligned, else N = 1), a v unit N elements of one head's row. Units
 * [0, q_units) are q's, then k_units of k, then v_units of v.
 *
 * The step's latency is a chain (the metadata, then the position, then cos and sin, then the
 * rotation), so each thread loads its unit before it looks for the owning row, overlapping the
 * metadata's loads; the inv_freqs come with the parameters. The block-table load is issued before
 * cos and sin are computed. A CTA then computes the head_dim / 2 cos/sin pairs of the position once
 * into shared memory (every head uses the same ones), and its threads rotate q's pairs into q_out
 * and, for a token a row owns, k's into the K pool's row, and copy v's into the V pool's. A padding
 * token has position 0, where the rotation is a copy, and writes no pool. Dynamic shared memory:
 * head_dim floats. */
template <typename T, int N>
__global__ void paged_rope_kv_write_kernel(const T *__restrict__ q, const T *__restrict__ k,
                                           const T *__restrict__ v, T *__restrict__ q_out,
                                           T *__restrict__ kc, T *__restrict__ vc,
                                           rope_kv_params p) {
  recap__pdl_begin();
  extern __shared__ float s_cos_sin[]; /* cos of pairs 0..half-1, then their sin */
  __shared__ int s_owner;
  const int64_t token = blockIdx.x;
  const int half = p.head_dim / 2;
  int unit = blockIdx.y * blockDim.x + threadIdx.x;
  /* What this thread moves: `kind` 0 q, 1 k, 2 v, 3 nothing; head h, element i. */
  int kind = 3, h = 0, i = 0;
  using vec = recap__vec<T, N>;
  vec a, b; /* the unit's elements i.. (and i + Dh / 2.. for a pair) */
  if (unit < p.q_units + p.k_units) {
    kind = unit < p.q_units ? 0 : 1;
    if (kind == 1) unit -= p.q_units;
    h = unit / (half / N);
    i = (unit - h * (half / N)) * N;
    const token_strides &rows = kind == 0 ? p.q : p.k;
    const T *x = (kind == 0 ? q : k) + token * rows.token + h * rows.head + i;
    a = *reinterpret_cast<const vec *>(x);
    b = *reinterpret_cast<const vec *>(x + half);
  } else if ((unit -= p.q_units + p.k_units) < p.v_units) {
    kind = 2;
    h = unit / (p.head_dim / N);
    i = (unit - h * (p.head_dim / N)) * N;
    a = *reinterpret_cast<const vec *>(v + token * p.v.token + h * p.v.head + i);
  }
  const int r = find_owner(p.meta, token, &s_owner);
  int64_t pos = 0, block = 0;
  if (r >= 0) {
    const seq_row s = load_row(p.meta, r);
    pos = (int64_t)s.len - s.count + (token - s.start);
    /* pos < LEN <= MB * BS (load_row): the column is in the row. */
    if (kind == 1 || kind == 2)
      block = block_at(p.meta.data + (int64_t)r * p.meta.width + RECAP_SEQ_BLOCKS,
                       pos / p.block_size, p.num_blocks);
  }
  for (int j = threadIdx.x; j < half; j += blockDim.x)
    recap__rope_cos_sin_at(p.inv_freq[j], pos, &s_cos_sin[j], &s_cos_sin[half + j]);
  __syncthreads();
  if (kind == 3 || (kind > 0 && r < 0)) return;
  const int64_t row = pos % p.block_size;
  if (kind == 2) {
    *reinterpret_cast<vec *>(vc + block * p.vc.block + row * p.vc.row + h * p.vc.head + i) = a;
    return;
  }
#pragma unroll
  for (int j = 0; j < N; ++j) {
    float o1, o2;
    recap__rope_rotate(recap__to_float(a.v[j]), recap__to_float(b.v[j]), s_cos_sin[i + j],
                       s_cos_sin[half + i + j], &o1, &o2);
    a.v[j] = recap__from_float<T>(o1);
    b.v[j] = recap__from_float<T>(o2);
  }
  T *y = kind == 0 ? q_out + (token * p.heads + h) * p.head_dim + i
                   : kc + block * p.kc.block + row * p.kc.row + h * p.kc.head + i;
  *reinterpret_cast<vec *>(y) = a;
  *reinterpret_cast<vec *>(y + half) = b;
}

/* Sixteen bytes of T as floats. */
template <typename T>
__device__ __forceinline__ void unpack16(const uint4 &u, float *f) {
  if constexpr (std::is_same<T, float>::value) {
    f[0] = __uint_as_float(u.x);
    f[1] = __uint_as_float(u.y);
    f[2] = __uint_as_float(u.z);
    f[3] = __uint_as_float(u.w);
  } else {
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float2 x;
      if constexpr (std::is_same<T, __half>::value)
        x = __half22float2(*reinterpret_cast<const __half2 *>(&w[i]));
      else
        x = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&w[i]));
      f[2 * i] = x.x;
      f[2 * i + 1] = x.y;
    }
  }
}

struct attention_params {
  seq_meta meta;
  token_strides q, o;
  pool_strides k, v;
  int64_t num_blocks;
  recap__fast_div block_size;
  int heads, kv_group, head_chunks, head_dim, splits, min_keys_per_split;
  float scale_log2; /* the score scale times log2(e): the softmax runs in base 2 */
  /* Split calls: the workspace, (max, sum) of every (token, head, split), then their rows;
   * and the call state, the splits arrived so far per (token, KV head, chunk). */
  float *part;
  unsigned *arrivals;
};

/* The merge's view of the workspace: (max, sum) pairs first, then the rows. */
__device__ __forceinline__ float *part_rows(const attention_params &p, int64_t tokens) {
  return p.part + tokens * p.heads * p.splits * 2;
}

/* paged_rope_attention's one kernel: what it reads besides paged_attention's inputs (q is then
 * the unrotated q). The step's own K and V rows (k, v [T, Hkv, Dh]), the pools it writes them
 * to (the same memory the kernel reads older keys from as kc, vc), the angles' constants. */
template <typename T>
struct step_rows {
  const T *k, *v;
  token_strides ks, vs;
  T *k_pool, *v_pool;
  /* Pair i's inv_freq (recap__rope_inv_freq), computed once at launch on the host: the
   * reference's own bits, and no double-precision pow on the kernel's path. */
  float inv_freq[kMaxHeadDim / 2];
};

/* What the plain kernel takes in step_rows' place: nothing, so that its launches carry no
 * more parameter bytes than before the fused kernel existed. */
struct no_step_rows {};
template <typename T, bool ROPE>
using step_rows_of = typename std::conditional<ROPE, step_rows<T>, no_step_rows>::type;

/* A head's 16-byte vector x of elements d0.. rotated at one position (rotate-half), rounded
 * to T as paged_rope_kv_write stores it: `pair` holds their partners (d0 + Dh/2.. for the
 * first half, d0 - Dh/2.. for the second), and their pairs' cos and sin are c[0..E), s[0..E). */
template <typename T>
__device__ __forceinline__ uint4 rope_vector(uint4 x, uint4 pair, bool first_half, const float *c,
                                             const float *s) {
  constexpr int E = 16 / sizeof(T);
  using vec = recap__vec<T, E>;
  const vec a = *reinterpret_cast<const vec *>(&x), b = *reinterpret_cast<const vec *>(&pair);
  vec o;
#pragma unroll
  for (int e = 0; e < E; ++e) {
    float o1, o2;
    const float xe = recap__to_float(a.v[e]), pe = recap__to_float(b.v[e]);
    if (first_half) {
      recap__rope_rotate(xe, pe, c[e], s[e], &o1, &o2);
      o.v[e] = recap__from_float<T>(o1);
    } else {
      recap__rope_rotate(pe, xe, c[e], s[e], &o1, &o2);
      o.v[e] = recap__from_float<T>(o2);
    }
  }
  return *reinterpret_cast<const uint4 *>(&o);
}

/* The vector index of vector vi's partners, with `half_vecs` vectors in half a head. */
__device__ __forceinline__ int pair_vector(int vi, int half_vecs) {
  return vi < half_vecs ? vi + half_vecs : vi - half_vecs;
}

/* One warp step over U keys per lane: K and V vectors loaded (kr, vr; a lane's NV vectors of
 * its key), invalid keys weighed 0. Scores over the LP lanes of a key by shuffles, then the
 * online softmax in base 2 (qf is pre-scaled) into the lane's state m, l, acc. */
template <typename T, int U, int GC, int NV, int E, int LP>
__device__ __forceinline__ void attend_step(const uint4 (&kr)[U][NV], const uint4 (&vr)[U][NV],
                                            const bool (&valid)[U], const float (&qf)[GC][NV][E],
                                            float (&m)[GC], float (&l)[GC],
                                            float (&acc)[GC][NV][E]) {
  float score[U][GC];
#pragma unroll
  for (int u = 0; u < U; ++u) {
#pragma unroll
    for (int g = 0; g < GC; ++g) score[u][g] = 0.0f;
#pragma unroll
    for (int n = 0; n < NV; ++n) {
      float kf[E];
      unpack16<T>(kr[u][n], kf);
#pragma unroll
      for (int g = 0; g < GC; ++g)
#pragma unroll
        for (int e = 0; e < E; ++e) score[u][g] += qf[g][n][e] * kf[e];
    }
#pragma unroll
    for (int g = 0; g < GC; ++g) {
#pragma unroll
      for (int o = LP / 2; o > 0; o >>= 1)
        score[u][g] += __shfl_xor_sync(0xffffffffu, score[u][g], o);
      if (!valid[u]) score[u][g] = -INFINITY;
    }
  }
#pragma unroll
  for (int g = 0; g < GC; ++g) {
    float top = m[g];
#pragma unroll
    for (int u = 0; u < U; ++u) top = fmaxf(top, score[u][g]);
    /* Nothing seen yet (top == -inf): weights must come out 0, not NaN. */
    const float ref = top == -INFINITY ? 0.0f : top;
    const float alpha = exp2f(m[g] - ref);
    l[g] *= alpha;
#pragma unroll
    for (int n = 0; n < NV; ++n)
#pragma unroll
      for (int e = 0; e < E; ++e) acc[g][n][e] *= alpha;
    m[g] = top;
  }
#pragma unroll
  for (int u = 0; u < U; ++u)
#pragma unroll
    for (int n = 0; n < NV; ++n) {
      float vf[E];
      unpack16<T>(vr[u][n], vf);
#pragma unroll
      for (int g = 0; g < GC; ++g) {
        const float w = exp2f(score[u][g] - (m[g] == -INFINITY ? 0.0f : m[g]));
        if (n == 0) l[g] += w;
#pragma unroll
        for (int e = 0; e < E; ++e) acc[g][n][e] += w * vf[e];
      }
    }
}

/* grid (T * head_chunks, Hkv, splits), kWarps * 32 threads. GC: query heads per CTA (a power of
 * two; heads past the group are computed on zeros and never written). DH: the largest head dim
 * the lanes' registers hold (p.head_dim <= DH, a multiple of 16 bytes).
 *
 * ROPE (paged_rope_attention, decode-shaped steps): q is unrotated; each CTA rotates its heads'
 * rows in registers at its token's position, the CTA of split 0 and chunk 0 writes the token's
 * rotated K row and its V row to the pools, and the keys at positions the step itself adds
 * (LEN - Q_LEN and later) are read from the step's k and v rows and rotated here, never from
 * the pools, which other CTAs of this launch are writing. Half a head must fill whole 16-byte
 * vectors (the launcher checks). */
template <typename T, int DH, int GC, int kWarps, bool ROPE>
__global__ void __launch_bounds__(kWarps * 32)
    paged_attention_kernel(const T *__restrict__ q, const T *__restrict__ kc,
                           const T *__restrict__ vc, T *__restrict__ out, attention_params p,
                           step_rows_of<T, ROPE> sr) {
  constexpr int E = 16 / sizeof(T);         /* elements per 16-byte vector */
  constexpr int VECS = DH / E;              /* vectors in a row of DH */
  constexpr int LP = VECS < 32 ? VECS : 32; /* lanes reading one key */
  constexpr int NV = VECS / LP;             /* vectors per lane */
  constexpr int KW = 32 / LP;               /* keys per warp load */
  /* Key loads per lane per step: about four vectors of K (and of V) in flight, two when eight
   * query heads already fill the registers. */
  constexpr int kLoads = GC >= 8 ? 2 : 4;
  constexpr int U = kLoads / NV > 0 ? kLoads / NV : 1;
  constexpr int kStep = KW * U; /* keys per warp step */
  static_assert(VECS % LP == 0 && 32 % LP == 0, "head dims of whole power-of-two lanes");

  recap__pdl_begin();
  __shared__ int s_owner;
  __shared__ float s_m[kWarps][GC], s_l[kWarps][GC];
  __shared__ float s_acc[kWarps][GC][DH];
  /* The merge's weight of each split per query head, and 1 / the heads' sums. */
  __shared__ float s_w[GC][RECAP__PAGED_MAX_SPLITS], s_inv[GC];
  __shared__ bool s_last;
  /* ROPE: cos and sin of the pairs at the token's position. */
  __shared__ float s_rope[ROPE ? DH : 1];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t token = blockIdx.x / p.head_chunks;
  const int chunk = blockIdx.x % p.head_chunks, kv_head = blockIdx.y, split = blockIdx.z;
  const int head0 = kv_head * p.kv_group + chunk * GC;
  const int heads_here = min(GC, p.kv_group - chunk * GC);
  const int key_lane = lane / LP, vec_lane = lane % LP, vecs = p.head_dim / E;
  const int half = p.head_dim / 2, half_vecs = vecs / 2;
  float *s_cos = s_rope, *s_sin = s_rope + DH / 2;

  /* The lane's vectors of each query row (lanes past the head dim hold zeros), and with ROPE
   * their partners and the token's own K and V vectors: loaded before the owner is found,
   * which they do not depend on, so the round trips to memory overlap. */
  uint4 qv[GC][NV], qpair[GC][NV], own_k[NV], own_kpair[NV], own_v[NV];
  /* Without ROPE, pre-scaled and element by element (paged_attention takes a q of any 16-byte
   * alignment). */
  float qf[GC][NV][E];
#pragma unroll
  for (int g = 0; g < GC; ++g)
#pragma unroll
    for (int n = 0; n < NV; ++n) {
      const int vi = vec_lane + n * LP;
      const bool in = g < heads_here && vi < vecs;
      const T *qr = q + token * p.q.token + (int64_t)(head0 + g) * p.q.head;
      if constexpr (ROPE) {
        qv[g][n] =
            in ? __ldg(reinterpret_cast<const uint4 *>(qr + vi * E)) : make_uint4(0, 0, 0, 0);
        qpair[g][n] =
            in ? __ldg(reinterpret_cast<const uint4 *>(qr + pair_vector(vi, half_vecs) * E))
               : make_uint4(0, 0, 0, 0);
      } else {
#pragma unroll
        for (int e = 0; e < E; ++e)
          qf[g][n][e] = in ? recap__to_float(qr[vi * E + e]) * p.scale_log2 : 0.0f;
      }
    }
  if constexpr (ROPE) {
    const T *kr = sr.k + token * sr.ks.token + (int64_t)kv_head * sr.ks.head;
    const T *vr = sr.v + token * sr.vs.token + (int64_t)kv_head * sr.vs.head;
#pragma unroll
    for (int n = 0; n < NV; ++n) {
      const int vi = vec_lane + n * LP;
      const bool in = vi < vecs;
      own_k[n] = in ? __ldg(reinterpret_cast<const uint4 *>(kr + vi * E)) : make_uint4(0, 0, 0, 0);
      own_kpair[n] =
          in ? __ldg(reinterpret_cast<const uint4 *>(kr + pair_vector(vi, half_vecs) * E))
             : make_uint4(0, 0, 0, 0);
      own_v[n] = in ? __ldg(reinterpret_cast<const uint4 *>(vr + vi * E)) : make_uint4(0, 0, 0, 0);
    }
  }

  /* This split's key positions [kbeg, kend) of the owning sequence (none for padding), and
   * how many of the token's splits hold keys: a short context fills only the first few. With
   * ROPE, keys from `fresh` on are the step's own. */
  const int r = find_owner(p.meta, token, &s_owner);
  int64_t kbeg = 0, kend = 0, pos = 0, fresh = 0;
  int active = 0;
  const int32_t *table = nullptr;
  if (r >= 0) {
    const seq_row s = load_row(p.meta, r);
    fresh = (int64_t)s.len - s.count;
    pos = fresh + (token - s.start);
    const int64_t visible = pos + 1;
    int64_t per = visible;
    if (p.splits > 1) {
      per = (visible + p.splits - 1) / p.splits;
      if (per < p.min_keys_per_split) per = p.min_keys_per_split;
    }
    kbeg = min((int64_t)split * per, visible);
    kend = min(kbeg + per, visible);
    active = visible > 0 ? (int)((visible + per - 1) / per) : 0;
    table = p.meta.data + (int64_t)r * p.meta.width + RECAP_SEQ_BLOCKS;
  }
  /* One split with keys (or none: padding, whose row is zeros) writes the rows itself, as an
   * unsplit call does; the splits past the keys have nothing to do. */
  const bool direct = active <= 1;
  if (split > 0 && split >= active) return;

  if constexpr (ROPE) {
    /* cos and sin at the token's position (0 for padding: a copy), then q rotated and rounded
     * to T as paged_rope_kv_write stores it, then scaled. */
    for (int j = threadIdx.x; j < half; j += kWarps * 32)
      recap__rope_cos_sin_at(sr.inv_freq[j], pos, &s_cos[j], &s_sin[j]);
    __syncthreads();
#pragma unroll
    for (int g = 0; g < GC; ++g)
#pragma unroll
      for (int n = 0; n < NV; ++n) {
        const int d0 = (vec_lane + n * LP) * E, i0 = d0 < half ? d0 : d0 - half;
        qv[g][n] = rope_vector<T>(qv[g][n], qpair[g][n], d0 < half, s_cos + i0, s_sin + i0);
      }
#pragma unroll
    for (int n = 0; n < NV; ++n) {
      const int d0 = (vec_lane + n * LP) * E, i0 = d0 < half ? d0 : d0 - half;
      own_k[n] = rope_vector<T>(own_k[n], own_kpair[n], d0 < half, s_cos + i0, s_sin + i0);
    }
    /* The token's K and V rows into the pools, once per (token, KV head). */
    if (r >= 0 && split == 0 && chunk == 0 && warp == 0 && key_lane == 0) {
      const uint32_t col = recap__fast_div_q(p.block_size, (uint32_t)pos);
      const int64_t row = pos - (int64_t)col * p.block_size.d;
      const int64_t block = block_at(table, col, p.num_blocks);
#pragma unroll
      for (int n = 0; n < NV; ++n) {
        const int vi = vec_lane + n * LP;
        if (vi >= vecs) continue;
        *reinterpret_cast<uint4 *>(sr.k_pool + block * p.k.block + row * p.k.row +
                                   kv_head * p.k.head + vi * E) = own_k[n];
        *reinterpret_cast<uint4 *>(sr.v_pool + block * p.v.block + row * p.v.row +
                                   kv_head * p.v.head + vi * E) = own_v[n];
      }
    }
#pragma unroll
    for (int g = 0; g < GC; ++g)
#pragma unroll
      for (int n = 0; n < NV; ++n) {
        float f[E];
        unpack16<T>(qv[g][n], f);
#pragma unroll
        for (int e = 0; e < E; ++e) qf[g][n][e] = f[e] * p.scale_log2;
      }
  }

  float m[GC], l[GC], acc[GC][NV][E];
#pragma unroll
  for (int g = 0; g < GC; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.0f;
#pragma unroll
    for (int n = 0; n < NV; ++n)
#pragma unroll
      for (int e = 0; e < E; ++e) acc[g][n][e] = 0.0f;
  }

  const int64_t cached_end = ROPE ? min(kend, fresh) : kend;
  for (int64_t base = kbeg + (int64_t)warp * kStep; base < cached_end;
       base += (int64_t)kWarps * kStep) {
    /* Every block id first, then every K and V vector of the step, then the math: the loads of
     * a step are in flight together. A lane past the end reads the step's first key (valid)
     * and weighs it 0. */
    int64_t koff[U], voff[U];
    bool valid[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      int64_t j = base + u * KW + key_lane;
      valid[u] = j < cached_end;
      if (!valid[u]) j = base;
      const uint32_t col = recap__fast_div_q(p.block_size, (uint32_t)j);
      const int64_t row = j - (int64_t)col * p.block_size.d;
      const int64_t block = block_at(table, col, p.num_blocks);
      koff[u] = block * p.k.block + row * p.k.row + kv_head * p.k.head;
      voff[u] = block * p.v.block + row * p.v.row + kv_head * p.v.head;
    }
    uint4 kr[U][NV], vr[U][NV];
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int n = 0; n < NV; ++n) {
        const int vi = vec_lane + n * LP;
        kr[u][n] = vi < vecs ? __ldg(reinterpret_cast<const uint4 *>(kc + koff[u] + vi * E))
                             : make_uint4(0, 0, 0, 0);
        vr[u][n] = vi < vecs ? __ldg(reinterpret_cast<const uint4 *>(vc + voff[u] + vi * E))
                             : make_uint4(0, 0, 0, 0);
      }
    attend_step<T, U, GC, NV, E, LP>(kr, vr, valid, qf, m, l, acc);
  }
  if constexpr (ROPE) {
    /* The step's own keys in this split: the token's own from registers, another token's of
     * the sequence (several tokens of one row in the step) read from k and v and rotated at
     * its position. */
    for (int64_t base = max(kbeg, fresh) + (int64_t)warp * KW; base < kend;
         base += (int64_t)kWarps * KW) {
      int64_t j = base + key_lane;
      bool valid[1] = {j < kend};
      if (!valid[0]) j = base;
      uint4 kr[1][NV], vr[1][NV];
      if (j == pos) {
#pragma unroll
        for (int n = 0; n < NV; ++n) {
          kr[0][n] = own_k[n];
          vr[0][n] = own_v[n];
        }
      } else {
        const int64_t other = token + (j - pos);
        const T *krow = sr.k + other * sr.ks.token + (int64_t)kv_head * sr.ks.head;
        const T *vrow = sr.v + other * sr.vs.token + (int64_t)kv_head * sr.vs.head;
#pragma unroll
        for (int n = 0; n < NV; ++n) {
          const int vi = vec_lane + n * LP;
          if (vi >= vecs) {
            kr[0][n] = vr[0][n] = make_uint4(0, 0, 0, 0);
            continue;
          }
          const int d0 = vi * E, i0 = d0 < half ? d0 : d0 - half;
          float c[E], sn[E];
#pragma unroll
          for (int e = 0; e < E; ++e) recap__rope_cos_sin_at(sr.inv_freq[i0 + e], j, &c[e], &sn[e]);
          kr[0][n] = rope_vector<T>(
              __ldg(reinterpret_cast<const uint4 *>(krow + d0)),
              __ldg(reinterpret_cast<const uint4 *>(krow + pair_vector(vi, half_vecs) * E)),
              d0 < half, c, sn);
          vr[0][n] = __ldg(reinterpret_cast<const uint4 *>(vrow + d0));
        }
      }
      attend_step<T, 1, GC, NV, E, LP>(kr, vr, valid, qf, m, l, acc);
    }
  }

  /* Merge the lanes that read different keys (same vectors, other key_lane) ... */
#pragma unroll
  for (int o = LP; o < 32; o <<= 1)
#pragma unroll
    for (int g = 0; g < GC; ++g) {
      const float m_o = __shfl_xor_sync(0xffffffffu, m[g], o);
      const float l_o = __shfl_xor_sync(0xffffffffu, l[g], o);
      const float top = fmaxf(m[g], m_o), ref = top == -INFINITY ? 0.0f : top;
      const float a = exp2f(m[g] - ref), b = exp2f(m_o - ref);
      l[g] = l[g] * a + l_o * b;
#pragma unroll
      for (int n = 0; n < NV; ++n)
#pragma unroll
        for (int e = 0; e < E; ++e)
          acc[g][n][e] = acc[g][n][e] * a + __shfl_xor_sync(0xffffffffu, acc[g][n][e], o) * b;
      m[g] = top;
    }
  /* ... then the warps, through shared memory. */
  if (lane == 0)
#pragma unroll
    for (int g = 0; g < GC; ++g) {
      s_m[warp][g] = m[g];
      s_l[warp][g] = l[g];
    }
  if (key_lane == 0)
#pragma unroll
    for (int g = 0; g < GC; ++g)
#pragma unroll
      for (int n = 0; n < NV; ++n)
#pragma unroll
        for (int e = 0; e < E; ++e) s_acc[warp][g][(vec_lane + n * LP) * E + e] = acc[g][n][e];
  __syncthreads();

  for (int c = threadIdx.x; c < heads_here * p.head_dim; c += kWarps * 32) {
    const int g = c / p.head_dim, d = c - g * p.head_dim;
    float top = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) top = fmaxf(top, s_m[w][g]);
    const float ref = top == -INFINITY ? 0.0f : top;
    float sum = 0.0f, o = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float a = exp2f(s_m[w][g] - ref);
      sum += s_l[w][g] * a;
      o += s_acc[w][g][d] * a;
    }
    const int64_t h = head0 + g;
    if (direct) {
      /* No key (padding) leaves sum == 0: the row is zeros. */
      out[token * p.o.token + h * p.o.head + d] = recap__from_float<T>(sum > 0.0f ? o / sum : 0.0f);
      continue;
    }
    const int64_t state = (token * p.heads + h) * p.splits + split;
    if (d == 0) {
      p.part[2 * state] = top;
      p.part[2 * state + 1] = sum;
    }
    part_rows(p, p.meta.tokens)[state * p.head_dim + d] = o;
  }
  if (direct) return;

  /* Count this split in once its partial is visible GPU-wide (each thread fences its own
   * writes); the one that finds every other split with keys already counted merges. */
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned *count = p.arrivals + (token * gridDim.y + kv_head) * p.head_chunks + chunk;
    s_last = atomicAdd(count, 1u) == (unsigned)active - 1;
    if (s_last) *count = 0; /* every split has arrived: zero for the next launch */
  }
  __syncthreads();
  if (!s_last) return;
  __threadfence();
  /* Per query head (a warp each): the splits' weights exp2(max_s - max) and the sum. The
   * other splits' partials are read from L2 (__ldcg), where their fences put them, each lane's
   * (max, sum) pairs (splits lane and lane + 32) in one round trip. */
  static_assert(RECAP__PAGED_MAX_SPLITS <= 64, "a lane holds the pairs of two splits");
  for (int g = warp; g < heads_here; g += kWarps) {
    const float *ml = p.part + 2 * (token * p.heads + head0 + g) * p.splits;
    float2 pair[2];
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int sp = lane + 32 * i;
      pair[i] = sp < active ? __ldcg(reinterpret_cast<const float2 *>(ml + 2 * sp))
                            : make_float2(-INFINITY, 0.0f);
    }
    const float top = recap__warp_max(fmaxf(pair[0].x, pair[1].x));
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int sp = lane + 32 * i;
      if (sp >= active) break;
      const float w = pair[i].x == -INFINITY ? 0.0f : exp2f(pair[i].x - top);
      s_w[g][sp] = w;
      if (w > 0.0f) sum += w * pair[i].y;
    }
    sum = recap__warp_sum(sum);
    /* No visible key in any split (padding) leaves sum == 0: the row is zeros. */
    if (lane == 0) s_inv[g] = sum > 0.0f ? 1.0f / sum : 0.0f;
  }
  __syncthreads();
  /* The output rows: each thread sums up to kMergeElems elements over the splits, kMergeSplits
   * splits at a time, every load of a batch issued before any is used, so a batch costs one
   * round trip to L2 (a loop of one dependent load per split took one each: 8 splits of 7
   * heads' rows cost Qwen2 0.5B's attention about 5 us). Splits of weight 0 are skipped and
   * the sum runs in split order, as it always did. */
  constexpr int kThreads = kWarps * 32;
  constexpr int kMergeSplits = 8;
  constexpr int kMergeElems = GC * DH > kThreads ? 2 : 1;
  const float *rows = part_rows(p, p.meta.tokens);
  const int elems = heads_here * p.head_dim;
  for (int c0 = threadIdx.x; c0 < elems; c0 += kMergeElems * kThreads) {
    int g[kMergeElems];
    int64_t at[kMergeElems]; /* element (g, d)'s offset in split 0's row */
    float o[kMergeElems];
#pragma unroll
    for (int e = 0; e < kMergeElems; ++e) {
      const int c = c0 + e * kThreads;
      g[e] = c < elems ? c / p.head_dim : 0;
      const int d = c < elems ? c - g[e] * p.head_dim : 0;
      at[e] = (token * p.heads + head0 + g[e]) * p.splits * p.head_dim + d;
      o[e] = 0.0f;
    }
    for (int sp0 = 0; sp0 < active; sp0 += kMergeSplits) {
      float r[kMergeElems][kMergeSplits];
#pragma unroll
      for (int e = 0; e < kMergeElems; ++e)
#pragma unroll
        for (int j = 0; j < kMergeSplits; ++j)
          r[e][j] = c0 + e * kThreads < elems && sp0 + j < active
                        ? __ldcg(rows + at[e] + (int64_t)(sp0 + j) * p.head_dim)
                        : 0.0f;
#pragma unroll
      for (int e = 0; e < kMergeElems; ++e)
#pragma unroll
        for (int j = 0; j < kMergeSplits; ++j) {
          const float w = sp0 + j < active ? s_w[g[e]][sp0 + j] : 0.0f;
          if (w > 0.0f) o[e] += w * r[e][j];
        }
    }
#pragma unroll
    for (int e = 0; e < kMergeElems; ++e) {
      const int c = c0 + e * kThreads;
      if (c >= elems) continue;
      const int d = c - g[e] * p.head_dim;
      out[token * p.o.token + (head0 + g[e]) * p.o.head + d] =
          recap__from_float<T>(o[e] * s_inv[g[e]]);
    }
  }
}

/* ================================ launchers =============================================== */

/* The metadata tensor's view; INVALID_ARGUMENT for what infer would have refused, so a
 * hand-built call cannot reach a kernel with a shape it indexes wrongly. */
recap_status meta_of(const recap__op_call *call, int index, int64_t tokens, int64_t capacity,
                     seq_meta *m) {
  const recap_tensor *seqs = &call->inputs[index];
  if (seqs->dtype != RECAP_DTYPE_I32 || seqs->ndim != 2 || seqs->shape[1] <= RECAP_SEQ_BLOCKS ||
      !recap__tensor_is_contiguous(seqs) || seqs->shape[0] > INT32_MAX ||
      seqs->shape[1] > INT32_MAX || !seqs->data)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "op '%s': seqs must be a contiguous i32 [Bs, W] in device memory with W > "
                      "%d",
                      call->def->name, RECAP_SEQ_BLOCKS);
  m->data = static_cast<const int32_t *>(seqs->data);
  m->rows = (int)seqs->shape[0];
  m->width = (int)seqs->shape[1];
  m->tokens = tokens;
  m->capacity = capacity;
  return RECAP_OK;
}

bool aligned16(const void *ptr) {
  return ((uintptr_t)ptr & 15u) == 0;
}

/* Whether a pool's rows can be read in 16-byte vectors of `elems` elements. */
bool pool_vectorizable(const recap_tensor *t, int64_t elems) {
  return aligned16(t->data) && t->shape[3] % elems == 0 && t->strides[0] % elems == 0 &&
         t->strides[1] % elems == 0 && t->strides[2] % elems == 0;
}

/* CTAs of one attention kernel an SM holds at once (its registers and shared memory decide),
 * asked once per kernel; 0 if the runtime cannot say. */
template <typename T, int DH, int GC, int W, bool ROPE>
int resident_per_sm() {
  static const int per_sm = [] {
    int n = 0;
    return cudaOccupancyMaxActiveBlocksPerMultiprocessor(
               &n, paged_attention_kernel<T, DH, GC, W, ROPE>, W * 32, 0) == cudaSuccess
               ? n
               : 0;
  }();
  return per_sm;
}

/* CTAs one wave of `per_sm` resident CTAs on every SM of the current device holds (0 if the
 * runtime cannot say). */
int64_t wave_of(int per_sm) {
  int device = 0, sms = 0;
  if (per_sm <= 0 || cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess)
    return 0;
  return (int64_t)per_sm * sms;
}

/* Launches the attention kernel for an attention-shaped call (paged_attention's, or
 * paged_rope_attention's attention part with ROPE, whose q is then the unrotated one, and sr
 * the step's rows; without ROPE sr is empty and declined may be NULL). With
 * ROPE it launches nothing and sets *declined where the fused kernel, which holds more
 * registers than the plain one (q's rotation, the step's own key: 128 against 96 at two heads
 * per CTA), fits fewer CTAs on an SM and the grid is more than one wave of it: there the CTAs
 * with keys can outnumber a wave of the fused kernel and not of the plain one, and the two
 * kernels cost less. Measured on an H200 (context 512, the fused kernel everywhere against the
 * two kernels): at batch 8 with the plan's splits, a grid of 1024 CTAs, Llama 3.2 1B +3.9%, 3B
 * +4.3% and 8B +2.6% a step; at batch 1, grids of at most 256 CTAs, every shape 0.7-2.2%
 * faster (batch 8 now runs 512 CTAs, the one-wave splits below, and the fused kernel). The
 * grid's splits past a short context return at once, but their count is not known at launch. */
template <typename T, int DH, int GC, bool ROPE>
recap_status launch_attention(const recap__op_call *call, const T *q, const attention_params &p,
                              const recap__paged_attention_grid &g, const step_rows_of<T, ROPE> &sr,
                              cudaStream_t stream, bool *declined) {
  const int64_t tokens = call->inputs[0].shape[0];
  const T *kc = static_cast<const T *>(call->inputs[1].data);
  const T *vc = static_cast<const T *>(call->inputs[2].data);
  T *out = static_cast<T *>(call->outputs[0].data);
  const dim3 grid((unsigned)(tokens * g.head_chunks), (unsigned)call->inputs[1].shape[2],
                  (unsigned)g.splits);
  /* Warps per CTA: 8 in a grid of few (token, KV head, chunk) groups (decode at batch 1 or 2),
   * whose splits then span 64 keys (kernels/paged.h): a warp step of 8 keys covers a split in one
   * pass of 8 warps, where 4 warps took two passes, each a chain of dependent loads (block id,
   * then K and V). Measured on two H200s against 4 warps, two interleaved rounds: the Llama 3.2
   * 1B shape's batch-1 step over 512 keys 1.2898-1.2907 against 1.3223-1.3261 ms, the 8B
   * shape's TPOT 5.193 against 5.248 ms (TP 1) and 3.226 against 3.290 (TP 2); at batch 8 (64
   * groups, 128-key splits) 8 warps were 8.5% slower, so larger grids keep 4. Head dims above
   * 128 keep 4: the eight warps' accumulators would not fit the 48 KB of static shared memory. */
  const auto launch = [&](auto warps) -> recap_status {
    constexpr int W = decltype(warps)::value;
    /* At decode, in a grid of more than FEW_GROUPS groups, fewer splits where they fill about
     * one wave (RECAP__PAGED_ONE_WAVE_CTAS, kernels/paged.h) and the grid then fits in one wave
     * of the kernel that runs; the plan's workspace, sized for its own count, holds the fewer
     * splits' partials too. Prefill chunks and batches 1-2 keep the plan's (not measured). */
    attention_params run = p;
    dim3 cut = grid;
    const int64_t groups = (int64_t)grid.x * grid.y;
    const bool decode = call->inputs[0].shape[0] <= call->inputs[3].shape[0];
    const int64_t fewer = (RECAP__PAGED_ONE_WAVE_CTAS + groups - 1) / groups;
    const int plain_per_sm = resident_per_sm<T, DH, GC, W, false>();
    const int runs_per_sm = ROPE ? resident_per_sm<T, DH, GC, W, true>() : plain_per_sm;
    if (decode && groups > RECAP__PAGED_FEW_GROUPS && fewer < g.splits &&
        groups * fewer <= wave_of(runs_per_sm)) {
      run.splits = (int)fewer;
      cut.z = (unsigned)fewer;
    }
    if constexpr (ROPE) {
      if (runs_per_sm < plain_per_sm && (int64_t)cut.x * cut.y * cut.z > wave_of(runs_per_sm)) {
        *declined = true;
        return RECAP_OK;
      }
    }
    RECAP_CUDA_TRY(recap__cuda_launch(paged_attention_kernel<T, DH, GC, W, ROPE>, cut, dim3(W * 32),
                                      0, stream, q, kc, vc, out, run, sr));
    return RECAP_OK;
  };
  if constexpr (DH <= 128) {
    if ((int64_t)grid.x * grid.y <= RECAP__PAGED_FEW_GROUPS)
      return launch(std::integral_constant<int, 8>());
  }
  return launch(std::integral_constant<int, 4>());
}

template <typename T, bool ROPE>
recap_status launch_attention_sized(const recap__op_call *call, const T *q,
                                    const attention_params &p, const recap__paged_attention_grid &g,
                                    const step_rows_of<T, ROPE> &sr, cudaStream_t stream,
                                    bool *declined) {
  const auto by_group = [&](auto dh) {
    constexpr int DH = decltype(dh)::value;
    switch (g.heads_per_cta) {
      case 1:
        return launch_attention<T, DH, 1, ROPE>(call, q, p, g, sr, stream, declined);
      case 2:
        return launch_attention<T, DH, 2, ROPE>(call, q, p, g, sr, stream, declined);
      case 4:
        return launch_attention<T, DH, 4, ROPE>(call, q, p, g, sr, stream, declined);
      default:
        return launch_attention<T, DH, 8, ROPE>(call, q, p, g, sr, stream, declined);
    }
  };
  if (p.head_dim <= 64) return by_group(std::integral_constant<int, 64>());
  if (p.head_dim <= 128) return by_group(std::integral_constant<int, 128>());
  return by_group(std::integral_constant<int, kMaxHeadDim>());
}

/* paged_attention's checks of an attention-shaped call, its grid and its kernel's parameters
 * (q's strides included). */
recap_status attention_setup(const recap__op_call *call, attention_params *p,
                             recap__paged_attention_grid *grid) {
  const recap_tensor *q = &call->inputs[0], *k = &call->inputs[1], *v = &call->inputs[2];
  const recap_tensor *out = &call->outputs[0];
  const char *name = call->def->name;
  bool ok = q->ndim == 3 && k->ndim == 4 && v->ndim == 4 && out->ndim == 3 &&
            k->dtype == q->dtype && v->dtype == q->dtype && out->dtype == q->dtype;
  for (int d = 0; ok && d < 4; ++d) ok = k->shape[d] == v->shape[d];
  for (int d = 0; ok && d < 3; ++d) ok = out->shape[d] == q->shape[d];
  ok = ok && q->shape[2] == k->shape[3] && q->shape[1] % k->shape[2] == 0 &&
       q->shape[0] <= INT32_MAX && q->shape[1] <= INT32_MAX && k->shape[2] <= 65535 &&
       k->shape[1] < INT32_MAX && (q->shape[2] == 1 || q->strides[2] == 1) &&
       (k->shape[3] == 1 || (k->strides[3] == 1 && v->strides[3] == 1)) &&
       (out->shape[2] == 1 || out->strides[2] == 1);
  if (!ok)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "op '%s': needs q [T, H, Dh], k_cache and v_cache [NB, BS, Hkv, Dh] and an "
                      "output shaped like q, of one dtype, with H %% Hkv == 0 and unit-stride "
                      "last dims",
                      name);
  const int64_t head_dim = q->shape[2], elems = 16 / (int64_t)recap_dtype_size(q->dtype);
  if (head_dim > kMaxHeadDim || head_dim % elems != 0 || !pool_vectorizable(k, elems) ||
      !pool_vectorizable(v, elems))
    return RECAP_FAIL(RECAP_STATUS_NOT_SUPPORTED,
                      "op '%s': the CUDA kernel needs a head dim of at most %d that is a multiple "
                      "of %lld (16-byte vectors) and 16-byte aligned pool rows; got head dim %lld",
                      name, kMaxHeadDim, (long long)elems, (long long)head_dim);
  const int64_t max_blocks = call->inputs[3].shape[1] - RECAP_SEQ_BLOCKS;
  RECAP_TRY(meta_of(call, 3, q->shape[0], max_blocks * k->shape[1], &p->meta));
  const recap__paged_attention_grid g = recap__paged_attention_plan(call);
  const size_t need = recap__paged_attention_workspace(call);
  if (need > call->workspace_bytes || (need > 0 && !call->workspace))
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "op '%s': its %lld key splits need a workspace of %zu bytes "
                      "(workspace_bytes), the call has %zu",
                      name, (long long)g.splits, need, call->workspace ? call->workspace_bytes : 0);
  const size_t counts = recap__paged_attention_arrivals(call);
  if (counts > call->call_state_bytes || (counts > 0 && !call->call_state))
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "op '%s': its %lld key splits need %zu bytes of call state, zeroed "
                      "(call_state_bytes), the call has %zu",
                      name, (long long)g.splits, counts,
                      call->call_state ? call->call_state_bytes : 0);
  if (q->shape[0] * g.head_chunks > INT32_MAX)
    return RECAP_FAIL(RECAP_STATUS_NOT_SUPPORTED, "op '%s': %lld tokens exceed the CUDA grid", name,
                      (long long)q->shape[0]);
  p->q = {q->strides[0], q->strides[1]};
  p->o = {out->strides[0], out->strides[1]};
  p->k = {k->strides[0], k->strides[1], k->strides[2]};
  p->v = {v->strides[0], v->strides[1], v->strides[2]};
  p->num_blocks = k->shape[0];
  p->block_size = recap__fast_div_make((uint32_t)k->shape[1]);
  p->heads = (int)q->shape[1];
  p->kv_group = (int)(q->shape[1] / k->shape[2]);
  p->head_chunks = (int)g.head_chunks;
  p->head_dim = (int)head_dim;
  p->splits = (int)g.splits;
  p->min_keys_per_split = (int)g.min_keys_per_split;
  const double scale = call->attrs.scale != 0.0 ? call->attrs.scale : 1.0 / sqrt((double)head_dim);
  p->scale_log2 = (float)(scale * kLog2e);
  p->part = static_cast<float *>(call->workspace);
  p->arrivals = static_cast<unsigned *>(call->call_state);
  *grid = g;
  return RECAP_OK;
}

/* Whether paged_rope_attention's q, k and v (rows of 16-byte vectors whose halves are whole
 * vectors) let its one kernel load them as it does. */
bool rope_rows_vectorizable(const recap__op_call *call, int64_t elems) {
  if ((call->inputs[0].shape[2] / 2) % elems != 0) return false;
  for (int i = 0; i < 3; ++i) {
    const recap_tensor *t = &call->inputs[i];
    if (!aligned16(t->data) || t->strides[0] % elems != 0 || t->strides[1] % elems != 0)
      return false;
  }
  return true;
}

}  // namespace

extern "C" recap_status recap__cuda_seq_positions(const recap__op_call *call, void *cuda_stream) {
  recap__cuda_launch_range range(call->def->name);
  const recap_tensor *out = &call->outputs[0];
  if (out->dtype != RECAP_DTYPE_I32 || out->ndim != 1 || out->shape[0] != call->attrs.dim ||
      out->shape[0] > INT32_MAX)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "op '%s': the output must be i32 [T] with T the 'tokens' attribute",
                      call->def->name);
  seq_meta m;
  RECAP_TRY(meta_of(call, 0, out->shape[0], -1, &m));
  const unsigned blocks = (unsigned)RECAP_CEIL_DIV(out->shape[0], (int64_t)kScanThreads);
  RECAP_CUDA_TRY(recap__cuda_launch(seq_positions_kernel, dim3(blocks), dim3(kScanThreads), 0,
                                    static_cast<cudaStream_t>(cuda_stream), m,
                                    static_cast<int32_t *>(out->data)));
  return RECAP_OK;
}

extern "C" recap_status recap__cuda_seq_last_tokens(const recap__op_call *call, void *cuda_stream) {
  recap__cuda_launch_range range(call->def->name);
  const recap_tensor *out = &call->outputs[0];
  seq_meta m;
  RECAP_TRY(meta_of(call, 0, -1, -1, &m));
  if (out->dtype != RECAP_DTYPE_I32 || out->ndim != 1 || out->shape[0] != m.rows)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "op '%s': the output must be i32 [Bs]",
                      call->def->name);
  const unsigned blocks = (unsigned)RECAP_CEIL_DIV((int64_t)m.rows, (int64_t)kScanThreads);
  RECAP_CUDA_TRY(recap__cuda_launch(seq_last_tokens_kernel, dim3(blocks), dim3(kScanThreads), 0,
                                    static_cast<cudaStream_t>(cuda_stream), m,
                                    static_cast<int32_t *>(out->data)));
  return RECAP_OK;
}

extern "C" recap_status recap__cuda_paged_kv_write(const recap__op_call *call, void *cuda_stream) {
  recap__cuda_launch_range range(call->def->name);
  const recap_tensor *cache = &call->inputs[0], *rows = &call->inputs[1];
  const char *name = call->def->name;
  if (cache->ndim != 4 || rows->ndim != 3 || rows->dtype != cache->dtype ||
      rows->shape[1] != cache->shape[2] || rows->shape[2] != cache->shape[3] ||
      (cache->shape[3] > 1 && (cache->strides[3] != 1 || rows->strides[2] != 1)) ||
      rows->shape[0] > INT32_MAX || cache->shape[2] * cache->shape[3] > INT32_MAX)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "op '%s': needs cache [NB, BS, Hkv, Dh] and new [T, Hkv, Dh] of one dtype "
                      "with unit-stride last dims",
                      name);
  /* The op writes the pool in place: an output elsewhere would be left unwritten. */
  if (call->outputs[0].data != cache->data)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "op '%s': the output must be the cache itself (same data pointer)", name);
  const int64_t max_blocks = call->inputs[2].shape[1] - RECAP_SEQ_BLOCKS;
  seq_meta m;
  RECAP_TRY(meta_of(call, 2, rows->shape[0], max_blocks * cache->shape[1], &m));
  const pool_strides cs = {cache->strides[0], cache->strides[1], cache->strides[2]};
  const token_strides rs = {rows->strides[0], rows->strides[1]};
  const int kv_heads = (int)cache->shape[2], head_dim = (int)cache->shape[3];
  cudaStream_t stream = static_cast<cudaStream_t>(cuda_stream);
  return recap__cuda_dispatch_float(cache->dtype, name, [&](auto tag) {
    using T = decltype(tag);
    constexpr int N = 16 / sizeof(T);
    const bool vec = head_dim % N == 0 && aligned16(cache->data) && aligned16(rows->data) &&
                     cs.block % N == 0 && cs.row % N == 0 && cs.head % N == 0 &&
                     rs.token % N == 0 && rs.head % N == 0;
    const int chunks = kv_heads * (vec ? head_dim / N : head_dim);
    const int threads = (int)RECAP_CEIL_DIV(chunks < 256 ? chunks : 256, 32) * 32;
    const dim3 grid((unsigned)rows->shape[0]);
    T *dst = static_cast<T *>(cache->data);
    const T *src = static_cast<const T *>(rows->data);
    if (vec)
      RECAP_CUDA_TRY(recap__cuda_launch(paged_kv_write_kernel<T, N>, grid, dim3(threads), 0, stream,
                                        dst, cs, cache->shape[1], cache->shape[0], src, rs,
                                        kv_heads, head_dim, m));
    else
      RECAP_CUDA_TRY(recap__cuda_launch(paged_kv_write_kernel<T, 1>, grid, dim3(threads), 0, stream,
                                        dst, cs, cache->shape[1], cache->shape[0], src, rs,
                                        kv_heads, head_dim, m));
    return RECAP_OK;
  });
}

extern "C" recap_status recap__cuda_paged_rope_kv_write(const recap__op_call *call,
                                                        void *cuda_stream) {
  recap__cuda_launch_range range(call->def->name);
  const recap_tensor *q = &call->inputs[0], *k = &call->inputs[1], *v = &call->inputs[2];
  const recap_tensor *kc = &call->inputs[3], *vc = &call->inputs[4], *out = &call->outputs[0];
  const char *name = call->def->name;
  bool ok = q->ndim == 3 && k->ndim == 3 && v->ndim == 3 && kc->ndim == 4 && vc->ndim == 4 &&
            out->ndim == 3 && recap__tensor_is_contiguous(out);
  for (int d = 0; ok && d < 4; ++d) ok = kc->shape[d] == vc->shape[d];
  for (int d = 0; ok && d < 3; ++d) ok = out->shape[d] == q->shape[d];
  const recap_tensor *all[] = {q, k, v, kc, vc, out};
  for (int i = 0; ok && i < 6; ++i)
    ok = all[i]->dtype == q->dtype && all[i]->strides[all[i]->ndim - 1] == 1;
  ok = ok && k->shape[0] == q->shape[0] && v->shape[0] == q->shape[0] &&
       k->shape[1] == kc->shape[2] && v->shape[1] == kc->shape[2] && k->shape[2] == kc->shape[3] &&
       v->shape[2] == kc->shape[3] && q->shape[2] == kc->shape[3] && q->shape[2] % 2 == 0 &&
       q->shape[0] <= INT32_MAX && q->shape[1] * q->shape[2] <= INT32_MAX &&
       kc->shape[2] * kc->shape[3] <= INT32_MAX;
  if (!ok)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "op '%s': needs q [T, H, Dh], k and v [T, Hkv, Dh], k_cache and v_cache "
                      "[NB, BS, Hkv, Dh] and a contiguous output shaped like q, of one dtype, "
                      "with Dh even and unit-stride last dims",
                      name);
  /* The op writes the pools in place: outputs elsewhere would be left unwritten. */
  if (call->outputs[1].data != kc->data || call->outputs[2].data != vc->data)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "op '%s': outputs 1 and 2 must be the caches themselves (same data "
                      "pointers)",
                      name);
  if (q->shape[2] > kMaxHeadDim)
    return RECAP_FAIL(RECAP_STATUS_NOT_SUPPORTED,
                      "op '%s': the CUDA kernel takes a head dim of at most %d (the attention "
                      "kernel's), got %lld",
                      name, kMaxHeadDim, (long long)q->shape[2]);
  const size_t shared = (size_t)q->shape[2] * sizeof(float);
  const int64_t max_blocks = call->inputs[5].shape[1] - RECAP_SEQ_BLOCKS;
  rope_kv_params p;
  RECAP_TRY(meta_of(call, 5, q->shape[0], max_blocks * kc->shape[1], &p.meta));
  p.q = {q->strides[0], q->strides[1]};
  p.k = {k->strides[0], k->strides[1]};
  p.v = {v->strides[0], v->strides[1]};
  p.kc = {kc->strides[0], kc->strides[1], kc->strides[2]};
  p.vc = {vc->strides[0], vc->strides[1], vc->strides[2]};
  p.block_size = kc->shape[1];
  p.num_blocks = kc->shape[0];
  p.heads = (int)q->shape[1];
  p.kv_heads = (int)kc->shape[2];
  p.head_dim = (int)q->shape[2];
  const recap__rope_freqs freqs = recap__rope_freqs_of(&call->attrs);
  for (int i = 0; i < p.head_dim / 2; ++i)
    p.inv_freq[i] = recap__rope_inv_freq(&freqs, i, p.head_dim);
  cudaStream_t stream = static_cast<cudaStream_t>(cuda_stream);
  return recap__cuda_dispatch_float(q->dtype, name, [&](auto tag) {
    using T = decltype(tag);
    constexpr int N = 16 / sizeof(T);
    /* 16-byte vectors for every unit, or single elements for all. */
    bool vec = (p.head_dim / 2) % N == 0;
    const void *bases[] = {q->data, k->data, v->data, out->data, kc->data, vc->data};
    for (int i = 0; vec && i < 6; ++i) vec = aligned16(bases[i]);
    const int64_t steps[] = {p.q.token,  p.q.head, p.k.token, p.k.head,   p.v.token, p.v.head,
                             p.kc.block, p.kc.row, p.kc.head, p.vc.block, p.vc.row,  p.vc.head};
    for (int i = 0; vec && i < 12; ++i) vec = steps[i] % N == 0;
    const int n = vec ? N : 1;
    p.q_units = p.heads * (p.head_dim / 2 / n);
    p.k_units = p.kv_heads * (p.head_dim / 2 / n);
    p.v_units = p.kv_heads * (p.head_dim / n);
    /* 128 threads a CTA (fewer when that is all there is): a few CTAs share a decode token. */
    const int64_t units = (int64_t)p.q_units + p.k_units + p.v_units;
    const int threads = (int)(units < 128 ? RECAP_CEIL_DIV(units, (int64_t)32) * 32 : 128);
    const int64_t chunks = RECAP_CEIL_DIV(units, (int64_t)threads);
    if (chunks > 65535)
      return RECAP_FAIL(RECAP_STATUS_NOT_SUPPORTED,
                        "op '%s': %lld heads of %lld need more CTAs per token than a grid has",
                        name, (long long)(p.heads + p.kv_heads), (long long)p.head_dim);
    const dim3 grid((unsigned)q->shape[0], (unsigned)chunks);
    const T *qs = static_cast<const T *>(q->data), *ks = static_cast<const T *>(k->data),
            *vs = static_cast<const T *>(v->data);
    T *qo = static_cast<T *>(out->data), *kd = static_cast<T *>(kc->data),
      *vd = static_cast<T *>(vc->data);
    if (vec)
      RECAP_CUDA_TRY(recap__cuda_launch(paged_rope_kv_write_kernel<T, N>, grid, dim3(threads),
                                        shared, stream, qs, ks, vs, qo, kd, vd, p));
    else
      RECAP_CUDA_TRY(recap__cuda_launch(paged_rope_kv_write_kernel<T, 1>, grid, dim3(threads),
                                        shared, stream, qs, ks, vs, qo, kd, vd, p));
    return RECAP_OK;
  });
}

extern "C" recap_status recap__cuda_paged_attention(const recap__op_call *call, void *cuda_stream) {
  recap__cuda_launch_range range(call->def->name);
  attention_params p;
  recap__paged_attention_grid g;
  RECAP_TRY(attention_setup(call, &p, &g));
  cudaStream_t stream = static_cast<cudaStream_t>(cuda_stream);
  return recap__cuda_dispatch_float(call->inputs[0].dtype, call->def->name, [&](auto tag) {
    using T = decltype(tag);
    return launch_attention_sized<T, false>(call, static_cast<const T *>(call->inputs[0].data), p,
                                            g, no_step_rows{}, stream, nullptr);
  });
}

extern "C" recap_status recap__cuda_paged_rope_attention(const recap__op_call *call,
                                                         void *cuda_stream) {
  recap__cuda_launch_range range(call->def->name);
  const char *name = call->def->name;
  const recap_tensor *k = &call->inputs[1], *v = &call->inputs[2];
  const recap_tensor *kc = &call->inputs[3], *vc = &call->inputs[4];
  if (call->num_inputs != 6 || call->num_outputs != 3 || k->ndim != 3 || v->ndim != 3)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "op '%s': needs inputs q, k, v, k_cache, v_cache, seqs and outputs "
                      "attention, k_cache, v_cache",
                      name);
  /* The op writes the pools in place: outputs elsewhere would be left unwritten. */
  if (call->outputs[1].data != kc->data || call->outputs[2].data != vc->data)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "op '%s': outputs 1 and 2 must be the caches themselves (same data "
                      "pointers)",
                      name);
  const size_t q_rot = recap__paged_rope_attention_q_rot_bytes(call);
  if (!call->workspace || call->workspace_bytes < q_rot)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "op '%s': needs a workspace of at least %zu bytes for its rotated q "
                      "(workspace_bytes), the call has %zu",
                      name, q_rot, call->workspace ? call->workspace_bytes : 0);
  recap__op_call rope, attention;
  recap__paged_rope_attention_parts(call, &rope, &attention);
  cudaStream_t stream = static_cast<cudaStream_t>(cuda_stream);
  const int64_t elems = 16 / (int64_t)recap_dtype_size(call->inputs[0].dtype);
  const bool one_kernel =
      recap__paged_rope_attention_one_kernel(call) && rope_rows_vectorizable(call, elems) &&
      k->shape[0] == call->inputs[0].shape[0] && v->shape[0] == k->shape[0] &&
      k->shape[1] == kc->shape[2] && v->shape[1] == kc->shape[2] && k->shape[2] == kc->shape[3] &&
      v->shape[2] == kc->shape[3] && k->strides[2] == 1 && v->strides[2] == 1 &&
      k->dtype == kc->dtype && v->dtype == kc->dtype;
  if (!one_kernel) {
    RECAP_TRY(recap__cuda_paged_rope_kv_write(&rope, cuda_stream));
    return recap__cuda_paged_attention(&attention, cuda_stream);
  }
  attention_params p;
  recap__paged_attention_grid g;
  RECAP_TRY(attention_setup(&attention, &p, &g));
  const recap_tensor *q = &call->inputs[0];
  p.q = {q->strides[0], q->strides[1]};
  return recap__cuda_dispatch_float(q->dtype, name, [&](auto tag) {
    using T = decltype(tag);
    step_rows<T> sr;
    sr.k = static_cast<const T *>(k->data);
    sr.v = static_cast<const T *>(v->data);
    sr.ks = {k->strides[0], k->strides[1]};
    sr.vs = {v->strides[0], v->strides[1]};
    sr.k_pool = static_cast<T *>(kc->data);
    sr.v_pool = static_cast<T *>(vc->data);
    const recap__rope_freqs freqs = recap__rope_freqs_of(&call->attrs);
    for (int64_t i = 0; i < p.head_dim / 2; ++i)
      sr.inv_freq[i] = recap__rope_inv_freq(&freqs, i, p.head_dim);
    bool declined = false;
    const recap_status st = launch_attention_sized<T, true>(
        &attention, static_cast<const T *>(q->data), p, g, sr, stream, &declined);
    if (st != RECAP_OK || !declined) return st;
    RECAP_TRY(recap__cuda_paged_rope_kv_write(&rope, cuda_stream));
    return recap__cuda_paged_attention(&attention, cuda_stream);
  });
}
