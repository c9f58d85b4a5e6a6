/*
 * sample.cu: argmax and sample on CUDA (semantics: kernels/cuda_ops.h; ranking and the draw:
 * kernels/sample.h), without sorting, in one launch.
 *
 * One block of 1024 threads per row; a row is read several times, from memory once and then
 * from the L2 (a Llama 3 row of 128256 f32 logits is 501 KiB; 64 of them fit the H100's L2).
 * A batch of few rows first cuts each row into slices, a block each (recap__sample_slices):
 * they read the row from memory together, each finds its slice's top-ranked token, and the
 * last to finish (an arrival count in the call's state) takes the best and runs the rest below
 * over the whole row alone, counting step 1's first digit in a pass of its own.
 *
 * 1. The top-ranked token: a block max of rank keys. Greedy rows (and argmax) end here, as
 *    does a row with a NaN. With top-k, the same pass counts the first radix digit.
 * 2. Top-k: radix selection of the k-th rank key over 11-bit digits, a histogram of 2048 bins
 *    in shared memory per digit, each pass counting only the tokens whose higher digits match
 *    those chosen so far; it stops as soon as the chosen bin is wholly in (usually after the
 *    second digit), the threshold then being that bin's lowest key.
 * 3. Top-p: the same selection over K's tokens, weighing each by its tempered probability; the
 *    first digit's histogram also gives K's total weight, from which the target mass comes.
 * 4. Min-p: a threshold on the logit itself, x >= m + T ln(min_p), rounded up to a float, so it
 *    selects exactly the tokens the host's double comparison does.
 * 5. The draw: each warp sums the kept weights of a contiguous 32nd of the row, the warp whose
 *    segment holds the target is found by a scan of the 32 sums; the 32 warps then split that
 *    segment the same way; and one warp walks the last piece in index order, 32 tokens at a
 *    time. The same pass sums the raw exponentials for the logprob.
 *
 * Weights are exp2f((x - m) log2(e) / T), in f32, held as 64-bit fixed point (weight x 2^s,
 * with s = 62 - bit length of V so that a row's sum cannot overflow): integer sums are exact
 * and independent of order, so the histogram atomics are deterministic, every level of the
 * draw agrees with the level above, and a replay (or another batch) gives the same token.
 * Weights below 2^-s of the largest round to 0 (2^-45 for V = 128256); such a token is never
 * drawn, where the host would draw it with probability below V 2^-s.
 *
 * Invalid parameters in a used row trap (recap__sample_params_error), as attention traps on a
 * bad length: the host reference fails the same rows.
 */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "kernels/cuda_common.cuh"
#include "kernels/cuda_ops.h"
#include "kernels/sample.h"
#include "runtime/cuda_check.h"

namespace {

using u64 = unsigned long long;

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr int kBins = 1 << RECAP__SAMPLE_DIGIT_BITS;
/* Vector loads issued together per thread before any is used: 64 KiB in flight per block. */
constexpr int kUnroll = 4;
constexpr unsigned kFullMask = 0xFFFFFFFFu;
constexpr float kLog2e = 1.4426950408889634f;

static_assert(kBins == 2 * kThreads, "each thread scans two bins");
static_assert(kWarps == 32, "one warp scans the warps' sums");

/* What the launcher fixes for every row. */
struct sample_args {
  const int32_t *seqs; /* nullptr: argmax (every row greedy, no parameters) */
  int64_t seqs_stride; /* elements between rows of seqs */
  int64_t row_stride;  /* elements between rows of logits */
  int vocab;
  float unit; /* 2^s: the fixed-point weight of the largest logit */
  int digits; /* recap__sample_digits */
  int shift[RECAP__SAMPLE_MAX_DIGITS], width[RECAP__SAMPLE_MAX_DIGITS];
  int32_t *tokens;
  float *logprobs; /* nullptr: not asked for */
  /* Sliced rows (gridDim.y slices a row, recap__sample_slices): logits per slice, each
   * slice's top rank (workspace, [rows, slices]) and each row's arrival count (call state,
   * zero at every launch and left zero). */
  int slice_len;
  u64 *partial;
  unsigned *arrivals;
};

struct sample_smem {
  uint32_t count[kBins];
  u64 mass[kBins];
  u64 scratch[kWarps];
  float fscratch[kWarps];
  u64 part[kWarps]; /* the warps' sums of kept weight at one level of the draw */
  int pick;         /* the bin or segment chosen, broadcast */
  bool last;        /* this block is its row's last slice to finish */
  u64 pick_below;   /* weight ranked above the chosen bin / before the chosen segment */
};

/* ================================ kernels ================================================ */

/* One row of logits: f(i, x_i) over elements of [begin, end) dealt to thread t of nt, VEC
 * consecutive ones per load (begin a multiple of VEC, the row 16-byte aligned when VEC > 1). */
template <typename T, int VEC>
struct row_in {
  const T *__restrict__ x;
  int n;

