/*
 * skinny.cu: the skinny GEMM of the decode case, out[m, n] = act(alpha * x[m, :] .
 * W[n, :] + bias[n]) + residual[m, n] for m <= 16, f16 or bf16 (f32 accumulate), W stored
 * [N, K] with unit stride along K (a linear layer's weight). cuBLASLt streams W at ~65% of copy
 * bandwidth here; two kernels follow (measurements in docs/perf/skinny_gemm.md): the register
 * kernel (76-80%; the default before Hopper) and, on Hopper, the bulk-copy kernel (81-93%),
 * described above bulk_kernel.
 *
 * Shape of the work: one block per 16 rows of W, its warps taking groups of K steps in turn
 * (so together they read one contiguous stretch of the 16 rows at a time); per 32-wide step
 * of K, each lane loads 16 bytes of W row g and of row g + 8 (g = lane / 4) and 16 bytes of x
 * row g (and g + 8 when m > 8), and two tensor-core mmas (m16n8k16) consume them. The mma
 * reduces over k in any order, so the lane's 8 consecutive k elements of W are fed as its
 * A-fragment pairs and the same 8 of x as its B-fragment pairs: both operands come straight
 * from the 16-byte loads with no shuffles or shared memory. The warps' 16 x m partial tiles
 * are summed in shared memory in a fixed order (deterministic results, so graph replays are
 * bit-identical), then alpha, bias, the activation and the residual are applied once per
 * output element, rounded once. The residual is a linear's skip connection (a folded `add`,
 * engine/fuse.h): adding it here rather than in a pass after the kernel makes the fold one
 * launch, where a decode step has one per layer's attention output and MLP down projection.
 *
 * Loads in flight: two register buffers of 4 steps (2 when m > 8); the next group's loads are
 * issued before the current group's mmas wait, so a warp keeps 8 to 16 W loads of 16 bytes in
 * flight per lane, and 16 warps per SM (two 8-warp blocks at N = 4096).
 *
 * Programmatic dependent launch (Hopper): launched with `pdl`, the kernel lets the next
 * kernel on the stream start as soon as all its blocks run, and it prefetches its first steps
 * of W into L2 before waiting for the previous kernel (griddepcontrol.wait). A layer's
 * weights never depend on the previous op in the cases that matter, but they may in general
 * (a matmul whose b the previous op wrote), so nothing is read into registers before the
 * wait: an L2 prefetch is only a hint and L2 is coherent. Every block waits before it exits,
 * so a grid's completion still implies its predecessor's.
 */
#include <cuda_runtime.h>
#include <stdint.h>

#include "kernels/cuda_common.cuh"
#include "kernels/gemm/async.cuh"
#include "kernels/gemm/gemm.h"
#include "runtime/cuda_check.h"

namespace {

constexpr int kRows = 16;     /* W rows per block: the mma's M */
constexpr int kStepK = 32;    /* K per step: 4 lanes x 8 elements per row */
constexpr int kMaxWarps = 16; /* per block; 512 threads at <= 128 registers */
constexpr int kMaxM = 16;

/* 8-row tiles of x a launch needs (the mma's N is 8): every kernel is instantiated for 1 and 2,
 * and its host-side shared memory and wave sizes follow the same count. */
__host__ __device__ constexpr int x_tiles(int64_t m) {
  return m <= 8 ? 1 : 2;
}

/* ================================ kernels ================================================ */

struct skinny_args {
  const void *x, *w, *bias;
  const void *residual; /* contiguous [m, n] like out, or NULL */
  void *out;
  int m, n, k;
  int64_t ldx, ldw; /* elements between rows of x and of W */
  float alpha;
  recap__activation act;
  int pdl; /* launched as a programmatic dependent: prefetch W into L2 before waiting */
  /* W rows each 16-row tile takes (1-16; 16 for a gated output and the register kernels): the
   * bulk launcher takes fewer where 16-row tiles would leave SMs idle (balanced_tile_rows);
   * the mma still runs 16 rows, the others stale and never stored. */
  int tile_rows;
  /* The prologue (gemm.h), a template parameter of the kernels: RMS_NORM reads x * gamma and
   * scales row b's dot products by rsqrt(ss_b / k + eps), ss_b the block's own sum of x^2 of
   * row b. The gated unit (GLU) has no variant: it gave different bits from run to run on the
   * H100 and was removed (docs/SERVING.md, "Prologue folds"); skinny_fits refuses it. */
  const void *gamma;
  float eps;
  /* A gated output (gemm.h; NONE: off): W has 2n rows, gate rows then up rows, and out [m, n]
   * = gated(gate) * up. Each 16-row tile of a block then holds 8 output columns' gate rows
   * followed by their up rows (w_row), so the pair meets in the block's epilogue. */
  recap__activation gated;
};

/* The row of W behind row r (0-15) of 16-row tile `tile` (counted over the grid), and whether
 * it exists: row tile_rows * tile + r for r < tile_rows, or for a gated output tile's 8 columns
 * 8 tile + r % 8 as gate rows (r < 8) and as up rows (r >= 8, n rows further). */
__device__ __forceinline__ int64_t w_row(const skinny_args &a, int64_t tile, int r, bool &in) {
  if (a.gated != RECAP_ACT_NONE) {
    const int64_t col = 8 * tile + (r & 7);
    in = col < a.n;
    return col + (r >= 8 ? a.n : 0);
  }
  const int64_t row = (int64_t)a.tile_rows * tile + r;
  in = r < a.tile_rows && row < a.n;
  return row;
}

/* Rows of W the grid covers: 2n for a gated output. */
__host__ __device__ __forceinline__ int64_t w_rows(const skinny_args &a) {
  return a.gated != RECAP_ACT_NONE ? 2 * (int64_t)a.n : a.n;
}

/* Tiles of `rt` 16-row tiles of W: the bulk kernel's unit of work, which its launcher sizes the
 * grid by and the kernel strides over. */
__host__ __device__ __forceinline__ int64_t block_tiles(const skinny_args &a, int rt) {
  return RECAP_CEIL_DIV(w_rows(a), (int64_t)a.tile_rows * rt);
}

constexpr int kProNone = RECAP__GEMM_PROLOGUE_NONE, kProRms = RECAP__GEMM_PROLOGUE_RMS_NORM;

/* 8 elements of T in one 16-byte register group. */
template <typename T>
union pack8 {
  uint4 raw;
  T v[8];
};

/* The prologue on the lane's 8 x elements as they enter the mma: RMS_NORM adds their squares to
 * ss (the raw x, before gamma) and returns x * gamma, rounded once to T, as the unfolded op's
 * output was (the norm's rsqrt is applied after the product, in f32). */
template <typename T, int kPro>
__device__ __forceinline__ uint4 prologue_x(uint4 x, uint4 gamma, float &ss) {
  if constexpr (kPro == kProNone) {
    return x;
  } else {
    pack8<T> a, b, out;
    a.raw = x;
    b.raw = gamma;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const float v = recap__to_float(a.v[i]);
      ss = fmaf(v, v, ss);
      out.v[i] = recap__from_float<T>(v * recap__to_float(b.v[i]));
    }
    return out.raw;
  }
}

/* The prologue's rows in shared memory after the main loop: row b's sum of squares from each
 * warp (RMS_NORM), summed over the warps in a fixed order so every block, and every replay,
 * gets the same scale. The lanes of a row (same g, tig 0-3) first add theirs by shuffles. */
template <int NT, int W>
__device__ __forceinline__ void store_row_squares(float (&ssw)[W][kMaxM], const float (&ss)[NT],
                                                  int warp, int g, int tig) {
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    float v = ss[t];
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    v += __shfl_xor_sync(0xffffffffu, v, 2);
    if (tig == 0) ssw[warp][8 * t + g] = v;
  }
}

/* RMSNorm's factor of a row whose squares sum to `sum_squares` over the K columns. */
__device__ __forceinline__ float rms_factor(float sum_squares, const skinny_args &a) {
  return rsqrtf(sum_squares / (float)a.k + a.eps);
}

