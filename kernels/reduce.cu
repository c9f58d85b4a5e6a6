/*
 * reduce.cu: the CUDA row reductions over the last dimension: softmax (scale, causal mask),
 * layernorm, rmsnorm, sum and mean.
 *
 * Every kernel maps one ROW (the last dimension, D elements, stride 1) to one "group" of
 * threads (a few lanes, a warp or a whole block), and groups loop over rows with the grid's
 * stride, so a capped grid covers any number of rows. Rows may sit anywhere in a strided view
 * (their start is found by decomposing the row index over the leading dims); outputs are
 * contiguous.
 *
 * softmax, layernorm and rmsnorm hold the row in registers (the *_regs kernels) when it is
 * 16-byte accessible (D a multiple of 8 halves / 4 floats; rows, output and parameter vectors
 * 16-byte aligned) and at most 32768 halves / 16384 floats long: the group reads it once with
 * 16-byte loads, keeps at most 4 slots of 16 bytes per thread in the storage type, reduces
 * from registers and writes once with 16-byte stores: one pass over memory in each direction,
 * which is what a bandwidth-bound op can do at best. Groups of 4-16 lanes for rows of up to
 * 256 halves, a warp up to 1024, then a block of 64-1024 threads (4 slots each) per row (for
 * floats, half those lengths); the norms spread few rows of 264-2048 halves one slot a thread
 * over a block of 64-256 (plan_norm).
 * Other rows use the streaming kernels below, which re-read the row from L1/L2; sum and mean
 * always do (one read, so nothing to keep).
 *
 * Numerics: all accumulation in f32. Register softmax takes the row's maximum, then the sum of
 * exp(x - max), then writes exp(x - max) / sum: never an overflow. The streaming softmax keeps
 * a running (max, sum of exp) pair per thread (online softmax) and merges the pairs across the
 * group. Layernorm is two-pass in both forms (mean, then the sum of squared deviations), which
 * avoids the cancellation of E[x^2] - E[x]^2 for rows with a large mean.
 *
 * Every kernel starts with recap__pdl_begin and is launched through recap__cuda_launch
 * (programmatic dependent launch, cuda_common.cuh). Measurements: docs/perf/kernels.md.
 */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include <type_traits>

#include "kernels/cuda_common.cuh"
#include "kernels/cuda_ops.h"
#include "runtime/cuda_check.h"

