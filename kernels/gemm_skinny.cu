/*
 * gemm_skinny.cu: the skinny GEMM of the decode case, out[m, n] = act(alpha * x[m, :] .
 * W[n, :] + bias[n]) for m <= 16, f16 or bf16 (f32 accumulate), W stored [N, K] with unit
 * stride along K (a linear layer's weight). cuBLASLt streams W at ~65% of copy bandwidth
 * here, this kernel at 77-81% (measurements in docs/perf/skinny_gemm.md).
 *
 * Shape of the work: one block per 16 rows of W, its warps taking groups of K steps in turn
 * (so together they read one contiguous stretch of the 16 rows at a time); per 32-wide step
 * of K, each lane loads 16 bytes of W row g and of row g + 8 (g = lane / 4) and 16 bytes of x
 * row g (and g + 8 when m > 8), and two tensor-core mmas (m16n8k16) consume them. The mma
 * reduces over k in any order, so the lane's 8 consecutive k elements of W are fed as its
 * A-fragment pairs and the same 8 of x as its B-fragment pairs: both operands come straight
 * from the 16-byte loads with no shuffles or shared memory. The warps' 16 x m partial tiles
 * are summed in shared memory in a fixed order (deterministic results, so graph replays are
 * bit-identical), then alpha, bias and the activation are applied once per output element.
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
#include "kernels/gemm.h"
#include "runtime/cuda_check.h"

namespace {

constexpr int kRows = 16;     /* W rows per block: the mma's M */
constexpr int kStepK = 32;    /* K per step: 4 lanes x 8 elements per row */
constexpr int kMaxWarps = 16; /* per block; 512 threads at <= 128 registers */
constexpr int kMaxM = 16;

/* ================================ kernels ================================================ */

struct skinny_args {
  const void *x, *w, *bias;
  void *out;
  int m, n, k;
  int64_t ldx, ldw; /* elements between rows of x and of W */
  float alpha;
  recap_activation act;
  int pdl; /* launched as a programmatic dependent: prefetch W into L2 before waiting */
};

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
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

template <>
__device__ __forceinline__ void mma16816<__half>(float (&d)[4], uint32_t a0, uint32_t a1,
                                                 uint32_t a2, uint32_t a3, uint32_t b0,
                                                 uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* One group of kSteps K steps as the lane holds it: W rows g and g + 8, x rows 8t + g. */
template <int NT, int kSteps>
struct group_regs {
  uint4 wa[kSteps], wb[kSteps], xv[NT][kSteps];
};

/* Loads the group of steps [s, s + kSteps) clipped to [0, limit) and to K; steps outside are
 * zeros (no memory traffic), so a group past the end costs only its mmas on zeros. */
template <int NT, int kSteps, typename T>
__device__ __forceinline__ void load_group(group_regs<NT, kSteps> &r, int s, int limit, int k,
                                           int tig, const T *w0, const T *w1,
                                           const T *const (&xr)[NT], uint64_t policy) {
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
    }
  }
}

template <typename T, int NT, int kSteps>
__device__ __forceinline__ void mma_group(float (&acc)[NT][4], const group_regs<NT, kSteps> &r) {
#pragma unroll
  for (int u = 0; u < kSteps; ++u) {
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      /* Elements 0-3 of the lane's 8 are the first mma's k pairs, 4-7 the second's. */
      mma16816<T>(acc[t], r.wa[u].x, r.wb[u].x, r.wa[u].y, r.wb[u].y, r.xv[t][u].x,
                  r.xv[t][u].y);
      mma16816<T>(acc[t], r.wa[u].z, r.wb[u].z, r.wa[u].w, r.wb[u].w, r.xv[t][u].z,
                  r.xv[t][u].w);
    }
  }
}

/* T: storage type. NT: 8-row tiles of x (1 for m <= 8, 2 for m <= 16). kSteps: K steps whose
 * loads are issued together. kPipe: two register buffers, the next group's loads issued
 * before the current group's mmas wait on theirs (so a warp never drains to zero loads in
 * flight); without it, one buffer of twice the steps. Both stay within 128 registers. */