/* The factor of row b's dot products: rsqrt(mean square + eps) for RMS_NORM, else 1. */
template <int kPro, int W>
__device__ __forceinline__ float row_scale(const float (&ssw)[W][kMaxM], int warps, int b,
                                           const skinny_args &a) {
  if constexpr (kPro != kProRms) {
    return 1.0f;
  } else {
    float s = 0.0f;
    for (int w = 0; w < warps; ++w) s += ssw[w][b];
    return rms_factor(s, a);
  }
}

/* The factor of row b's dot products in the bulk kernel: rsqrt(mean square + eps) from the
 * row's summed squares with the norm's prologue, else 1. */
template <bool kNorm>
__device__ __forceinline__ float bulk_row_scale(const float *row_ss, int b, const skinny_args &a) {
  if constexpr (kNorm)
    return rms_factor(row_ss[b], a);
  else
    return 1.0f;
}

/* An L2 cache policy that marks lines first to leave (cheap: one instruction per thread). */
__device__ __forceinline__ uint64_t evict_first_policy() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  return policy;
}

/* 16 bytes of W: read once per launch, so kept out of L1 (x lives there) and marked first to
 * leave L2, so lines a dependent kernel prefetched survive this kernel's stream. volatile
 * keeps every load after the grid-dependency wait. */
__device__ __forceinline__ uint4 load_stream(const void *p, uint64_t policy) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p), "l"(policy));
  return v;
}

/* 16 bytes of x (reused by every block on the SM, so cached in L1). volatile for the same
 * ordering reason: x is what the previous kernel wrote. */
__device__ __forceinline__ uint4 load_cached(const void *p) {
  uint4 v;
  asm volatile("ld.global.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

__device__ __forceinline__ void prefetch_l2(const void *p) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}

/* Waits until the previous kernel on the stream has completed and its writes are visible
 * (returns at once when this grid was not launched as a programmatic dependent). */
__device__ __forceinline__ void wait_for_previous_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

/* Lets the next kernel on the stream be scheduled once every block of this grid has run this
 * (it still waits for our completion before reading what we write). */
__device__ __forceinline__ void allow_next_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;");
#endif
}

/* d += A (16 x 16, row-major fragment a) * B (16 x 8, column fragment b0, b1), f32 accumulate. */
template <typename T>
__device__ __forceinline__ void mma16816(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                         uint32_t a3, uint32_t b0, uint32_t b1);

template <>
__device__ __forceinline__ void mma16816<__nv_bfloat16>(float (&d)[4], uint32_t a0, uint32_t a1,
                                                        uint32_t a2, uint32_t a3, uint32_t b0,
                                                        uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

template <>
__device__ __forceinline__ void mma16816<__half>(float (&d)[4], uint32_t a0, uint32_t a1,
                                                 uint32_t a2, uint32_t a3, uint32_t b0,
                                                 uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* One group of kSteps K steps as the lane holds it: W rows g and g + 8, x rows 8t + g, and
 * gamma's same 8 elements (RMS_NORM, one for every row). */
template <int NT, int kSteps, int kPro>
struct group_regs {
  static constexpr int kGammaSteps = kPro == kProRms ? kSteps : 1;
  uint4 wa[kSteps], wb[kSteps], xv[NT][kSteps];
  uint4 gamma[kGammaSteps];
};

/* Loads the group of steps [s, s + kSteps) clipped to [0, limit) and to K; steps outside are
 * zeros (no memory traffic), so a group past the end costs only its mmas on zeros. */
template <int NT, int kSteps, int kPro, typename T>
__device__ __forceinline__ void load_group(group_regs<NT, kSteps, kPro> &r, int s, int limit, int k,
                                           int tig, const T *w0, const T *w1,
                                           const T *const (&xr)[NT], const T *gp, uint64_t policy) {
  const uint4 zero = make_uint4(0, 0, 0, 0);
  if (s + kSteps <= limit && (s + kSteps) * kStepK <= k) {
    /* The common case: every load of the group is in range, none is predicated. */
#pragma unroll
    for (int u = 0; u < kSteps; ++u) {
      const int off = (s + u) * kStepK;
      r.wa[u] = load_stream(w0 + off, policy);
      r.wb[u] = load_stream(w1 + off, policy);
#pragma unroll
      for (int t = 0; t < NT; ++t) r.xv[t][u] = load_cached(xr[t] + off);
      if constexpr (kPro == kProRms) r.gamma[u] = load_cached(gp + off);
    }
  } else {
#pragma unroll
    for (int u = 0; u < kSteps; ++u) {
      const int off = (s + u) * kStepK;
      /* K % 8 == 0 (the launcher checks), so a lane's 8 elements are all in or all out. */
      const bool in = s + u < limit && off + 8 * tig < k;
      r.wa[u] = in ? load_stream(w0 + off, policy) : zero;
      r.wb[u] = in ? load_stream(w1 + off, policy) : zero;
#pragma unroll
      for (int t = 0; t < NT; ++t) r.xv[t][u] = in ? load_cached(xr[t] + off) : zero;
      if constexpr (kPro == kProRms) r.gamma[u] = in ? load_cached(gp + off) : zero;
    }
  }
}

template <typename T, int NT, int kSteps, int kPro>
__device__ __forceinline__ void mma_group(float (&acc)[NT][4],
                                          const group_regs<NT, kSteps, kPro> &r, float (&ss)[NT]) {
#pragma unroll
  for (int u = 0; u < kSteps; ++u) {
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      /* Without a prologue gamma is never read: x stands in for it. */
      const uint4 gamma = kPro == kProRms ? r.gamma[kPro == kProRms ? u : 0] : r.xv[t][u];
      const uint4 xv = prologue_x<T, kPro>(r.xv[t][u], gamma, ss[t]);
      /* Elements 0-3 of the lane's 8 are the first mma's k pairs, 4-7 the second's. */
      mma16816<T>(acc[t], r.wa[u].x, r.wb[u].x, r.wa[u].y, r.wb[u].y, xv.x, xv.y);
      mma16816<T>(acc[t], r.wa[u].z, r.wb[u].z, r.wa[u].w, r.wb[u].w, xv.z, xv.w);
    }
  }
}

/* The epilogue of one output element (x row b, W row j) from its f32 product: bias, the
 * activation and the residual in f32, one rounding. Both kernels call it after the grid
 * dependency wait, so the residual (often written by a recent kernel) is visible. */
template <typename T>
__device__ __forceinline__ void store_output(const skinny_args &a, int b, int64_t j, float v) {
  const int64_t at = (int64_t)b * a.n + j;
  if (a.bias) v += recap__to_float(static_cast<const T *>(a.bias)[j]);
  v = recap__gemm_activate(a.act, v);
  if (a.residual) v += recap__to_float(static_cast<const T *>(a.residual)[at]);
  static_cast<T *>(a.out)[at] = recap__from_float<T>(v);
}

/* The epilogue of a gated output element (x row b, output column j) from the f32 products of
 * its gate and up rows: each gets its bias and is rounded to T, as the unfolded linear's output
 * was; then act(gate) * up in f32 (the host reference's activation), rounded once. */
template <typename T>
__device__ __forceinline__ void store_gated(const skinny_args &a, int b, int64_t j, float gate,
                                            float up) {
  const T *bias = static_cast<const T *>(a.bias);
  if (bias) {
    gate += recap__to_float(bias[j]);
    up += recap__to_float(bias[a.n + j]);
  }
  const float g = recap__to_float(recap__from_float<T>(gate));
  const float u = recap__to_float(recap__from_float<T>(up));
  static_cast<T *>(a.out)[(int64_t)b * a.n + j] =
      recap__from_float<T>(recap__gemm_activate(a.gated, g) * u);
}

/* T: storage type. NT: 8-row tiles of x (1 for m <= 8, 2 for m <= 16). kSteps: K steps whose
 * loads are issued together. kPipe: two register buffers, the next group's loads issued
 * before the current group's mmas wait on theirs (so a warp never drains to zero loads in
 * flight); without it, one buffer of twice the steps. Both stay within 128 registers. */
template <typename T, int NT, int kSteps, bool kPipe, int kPro>
__global__ void __launch_bounds__(kMaxWarps * 32) skinny_kernel(const skinny_args a) {
  __shared__ float partial[kMaxWarps][kMaxM][kRows + 1];        /* [warp][x row][W row] */
  __shared__ float ssw[kPro == kProRms ? kMaxWarps : 1][kMaxM]; /* RMS_NORM: [warp][x row] */
  allow_next_grid();

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const int g = lane >> 2, tig = lane & 3;
  const int64_t n0 = (int64_t)blockIdx.x * kRows;
  /* Rows past W read row 0 (valid memory); their results are never stored. */
  bool in0, in1;
  int64_t r0 = w_row(a, blockIdx.x, g, in0), r1 = w_row(a, blockIdx.x, g + 8, in1);
  r0 = in0 ? r0 : 0;
  r1 = in1 ? r1 : 0;
  const T *w0 = static_cast<const T *>(a.w) + r0 * a.ldw + 8 * tig;
  const T *w1 = static_cast<const T *>(a.w) + r1 * a.ldw + 8 * tig;
  /* x rows past m read row 0: an mma's output column depends on its own B column only, so
   * those columns hold finite garbage that is never stored, and no load needs a predicate. */
  const T *xr[NT];
#pragma unroll
  for (int t = 0; t < NT; ++t)
    xr[t] = static_cast<const T *>(a.x) + (8 * t + g < a.m ? (8 * t + g) * a.ldx : 0) + 8 * tig;
  /* Groups are interleaved across the block's warps: together they read one contiguous
   * stretch of each of the 16 rows at a time. */
  const int steps = (a.k + kStepK - 1) / kStepK;
  const int first = warp * kSteps, stride = warps * kSteps;
  const T *gp = kPro == kProRms ? static_cast<const T *>(a.gamma) + 8 * tig : nullptr;

  if (a.pdl) {
#pragma unroll
    for (int u = 0; u < kSteps * (kPipe ? 2 : 1); ++u) {
      const int s = first + (u / kSteps) * stride + u % kSteps;
      if (s < steps && s * kStepK + 8 * tig < a.k) {
        prefetch_l2(w0 + s * kStepK);
        prefetch_l2(w1 + s * kStepK);
      }
    }
  }
  wait_for_previous_grid();

  const uint64_t policy = evict_first_policy();
  float acc[NT][4], ss[NT];
#pragma unroll
  for (int t = 0; t < NT; ++t) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = ss[t] = 0.0f;

  if (kPipe) {
    group_regs<NT, kSteps, kPro> ra, rb;
    load_group(ra, first, steps, a.k, tig, w0, w1, xr, gp, policy);
    for (int s = first; s < steps; s += 2 * stride) {
      load_group(rb, s + stride, steps, a.k, tig, w0, w1, xr, gp, policy);
      mma_group<T>(acc, ra, ss);
      load_group(ra, s + 2 * stride, steps, a.k, tig, w0, w1, xr, gp, policy);
      mma_group<T>(acc, rb, ss);
    }
  } else {
    for (int s = first; s < steps; s += stride) {
      group_regs<NT, kSteps, kPro> r;
      load_group(r, s, steps, a.k, tig, w0, w1, xr, gp, policy);
      mma_group<T>(acc, r, ss);
    }
  }
  if constexpr (kPro == kProRms) store_row_squares<NT>(ssw, ss, warp, g, tig);

    /* acc[t]: {0, 1} = (W row g, x rows 8t + 2 tig + {0, 1}), {2, 3} = (W row g + 8, same). */
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    const int b = 8 * t + 2 * tig;
    partial[warp][b][g] = acc[t][0];
    partial[warp][b + 1][g] = acc[t][1];
    partial[warp][b][g + 8] = acc[t][2];
    partial[warp][b + 1][g + 8] = acc[t][3];
  }
  __syncthreads();
  if (a.gated != RECAP_ACT_NONE) {
    /* Tile rows r and r + 8 are output column 8 blockIdx.x + r's gate and up. */
    for (int i = threadIdx.x; i < a.m * 8; i += blockDim.x) {
      const int b = i / 8, r = i % 8;
      const int64_t j = 8 * (int64_t)blockIdx.x + r;
      if (j >= a.n) continue;
      float gate = 0.0f, up = 0.0f;
      for (int w = 0; w < warps; ++w) {
        gate += partial[w][b][r];
        up += partial[w][b][r + 8];
      }
      const float scale = a.alpha * row_scale<kPro>(ssw, warps, b, a);
      store_gated<T>(a, b, j, gate * scale, up * scale);
    }
    return;
  }
  for (int i = threadIdx.x; i < a.m * kRows; i += blockDim.x) {
    const int b = i / kRows, r = i % kRows;
    if (n0 + r >= a.n) continue;
    float sum = 0.0f;
    for (int w = 0; w < warps; ++w) sum += partial[w][b][r];
    store_output<T>(a, b, n0 + r, a.alpha * sum * row_scale<kPro>(ssw, warps, b, a));
  }
}