namespace {

/* The streaming kernels (sum, mean, and rows too long for registers): rows up to kWarpRowMax
 * elements go to one warp each. Longer rows go to a block each, unless there are at least
 * kManyRows of them and they are at most kWarpRowMaxManyRows long: then warps still fill the
 * GPU, and avoid the block's barriers (measured on H100: 4096 rows of 4096 f16 ran softmax at
 * 1270 GB/s by warps against 760 GB/s by blocks, before the register kernels). */
constexpr int kWarpRowMax = 1024;
constexpr int64_t kManyRows = 4096;
constexpr int kWarpRowMaxManyRows = 8192;
constexpr int kWarpRowThreads = 256; /* 8 rows per block in warp mode */
constexpr int kBlockRowThreads = 512;

/* The register kernels (docs/perf/kernels.md has the measurements behind these numbers):
 * rows of up to kSubWarpSlots slots (of VEC elements, 16 bytes) go to groups of 4, 8 or 16
 * lanes (several rows per warp, at most 2 slots a lane: a 128-half attention row would
 * otherwise leave half of a warp idle), rows of up to 32 x kWarpSlots slots (1024 halves, 512
 * floats) to a warp, longer rows to a block of 64 to kMaxBlockThreads threads with at most
 * kBlockSlots slots each (32768 halves, 16384 floats). Groups of lanes run in blocks of
 * kRegWarpThreads. Few slots a thread is the point: the per-element work of a row (~10
 * instructions) is split over many threads, so a row's reduce-and-write phase is short, and
 * the registers a thread holds stay small enough for many rows in flight per SM. */
constexpr int kSubWarpSlots = 32;
constexpr int kWarpSlots = 4;
constexpr int kBlockSlots = 4;
constexpr int kRegWarpThreads = 128;
constexpr int kMaxBlockThreads = 1024;

/* Threads per block of a register kernel: kLanes <= 32 runs groups of lanes in blocks of
 * kRegWarpThreads; kLanes > 32 is one group of kLanes threads, the whole block. */
constexpr int regs_threads(int lanes) {
  return lanes <= 32 ? kRegWarpThreads : lanes;
}
/* Launch bounds: the minimum resident blocks per SM that leaves each thread at most
 * regs_cap(kVecs) registers, about 40 beyond the row it holds (4 per slot): tighter made
 * ptxas spill, looser let it take registers that cost rows in flight (ptxas -v numbers in
 * docs/perf/kernels.md). Blocks of 512 threads get 2 (64 registers, a few bytes of spill in
 * the bf16 layernorm) rather than 1 row in flight per SM; never more than 2048 threads. */
constexpr int regs_cap(int vecs) {
  return 40 + 8 * vecs;
}
constexpr int regs_min_blocks_fit(int threads, int vecs) {
  return 65536 / (threads * regs_cap(vecs)) < (threads <= 512 ? 2 : 1)
             ? (threads <= 512 ? 2 : 1)
             : 65536 / (threads * regs_cap(vecs));
}
constexpr int regs_min_blocks(int lanes, int vecs) {
  return regs_min_blocks_fit(regs_threads(lanes), vecs) > 2048 / regs_threads(lanes)
             ? 2048 / regs_threads(lanes)
             : regs_min_blocks_fit(regs_threads(lanes), vecs);
}

/* ================================ kernels ================================================ */

/* Which rows a thread works on and how its group reduces. kLanes <= 32: each run of kLanes
 * (4, 8, 16 or 32) lanes of a warp is a group; otherwise the block (kLanes threads) is. All
 * members of a group see the same row sequence, so the barriers inside block reductions are
 * reached uniformly; groups of one warp may run different numbers of rows, so their shuffles
 * name the group's lanes alone (xor offsets below kLanes stay inside the group).
 *
 * A block reduction takes one barrier: each warp's partial goes to shared memory, and after
 * the barrier every thread combines all of them in the same order (so all agree bitwise).
 * Reductions alternate between two scratch rows: a thread writes row p of reduction n + 2
 * only after the barrier of reduction n + 1, which every thread reaches after its reads of
 * reduction n. */
template <int kLanes>
struct row_group {
  static constexpr bool kBlock = kLanes > 32;
  int64_t first_row, row_stride;
  int rank, size;
  unsigned mask;
  float (*scratch)[32];
  int phase;

  __device__ __forceinline__ explicit row_group(float (*scratch_rows)[32])
      : scratch(scratch_rows), phase(0) {
    if constexpr (kBlock) {
      first_row = blockIdx.x;
      row_stride = gridDim.x;
      rank = threadIdx.x;
      size = kLanes;
      mask = 0xffffffffu;
    } else {
      const int groups = blockDim.x / kLanes;
      first_row = (int64_t)blockIdx.x * groups + threadIdx.x / kLanes;
      row_stride = (int64_t)gridDim.x * groups;
      rank = threadIdx.x % kLanes;
      size = kLanes;
      mask = kLanes == 32 ? 0xffffffffu
                          : ((1u << (kLanes % 32)) - 1u) << ((threadIdx.x & 31) & ~(kLanes - 1));
    }
  }

  template <typename Op>
  __device__ __forceinline__ float reduce(float v, Op op) {
    constexpr int width = kBlock ? 32 : kLanes;
#pragma unroll
    for (int o = width / 2; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(mask, v, o));
    if constexpr (kBlock) {
      float *buf = scratch[phase];
      phase ^= 1;
      if ((threadIdx.x & 31) == 0) buf[threadIdx.x >> 5] = v;
      __syncthreads();
      v = buf[0];
#pragma unroll
      for (int w = 1; w < kLanes / 32; ++w) v = op(v, buf[w]);
    }
    return v;
  }

  __device__ __forceinline__ float sum(float v) {
    return reduce(v, [](float a, float b) { return a + b; });
  }