  template <typename F>
  __device__ __forceinline__ void each(int begin, int end, int t, int nt, F &&f) const {
    using vec = recap__vec<T, VEC>;
    const int64_t step = (int64_t)nt * VEC;
    int64_t i = begin + (int64_t)t * VEC;
    for (; i + (kUnroll - 1) * step + VEC <= end; i += kUnroll * step) {
      vec v[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) v[u] = *reinterpret_cast<const vec *>(x + i + u * step);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
#pragma unroll
        for (int j = 0; j < VEC; ++j) f((int)(i + u * step + j), recap__to_float(v[u].v[j]));
    }
    for (; i < end; i += step) {
      if (i + VEC <= end) {
        const vec v = *reinterpret_cast<const vec *>(x + i);
#pragma unroll
        for (int j = 0; j < VEC; ++j) f((int)(i + j), recap__to_float(v.v[j]));
      } else {
        for (int j = 0; i + j < end; ++j) f((int)(i + j), recap__to_float(x[i + j]));
      }
    }
  }

  __device__ __forceinline__ float at(int i) const {
    return recap__to_float(x[i]);
  }
};

__device__ __forceinline__ u64 rank_of(float x, int i, int vocab) {
  return recap__sample_rank(recap__sample_order_key(x), i, vocab);
}

__device__ __forceinline__ u64 warp_max_u64(u64 v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const u64 other = __shfl_xor_sync(kFullMask, v, o);
    v = other > v ? other : v;
  }
  return v;
}

__device__ __forceinline__ u64 warp_sum_u64(u64 v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}

__device__ __forceinline__ u64 warp_scan_u64(u64 v) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const u64 below = __shfl_up_sync(kFullMask, v, o);
    if (lane >= o) v += below;
  }
  return v;
}