/* ================================ bulk-copy variant ====================================== */

/* The register-streaming kernel above holds every byte in flight in registers, which caps the
 * loads per SM. This variant streams W through a ring of shared-memory stages filled by the
 * bulk copy engine (cp.async.bulk, one copy per row chunk, completion counted in bytes on an
 * mbarrier): one producer warp keeps S stages of KC columns of the block's W rows (and the
 * same columns of x's m rows) in flight, the consumer warps read each stage with 16-byte
 * shared loads into the same mma fragments as above and release it through a second
 * mbarrier. Bytes in flight are bounded by shared memory, not registers, and a block uses few
 * registers, so the next layer's blocks (programmatic dependent launch) can be resident and
 * prefetching while this layer drains. */

constexpr int kPad = 64; /* bytes after each staged row (see bulk_kernel's bank note) */

/* Pipe codes 2.. of recap__cuda_gemm_skinny_config: RT 16-row tiles of W per block, KC
 * columns per stage, S stages, and PF: the columns of each W row a block prefetches into L2
 * before the grid dependency wait (programmatic dependent launch). Measured on an H100
 * (skinny_gemm.md): 32 rows x 1024 x 2 at m > 4 (x's L2-to-SM bytes halved, 2 KB copies, 128
 * blocks; at m = 16 level with the register kernel or slightly ahead); at m <= 4, 16 x 512 x 3
 * and 16 x 1024 x 2 were level there (97.3 and 97.1 us for eight 4096 x 4096 layers). On an
 * H200, whose memory is 1.4x faster, the copy size decides: at m = 1, 16 x 1024 x 2 took
 * 61.1 us for Llama 3 8B's gate_up against 71.0 for 16 x 512 x 3 and 117.5 for 16 x 256 x 6,
 * and 4 stages of 512 columns no less than 3 (71.8): so 16 x 1024 x 2 at m <= 4. The prefetch
 * has an optimum: on the H100, 768-1280 columns (6-10 MB per 4096 x 4096 layer) beat both
 * less (memory idles while the blocks wait for the previous layer) and more (the previous
 * layer's last blocks, which every block waits for, compete with it for memory) by 3-6%; on
 * the H200, 1024 columns beat 768 on all 10 shapes compared at m = 1 (by 0.3-4%). */
struct bulk_shape {
  int rt, kc, stages, prefetch;
  int max_m; /* x rows it takes: 4 stages of two 8-row x tiles would not fit shared memory */
};
/* Shape 2, four stages, is for grids of at most one block per SM (bulk_shape_index): such a
 * block has the SM's memory to itself and two stages keep too few bytes in flight for it. */
constexpr bulk_shape kBulkShapes[] = {
    {1, 1024, 2, 1024, kMaxM}, {2, 1024, 2, 768, kMaxM}, {1, 1024, 4, 1024, 8}};
constexpr int kBulkFirst = 2, kBulkCount = (int)(sizeof kBulkShapes / sizeof kBulkShapes[0]);
constexpr int kBulkDeep = 2;         /* the four-stage shape's index */
constexpr int kBulkSmallM = 4;       /* shape 0 up to this m; above it, bulk_shape_index decides */
constexpr int kBulkDefaultWarps = 8; /* consumer warps (4 and 16 measured slower) */