  __device__ __forceinline__ float max(float v) {
    return reduce(v, [](float a, float b) { return fmaxf(a, b); });
  }
};

/* The start of row r: r * row_stride when the leading dims merge into one stride (row_stride
 * >= 0, found at launch), else the view's decomposition (three 64-bit divisions per row, which
 * cost as much as the arithmetic of a short row). */
__device__ __forceinline__ int64_t row_start(const recap__cuda_view4 &v, int64_t row_stride,
                                             int64_t r) {
  return row_stride >= 0 ? r * row_stride : recap__view4_offset(v, r);
}

/* ---- register-resident rows -------------------------------------------------------------- */

/* A thread's share of one row: kVecs slots of VEC elements, kept in the storage type (8
 * halves take 4 registers; converted to f32 at each use, which costs less than the registers
 * that f32 copies would take). Slot k holds columns [(k * size + rank) * VEC, + VEC), one
 * 16-byte access, so D must be a multiple of VEC and every row start, output and parameter
 * vector 16-byte aligned (other rows take the streaming kernels: an element-wise path here
 * held a row in twice the registers, one per element, and made ptxas spill every kernel of
 * the file past 4 slots). Slots past the row's nslots = D / VEC (< 2^31 here) are padding:
 * they hold 0, are never stored, and the callers skip them where 0 would count. Bounds are
 * checked per slot, never per element. */
template <typename T, int kVecs>
struct row_slots {
  static constexpr int VEC = 16 / sizeof(T);
  using V = recap__vec<T, VEC>;
  V raw[kVecs];

  __device__ __forceinline__ static int col(int k, int e, int rank, int size) {
    return (k * size + rank) * VEC + e;
  }

  __device__ __forceinline__ static bool valid(int k, int rank, int size, int nslots) {
    return k * size + rank < nslots;
  }

  /* Element e of slot k as f32. A bf16 is the high half of its f32, one shift or mask; the
   * asm is volatile so that ptxas redoes it at each use instead of keeping 8 f32 copies of
   * each slot live across the reductions (which made the bf16 layernorm spill). */
  __device__ __forceinline__ float at(int k, int e) const {
    if constexpr (std::is_same<T, __nv_bfloat16>::value) {
      const uint32_t pair = reinterpret_cast<const uint32_t *>(raw[k].v)[e / 2];
      uint32_t bits;
      if (e % 2 == 0)
        asm volatile("shl.b32 %0, %1, 16;" : "=r"(bits) : "r"(pair));
      else
        asm volatile("and.b32 %0, %1, 0xffff0000;" : "=r"(bits) : "r"(pair));
      return __uint_as_float(bits);
    } else {
      return recap__to_float(raw[k].v[e]);
    }
  }

  __device__ __forceinline__ void load(const T *__restrict__ src, int nslots, int rank, int size) {
    const T zero = recap__from_float<T>(0.0f);
#pragma unroll
    for (int k = 0; k < kVecs; ++k) {
      if (valid(k, rank, size, nslots)) {
        raw[k] = reinterpret_cast<const V *>(src)[k * size + rank];
      } else {
#pragma unroll
        for (int e = 0; e < VEC; ++e) raw[k].v[e] = zero;
      }
    }
  }

  /* Stores fn(k, e, x, pa[c], pb[c]) for element e of slot k (column c) of every slot that is
   * not padding. pa and pb are parameter vectors of D elements read at the slots' columns with
   * 16-byte loads; a NULL one reads as 0. Elements are converted in pairs (one instruction
   * per pair for halves). */
  template <typename Fn>
  __device__ __forceinline__ void store(T *__restrict__ dst, int nslots, int rank, int size,
                                        const T *__restrict__ pa, const T *__restrict__ pb,
                                        Fn &&fn) const {
#pragma unroll
    for (int k = 0; k < kVecs; ++k) {
      if (!valid(k, rank, size, nslots)) continue;
      const int slot = k * size + rank;
      V a, b, out;
      if (pa) a = reinterpret_cast<const V *>(pa)[slot];
      if (pb) b = reinterpret_cast<const V *>(pb)[slot];
#pragma unroll
      for (int e = 0; e < VEC; e += 2) {
        const float y0 = fn(k, e, at(k, e), pa ? recap__to_float(a.v[e]) : 0.0f,
                            pb ? recap__to_float(b.v[e]) : 0.0f);
        const float y1 = fn(k, e + 1, at(k, e + 1), pa ? recap__to_float(a.v[e + 1]) : 0.0f,
                            pb ? recap__to_float(b.v[e + 1]) : 0.0f);
        put2(&out.v[e], y0, y1);
      }
      reinterpret_cast<V *>(dst)[slot] = out;
    }
  }