/* The block's largest value, to every thread; `scratch` is reusable when it returns. */
__device__ __forceinline__ u64 block_max_u64(u64 v, u64 *scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warp_max_u64(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = warp_max_u64(scratch[lane]);
  __syncthreads();
  return v;
}

/* Inclusive prefix sum over the block in thread order; *total gets the block's sum. */
__device__ __forceinline__ u64 block_scan_u64(u64 v, u64 *scratch, u64 *total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warp_scan_u64(v);
  if (lane == 31) scratch[warp] = v;
  __syncthreads();
  const u64 warps = warp_scan_u64(scratch[lane]); /* lane j: warps 0..j */
  const u64 before = __shfl_sync(kFullMask, warps, warp > 0 ? warp - 1 : 0);
  *total = __shfl_sync(kFullMask, warps, 31);
  __syncthreads();
  return warp > 0 ? v + before : v;
}

/* Run by one whole warp: of the 32 parts (lane j holds part j), the first whose running sum
 * exceeds `goal`, and the goal's remainder within it. goal < the parts' sum, always (the
 * parts partition what the goal was taken from, in exact integers), so one part is found. */
__device__ __forceinline__ void pick_part(u64 own, u64 goal, int *index, u64 *rest) {
  const u64 run = warp_scan_u64(own);
  const int k = __ffs(__ballot_sync(kFullMask, run > goal)) - 1;
  *index = k;
  *rest = goal - __shfl_sync(kFullMask, run - own, k);
}

/* Radix selection (as host/sample.c's select_rank): the threshold rank key at which the tokens
 * ranked at or above it (and at or above `floor`) first weigh `target` in count (mass false)
 * or, mass true, `fraction` of their total fixed-point weight. With counted_first, the first
 * digit's counts are already in the bins (pass 1 made them). */
template <typename T, int VEC, typename Weight>
__device__ u64 select_rank(const row_in<T, VEC> &in, const sample_args &a, sample_smem &sm,
                           const Weight &weight, bool mass, u64 floor, u64 target, float fraction,
                           bool counted_first) {
  const int tid = threadIdx.x;
  u64 prefix = 0, mask = 0, above = 0;
  for (int d = 0; d < a.digits; ++d) {
    const int shift = a.shift[d], bins = 1 << a.width[d];
    if (!(d == 0 && counted_first)) {
      sm.count[2 * tid] = sm.count[2 * tid + 1] = 0;
      sm.mass[2 * tid] = sm.mass[2 * tid + 1] = 0;
      __syncthreads();
      in.each(0, in.n, tid, kThreads, [&](int i, float x) {
        const u64 c = rank_of(x, i, a.vocab);
        if (c < floor || (c & mask) != prefix) return;
        const int b = (int)((c >> shift) & (u64)(bins - 1));
        atomicAdd(&sm.count[b], 1u);
        if (mass) {
          const u64 w = weight(x);
          if (w) atomicAdd(&sm.mass[b], w);
        }
      });
      __syncthreads();
    }
    /* Thread t holds bins hi and hi - 1, hi = bins - 1 - 2t: thread order is rank order. */
    const int hi = bins - 1 - 2 * tid, lo = hi - 1;
    const u64 w_hi = hi < 0 ? 0 : mass ? sm.mass[hi] : sm.count[hi];
    const u64 w_lo = lo < 0 ? 0 : mass ? sm.mass[lo] : sm.count[lo];
    u64 total;
    const u64 run = block_scan_u64(w_hi + w_lo, sm.scratch, &total);
    if (mass && d == 0) {
      /* Top-p's target: TOP_P of K's weight, at least one unit, at most all of it. */
      const double want = ceil((double)fraction * (double)total);
      target = want < 1.0 ? 1 : want >= (double)total ? total : (u64)want;
    }
    const u64 before = above + run - (w_hi + w_lo);
    if (before < target && before + w_hi + w_lo >= target) {
      const bool take_hi = before + w_hi >= target;
      sm.pick = take_hi ? hi : lo;
      sm.pick_below = take_hi ? before : before + w_hi;
    }
    __syncthreads();
    const int b = sm.pick;
    above = sm.pick_below;
    prefix |= (u64)b << shift;
    mask |= (u64)(bins - 1) << shift;
    const uint32_t held = sm.count[b];
    const bool whole_bin_in = held == 1 || (!mass && above + held == target);
    __syncthreads(); /* every thread has read the bins and the pick before they change */
    if (whole_bin_in) break;
  }
  return prefix;
}

/* The smallest float >= m + T ln(min_p) (computed in double, without a fused multiply-add,
 * as the host computes it), so that x >= it exactly when (double)x >= the double bound. */
__device__ __forceinline__ float min_p_logit(float m, float temperature, float min_p) {
  const double bound = __dadd_rn((double)m, __dmul_rn((double)temperature, log((double)min_p)));
  float f = (float)bound;
  if ((double)f < bound) f = nextafterf(f, INFINITY);
  return f;
}

/* sum_i exp(x_i - m) over the row (1 for x_i == m), to every thread: the raw softmax's sum. */
template <typename T, int VEC>
__device__ float raw_sum(const row_in<T, VEC> &in, float m, sample_smem &sm) {
  float z = 0.0f;
  in.each(0, in.n, threadIdx.x, kThreads,
          [&](int, float x) { z += x == m ? 1.0f : exp2f((x - m) * kLog2e); });
  return recap__block_sum(z, sm.fscratch);
}

__device__ __forceinline__ float raw_logprob(float x, float m, float sum) {
  return (x == m ? 0.0f : x - m) - logf(sum);
}

template <typename T, int VEC>
__global__ void __launch_bounds__(kThreads)
    sample_kernel(const T *__restrict__ logits, const sample_args a) {
  recap__pdl_begin();
  __shared__ sample_smem sm;
  const int row = blockIdx.x, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int vocab = a.vocab;
  const row_in<T, VEC> in = {logits + (int64_t)row * a.row_stride, vocab};

  const int slice = blockIdx.y, slices = gridDim.y;

  recap__sample_params p = {};
  bool greedy = true;
  if (a.seqs) {
    p = recap__sample_params_read(a.seqs + (int64_t)row * a.seqs_stride);
    if (p.q_len == 0) {
      if (tid == 0 && slice == 0) {
        a.tokens[row] = -1;
        if (a.logprobs) a.logprobs[row] = 0.0f;
      }
      return;
    }
    if (recap__sample_params_error(&p)) __trap();
    greedy = recap__sample_is_greedy(&p);
  }

  /* 1. The top-ranked token (of the block's slice); with top-k, the first digit's counts of
   * every token. */
  const bool top_k_on = !greedy && p.top_k > 0 && p.top_k < vocab;
  const int first_shift = a.shift[0] - 32;
  const auto zero_counts = [&] {
    sm.count[2 * tid] = sm.count[2 * tid + 1] = 0;
    __syncthreads();
  };
  const auto count_first_digit = [&](float x) {
    atomicAdd(&sm.count[recap__sample_order_key(x) >> first_shift], 1u);
  };
  const bool counts_here = top_k_on && slices == 1;
  if (counts_here) zero_counts();
  /* A thread meets its tokens in increasing id order, so keeping the first of its largest
   * order keys (32-bit compares) keeps its top rank; the block then compares rank keys. Key 0
   * is below every logit's. The first digit of a rank key is the top of its order key. */
  const int slice_begin = min(slice * a.slice_len, vocab);
  const int slice_end = min(slice_begin + a.slice_len, vocab);
  uint32_t best_key = 0;
  int best = 0;
  in.each(slice_begin, slice_end, tid, kThreads, [&](int i, float x) {
    const uint32_t k = recap__sample_order_key(x);
    if (k > best_key) best_key = k, best = i;
    if (counts_here) count_first_digit(x);
  });
  u64 top = block_max_u64(recap__sample_rank(best_key, best, vocab), sm.scratch);
  if (slices > 1) {
    /* Count this slice in once its top rank is visible GPU-wide; the row's last slice takes
     * the best of them (a max: the order of arrival does not matter) and goes on alone, the
     * row now in the L2. */
    u64 *ranks = a.partial + (int64_t)row * slices;
    if (tid == 0) ranks[slice] = top;
    __threadfence();
    __syncthreads();
    if (tid == 0) {
      unsigned *count = a.arrivals + row;
      sm.last = atomicAdd(count, 1u) == (unsigned)slices - 1;
      if (sm.last) *count = 0; /* every slice has arrived: zero for the next launch */
    }
    __syncthreads();
    if (!sm.last) return;
    __threadfence();
    top = block_max_u64(tid < slices ? __ldcg(ranks + tid) : 0, sm.scratch);
    if (top_k_on) {
      zero_counts();
      in.each(0, vocab, tid, kThreads, [&](int, float x) { count_first_digit(x); });
      __syncthreads();
    }
  }
  const uint32_t top_key = (uint32_t)(top >> 32);
  const int top_index = (int)recap__sample_rank_index(top, vocab);
  if (greedy || top_key == RECAP__SAMPLE_NAN_KEY) {
    float logprob = NAN;
    if (a.logprobs && top_key != RECAP__SAMPLE_NAN_KEY) {
      const float m = recap__sample_order_value(top_key);
      logprob = raw_logprob(m, m, raw_sum(in, m, sm));
    }
    if (tid == 0) {
      a.tokens[row] = top_index;
      if (a.logprobs) a.logprobs[row] = logprob;
    }
    return;
  }

  const float m = recap__sample_order_value(top_key);
  const float scale = (float)(1.4426950408889634 / (double)p.temperature); /* log2(e) / T */
  const auto weight = [&](float x) -> u64 {
    const float e = x == m ? 1.0f : exp2f((x - m) * scale);
    return __float2ull_rn(e * a.unit);
  };

  /* 2, 3. Thresholds on rank keys: tokens ranked below `floor` are out. */
  u64 floor = 0;
  if (top_k_on)
    floor = select_rank(in, a, sm, weight, false, 0, (u64)p.top_k, 0.0f, /*counted_first=*/true);
  if (p.top_p > 0.0f && p.top_p < 1.0f) {
    const u64 top_p_floor = select_rank(in, a, sm, weight, true, floor, 0, p.top_p, false);
    floor = top_p_floor > floor ? top_p_floor : floor;
  }
  /* 4. */
  const float min_logit = p.min_p > 0.0f ? min_p_logit(m, p.temperature, p.min_p) : -INFINITY;
  const auto kept_weight = [&](int i, float x) -> u64 {
    return rank_of(x, i, vocab) >= floor && x >= min_logit ? weight(x) : 0;
  };

  /* 5. Level 1: a contiguous segment per warp (a multiple of 32 vectors, so every segment and
   * every 32nd of one starts aligned). */
  const int seg = (int)RECAP_CEIL_DIV(RECAP_CEIL_DIV((int64_t)vocab, kWarps), 32 * VEC) * 32 * VEC;
  const int sub = seg / kWarps;
  {
    const int64_t b0 = (int64_t)warp * seg;
    const int begin = (int)(b0 < vocab ? b0 : vocab);
    const int end = (int)(b0 + seg < vocab ? b0 + seg : vocab);
    u64 mine = 0;
    float z = 0.0f;
    in.each(begin, end, lane, 32, [&](int i, float x) {
      mine += kept_weight(i, x);
      if (a.logprobs) z += x == m ? 1.0f : exp2f((x - m) * kLog2e);
    });
    mine = warp_sum_u64(mine);
    if (lane == 0) sm.part[warp] = mine;
    const float raw = a.logprobs ? recap__block_sum(z, sm.fscratch) : 0.0f;
    __syncthreads();
    if (warp == 0) {
      const u64 total = warp_sum_u64(sm.part[lane]);
      /* floor(u x total), u = u53 / 2^53: the high word of (u53 2^11) x total. */
      const u64 goal = __umul64hi(recap__sample_u53(p.seed, p.out_index) << 11, total);
      int index;
      u64 rest;
      pick_part(sm.part[lane], goal, &index, &rest);
      if (lane == 0) {
        sm.pick = index;
        sm.pick_below = rest;
      }
    }
    __syncthreads();
    const int s0 = sm.pick * seg;
    const u64 goal = sm.pick_below;
    __syncthreads();

    /* Level 2: the 32 warps split that segment. */
    const int s_end = s0 + seg < vocab ? s0 + seg : vocab;
    const int c0 = s0 + warp * sub < s_end ? s0 + warp * sub : s_end;
    const int c_end = c0 + sub < s_end ? c0 + sub : s_end;
    mine = 0;
    in.each(c0, c_end, lane, 32, [&](int i, float x) { mine += kept_weight(i, x); });
    mine = warp_sum_u64(mine);
    if (lane == 0) sm.part[warp] = mine;
    __syncthreads();

    /* Level 3: one warp walks the chosen 32nd in index order, 32 tokens at a time. */
    if (warp == 0) {
      int index;
      u64 rest;
      pick_part(sm.part[lane], goal, &index, &rest);
      const int t0 = s0 + index * sub;
      const int t_end = t0 + sub < s_end ? t0 + sub : s_end;
      int token = -1;
      for (int base = t0; base < t_end && token < 0; base += 32) {
        const int i = base + lane;
        const u64 w = i < t_end ? kept_weight(i, in.at(i)) : 0;
        const u64 run = warp_scan_u64(w);
        const unsigned hit = __ballot_sync(kFullMask, run > rest);
        if (hit)
          token = base + __ffs(hit) - 1;
        else
          rest -= __shfl_sync(kFullMask, run, 31);
      }
      if (lane == 0) {
        a.tokens[row] = token;
        if (a.logprobs) a.logprobs[row] = raw_logprob(in.at(token), m, raw);
      }
    }
  }
}

/* ================================ launchers ============================================== */

/* The fixed-point exponent s: a row's weights sum to at most V 2^s < 2^62. */
int fixed_point_shift(int64_t vocab) {
  int bits = 0;
  while (bits < 63 && (vocab >> bits) != 0) ++bits;
  return 62 - bits;
}

template <typename T>
recap_status launch_rows(const recap__op_call *call, const int32_t *seqs, int64_t seqs_stride,
                         int32_t *tokens, float *logprobs, cudaStream_t stream) {
  const recap_tensor *x = &call->inputs[0];
  const int64_t rows = x->shape[0], vocab = x->shape[1];
  /* Rows index the grid; 2^30 logits a row keep the draw's segment arithmetic in int. */
  if (rows > INT32_MAX || vocab > (1 << 30))
    return RECAP_FAIL(RECAP_STATUS_NOT_SUPPORTED,
                      "op '%s': %lld rows of %lld logits exceed the CUDA kernel's limits (2^31 - 1 "
                      "rows, 2^30 logits a row)",
                      call->def->name, (long long)rows, (long long)vocab);
  sample_args a;
  a.seqs = seqs;
  a.seqs_stride = seqs_stride;
  a.row_stride = x->strides[0];
  a.vocab = (int)vocab;
  a.unit = ldexpf(1.0f, fixed_point_shift(vocab));
  a.digits = recap__sample_digits(vocab, a.shift, a.width);
  a.tokens = tokens;
  a.logprobs = logprobs;
  const int slices = recap__sample_slices(rows, vocab);
  a.slice_len = (int)recap__sample_slice_len(vocab, slices);
  a.partial = static_cast<u64 *>(call->workspace);
  a.arrivals = static_cast<unsigned *>(call->call_state);
  if (slices > 1) {
    const size_t ranks = (size_t)rows * (size_t)slices * sizeof(u64);
    const size_t counts = (size_t)rows * sizeof(unsigned);
    if (!a.partial || call->workspace_bytes < ranks || !a.arrivals ||
        call->call_state_bytes < counts)
      return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                        "op '%s': %lld rows of %lld logits cut in %d slices need a workspace of "
                        "%zu bytes and a zeroed call state of %zu bytes (recap__op_def's "
                        "workspace_bytes and call_state_bytes)",
                        call->def->name, (long long)rows, (long long)vocab, slices, ranks, counts);
  }
  const T *data = static_cast<const T *>(x->data);
  constexpr int kVec = 16 / (int)sizeof(T);
  /* 16-byte loads need every row 16-byte aligned. */
  const bool vectors =
      ((uintptr_t)data & 15u) == 0 && (rows == 1 || (x->strides[0] * (int64_t)sizeof(T)) % 16 == 0);
  const dim3 grid((unsigned)rows, (unsigned)slices), block(kThreads);
  if (vectors)
    RECAP_CUDA_TRY(recap__cuda_launch(sample_kernel<T, kVec>, grid, block, 0, stream, data, a));
  else
    RECAP_CUDA_TRY(recap__cuda_launch(sample_kernel<T, 1>, grid, block, 0, stream, data, a));
  return RECAP_OK;
}