__host__ __device__ constexpr int bulk_row_bytes(int kc) {
  return kc * 2 + kPad;
}
/* W's rows, x's rows (8 per x tile) and, with the norm's prologue, one row of gamma. */
__host__ __device__ constexpr int bulk_stage_rows(int rt, int nt, bool norm) {
  return kRows * rt + 8 * nt + (norm ? 1 : 0);
}
__host__ __device__ constexpr size_t bulk_smem(int rt, int nt, int kc, int stages, bool norm) {
  return (size_t)stages * bulk_stage_rows(rt, nt, norm) * bulk_row_bytes(kc);
}

/* The bulk helpers exist for sm_90 passes only (an sm_80 pass would warn that they are unused). */
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
/* bytes (a multiple of 16) from global src to shared dst (both 16-byte aligned); completion is
 * counted on bar. */
__device__ __forceinline__ void bulk_copy(uint32_t dst, const void *src, uint32_t bytes,
                                          uint32_t bar, uint64_t policy) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1], %2, [%3], %4;" ::"r"(dst),
      "l"(src), "r"(bytes), "r"(bar), "l"(policy)
      : "memory");
}

__device__ __forceinline__ void bulk_prefetch_l2(const void *src, uint32_t bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(src), "r"(bytes) : "memory");
}

/* The same for x, which every block reads: no eviction hint. */
__device__ __forceinline__ void bulk_copy(uint32_t dst, const void *src, uint32_t bytes,
                                          uint32_t bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1], %2, [%3];" ::"r"(dst),
      "l"(src), "r"(bytes), "r"(bar)
      : "memory");
}

__device__ __forceinline__ uint4 lds128(uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(addr));
  return v;
}

/* Orders this thread's generic-proxy writes to shared memory before later bulk copies (the
 * async proxy) into the same bytes: a stage that held partial sums is refilled next. */
__device__ __forceinline__ void fence_proxy_async_smem() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

/* A barrier among the consumer warps only (named barrier 1): the producer warp streams on. */
__device__ __forceinline__ void consumers_sync(int warps) {
  asm volatile("bar.sync 1, %0;" ::"r"(warps * 32) : "memory");
}

/* The norm's prologue on a full stage, before any mma reads it (bulk_kernel): x's m rows become
 * x * gamma in place, rounded once to T (prologue_x), and each 16-byte group's squares of the
 * raw x go to squares[row][group], summed over the tile's chunks. Group (row b, column group j)
 * is always the same consumer thread's (its index over the m rows' groups, strided by the
 * threads), so the sums need no atomics and add in the same order in every run. The columns
 * past K in the last chunk are left alone (their W words are zeroed in the mma loop); their
 * squares are zeroed on a tile's first chunk. */
template <typename T, int G>
__device__ __forceinline__ void norm_stage(unsigned char *x_rows, const unsigned char *gamma,
                                           int row_bytes, int m, int cols, bool first_chunk,
                                           int threads, float (*squares)[G]) {
  for (int i = threadIdx.x; i < m * G; i += threads) {
    const int b = i / G, j = i % G;
    if (8 * j >= cols) {
      /* Past K (a K under KC leaves groups no chunk writes): the row's sum must not see the
       * stale word. */
      if (first_chunk) squares[b][j] = 0.0f;
      continue;
    }
    uint4 *at = reinterpret_cast<uint4 *>(x_rows + (size_t)b * row_bytes + 16 * j);
    float ss = 0.0f;
    *at = prologue_x<T, kProRms>(*at, *reinterpret_cast<const uint4 *>(gamma + 16 * j), ss);
    squares[b][j] = first_chunk ? ss : squares[b][j] + ss;
  }
  /* The stage is refilled by bulk copies (the async proxy) after the consumers release it. */
  fence_proxy_async_smem();
}

/* After a tile's last chunk: each x row's sum of squares over its groups, in a fixed order (a
 * warp per row, a fixed shuffle tree), into row_ss[b]. */
template <int G>
__device__ __forceinline__ void sum_row_squares(const float (*squares)[G], float *row_ss, int m,
                                                int warp, int warps, int lane) {
  for (int b = warp; b < m; b += warps) {
    float v = 0.0f;
    for (int j = lane; j < G; j += 32) v += squares[b][j];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    if (lane == 0) row_ss[b] = v;
  }
}
#endif

/* T: storage type. NT: 8-row tiles of x. RT: 16-row tiles of W per block tile. KC: K columns
 * per stage. S: stages. PF: columns prefetched (bulk_shape). Block: blockDim.x / 32 - 1
 * consumer warps, then the producer warp. Block tile t covers W rows [16 RT t, 16 RT (t + 1));
 * block b takes tiles b, b + gridDim.x, ...: the launch makes at most as many blocks as the
 * device holds at once, so each block streams several tiles through one ring and the producer
 * keeps its stages in flight across the tiles' boundaries (on an H200 the ring's ramp at each
 * block's start and its drain at each block's end cost Llama 3 8B's gate_up 60.5 us against
 * cuBLASLt's 56.9 when every tile was a block of its own). Stage layout: rows [0, 16 RT) are W's,
 * rows 16 RT + [0, m) are x's, each row KC elements plus kPad bytes: a row stride of 64 (mod
 * 128) bytes puts a lane's rows g and g + 1 in opposite halves of the banks, so the 16-byte
 * shared loads of a quarter warp never conflict. Only the tile's own W rows and x's m rows are
 * copied; the others hold stale words that reach only output rows and columns that are never
 * stored (an mma's output row depends on its own A row only, a column on its own B column
 * only). A tile's partial sums go to the stage of its last chunk, which the consumers release
 * only after the epilogue. With the norm's prologue (RMS_NORM) the producer also copies gamma's
 * columns into row 16 RT + 8 NT of each stage, and the consumers first turn x's rows into
 * x * gamma in place (norm_stage: each element converted and multiplied once per tile and
 * chunk, not once per mma step, and gamma read from the stage rather than from L1 on every
 * step), then read them as plain x. Dynamic shared memory: bulk_smem(RT, NT, KC, S, norm). */