  __device__ __forceinline__ static void put2(float *p, float a, float b) {
    p[0] = a;
    p[1] = b;
  }
  __device__ __forceinline__ static void put2(__half *p, float a, float b) {
    *reinterpret_cast<__half2 *>(p) = __floats2half2_rn(a, b);
  }
  __device__ __forceinline__ static void put2(__nv_bfloat16 *p, float a, float b) {
    *reinterpret_cast<__nv_bfloat162 *>(p) = __floats2bfloat162_rn(a, b);
  }
};

/* Asks for the line holding p in L1 (a hint: no register waits on it). */
__device__ __forceinline__ void prefetch_l1(const void *p) {
  asm volatile("prefetch.global.L1 [%0];" ::"l"(p));
}

/* 2^x by the hardware's approximation (MUFU.EX2, relative error ~2^-22, subnormal results
 * flushed to 0, far below the smallest f16 or bf16 and within the f32 tolerance): exp2f
 * without fast math adds instructions to scale subnormals, and softmax takes two per element. */
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

/* Runs body(row, r) for each of the group's rows r, the row loaded into registers first. (A
 * variant that loaded the next row before reducing the current one, to keep a load in flight
 * through the compute, ran 5-15% slower on H100: its two rows of registers cost more rows in
 * flight per SM than the overlap gained.) */
template <typename T, int kVecs, typename G, typename Body>
__device__ __forceinline__ void for_each_row(G &g, const T *__restrict__ x,
                                             const recap__cuda_view4 &rows_view, int64_t row_stride,
                                             int64_t num_rows, int nslots, Body &&body) {
  for (int64_t r = g.first_row; r < num_rows; r += g.row_stride) {
    row_slots<T, kVecs> row;
    row.load(x + row_start(rows_view, row_stride, r), nslots, g.rank, g.size);
    body(row, r);
  }
}

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
  __shared__ float scratch[2][32];
  row_group<kBlock ? kBlockRowThreads : 32> g(scratch);
  float *scratch_m = scratch[0], *scratch_s = scratch[1];
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
  __shared__ float scratch[2][32];
  row_group<kBlock ? kBlockRowThreads : 32> g(scratch);
  const float inv_d = 1.0f / (float)d;
  for (int64_t r = g.first_row; r < num_rows; r += g.row_stride) {
    const T *xr = x + recap__view4_offset(rows_view, r);
    T *yr = y + r * d;
    float mean = 0.0f;
    if (!kRms) {
      float acc = 0.0f;
      for (int64_t j = g.rank; j < d; j += g.size) acc += recap__to_float(xr[j]);
      mean = g.sum(acc) * inv_d;
    }
    float sq = 0.0f;
    for (int64_t j = g.rank; j < d; j += g.size) {
      const float c = recap__to_float(xr[j]) - mean;
      sq += c * c;
    }
    const float rstd = 1.0f / sqrtf(g.sum(sq) * inv_d + eps);
    for (int64_t j = g.rank; j < d; j += g.size) {
      float v = (recap__to_float(xr[j]) - mean) * rstd * recap__to_float(weight[j]);
      if (!kRms && bias) v += recap__to_float(bias[j]);
      yr[j] = recap__from_float<T>(v);
    }
  }
}

/* One row of the register softmax; kMasked: columns at or past `limit` are masked (no part
 * in the maximum or the sum, and output 0), checked per element only then. exp is taken twice
 * (for the sum and for the output) rather than kept: registers are what bound the rows in
 * flight. It is exp2 of x * scale * log2(e) - max: one FMA and one MUFU.EX2. */
template <bool kMasked, typename T, int kVecs, typename G>
__device__ __forceinline__ void softmax_row(const row_slots<T, kVecs> &row, G &g,
                                            T *__restrict__ yr, int nslots, int limit,
                                            float scale2) {
  constexpr int VEC = row_slots<T, kVecs>::VEC;
  const auto visible = [&](int k, int e) {
    return !kMasked || row_slots<T, kVecs>::col(k, e, g.rank, g.size) < limit;
  };
  float m = -INFINITY;
#pragma unroll
  for (int k = 0; k < kVecs; ++k)
    if (row.valid(k, g.rank, g.size, nslots))
#pragma unroll
      for (int e = 0; e < VEC; ++e)
        if (visible(k, e)) m = fmaxf(m, row.at(k, e) * scale2);
  m = g.max(m);
  /* m == -inf: every column masked (or -inf); no exp2(-inf - -inf) is ever taken. */
  const float shift = m == -INFINITY ? 0.0f : m;
  float s = 0.0f;
#pragma unroll
  for (int k = 0; k < kVecs; ++k)
    if (row.valid(k, g.rank, g.size, nslots))
#pragma unroll
      for (int e = 0; e < VEC; ++e)
        if (visible(k, e)) s += fast_exp2(fmaf(row.at(k, e), scale2, -shift));
  s = g.sum(s);
  const float inv = s > 0.0f ? 1.0f / s : 0.0f;
  row.store(yr, nslots, g.rank, g.size, nullptr, nullptr, [&](int k, int e, float v, float, float) {
    return visible(k, e) ? fast_exp2(fmaf(v, scale2, -shift)) * inv : 0.0f;
  });
}