/* What both entry points check: logits [R, V] with unit-stride rows, outputs i32 [R]. */
recap_status check_logits(const recap__op_call *call) {
  const recap_tensor *x = &call->inputs[0], *tokens = &call->outputs[0];
  if (x->ndim != 2 || (x->shape[1] > 1 && x->strides[1] != 1) || tokens->dtype != RECAP_DTYPE_I32 ||
      recap__tensor_numel(tokens) != x->shape[0] || !x->data || !tokens->data)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "op '%s': needs logits [R, V] with unit-stride rows and an i32 output of "
                      "R elements",
                      call->def->name);
  return RECAP_OK;
}

}  // namespace

extern "C" recap_status recap__cuda_argmax(const recap__op_call *call, void *cuda_stream) {
  recap__cuda_launch_range range(call->def->name);
  RECAP_TRY(check_logits(call));
  cudaStream_t stream = static_cast<cudaStream_t>(cuda_stream);
  int32_t *tokens = static_cast<int32_t *>(call->outputs[0].data);
  return recap__cuda_dispatch_float(call->inputs[0].dtype, call->def->name, [&](auto tag) {
    return launch_rows<decltype(tag)>(call, nullptr, 0, tokens, nullptr, stream);
  });
}

extern "C" recap_status recap__cuda_sample(const recap__op_call *call, void *cuda_stream) {
  recap__cuda_launch_range range(call->def->name);
  RECAP_TRY(check_logits(call));
  const recap_tensor *seqs = &call->inputs[1];
  const recap_tensor *logprobs = call->num_outputs > 1 ? &call->outputs[1] : NULL;
  if (seqs->dtype != RECAP_DTYPE_I32 || seqs->ndim != 2 ||
      seqs->shape[0] != call->inputs[0].shape[0] || seqs->shape[1] < RECAP_SEQ_MIN_P + 1 ||
      seqs->strides[1] != 1 || !seqs->data)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "op '%s': needs seqs i32 [R, W >= %d] with unit-stride rows, R the rows "
                      "of the logits",
                      call->def->name, RECAP_SEQ_MIN_P + 1);
  if (logprobs && (logprobs->dtype != RECAP_DTYPE_F32 ||
                   recap__tensor_numel(logprobs) != call->inputs[0].shape[0] || !logprobs->data))
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "op '%s': the logprobs output must be f32 with one element per row",
                      call->def->name);
  cudaStream_t stream = static_cast<cudaStream_t>(cuda_stream);
  int32_t *tokens = static_cast<int32_t *>(call->outputs[0].data);
  float *lp = logprobs ? static_cast<float *>(logprobs->data) : nullptr;
  return recap__cuda_dispatch_float(call->inputs[0].dtype, call->def->name, [&](auto tag) {
    return launch_rows<decltype(tag)>(call, static_cast<const int32_t *>(seqs->data),
                                      seqs->strides[0], tokens, lp, stream);
  });
}