template <typename T, int NT, int kSteps, bool kPipe>
__global__ void __launch_bounds__(kMaxWarps * 32) skinny_kernel(const skinny_args a) {
  __shared__ float partial[kMaxWarps][kMaxM][kRows + 1]; /* [warp][x row][W row] */
  allow_next_grid();

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const int g = lane >> 2, tig = lane & 3;
  const int64_t n0 = (int64_t)blockIdx.x * kRows;
  /* Rows past N read row 0 (valid memory); their results are never stored. */
  const int64_t r0 = n0 + g < a.n ? n0 + g : 0, r1 = n0 + g + 8 < a.n ? n0 + g + 8 : 0;
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
  float acc[NT][4];
#pragma unroll
  for (int t = 0; t < NT; ++t) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0.0f;

  if (kPipe) {
    group_regs<NT, kSteps> ra, rb;
    load_group(ra, first, steps, a.k, tig, w0, w1, xr, policy);
    for (int s = first; s < steps; s += 2 * stride) {
      load_group(rb, s + stride, steps, a.k, tig, w0, w1, xr, policy);
      mma_group<T>(acc, ra);
      load_group(ra, s + 2 * stride, steps, a.k, tig, w0, w1, xr, policy);
      mma_group<T>(acc, rb);
    }
  } else {
    for (int s = first; s < steps; s += stride) {
      group_regs<NT, kSteps> r;
      load_group(r, s, steps, a.k, tig, w0, w1, xr, policy);
      mma_group<T>(acc, r);
    }
  }

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
  for (int i = threadIdx.x; i < a.m * kRows; i += blockDim.x) {
    const int b = i / kRows, r = i % kRows;
    if (n0 + r >= a.n) continue;
    float sum = 0.0f;
    for (int w = 0; w < warps; ++w) sum += partial[w][b][r];
    float v = a.alpha * sum;
    if (a.bias) v += recap__to_float(static_cast<const T *>(a.bias)[n0 + r]);
    static_cast<T *>(a.out)[(int64_t)b * a.n + n0 + r] =
        recap__from_float<T>(recap__gemm_activate(a.act, v));
  }
}

/* ================================ launch plan ============================================ */

/* Multiprocessor count and compute capability per device, read once (device attribute
 * queries are legal during capture, but the launch path should not repeat them). */
struct device_facts {
  int sms, major;
};
constexpr int kMaxDevices = 64;
device_facts facts_cache[kMaxDevices];

recap_status device_facts_of(int device, device_facts *out) {
  if (device < 0 || device >= kMaxDevices)
    return RECAP_FAIL(RECAP_STATUS_NOT_SUPPORTED, "skinny gemm: device %d is beyond the %d "
                      "supported", device, kMaxDevices);
  /* Two threads racing here store the same values; int stores do not tear. */
  device_facts f = {__atomic_load_n(&facts_cache[device].sms, __ATOMIC_ACQUIRE),
                    __atomic_load_n(&facts_cache[device].major, __ATOMIC_RELAXED)};
  if (f.sms == 0) {
    RECAP_CUDA_TRY(cudaDeviceGetAttribute(&f.sms, cudaDevAttrMultiProcessorCount, device));
    RECAP_CUDA_TRY(cudaDeviceGetAttribute(&f.major, cudaDevAttrComputeCapabilityMajor, device));
    __atomic_store_n(&facts_cache[device].major, f.major, __ATOMIC_RELAXED);
    __atomic_store_n(&facts_cache[device].sms, f.sms, __ATOMIC_RELEASE);
  }
  *out = f;
  return RECAP_OK;
}

/* Warps per block: enough blocks x warps to keep ~12 warps (each with 16 loads of 512 bytes
 * in flight) on every SM while every block is resident at once (blocks of up to 8 warps fit
 * twice per SM at 128 registers), and no more warps than K has steps. */
int warps_for(int64_t blocks, int steps, int sms) {
  int warps = 1;
  while (warps < kMaxWarps && blocks * warps < 12 * (int64_t)sms) warps *= 2;
  while (warps > 1 && warps > steps) warps /= 2;
  return warps;
}

/* The A/B switches (RECAP_GEMM_SKINNY_PDL, _PIPE, _WARPS) come from recap__gemm_env_get, read
 * once per process; tools/bench_skinny.c times them and the tuner (cuda_gemm.c) times the
 * warps and pipelining variants as candidates of their own. */