/* Softmax with the row in registers; causal as in softmax_kernel. */
template <typename T, int kLanes, int kVecs>
__global__ void __launch_bounds__(regs_threads(kLanes), regs_min_blocks(kLanes, kVecs))
    softmax_regs_kernel(const T *__restrict__ x, recap__cuda_view4 rows_view, int64_t row_stride,
                        T *__restrict__ y, int64_t num_rows, int64_t d64, float scale, bool causal,
                        int64_t rows_per_matrix, int64_t causal_shift) {
  recap__pdl_begin();
  __shared__ float scratch[2][32];
  row_group<kLanes> g(scratch);
  const int d = (int)d64, nslots = d / row_slots<T, kVecs>::VEC;
  const float scale2 = scale * 1.44269504088896341f;
  for_each_row<T, kVecs>(g, x, rows_view, row_stride, num_rows, nslots,
                         [&](const row_slots<T, kVecs> &row, int64_t r) {
                           int limit = d;
                           if (causal) {
                             const int64_t visible = r % rows_per_matrix + causal_shift + 1;
                             limit = visible < 0 ? 0 : (visible < d ? (int)visible : d);
                           }
                           if (limit == d)
                             softmax_row<false>(row, g, y + r * d64, nslots, limit, scale2);
                           else
                             softmax_row<true>(row, g, y + r * d64, nslots, limit, scale2);
                         });
}

/* LayerNorm (bias may be NULL) and RMSNorm (kRms: no mean, no bias) with the row in
 * registers; weight and bias are read at the slots' columns when the row is written. */
template <typename T, int kLanes, int kVecs, bool kRms>
__global__ void __launch_bounds__(regs_threads(kLanes), regs_min_blocks(kLanes, kVecs))
    norm_regs_kernel(const T *__restrict__ x, recap__cuda_view4 rows_view, int64_t row_stride,
                     const T *__restrict__ weight, const T *__restrict__ bias, T *__restrict__ y,
                     int64_t num_rows, int64_t d64, float eps, bool prefetch_params) {
  recap__pdl_begin();
  __shared__ float scratch[2][32];
  row_group<kLanes> g(scratch);
  constexpr int VEC = row_slots<T, kVecs>::VEC;
  const int d = (int)d64, nslots = d / VEC;
  const float inv_d = 1.0f / (float)d;
  /* Every row of a group reads the parameters at the same slots, after its reductions: fetched
   * into L1 now, their round trip overlaps the row's load instead of following the reductions
   * (a decode step's norm is one row, a chain of latencies). No registers held. Only where
   * the launcher says the grid is one block per SM at most (norm_prefetches). */
  if (prefetch_params) {
#pragma unroll
    for (int k = 0; k < kVecs; ++k)
      if (row_slots<T, kVecs>::valid(k, g.rank, g.size, nslots)) {
        if (weight) prefetch_l1(weight + (k * g.size + g.rank) * VEC);
        if (!kRms && bias) prefetch_l1(bias + (k * g.size + g.rank) * VEC);
      }
  }
  for_each_row<T, kVecs>(
      g, x, rows_view, row_stride, num_rows, nslots,
      [&](const row_slots<T, kVecs> &row, int64_t r) {
        float mean = 0.0f;
        if (!kRms) {
          /* Padding holds 0 and adds nothing. */
          float acc = 0.0f;
#pragma unroll
          for (int k = 0; k < kVecs; ++k)
#pragma unroll
            for (int e = 0; e < VEC; ++e) acc += row.at(k, e);
          mean = g.sum(acc) * inv_d;
        }
        float sq = 0.0f;
#pragma unroll
        for (int k = 0; k < kVecs; ++k)
          if (row.valid(k, g.rank, g.size, nslots))
#pragma unroll
            for (int e = 0; e < VEC; ++e) {
              const float c = row.at(k, e) - mean;
              sq = fmaf(c, c, sq);
            }
        const float rstd = 1.0f / sqrtf(g.sum(sq) * inv_d + eps);
        /* The bias reads as 0 when absent (and for RMSNorm, which passes none). */
        row.store(y + r * d64, nslots, g.rank, g.size, weight, kRms ? nullptr : bias,
                  [&](int, int, float v, float w, float b) { return (v - mean) * rstd * w + b; });
      });
}