template <typename T, int NT, int RT, int KC, int S, int PF, int kPro>
__global__ void __launch_bounds__((kMaxWarps + 1) * 32, 1) bulk_kernel(const skinny_args a) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr bool kNorm = kPro == kProRms;
  constexpr int kRowBytes = bulk_row_bytes(KC), kStageRows = bulk_stage_rows(RT, NT, kNorm);
  constexpr int kStageBytes = kStageRows * kRowBytes, kSteps = KC / kStepK;
  constexpr int kBlockRows = kRows * RT;
  constexpr size_t kPartialFloats = (size_t)kMaxWarps * kMaxM * (kBlockRows + 1);
  static_assert(KC % kStepK == 0 && (2 * KC) % 128 == 0, "stage rows must keep the bank pattern");
  static_assert(kPartialFloats * sizeof(float) <= (size_t)kStageBytes,
                "a tile's partial sums reuse a stage");
  extern __shared__ __align__(128) unsigned char ring[];
  __shared__ __align__(8) uint64_t full[S], empty[S];
  /* The norm's prologue (RMS_NORM): squares per x row and 16-byte column group of a stage
   * (norm_stage), and per row once the tile's chunks are done. */
  constexpr int kGroups = KC / 8;
  __shared__ float squares[kNorm ? 8 * NT : 1][kNorm ? kGroups : 1];
  __shared__ float row_ss[kNorm ? 8 * NT : 1];

  const int tiles = (int)block_tiles(a, RT);
  /* Dependents launch once every block runs its last tile: as early as when each tile was a
   * block (the last wave's start), not while this grid still has most of W to stream (a
   * dependent's early blocks and prefetches then compete with it). */
  if ((int)(blockIdx.x + gridDim.x) >= tiles) allow_next_grid();

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x >> 5) - 1;
  const int chunks = (a.k + KC - 1) / KC;
  const uint32_t ring0 = recap__smem_addr(ring);
  const T *w = static_cast<const T *>(a.w);
  const T *x = static_cast<const T *>(a.x);

  if (threadIdx.x == 0) {
    for (int s = 0; s < S; ++s) {
      recap__mbar_init(recap__smem_addr(&full[s]), 1);
      recap__mbar_init(recap__smem_addr(&empty[s]), (uint32_t)warps);
    }
    recap__mbar_init_fence();
  }
  /* The producer lane of each W row of the first tile prefetches the row's first PF columns. */
  if (a.pdl && warp == warps) {
    const uint32_t first = (uint32_t)(a.k < PF ? a.k : PF) * 2;
    for (int i = lane; i < kBlockRows; i += 32) {
      bool in;
      const int64_t row = w_row(a, (int64_t)blockIdx.x * RT + i / kRows, i % kRows, in);
      if (in) bulk_prefetch_l2(w + row * a.ldw, first);
    }
  }
  /* Every thread waits: the stores at the end must not overtake the previous kernel's reads. */
  wait_for_previous_grid();
  __syncthreads();

  if (warp == warps) {
    /* Producer: the block's q-th chunk (counted over its tiles) goes to stage q % S once that
     * stage's previous use is released. */
    const uint64_t w_policy = evict_first_policy();
    uint32_t q = 0;
    for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
      /* One thread's trigger counts for its block (PTX ISA, griddepcontrol). */
      if (t != blockIdx.x && t + gridDim.x >= tiles) allow_next_grid();
      const int64_t tile0 = (int64_t)t * RT;
      int copies = a.m + (kNorm ? 1 : 0);
      for (int i = 0; i < kBlockRows; ++i) {
        bool in;
        (void)w_row(a, tile0 + i / kRows, i % kRows, in);
        copies += in;
      }
      for (int c = 0; c < chunks; ++c, ++q) {
        const int s = (int)(q % S);
        if (q >= S) recap__mbar_wait(recap__smem_addr(&empty[s]), ((q / S - 1) & 1u));
        const int k0 = c * KC;
        const uint32_t bytes = (uint32_t)((a.k - k0 < KC ? a.k - k0 : KC) * 2);
        const uint32_t bar = recap__smem_addr(&full[s]);
        if (lane == 0) recap__mbar_arrive_expect_tx(bar, bytes * (uint32_t)copies);
        __syncwarp();
        for (int i = lane; i < kBlockRows + a.m; i += 32) {
          if (i < kBlockRows) {
            bool in;
            const int64_t row = w_row(a, tile0 + i / kRows, i % kRows, in);
            if (!in) continue;
            const uint32_t dst = ring0 + (uint32_t)(s * kStageBytes + i * kRowBytes);
            bulk_copy(dst, w + row * a.ldw + k0, bytes, bar, w_policy);
          } else {
            const int b = i - kBlockRows;
            const uint32_t dst = ring0 + (uint32_t)(s * kStageBytes + (kBlockRows + b) * kRowBytes);
            bulk_copy(dst, x + (int64_t)b * a.ldx + k0, bytes, bar);
          }
        }
        if (kNorm && lane == 0) {
          const uint32_t dst =
              ring0 + (uint32_t)(s * kStageBytes + (kBlockRows + 8 * NT) * kRowBytes);
          bulk_copy(dst, static_cast<const T *>(a.gamma) + k0, bytes, bar);
        }
      }
    }
    return;
  }

  /* Consumers: warp takes the steps warp, warp + warps, ... of every stage. */
  const int g = lane >> 2, tig = lane & 3;
  const uint4 zero = make_uint4(0, 0, 0, 0);
  const int threads = warps * 32;
  uint32_t q = 0;
  for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
    const int64_t tile0 = (int64_t)t * RT;
    /* The block's last tile releases nothing: no copy follows into its stage. */
    const bool refill = t + gridDim.x < tiles;
    float acc[RT][NT][4];
#pragma unroll
    for (int r = 0; r < RT; ++r)
#pragma unroll
      for (int u = 0; u < NT; ++u) acc[r][u][0] = acc[r][u][1] = acc[r][u][2] = acc[r][u][3] = 0.0f;
    int s = 0;
    for (int c = 0; c < chunks; ++c, ++q) {
      s = (int)(q % S);
      recap__mbar_wait(recap__smem_addr(&full[s]), ((q / S) & 1u));
      if constexpr (kNorm) {
        unsigned char *stage = ring + (size_t)s * kStageBytes;
        norm_stage<T, kGroups>(stage + kBlockRows * kRowBytes,
                               stage + (kBlockRows + 8 * NT) * kRowBytes, kRowBytes, a.m,
                               a.k - c * KC < KC ? a.k - c * KC : KC, c == 0, threads, squares);
        consumers_sync(warps);
      }
      const uint32_t base = ring0 + (uint32_t)(s * kStageBytes + g * kRowBytes + 16 * tig);
#pragma unroll 2
      for (int j = warp; j < kSteps; j += warps) {
        /* K % 8 == 0, so a lane's 8 elements are all in or all out; out-of-range words are
         * stale (or never written), so both operands become zeros. */
        const bool in = c * KC + j * kStepK + 8 * tig < a.k;
        const uint32_t at = base + (uint32_t)(j * kStepK * 2);
        uint4 wa[RT], wb[RT], xv[NT];
#pragma unroll
        for (int r = 0; r < RT; ++r) {
          wa[r] = in ? lds128(at + (uint32_t)(16 * r * kRowBytes)) : zero;
          wb[r] = in ? lds128(at + (uint32_t)((16 * r + 8) * kRowBytes)) : zero;
        }
#pragma unroll
        for (int u = 0; u < NT; ++u)
          xv[u] = in ? lds128(at + (uint32_t)((kBlockRows + 8 * u) * kRowBytes)) : zero;
#pragma unroll
        for (int r = 0; r < RT; ++r)
#pragma unroll
          for (int u = 0; u < NT; ++u) {
            mma16816<T>(acc[r][u], wa[r].x, wb[r].x, wa[r].y, wb[r].y, xv[u].x, xv[u].y);
            mma16816<T>(acc[r][u], wa[r].z, wb[r].z, wa[r].w, wb[r].w, xv[u].z, xv[u].w);
          }
      }
      __syncwarp();
      if (c + 1 < chunks && lane == 0) recap__mbar_arrive(recap__smem_addr(&empty[s]));
    }
    /* Every consumer is done with the last chunk's stage: it takes the partial sums
     * [warp][x row][W row]. */
    consumers_sync(warps);
    if constexpr (kNorm) sum_row_squares<kGroups>(squares, row_ss, a.m, warp, warps, lane);
    float *partial = reinterpret_cast<float *>(ring + (size_t)s * kStageBytes);
#pragma unroll
    for (int r = 0; r < RT; ++r)
#pragma unroll
      for (int u = 0; u < NT; ++u) {
        const int b = 8 * u + 2 * tig, row = 16 * r + g;
        float *p = partial + (size_t)warp * kMaxM * (kBlockRows + 1);
        p[b * (kBlockRows + 1) + row] = acc[r][u][0];
        p[(b + 1) * (kBlockRows + 1) + row] = acc[r][u][1];
        p[b * (kBlockRows + 1) + row + 8] = acc[r][u][2];
        p[(b + 1) * (kBlockRows + 1) + row + 8] = acc[r][u][3];
      }
    if (refill) fence_proxy_async_smem();
    consumers_sync(warps);
    if (a.gated != RECAP_ACT_NONE) {
      /* Tile u's rows r and r + 8 are output column 8 (tile0 + u) + r's gate and up. */
      constexpr int kCols = kBlockRows / 2;
      for (int i = threadIdx.x; i < a.m * kCols; i += threads) {
        const int b = i / kCols, col = i % kCols, row = kRows * (col / 8) + col % 8;
        const int64_t j = 8 * (tile0 + col / 8) + col % 8;
        if (j >= a.n) continue;
        float gate = 0.0f, up = 0.0f;
        for (int wi = 0; wi < warps; ++wi) {
          const float *p = partial + ((size_t)wi * kMaxM + b) * (kBlockRows + 1);
          gate += p[row];
          up += p[row + 8];
        }
        const float scale = a.alpha * bulk_row_scale<kNorm>(row_ss, b, a);
        store_gated<T>(a, b, j, gate * scale, up * scale);
      }
    } else {
      /* Row q of the block tile's tile_rows * RT is row 16 (q / tile_rows) + q % tile_rows of
       * the partial sums. */
      const int64_t n0 = tile0 * a.tile_rows;
      const int span = a.tile_rows * RT;
      const int rows = (int)(a.n - n0 < span ? a.n - n0 : span);
      for (int i = threadIdx.x; i < a.m * rows; i += threads) {
        const int b = i / rows, q = i % rows;
        const int r = kRows * (q / a.tile_rows) + q % a.tile_rows;
        float sum = 0.0f;
        for (int wi = 0; wi < warps; ++wi)
          sum += partial[((size_t)wi * kMaxM + b) * (kBlockRows + 1) + r];
        store_output<T>(a, b, n0 + q, a.alpha * sum * bulk_row_scale<kNorm>(row_ss, b, a));
      }
    }
    if (refill) {
      /* The stage (and row_ss) may be written again only after every consumer has read them. */
      consumers_sync(warps);
      if (lane == 0) recap__mbar_arrive(recap__smem_addr(&empty[s]));
    }
  }