template <typename T>
recap_status launch(const skinny_args &args, int warps, bool pipe, bool pdl, cudaStream_t stream) {
  const unsigned blocks = (unsigned)RECAP_CEIL_DIV(args.n, kRows);
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
  if (args.m <= 8)
    RECAP_CUDA_TRY(pipe ? cudaLaunchKernelEx(&config, skinny_kernel<T, 1, 4, true>, args)
                               : cudaLaunchKernelEx(&config, skinny_kernel<T, 1, 8, false>, args));
  else
    RECAP_CUDA_TRY(pipe ? cudaLaunchKernelEx(&config, skinny_kernel<T, 2, 2, true>, args)
                               : cudaLaunchKernelEx(&config, skinny_kernel<T, 2, 4, false>, args));
  RECAP_CUDA_TRY(cudaGetLastError());
  return RECAP_OK;
}

bool aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

}  // namespace

/* ================================ launchers ============================================== */

extern "C" bool recap__cuda_gemm_skinny_fits(const recap__gemm_plan *p) {
  const bool half = p->dtype == RECAP_DTYPE_BF16 || p->dtype == RECAP_DTYPE_F16;
  /* A(i, p) = a[i * a_rs + p * a_cs] is x; B(p, j) = b[p * b_rs + j * b_cs] is W^T. */
  return half && p->m >= 1 && p->m <= kMaxM && p->n >= 1 && p->n <= INT32_MAX && p->k >= 1 &&
         p->k <= INT32_MAX - kStepK && p->k % 8 == 0 && p->batch[0] == 1 && p->batch[1] == 1 &&
         !p->c && (p->a_cs == 1) && (p->m == 1 || p->a_rs % 8 == 0) && p->b_rs == 1 &&
         (p->n == 1 || p->b_cs % 8 == 0) && (!p->a || aligned16(p->a)) &&
         (!p->b || aligned16(p->b));
}

extern "C" recap_status recap__cuda_gemm_skinny_default(const recap__gemm_plan *p, int device,
                                                       int *warps, int *pipe) {
  if (!p || !warps || !pipe)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "skinny gemm: NULL argument");
  device_facts f;
  RECAP_TRY(device_facts_of(device, &f));
  const recap__gemm_env *env = recap__gemm_env_get();
  const int steps = (int)RECAP_CEIL_DIV(p->k, (int64_t)kStepK);
  *warps = env->skinny_warps ? env->skinny_warps
                             : warps_for(RECAP_CEIL_DIV(p->n, (int64_t)kRows), steps, f.sms);
  *pipe = env->skinny_pipe ? 1 : 0;
  return RECAP_OK;
}

extern "C" recap_status recap__cuda_gemm_skinny_config(const recap__gemm_plan *p, int device,
                                                      void *cuda_stream, int warps, int pipe) {
  recap__cuda_launch_range range("recap gemm skinny");
  if (!p || !cuda_stream || !p->a || !p->b || !p->out || !recap__cuda_gemm_skinny_fits(p))
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "skinny gemm: the plan does not fit the kernel (m <= 16, f16/bf16, x rows "
                      "and W [N, K] rows 16-byte aligned with unit stride along K, K %% 8 == 0, "
                      "no batch, no c)");
  if (warps < 1 || warps > kMaxWarps || (warps & (warps - 1)) != 0 || (pipe != 0 && pipe != 1))
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "skinny gemm: %d warps (1..%d, a power of two), pipe %d (0 or 1)", warps,
                      kMaxWarps, pipe);
  device_facts f;
  RECAP_TRY(device_facts_of(device, &f));
  skinny_args args;
  args.x = p->a;
  args.w = p->b;
  args.bias = p->bias;
  args.out = p->out;
  args.m = (int)p->m;
  args.n = (int)p->n;
  args.k = (int)p->k;
  /* A single row's stride is never stepped, so it may be anything; likewise W's when N = 1. */
  args.ldx = p->m == 1 ? p->k : p->a_rs;
  args.ldw = p->n == 1 ? p->k : p->b_cs;
  args.alpha = p->alpha;
  args.act = p->act;
  const bool pdl = f.major >= 9 && recap__gemm_env_get()->skinny_pdl;
  args.pdl = pdl;
  cudaStream_t stream = static_cast<cudaStream_t>(cuda_stream);
  return recap__cuda_dispatch_float(p->dtype, "skinny gemm", [&](auto tag) -> recap_status {
    using T = decltype(tag);
    if constexpr (sizeof(T) == 2) return launch<T>(args, warps, pipe != 0, pdl, stream);
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