/* Sum of each row, times `factor` (1 for sum, 1/D for mean). */
template <typename T, bool kBlock>
__global__ void sum_kernel(const T *__restrict__ x, recap__cuda_view4 rows_view, T *__restrict__ y,
                           int64_t num_rows, int64_t d, float factor) {
  recap__pdl_begin();
  __shared__ float scratch[2][32];
  row_group<kBlock ? kBlockRowThreads : 32> g(scratch);
  for (int64_t r = g.first_row; r < num_rows; r += g.row_stride) {
    const T *xr = x + recap__view4_offset(rows_view, r);
    float acc = 0.0f;
    for (int64_t j = g.rank; j < d; j += g.size) acc += recap__to_float(xr[j]);
    acc = g.sum(acc);
    if (g.rank == 0) y[r] = recap__from_float<T>(acc * factor);
  }
}

/* ================================ launchers ============================================== */

/* The row geometry of a last-dimension reduction over `x`. */
struct rows_info {
  recap__cuda_view4 rows_view;
  int64_t row_stride; /* >= 0: row r starts at r * row_stride; -1: use rows_view */
  int64_t num_rows, d;
  bool block_mode;
  unsigned grid, threads;
};

recap_status rows_setup(const recap__op_call *call, const recap_tensor *x, rows_info *out) {
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
  /* The leading dims merge into one stride when each is its inner neighbour's span apart. */
  bool found = false, uniform = true;
  int64_t stride = 0, span = 1;
  for (int dim = 2; dim >= 0; --dim) {
    if (out->rows_view.shape[dim] == 1) continue;
    if (!found) {
      stride = out->rows_view.stride[dim];
      found = true;
    } else if (out->rows_view.stride[dim] != stride * span) {
      uniform = false;
    }
    span *= out->rows_view.shape[dim];
  }
  out->row_stride = uniform && stride >= 0 ? stride : -1;
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

recap_status check_same(const recap__op_call *call, const recap_tensor *x, const recap_tensor *y) {
  if (x->dtype != y->dtype || recap__tensor_numel(x) != recap__tensor_numel(y) ||
      !recap__tensor_is_contiguous(y))
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "op '%s': the output must be contiguous with the input's size and dtype",
                      call->def->name);
  return RECAP_OK;
}

/* A parameter vector (weight, bias): D elements, contiguous, the input's dtype. */
recap_status check_param(const recap__op_call *call, const recap_tensor *p, const recap_tensor *x,
                         int64_t d, const char *which) {
  if (p->dtype != x->dtype || recap__tensor_numel(p) != d || !recap__tensor_is_contiguous(p))
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "op '%s': %s must be %lld contiguous elements of the input's dtype",
                      call->def->name, which, (long long)d);
  return RECAP_OK;
}

/* The register kernels' geometry for rows of d elements of `elem` bytes. */
struct regs_plan {
  bool fits; /* false: a row needs more than kMaxBlockThreads x kBlockSlots slots */
  int lanes; /* a group of 4, 8, 16 or 32 lanes per row, or a block of 64-1024 threads */
  int kvecs; /* slots per thread: 1, 2 or 4 */
  unsigned threads, grid;
};

regs_plan plan_regs(int64_t d, int64_t num_rows, size_t elem) {
  regs_plan p = {};
  const int64_t vec = (int64_t)(16 / elem), slots = RECAP_CEIL_DIV(d, vec);
  int64_t per_thread;
  if (slots <= kSubWarpSlots) {
    /* The narrowest group that holds the row in 2 slots a lane (4 lanes at least). */
    p.lanes = 4;
    while (p.lanes < 16 && p.lanes * 2 < slots) p.lanes *= 2;
    per_thread = RECAP_CEIL_DIV(slots, (int64_t)p.lanes);
  } else if (slots <= 32 * kWarpSlots) {
    p.lanes = 32;
    per_thread = RECAP_CEIL_DIV(slots, (int64_t)32);
  } else {
    /* The smallest block that holds the row in kBlockSlots slots per thread. */
    int64_t threads = 64;
    while (threads * kBlockSlots < slots && threads < kMaxBlockThreads) threads *= 2;
    if (threads * kBlockSlots < slots) return p;
    p.lanes = (int)threads;
    per_thread = RECAP_CEIL_DIV(slots, threads);
  }
  p.threads = (unsigned)regs_threads(p.lanes);
  p.grid = recap__cuda_grid_for(num_rows, p.lanes <= 32 ? kRegWarpThreads / p.lanes : 1);
  p.kvecs = 1;
  while (p.kvecs < per_thread) p.kvecs *= 2;
  p.fits = true;
  return p;
}