#endif
}

/* ================================ launch plan ============================================ */

/* The default bulk shape's blocks for the plan's W rows, and how many of them the device holds
 * at once (1 KB of each block's shared memory is the system's). */
struct bulk_wave {
  int64_t blocks, slots;
};

/* The default bulk shape of a plan (an index into kBulkShapes): above kBulkSmallM rows of x the
 * 32-row blocks halve x's reads, but only while they reach more than half the SMs; with fewer
 * the bandwidth of the idle SMs is lost, so those run 16-row blocks. On an H200 at m = 8-16:
 * 2048-row weights (64 blocks of 32 rows) ran faster with 16-row blocks (Llama 3.2 1B's down
 * 15.5 -> 12.6 us at m = 8, its o 6.95 -> 5.89 at m = 16), 2304 rows and more (72 blocks and
 * more) slower (its qkv, 3072 rows, 5.81 -> 7.04 at m = 8; Llama 3 8B's o 10.4 -> 10.9). */
int bulk_shape_index(const recap__gemm_plan *p, const recap__cuda_device_facts &f) {
  /* At most one 16-row block per SM at m 5-8: four stages. On an H200 (bench-decode, context
   * 512, two rounds) Llama 3.2 1B's batch-8 step went 1.192 -> 1.165 ms (its o and down
   * projections, 128 blocks) and Qwen2 0.5B's 1.276 -> 1.260 (qkv, o and down, 56-72 blocks).
   * Below m = 5 it was not a win everywhere: at batch 4 the 1B gained 1.5% but Qwen2 0.5B lost
   * 1.3%, and at batch 1 Qwen2 0.5B lost 6% (1.029 -> 1.092 ms: a block of 200 KB shares its
   * SM with no block of the next kernel, which then cannot start early). */
  if (p->m > kBulkSmallM && p->m <= kBulkShapes[kBulkDeep].max_m &&
      RECAP_CEIL_DIV(p->n, (int64_t)kRows) <= f.sms)
    return kBulkDeep;
  if (p->m <= kBulkSmallM) return 0;
  const int64_t blocks = RECAP_CEIL_DIV(p->n, (int64_t)kRows * kBulkShapes[1].rt);
  return 2 * blocks > f.sms ? 1 : 0;
}

bulk_wave bulk_wave_of(const recap__gemm_plan *p, const recap__cuda_device_facts &f) {
  const bulk_shape b = kBulkShapes[bulk_shape_index(p, f)];
  const int nt = x_tiles(p->m);
  const bool norm = p->prologue == RECAP__GEMM_PROLOGUE_RMS_NORM;
  const int64_t per_sm =
      f.smem_per_sm / ((int64_t)bulk_smem(b.rt, nt, b.kc, b.stages, norm) + 1024);
  return {RECAP_CEIL_DIV(p->n, (int64_t)kRows * b.rt), (per_sm > 0 ? per_sm : 1) * f.sms};
}

/* Warps per block: enough blocks x warps to keep ~12 warps (each with 16 loads of 512 bytes
 * in flight) on every SM while every block is resident at once (blocks of up to 8 warps fit
 * twice per SM at 128 registers), at least two (a lone warp streaming its 16 rows x K is
 * latency-bound: Llama 3 8B's gate_up at m = 1, 1792 blocks, took 112.8 us at one warp and
 * 59.6 at two on an H200), and no more warps than K has steps. */
int warps_for(int64_t blocks, int steps, int sms) {
  int warps = 2;
  while (warps < kMaxWarps && blocks * warps < 12 * (int64_t)sms) warps *= 2;
  while (warps > 1 && warps > steps) warps /= 2;
  return warps;
}

/* The A/B switches (RECAP_GEMM_SKINNY_PDL, _PIPE, _WARPS) come from recap__gemm_env_get, read
 * once per process (RECAP_GEMM_SKINNY_PIPE=0: the single-buffer register kernel, never the
 * bulk one); bench/bench_skinny.c times every configuration directly and the tuner
 * (choose.c) times the register kernel's as candidates of their own. */

/* Above 48 KB a kernel's dynamic shared memory must be allowed explicitly, once per device
 * (`done` is the kernel's per-device flag; racing threads set the same value). */
template <typename Kernel>
recap_status allow_smem(Kernel kernel, int device, size_t bytes, int (&done)[kRecapMaxDevices]) {
  if (bytes <= 48 * 1024 || __atomic_load_n(&done[device], __ATOMIC_ACQUIRE)) return RECAP_OK;
  RECAP_CUDA_TRY(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
  __atomic_store_n(&done[device], 1, __ATOMIC_RELEASE);
  return RECAP_OK;
}

/* How many blocks of `threads` threads and `smem` bytes of dynamic shared memory one SM of the
 * current device holds at once (registers included), asked once per device and consumer warp
 * count (`cache` is the kernel's; racing threads store the same value). */
template <typename Kernel>
recap_status resident_blocks(Kernel kernel, int device, int warps, size_t smem,
                             int (&cache)[kRecapMaxDevices][kMaxWarps + 1], int *per_sm) {
  int n = __atomic_load_n(&cache[device][warps], __ATOMIC_RELAXED);
  if (n == 0) {
    RECAP_CUDA_TRY(
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, (warps + 1) * 32, smem));
    if (n < 1) n = 1;
    __atomic_store_n(&cache[device][warps], n, __ATOMIC_RELAXED);
  }
  *per_sm = n;
  return RECAP_OK;
}

/* W rows per 16-row tile for a grid that fits the device at once. With full tiles some SMs may
 * idle (Qwen2.5 1.5B's o and down, 1536 rows: 96 tiles on 132 SMs) or hold two tiles beside
 * SMs holding one (Llama 3.2 1B's qkv, 3072 rows: 192 tiles); a block streams at about the
 * same rate whatever its neighbours do, so the step lasts as long as the SM with the most rows.
 * This takes the tile height, from 16 down to max(4, m) (below that the x rows every block
 * reads outweigh its W rows), that gives the fewest rows on the busiest SM, the tallest of
 * equals (fewer blocks); weights whose tiles take several rounds keep 16 rows. */
int balanced_tile_rows(int64_t n, int m, int rt, int64_t sms, int64_t slots) {
  int best = kRows;
  int64_t best_load = INT64_MAX;
  for (int tr = kRows; tr >= (m > 4 ? m : 4); --tr) {
    const int64_t tiles = RECAP_CEIL_DIV(n, (int64_t)tr * rt);
    if (tiles > slots) break;
    const int64_t load = RECAP_CEIL_DIV(tiles, sms) * tr;
    if (load < best_load) best = tr, best_load = load;
  }
  return best;
}

/* One block per block tile, or as many as the device holds at once, each then taking several
 * tiles (bulk_kernel). */
template <typename T, int NT, int RT, int KC, int S, int PF, int kPro>
recap_status launch_bulk(skinny_args args, int device, int warps, cudaLaunchConfig_t config) {
  static int smem_allowed[kRecapMaxDevices];
  static int resident[kRecapMaxDevices][kMaxWarps + 1];
  const auto kernel = bulk_kernel<T, NT, RT, KC, S, PF, kPro>;
  const size_t smem = bulk_smem(RT, NT, KC, S, kPro == kProRms);
  RECAP_TRY(allow_smem(kernel, device, smem, smem_allowed));
  /* warps and device were checked by recap__cuda_gemm_skinny_config. */
  recap__cuda_device_facts f;
  int per_sm = 0;
  RECAP_TRY(recap__cuda_facts_of(device, &f));
  RECAP_TRY(resident_blocks(kernel, device, warps, smem, resident, &per_sm));
  const int64_t slots = (int64_t)per_sm * f.sms;
  if (args.gated == RECAP_ACT_NONE && recap__gemm_env_get()->skinny_balance)
    args.tile_rows = balanced_tile_rows(args.n, args.m, RT, f.sms, slots);
  const int64_t tiles = block_tiles(args, RT);
  config.gridDim = dim3((unsigned)(tiles < slots ? tiles : slots));
  config.blockDim = dim3((unsigned)(warps + 1) * 32); /* + the producer warp */
  config.dynamicSmemBytes = smem;
  RECAP_CUDA_TRY(cudaLaunchKernelEx(&config, kernel, args));
  RECAP_CUDA_TRY(cudaGetLastError());
  return RECAP_OK;
}