/* The norms' geometry. Few rows (at most kSpreadThreads threads in all, about one wave of an
 * H100, when each row is spread one slot a thread) of 33-256 slots go to a block of 64, 128 or
 * 256 threads with one slot each instead of a warp with 2-4 slots or a block of 64 with 4:
 * such a grid has about one row in flight per group, so the time is the latency of a row's
 * read-reduce-write chain, which four times the threads per row shortens (the transformer
 * block's [1024, 1024] f16 layernorm: 5.2 -> 4.3 us in ncu; docs/perf/kernels.md). Many rows
 * keep plan_regs's geometry, which moves them at copy bandwidth (one slot a thread ran
 * [65536, 1024] f16 11% slower). */
constexpr int64_t kSpreadThreads = 1 << 18;

regs_plan plan_norm(int64_t d, int64_t num_rows, size_t elem) {
  regs_plan p = plan_regs(d, num_rows, elem);
  const int64_t slots = RECAP_CEIL_DIV(d, (int64_t)(16 / elem));
  if (!p.fits || slots <= kSubWarpSlots || slots > 256) return p;
  const int64_t threads = slots <= 64 ? 64 : (slots <= 128 ? 128 : 256);
  if (num_rows > kSpreadThreads / threads) return p;
  p.lanes = (int)threads;
  p.kvecs = 1;
  p.threads = (unsigned)threads;
  p.grid = recap__cuda_grid_for(num_rows, 1);
  return p;
}

/* Whether norm_regs_kernel fetches its weight and bias into L1 ahead of the reductions: only
 * when its grid is at most one block per SM, where each block's chain of latencies is the
 * kernel's time (a decode step's norms: on an H200 the 1B shape's batch-1 step 1.146 -> 1.138
 * ms, the 8B's 4.824 -> 4.776). With more blocks the others hide that latency, and the
 * prefetches cost: the transformer block's [1024, 1024] f16 layernorm took 7.1 us in ncu with
 * them against 4.1-4.3 without, and the block 75.6-76.4 us against 70.5-71.2
 * (docs/perf/transformer_block.md, section 7). */
recap_status norm_prefetches(const regs_plan &p, bool *prefetch) {
  recap__cuda_device_facts dev;
  RECAP_TRY(recap__cuda_current_facts(&dev));
  *prefetch = p.grid <= (unsigned)dev.sms;
  return RECAP_OK;
}

/* Whether the register kernels may use 16-byte accesses: D a multiple of the vector, every row
 * start (the leading dims' strides) and every pointer (NULL: absent) on a 16-byte boundary. */
bool rows_vectorizable(const rows_info &ri, size_t elem, const void *x, const void *y,
                       const void *w, const void *b) {
  const int64_t vec = (int64_t)(16 / elem);
  if (ri.d % vec != 0) return false;
  for (int d = 0; d < 3; ++d)
    if (ri.rows_view.shape[d] > 1 && ri.rows_view.stride[d] % vec != 0) return false;
  for (const void *p : {x, y, w, b})
    if (((uintptr_t)p & 15u) != 0) return false;
  return true;
}

/* The register kernel for a plan: Kernel<kLanes, kVecs>::get(), for the (lanes, kvecs) pairs
 * that plan_regs makes: groups of 4-16 lanes with 1 or 2 slots, warps with 2 or 4, blocks of
 * 64-1024 threads with kBlockSlots. */
template <template <int, int> class Kernel>
auto regs_kernel_for(const regs_plan &p) -> decltype(Kernel<32, 2>::get()) {
  switch (p.lanes) {
    case 4:
      return p.kvecs == 1 ? Kernel<4, 1>::get() : Kernel<4, 2>::get();
    case 8:
      return p.kvecs == 1 ? Kernel<8, 1>::get() : Kernel<8, 2>::get();
    case 16:
      return p.kvecs == 1 ? Kernel<16, 1>::get() : Kernel<16, 2>::get();
    case 32:
      return p.kvecs == 2 ? Kernel<32, 2>::get() : Kernel<32, kWarpSlots>::get();
    case 64:
      return Kernel<64, kBlockSlots>::get();
    case 128:
      return Kernel<128, kBlockSlots>::get();
    case 256:
      return Kernel<256, kBlockSlots>::get();
    case 512:
      return Kernel<512, kBlockSlots>::get();
    default:
      return Kernel<1024, kBlockSlots>::get();
  }
}

template <typename T>
struct softmax_regs {
  template <int kLanes, int kVecs>
  struct at {
    static auto get() {
      return softmax_regs_kernel<T, kLanes, kVecs>;
    }
  };
};

template <typename T, bool kRms>
struct norm_regs {
  template <int kLanes, int kVecs>
  struct at {
    static auto get() {
      return norm_regs_kernel<T, kLanes, kVecs, kRms>;
    }
  };
};

}  // namespace

extern "C" recap_status recap__cuda_softmax(const recap__op_call *call, void *cuda_stream) {
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
    const regs_plan p = plan_regs(ri.d, ri.num_rows, sizeof(T));
    if (p.fits && rows_vectorizable(ri, sizeof(T), xp, yp, nullptr, nullptr)) {
      RECAP_CUDA_TRY(recap__cuda_launch(regs_kernel_for<softmax_regs<T>::template at>(p), p.grid,
                                        p.threads, 0, stream, xp, ri.rows_view, ri.row_stride, yp,
                                        ri.num_rows, ri.d, scale, causal, rows_per_matrix,
                                        causal_shift));
      return RECAP_OK;
    }
    /* Rows too long for registers, or not 16-byte accessible: the streaming kernel, a warp or a
     * block per row as rows_setup chose. */
    RECAP_CUDA_TRY(
        recap__cuda_launch(ri.block_mode ? softmax_kernel<T, true> : softmax_kernel<T, false>,
                           ri.grid, ri.threads, 0, stream, xp, ri.rows_view, yp, ri.num_rows, ri.d,
                           scale, causal, rows_per_matrix, causal_shift));
    return RECAP_OK;
  });
}

/* LayerNorm and RMSNorm share the launcher; kRms selects the kernel and the inputs. */
template <bool kRms>
static recap_status launch_norm(const recap__op_call *call, void *cuda_stream) {
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
    const regs_plan p = plan_norm(ri.d, ri.num_rows, sizeof(T));
    if (p.fits && rows_vectorizable(ri, sizeof(T), xp, yp, w, b)) {
      bool prefetch = false;
      RECAP_TRY(norm_prefetches(p, &prefetch));
      /* A block with one slot a thread comes from plan_norm's spread rows alone. */
      const auto kernel = p.kvecs == 1 && p.lanes > 32
                              ? (p.lanes == 64    ? norm_regs_kernel<T, 64, 1, kRms>
                                 : p.lanes == 128 ? norm_regs_kernel<T, 128, 1, kRms>
                                                  : norm_regs_kernel<T, 256, 1, kRms>)
                              : regs_kernel_for<norm_regs<T, kRms>::template at>(p);
      RECAP_CUDA_TRY(recap__cuda_launch(kernel, p.grid, p.threads, 0, stream, xp, ri.rows_view,
                                        ri.row_stride, w, b, yp, ri.num_rows, ri.d, eps, prefetch));
      return RECAP_OK;
    }
    /* As for softmax: the streaming kernel in rows_setup's geometry. */
    RECAP_CUDA_TRY(recap__cuda_launch(
        ri.block_mode ? norm_kernel<T, true, kRms> : norm_kernel<T, false, kRms>, ri.grid,
        ri.threads, 0, stream, xp, ri.rows_view, w, b, yp, ri.num_rows, ri.d, eps));
    return RECAP_OK;
  });
}

extern "C" recap_status recap__cuda_layernorm(const recap__op_call *call, void *cuda_stream) {
  return launch_norm<false>(call, cuda_stream);
}

extern "C" recap_status recap__cuda_rmsnorm(const recap__op_call *call, void *cuda_stream) {
  return launch_norm<true>(call, cuda_stream);
}

extern "C" recap_status recap__cuda_reduce_last(const recap__op_call *call, void *cuda_stream) {
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