template <typename T, int I, int kPro>
recap_status launch_bulk_shape(const skinny_args &args, int device, int warps,
                               const cudaLaunchConfig_t &config) {
  constexpr bulk_shape b = kBulkShapes[I];
  if (x_tiles(args.m) == 1)
    return launch_bulk<T, 1, b.rt, b.kc, b.stages, b.prefetch, kPro>(args, device, warps, config);
  if constexpr (b.max_m > 8)
    return launch_bulk<T, 2, b.rt, b.kc, b.stages, b.prefetch, kPro>(args, device, warps, config);
  return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "skinny gemm: bulk shape %d takes m <= %d", I,
                    b.max_m);
}

/* Launches bulk shape I if it is `shape`, else tries the next one. */
template <typename T, int kPro, int I = 0>
recap_status launch_bulk_index(int shape, const skinny_args &args, int device, int warps,
                               const cudaLaunchConfig_t &config) {
  if constexpr (I < kBulkCount) {
    if (shape == I) return launch_bulk_shape<T, I, kPro>(args, device, warps, config);
    return launch_bulk_index<T, kPro, I + 1>(shape, args, device, warps, config);
  }
  return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "skinny gemm: no bulk shape %d", shape);
}

/* pipe: 0 single register buffer, 1 two register buffers, kBulkFirst + i bulk shape i (the
 * caller checked the range and the device). */
template <typename T, int kPro>
recap_status launch(const skinny_args &args, int device, int warps, int pipe, bool pdl,
                    cudaStream_t stream) {
  const unsigned blocks = (unsigned)RECAP_CEIL_DIV(w_rows(args), (int64_t)kRows);
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(blocks);
  config.blockDim = dim3((unsigned)warps * 32);
  config.stream = stream;
  cudaLaunchAttribute attr[1];
  if (pdl) {
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    config.attrs = attr;
    config.numAttrs = 1;
  }
  if (pipe >= kBulkFirst)
    return launch_bulk_index<T, kPro>(pipe - kBulkFirst, args, device, warps, config);
  /* The norm's prologue holds more per step (gamma's loads and the conversions): half the steps
   * per group at one 8-row tile, where that keeps the kernel within 128 registers without
   * spilling (ptxas -v, sm_90); two tiles keep their steps. */
  constexpr int kDiv = kPro == kProNone ? 1 : 2;
  if (x_tiles(args.m) == 1)
    RECAP_CUDA_TRY(
        pipe == 1 ? cudaLaunchKernelEx(&config, skinny_kernel<T, 1, 4 / kDiv, true, kPro>, args)
                  : cudaLaunchKernelEx(&config, skinny_kernel<T, 1, 8 / kDiv, false, kPro>, args));
  else
    RECAP_CUDA_TRY(pipe == 1
                       ? cudaLaunchKernelEx(&config, skinny_kernel<T, 2, 2, true, kPro>, args)
                       : cudaLaunchKernelEx(&config, skinny_kernel<T, 2, 4, false, kPro>, args));
  RECAP_CUDA_TRY(cudaGetLastError());
  return RECAP_OK;
}

bool aligned16(const void *p) {
  return ((uintptr_t)p & 15u) == 0;
}

}  // namespace

/* ================================ launchers ============================================== */

extern "C" bool recap__cuda_gemm_skinny_fits(const recap__gemm_plan *p) {
  const bool half = p->dtype == RECAP_DTYPE_BF16 || p->dtype == RECAP_DTYPE_F16;
  /* A(i, p) = a[i * a_rs + p * a_cs] is x; B(p, j) = b[p * b_rs + j * b_cs] is W^T. */
  return half && p->m >= 1 && p->m <= kMaxM && p->n >= 1 && p->n <= INT32_MAX && p->k >= 1 &&
         p->k <= INT32_MAX - kStepK && p->k % 8 == 0 && p->batch[0] == 1 && p->batch[1] == 1 &&
         !p->c && (p->a_cs == 1) && (p->m == 1 || p->a_rs % 8 == 0) && p->b_rs == 1 &&
         (p->n == 1 || p->b_cs % 8 == 0) && (!p->a || aligned16(p->a)) &&
         (!p->b || aligned16(p->b)) && (!p->norm_weight || aligned16(p->norm_weight)) &&
         p->prologue != RECAP__GEMM_PROLOGUE_GLU &&
         (p->gated == RECAP_ACT_NONE ||
          (p->n % 2 == 0 && p->act == RECAP_ACT_NONE && !p->residual && p->alpha == 1.0f));
}

extern "C" bool recap__cuda_gemm_skinny_pipe_fits(const recap__gemm_plan *p, int pipe) {
  return pipe < kBulkFirst || pipe >= kBulkFirst + kBulkCount ||
         p->m <= kBulkShapes[pipe - kBulkFirst].max_m;
}

extern "C" recap_status recap__cuda_gemm_skinny_default(const recap__gemm_plan *p, int device,
                                                        int *warps, int *pipe) {
  if (!p || !warps || !pipe)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "skinny gemm: NULL argument");
  recap__cuda_device_facts f;
  RECAP_TRY(recap__cuda_facts_of(device, &f));
  const recap__gemm_env *env = recap__gemm_env_get();
  const int steps = (int)RECAP_CEIL_DIV(p->k, (int64_t)kStepK);
  /* The bulk-copy variant needs Hopper (cp.async.bulk, mbarrier transaction counts). The
   * register kernel ran many shapes faster alone on an H200 (a chain of one GEMM: Llama 3 8B's
   * qkv at m = 1, 384 blocks, 13.9 us against 16.1) but not in a decode step, between other
   * kernels under programmatic dependent launch: with it for the shapes whose bulk blocks do
   * not fit at once, Llama 3 8B's batch-1 step took 5.82 ms against 4.77 with the bulk kernel
   * everywhere (and 4.86 with dependent launch off). */
  const bool bulk = env->skinny_pipe && f.major >= 9;
  *pipe = bulk ? kBulkFirst + bulk_shape_index(p, f) : env->skinny_pipe ? 1 : 0;
  *warps = env->skinny_warps ? env->skinny_warps
           : bulk            ? kBulkDefaultWarps
                             : warps_for(RECAP_CEIL_DIV(p->n, (int64_t)kRows), steps, f.sms);
  return RECAP_OK;
}

/* Where the default configuration is expected to beat cuBLASLt (measured with `recap
 * bench-gemm` against PyTorch's F.linear, which runs cuBLASLt: docs/perf/gemm_sweep.md).
 * Before Hopper (no bulk variant) the kernel keeps every shape it fits. Not preferred, each
 * measured slower than cuBLASLt by 3-40% in the sweep and its interleaved re-runs:
 *  - n >= 65536 (the lm_heads, 128256 and 152064 rows): cuBLASLt streams the 0.5 GB weight
 *    faster (H100: 196 vs 189 us at m = 1, 242 vs 190 at m = 16);
 *  - n >= 16384 with nothing fused that cuBLASLt would need a kernel of its own for (a gated
 *    unit, a prologue, or at m = 1 an activation its epilogue lacks): on an H200 cuBLASLt
 *    streamed Llama 3 8B's gate_up (28672 x 4096) faster, 56.9 us against the kernel's 59.3 at
 *    m = 1, though the kernel's tiles now share each block's ring (Llama 3.2 1B's 16384 x 2048:
 *    17.2 against 17.9; Qwen2 7B's 37888 x 3584: 65.0 against 70.2). With silu, sigmoid, tanh
 *    or erf gelu at m = 1 the kernel's fused epilogue took 59.1-60.6 us for the 8B's against
 *    cuBLASLt and its pass's 62.2-62.6 (PyTorch 57.6-58.4), 17.5 against 19.1 for the 1B's and
 *    65.0 against 71.2 for Qwen2's; at m = 2 cuBLASLt and its pass were ahead on the 8B's
 *    (56.9 against 59.6) and the 1B's (18.9 against 19.5). A decode step's gate_up keeps the
 *    kernel: its gated unit saves the pass cuBLASLt's output would need;
 *  - m > 8 with n > 4096 or k < 2048: at m 9-16 cuBLASLt's tiles are full enough (H100: gate_up
 *    16 x 16384 x 2048: 30.4 vs 25.8 us; GPT-2's c_attn 16 x 2304 x 768: 6.2 vs 4.8);
 *  - more bulk blocks than slots with a last wave under a quarter full, where that leaves the
 *    slots under three quarters busy over the rounds of tiles (Qwen2's qkv, n = 4608: 288
 *    blocks of 16 rows on 264 slots: H100 17-24% slower at m 1-8 with 16 x 512 x 3; H200 14.8
 *    against 10.9 us at m = 1 with 16 x 1024 x 2). Since a block streams several tiles, a
 *    small last round after three or more full ones costs little: a Qwen2.5 1.5B shape's
 *    gated gate_up (17920 x 1536, 1120 tiles on 264 slots, 85% busy) went to cuBLASLt (17.8
 *    us, ncu) and its pairing pass (2.7 us), a launch more a layer, before this exception;
 *  - a plain linear (nothing fused: no bias, activation, residual, prologue or gated unit) at
 *    m > 8, or whose bulk blocks take more than one wave: there the kernel has only its own
 *    GEMM to win by, and on an H200 cuBLASLt was ahead (Llama 3 8B's qkv, 384 blocks on 264
 *    slots: 13.9 vs 16.7 us at m = 1, 13.5 vs 19.1 at m = 8; Llama 3.2 1B's down at m = 16:
 *    12.7 vs 18.1). Llama 3 8B's batch-8 decode step went 5.344 -> 5.224 ms with it (its
 *    qkv), batch 1 unchanged (4.787 / 4.777);
 *  - a linear with only a bias, an activation or a residual fused, at m > 2 with more bulk
 *    blocks than slots: cuBLASLt and the epilogue pass beat it (H200, Llama 3 8B's qkv with
 *    bias + silu at m = 8: 19.5 against 15.5 us, PyTorch 16.1); at m 1-2 the fused epilogue
 *    still wins. A prologue or a gated unit keeps the kernel everywhere it fits.
 * Llama 3.2 1B's down (2048 x 8192, 128 blocks), which cuBLASLt split K for faster than the
 * former 16 x 512 x 3 bulk shape, is the kernel's again: 11.4 us against 13.0 at m = 1 on an
 * H200 with 16 x 1024 x 2.
 * The tuner (RECAP_TUNE=1) still times the kernel's configurations on every shape it fits. */
extern "C" bool recap__cuda_gemm_skinny_preferred(const recap__gemm_plan *p, int device,
                                                  bool lt_needs_pass) {
  recap__cuda_device_facts f;
  if (recap__cuda_facts_of(device, &f) != RECAP_OK) {
    recap_clear_error();
    return true;
  }
  const recap__gemm_env *env = recap__gemm_env_get();
  if (!(env->skinny_pipe && f.major >= 9) || env->skinny_warps) return true;
  if (p->n >= 65536) return false;
  if (p->n >= 16384 && p->gated == RECAP_ACT_NONE && p->prologue == RECAP__GEMM_PROLOGUE_NONE &&
      !(lt_needs_pass && p->m == 1))
    return false;
  if (p->m > 8 && (p->n > 4096 || p->k < 2048)) return false;
  const bulk_wave w = bulk_wave_of(p, f);
  const int64_t tail = w.blocks % w.slots, rounds = RECAP_CEIL_DIV(w.blocks, w.slots);
  if (w.blocks > w.slots && tail > 0 && tail <= w.slots / 4 && 4 * w.blocks < 3 * rounds * w.slots)
    return false;
  /* A prologue or gated unit would cost cuBLASLt a kernel of its own; bias, activation and
   * residual only the epilogue pass after it. */
  const bool folds = p->prologue != RECAP__GEMM_PROLOGUE_NONE || p->gated != RECAP_ACT_NONE;
  const bool epilogue = p->bias || p->act != RECAP_ACT_NONE || p->residual;
  if (folds) return true;
  if (w.blocks > w.slots) return epilogue && p->m <= 2;
  return epilogue || p->m <= 8;
}

extern "C" recap_status recap__cuda_gemm_skinny_config(const recap__gemm_plan *p, int device,
                                                       void *cuda_stream, int warps, int pipe) {
  recap__cuda_launch_range range("recap gemm skinny");
  if (!p || !cuda_stream || !p->a || !p->b || !p->out || !recap__cuda_gemm_skinny_fits(p))
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "skinny gemm: the plan does not fit the kernel (m <= 16, f16/bf16, x rows "
                      "and W [N, K] rows 16-byte aligned with unit stride along K, K %% 8 == 0, "
                      "no batch, no c, no gated-unit prologue)");
  if (warps < 1 || warps > kMaxWarps || (warps & (warps - 1)) != 0 || pipe < 0 ||
      pipe >= kBulkFirst + kBulkCount)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "skinny gemm: %d warps (1..%d, a power of two), pipe %d (0..%d)", warps,
                      kMaxWarps, pipe, kBulkFirst + kBulkCount - 1);
  if (!recap__cuda_gemm_skinny_pipe_fits(p, pipe))
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "skinny gemm: pipe %d takes at most %d rows of x, the plan has %lld", pipe,
                      kBulkShapes[pipe - kBulkFirst].max_m, (long long)p->m);
  recap__cuda_device_facts f;
  RECAP_TRY(recap__cuda_facts_of(device, &f));
  /* Before Hopper the bulk shapes run as the double-buffered register kernel. */
  if (pipe >= kBulkFirst && f.major < 9) pipe = 1;
  skinny_args args;
  args.x = p->a;
  args.w = p->b;
  args.bias = p->bias;
  args.residual = p->residual;
  args.out = p->out;
  args.m = (int)p->m;
  args.gated = p->gated;
  args.n = (int)(p->gated != RECAP_ACT_NONE ? p->n / 2 : p->n);
  args.k = (int)p->k;
  /* A single row's stride is never stepped, so it may be anything; likewise W's when N = 1. */
  args.ldx = p->m == 1 ? p->k : p->a_rs;
  args.ldw = p->n == 1 ? p->k : p->b_cs;
  args.alpha = p->alpha;
  args.act = p->act;
  args.gamma = p->norm_weight;
  args.eps = (float)p->eps;
  const bool pdl = f.major >= 9 && recap__gemm_env_get()->skinny_pdl;
  args.pdl = pdl;
  args.tile_rows = kRows;
  cudaStream_t stream = static_cast<cudaStream_t>(cuda_stream);
  return recap__cuda_dispatch_float(p->dtype, "skinny gemm", [&](auto tag) -> recap_status {
    using T = decltype(tag);
    if constexpr (sizeof(T) == 2) {
      return p->prologue == RECAP__GEMM_PROLOGUE_RMS_NORM
                 ? launch<T, kProRms>(args, device, warps, pipe, pdl, stream)
                 : launch<T, kProNone>(args, device, warps, pipe, pdl, stream);
    }
    return RECAP_FAIL(RECAP_STATUS_NOT_SUPPORTED, "skinny gemm: f32 is not supported");
  });
}

extern "C" recap_status recap__cuda_gemm_skinny(const recap__gemm_plan *p, int device,
                                                void *cuda_stream) {
  int warps = 0, pipe = 0;
  if (p && recap__cuda_gemm_skinny_fits(p))
    RECAP_TRY(recap__cuda_gemm_skinny_default(p, device, &warps, &pipe));
  return recap__cuda_gemm_skinny_config(p, device, cuda_stream, warps, pipe);
}
