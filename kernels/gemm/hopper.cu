/*
 * hopper.cu: our own GEMM for Hopper (sm_90a), for the shapes where cuBLASLt would need a
 * second pass: out = act(alpha * x W^T + bias) + residual with the activation cuBLASLt has no
 * epilogue for (gelu in its erf form, silu, sigmoid, tanh) fused in, so the output is written
 * once instead of written, read and written again (docs/perf/transformer_block.md: the erf
 * gelu pass after the block's fc1 cost 7.4 us on top of a 17 us GEMM).
 *
 * Shapes: f16/bf16, x [M, K] and W [N, K] both with unit stride along K (a linear, or a matmul
 * with b transposed), row strides and K multiples of 8 elements (16 bytes: what TMA needs),
 * N a multiple of 8, out contiguous [M, N], no batch, no C, 16-byte aligned pointers. M, N and K
 * need not be multiples of the tile: TMA fills the parts of a tile outside the matrices with zeros
 * and the stores are bounded. recap__cuda_gemm_hopper_fits has the full list.
 *
 * The kernel (one output tile per block, one wave for the shapes it is chosen for):
 * - one producer warp (of a warpgroup that otherwise idles) issues, per 64-wide K step, two
 *   TMA copies (the x tile and the W tile, 128-byte swizzled, as wgmma reads them) into a ring
 *   of kStages shared-memory stages, each guarded by a "full" mbarrier (completes when its
 *   bytes have landed) and an "empty" one (completes when every consumer is done with it);
 * - one or two consumer warpgroups, each owning 64 rows of the tile, wait for a stage, issue 4
 *   wgmma m64nBNk16 (f32 accumulators in registers), commit, and release the PREVIOUS stage
 *   once its wgmmas are known complete (wait_group 1): one group always runs while the next
 *   is issued;
 * - the epilogue puts the f32 accumulators in shared memory (the ring, free by then), then
 *   applies alpha, bias, the activation and the residual (one rounding, as the host
 *   reference) and writes the tile with coalesced 16-byte stores.
 * Tile configurations (rows x columns, stages) are a table; the default picks the one that
 * fills the SMs best, and tuning (RECAP_TUNE=1) times them all (kernels/gemm/choose.c).
 *
 * Built for sm_90a only (kernels/BUILD); the host side checks the device is 9.0 before any
 * launch, so other GPUs never see these kernels.
 */
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>

#include <atomic>

#include "kernels/cuda_common.cuh"
#include "kernels/gemm/async.cuh"
#include "kernels/gemm/gemm.h"
#include "kernels/gemm/wgmma.cuh"
#include "runtime/cuda_check.h"

namespace {

constexpr int kBK = 64;         /* K per stage: one 128-byte swizzle row of 16-bit elements */
constexpr int kWarpgroup = 128; /* threads */
constexpr int kMaxSmem = 227 * 1024;

/* A tile configuration: consumer warpgroups (64 rows each), tile columns, ring stages, and
 * CTAs per cluster along M: with 2, the two CTAs of a cluster (same columns, adjacent rows)
 * each load half of the W tile and multicast it to both, halving W's traffic from L2. */
struct tile_config {
  int consumers, bn, stages, cluster;
};

/* Indexed by the tuning file's config value: append only. */
constexpr tile_config kConfigs[] = {
    {2, 256, 4, 1}, /* 128 x 256 */
    {2, 192, 4, 1}, /* 128 x 192 */
    {2, 128, 6, 1}, /* 128 x 128 */
    {1, 256, 5, 1}, /* 64 x 256 */
    {1, 128, 8, 1}, /* 64 x 128 */
    {2, 256, 4, 2}, /* the same, in pairs sharing W */
    {2, 192, 4, 2}, {2, 128, 6, 2}, {1, 256, 5, 2}, {1, 128, 8, 2},
};
constexpr int kConfigCount = (int)(sizeof kConfigs / sizeof kConfigs[0]);

__host__ __device__ constexpr int stage_bytes(int consumers, int bn) {
  return (64 * consumers + bn) * kBK * 2;
}

/* The ring, the 2 x stages mbarriers, and 1 KiB to align the ring to the 128-byte swizzle's
 * 1024-byte pattern (dynamic shared memory is only 16-byte aligned). */
__host__ __device__ constexpr size_t smem_bytes(int consumers, int bn, int stages) {
  return (size_t)stages * stage_bytes(consumers, bn) + 2 * stages * 8 + 1024;
}

struct epilogue_args {
  void *out;
  const void *bias, *residual;
  int m, n;
  float alpha;
  recap__activation act;
};

/* Floats per row of a consumer's f32 tile in shared memory: 8 of padding put the 8 rows a
 * warp's float2 stores touch at bank offsets 0, 8, 16, 24 (twice): two wavefronts, the least
 * for 256 bytes. */
template <int kBN>
__host__ __device__ constexpr int tile_pitch() {
  return kBN + 8;
}

/* The block's kRows x kBN tile, f32 in shared memory, to out, by all kThreads threads:
 * alpha, bias, the activation, the residual, one rounding; 8 columns (one 16-byte store) per
 * thread and step. */
template <typename T, recap__activation kAct, int kBN, int kRows, int kThreads>
__device__ __forceinline__ void write_tile(const float *tile, const epilogue_args &e, int row0,
                                           int n0) {
  constexpr int kChunks = kBN / 8;
  const T *bias = static_cast<const T *>(e.bias);
  const T *residual = static_cast<const T *>(e.residual);
  T *out = static_cast<T *>(e.out);
  for (int c = threadIdx.x; c < kRows * kChunks; c += kThreads) {
    const int r = c / kChunks, col = n0 + (c % kChunks) * 8, row = row0 + r;
    if (row >= e.m || col >= e.n) continue;
    const float *src = tile + r * tile_pitch<kBN>() + (c % kChunks) * 8;
    const float4 lo = *reinterpret_cast<const float4 *>(src);
    const float4 hi = *reinterpret_cast<const float4 *>(src + 4);
    const float v[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
    const int64_t at = (int64_t)row * e.n + col;
    recap__vec<T, 8> b, res, o;
    if (bias) b = *reinterpret_cast<const recap__vec<T, 8> *>(bias + col);
    if (residual) res = *reinterpret_cast<const recap__vec<T, 8> *>(residual + at);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      float f = e.alpha * v[j] + (bias ? recap__to_float(b.v[j]) : 0.0f);
      f = recap__gemm_activate(kAct, f);
      if (residual) f += recap__to_float(res.v[j]);
      o.v[j] = recap__from_float<T>(f);
    }
    *reinterpret_cast<recap__vec<T, 8> *>(out + at) = o;
  }
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
/* A consumer warpgroup: the mainloop over the ring, then its 64 rows of accumulators, f32, into
 * shared memory (rows 64 consumer.. of the block's tile, pitch tile_pitch). */
template <typename T, int kConsumers, int kBN, int kStages, int kCluster>
__device__ __forceinline__ void consume(uint8_t *ring, uint64_t *full, uint64_t *empty, int k_steps,
                                        int consumer, int tid) {
  constexpr int kBM = 64 * kConsumers;
  constexpr int kXBytes = kBM * kBK * 2, kStageBytes = stage_bytes(kConsumers, kBN);
  constexpr int kAcc = kBN / 2;

  float acc[kAcc];
#pragma unroll
  for (int i = 0; i < kAcc; ++i) acc[i] = 0.0f;
  recap__wgmma_fence_operands(acc);
  for (int step = 0; step < k_steps; ++step) {
    const int s = step % kStages;
    recap__mbar_wait(recap__smem_addr(&full[s]), (uint32_t)((step / kStages) & 1));
    const uint32_t x_tile = recap__smem_addr(ring + s * kStageBytes) + consumer * 64 * 128;
    const uint32_t w_tile = recap__smem_addr(ring + s * kStageBytes + kXBytes);
    recap__wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kBK / 16; ++kk)
      recap__wgmma_m64k16<kBN, T>(acc, recap__wgmma_desc_k128(x_tile + kk * 32),
                                  recap__wgmma_desc_k128(w_tile + kk * 32));
    recap__wgmma_commit();
    recap__wgmma_wait<1>();
    recap__wgmma_fence_operands(acc);
    if (step > 0 && tid == 0) {
      const uint32_t bar = recap__smem_addr(&empty[(step - 1) % kStages]);
      if (kCluster == 1) {
        recap__mbar_arrive(bar);
      } else {
        recap__mbar_arrive_cluster(bar, 0);
        recap__mbar_arrive_cluster(bar, 1);
      }
    }
  }
  recap__wgmma_wait<0>();
  recap__wgmma_fence_operands(acc);

  /* Every consumer is past its last wgmma: the ring may be overwritten. The accumulators go
   * to shared memory as they are (a short unrolled loop), and a compact loop (write_tile) does
   * the rest: unrolled over all 128 accumulators with the activation inlined, the epilogue was
   * ~5k instructions of straight-line code that missed the instruction cache at every line
   * (ncu: "no instruction" stalls, the kernel at 9% of the SM's throughput). */
  asm volatile("bar.sync 1, %0;" ::"n"(kWarpgroup * kConsumers) : "memory");
  float *tile = reinterpret_cast<float *>(ring) + consumer * 64 * tile_pitch<kBN>();
  {
    const int warp = tid / 32, lane = tid % 32;
    float *row_lo = tile + (warp * 16 + lane / 4) * tile_pitch<kBN>() + 2 * (lane % 4);
    float *row_hi = row_lo + 8 * tile_pitch<kBN>();
#pragma unroll
    for (int i = 0; i < kBN / 8; ++i) {
      *reinterpret_cast<float2 *>(row_lo + 8 * i) = make_float2(acc[4 * i], acc[4 * i + 1]);
      *reinterpret_cast<float2 *>(row_hi + 8 * i) = make_float2(acc[4 * i + 2], acc[4 * i + 3]);
    }
  }
}

/* The epilogue's second half, by every thread of the block (the producer warpgroup is idle by
 * then: 12 warps instead of 8 for the activation, which is most of the epilogue's work). */
template <typename T, int kConsumers, int kBN>
__device__ __forceinline__ void write_block_tile(const float *tile, const epilogue_args &e, int m0,
                                                 int n0) {
  constexpr int kRows = 64 * kConsumers, kThreads = kWarpgroup * (kConsumers + 1);
  recap__with_activation(e.act, [&](auto act) {
    write_tile<T, decltype(act)::value, kBN, kRows, kThreads>(tile, e, m0, n0);
  });
}
#endif

template <typename T, int kConsumers, int kBN, int kStages, int kCluster>
__global__ void __launch_bounds__(kWarpgroup *(kConsumers + 1), 1)
    gemm_hopper_kernel(const __grid_constant__ CUtensorMap x_map,
                       const __grid_constant__ CUtensorMap w_map, epilogue_args e, int k) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int kBM = 64 * kConsumers;
  constexpr int kXBytes = kBM * kBK * 2, kStageBytes = stage_bytes(kConsumers, kBN);
  extern __shared__ uint8_t smem_raw[];
  uint8_t *ring = reinterpret_cast<uint8_t *>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) &
                                              ~static_cast<uintptr_t>(1023));
  uint64_t *full = reinterpret_cast<uint64_t *>(ring + kStages * kStageBytes);
  uint64_t *empty = full + kStages;
  const int group = threadIdx.x / kWarpgroup, tid = threadIdx.x % kWarpgroup;
  const int m0 = blockIdx.y * kBM, n0 = blockIdx.x * kBN;
  const int k_steps = (k + kBK - 1) / kBK;

  /* A stage is free again once every consumer of every CTA of the cluster is done with it
   * (with pairs, this CTA's producer writes half of W into the other CTA too). */
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      recap__mbar_init(recap__smem_addr(&full[s]), 1);
      recap__mbar_init(recap__smem_addr(&empty[s]), kConsumers * kCluster);
    }
    recap__mbar_init_fence();
  }
  /* With pairs, neither CTA may signal the other's barriers before they are initialized. */
  if (kCluster > 1)
    recap__cluster_sync();
  else
    __syncthreads();
  /* x (and the residual) may be the previous kernel's output. */
  recap__pdl_begin();
  const uint32_t rank = kCluster > 1 ? recap__cluster_rank() : 0;

  if (group == 0) {
    /* The producer: one thread keeps the ring full. */
    if (tid == 0) {
      for (int step = 0; step < k_steps; ++step) {
        const int s = step % kStages;
        if (step >= kStages)
          recap__mbar_wait(recap__smem_addr(&empty[s]), (uint32_t)((step / kStages + 1) & 1));
        const uint32_t bar = recap__smem_addr(&full[s]);
        const uint32_t dst = recap__smem_addr(ring + s * kStageBytes);
        /* The whole stage lands here either way: x, W's half from this CTA and (pairs) the
         * other half from the other CTA. */
        recap__mbar_arrive_expect_tx(bar, kStageBytes);
        recap__tma_load_2d(dst, &x_map, bar, step * kBK, m0);
        if (kCluster == 1) {
          recap__tma_load_2d(dst + kXBytes, &w_map, bar, step * kBK, n0);
        } else {
          constexpr int kHalf = kBN / 2;
          recap__tma_load_2d_multicast(dst + kXBytes + rank * kHalf * 128, &w_map, bar, step * kBK,
                                       n0 + (int)rank * kHalf, (uint16_t)0x3);
        }
      }
    }
  } else {
    consume<T, kConsumers, kBN, kStages, kCluster>(ring, full, empty, k_steps, group - 1, tid);
  }
  /* The consumers' f32 tiles (rows 64 c .. 64 c + 63 of the block's tile, one after the other)
   * are in shared memory: everyone writes them out. */
  asm volatile("barrier.sync 2, %0;" ::"n"(kWarpgroup * (kConsumers + 1)) : "memory");
  write_block_tile<T, kConsumers, kBN>(reinterpret_cast<const float *>(ring), e, m0, n0);
  /* With pairs, neither CTA may leave while the other can still write its shared memory or
   * arrive on its barriers. */
  if (kCluster > 1) recap__cluster_sync();
#else
  /* Built for sm_90a only; the launcher never runs it elsewhere. */
  __trap();
#endif
}

/* ================================ host side ============================================== */

/* cuTensorMapEncodeTiled, found once through the runtime (the driver library is not linked). */
typedef CUresult (*encode_tiled_fn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *,
                                    const cuuint64_t *, const cuuint64_t *, const cuuint32_t *,
                                    const cuuint32_t *, CUtensorMapInterleave, CUtensorMapSwizzle,
                                    CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

encode_tiled_fn encode_tiled() {
  static const encode_tiled_fn fn = [] {
    void *p = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault,
                                         &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      return (encode_tiled_fn) nullptr;
    }
    return reinterpret_cast<encode_tiled_fn>(p);
  }();
  return fn;
}

/* Whether sm_90a code runs on the device: compute capability exactly 9.0, and the driver has
 * the tensor-map encoder. A device that cannot be asked gets the other kernels. */
bool runs_on(int device) {
  recap__cuda_device_facts f;
  if (recap__cuda_facts_of(device, &f) != RECAP_OK) {
    recap_clear_error();
    return false;
  }
  return f.major == 9 && f.minor == 0 && encode_tiled() != nullptr;
}

/* The map of a [rows, k] operand with row stride ld (elements), read in boxes of 64 x box_rows,
 * 128-byte swizzled. */
recap_status make_map(CUtensorMap *map, const void *base, recap_dtype dtype, int64_t rows,
                      int64_t k, int64_t ld, int box_rows) {
  const cuuint64_t dims[2] = {(cuuint64_t)k, (cuuint64_t)rows};
  const cuuint64_t strides[1] = {(cuuint64_t)ld * 2};
  const cuuint32_t box[2] = {(cuuint32_t)kBK, (cuuint32_t)box_rows};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult r =
      encode_tiled()(map,
                     dtype == RECAP_DTYPE_BF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                               : CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
                     2, const_cast<void *>(base), dims, strides, box, element_strides,
                     CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                     CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  /* What fits() admits encodes; a refusal here means the plan does not fit after all, which
   * tuning treats as a refused candidate (a device error would end the tuning). */
  if (r != CUDA_SUCCESS)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "hopper gemm: cuTensorMapEncodeTiled failed (error %d) for a [%lld, %lld] "
                      "operand with row stride %lld",
                      (int)r, (long long)rows, (long long)k, (long long)ld);
  return RECAP_OK;
}

template <typename T, int kConsumers, int kBN, int kStages, int kCluster>
recap_status launch(const recap__gemm_plan *p, int device, cudaStream_t stream) {
  constexpr size_t smem = smem_bytes(kConsumers, kBN, kStages);
  static_assert(smem <= kMaxSmem, "tile configuration over the shared-memory limit");
  static_assert(kConsumers * 64 * tile_pitch<kBN>() * 4 <= kStages * stage_bytes(kConsumers, kBN),
                "the epilogue's f32 tiles must fit in the ring");
  auto kernel = gemm_hopper_kernel<T, kConsumers, kBN, kStages, kCluster>;
  /* Over the default 48 KiB: the kernel must opt in, once per device (allowed during a
   * capture; later launches skip the driver call). */
  static std::atomic<uint64_t> opted_in{0};
  const uint64_t bit = (uint64_t)1 << device;
  if (!(opted_in.load(std::memory_order_acquire) & bit)) {
    RECAP_CUDA_TRY(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    opted_in.fetch_or(bit, std::memory_order_release);
  }
  CUtensorMap x_map, w_map;
  RECAP_TRY(make_map(&x_map, p->a, p->dtype, p->m, p->k, p->a_rs, 64 * kConsumers));
  RECAP_TRY(make_map(&w_map, p->b, p->dtype, p->n, p->k, p->b_cs, kBN / kCluster));
  const epilogue_args e = {p->out, p->bias, p->residual, (int)p->m, (int)p->n, p->alpha, p->act};
  /* Pairs need an even number of row tiles: a last CTA past m loads zeros (TMA) for its
   * partner's sake and stores nothing. */
  const int64_t row_tiles = RECAP_CEIL_DIV(p->m, (int64_t)(64 * kConsumers));
  cudaLaunchConfig_t config;
  memset(&config, 0, sizeof config);
  config.gridDim = dim3((unsigned)RECAP_CEIL_DIV(p->n, (int64_t)kBN),
                        (unsigned)(RECAP_CEIL_DIV(row_tiles, (int64_t)kCluster) * kCluster));
  config.blockDim = dim3(kWarpgroup * (kConsumers + 1));
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attrs[2];
  memset(attrs, 0, sizeof attrs);
  unsigned count = 0;
  if (kCluster > 1) {
    attrs[count].id = cudaLaunchAttributeClusterDimension;
    attrs[count].val.clusterDim.x = 1;
    attrs[count].val.clusterDim.y = kCluster;
    attrs[count].val.clusterDim.z = 1;
    ++count;
  }
  if (recap__cuda_pdl_enabled()) {
    attrs[count].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attrs[count].val.programmaticStreamSerializationAllowed = 1;
    ++count;
  }
  config.attrs = attrs;
  config.numAttrs = count;
  RECAP_CUDA_TRY(cudaLaunchKernelEx(&config, kernel, x_map, w_map, e, (int)p->k));
  return RECAP_OK;
}

/* Configuration I of kConfigs. */
template <typename T, int I>
recap_status launch_index(const recap__gemm_plan *p, int device, cudaStream_t stream) {
  constexpr tile_config c = kConfigs[I];
  return launch<T, c.consumers, c.bn, c.stages, c.cluster>(p, device, stream);
}

template <typename T>
recap_status launch_config(const recap__gemm_plan *p, int config, int device, cudaStream_t stream) {
  static_assert(kConfigCount == 10, "one case per configuration below");
  switch (config) {
    case 0:
      return launch_index<T, 0>(p, device, stream);
    case 1:
      return launch_index<T, 1>(p, device, stream);
    case 2:
      return launch_index<T, 2>(p, device, stream);
    case 3:
      return launch_index<T, 3>(p, device, stream);
    case 4:
      return launch_index<T, 4>(p, device, stream);
    case 5:
      return launch_index<T, 5>(p, device, stream);
    case 6:
      return launch_index<T, 6>(p, device, stream);
    case 7:
      return launch_index<T, 7>(p, device, stream);
    case 8:
      return launch_index<T, 8>(p, device, stream);
    default:
      return launch_index<T, 9>(p, device, stream);
  }
}

bool aligned16(const void *p) {
  return ((uintptr_t)p & 15u) == 0;
}

}  // namespace

/* ================================ launchers ============================================== */

extern "C" int recap__cuda_gemm_hopper_configs(void) {
  return kConfigCount;
}

extern "C" bool recap__cuda_gemm_hopper_fits(const recap__gemm_plan *p, int device) {
  if (p->dtype != RECAP_DTYPE_F16 && p->dtype != RECAP_DTYPE_BF16) return false;
  /* x [m, k] rows and W [n, k] rows, unit stride along k; 16-byte row strides for TMA. */
  if (p->a_cs != 1 || p->b_rs != 1 || p->a_rs % 8 != 0 || p->b_cs % 8 != 0) return false;
  if (p->a_rs < p->k || p->b_cs < p->k) return false;
  if (p->batch[0] != 1 || p->batch[1] != 1 || p->c || p->beta != 0.0f) return false;
  if (p->k % 8 != 0 || p->n % 8 != 0 || p->m < 1 || p->k < 1) return false;
  if (p->m > INT32_MAX || p->n > INT32_MAX || p->k > INT32_MAX) return false;
  /* TMA boxes address rows with 32-bit coordinates; the grid's y dimension counts row tiles
   * (64 rows at the least, rounded up to pairs for the cluster configurations); TMA takes row
   * strides below 2^40 bytes. */
  if (RECAP_CEIL_DIV(p->m, (int64_t)64) > 65534) return false;
  if (p->a_rs >= ((int64_t)1 << 39) || p->b_cs >= ((int64_t)1 << 39)) return false;
  /* Unbound plans (a prepare) fit on shape; bound ones also on alignment. */
  for (const void *ptr :
       {(const void *)p->a, (const void *)p->b, (const void *)p->out, p->residual})
    if (ptr && !aligned16(ptr)) return false;
  if (p->bias && !aligned16(p->bias)) return false;
  return runs_on(device);
}

/* The configuration that fills the SMs best: estimated time = waves x tile work / tile
 * efficiency (wider tiles reuse each loaded element more). Pairs sharing W pay for their
 * cluster barriers in one wave and win from several (L2 holds less of W between waves):
 * bench_hopper_gemm on the H100 measured the block's one-wave shapes 5-10% slower in pairs and
 * 8192^3 14% faster (docs/perf/transformer_block.md). */
extern "C" int recap__cuda_gemm_hopper_default(const recap__gemm_plan *p, int device) {
  static const float kEfficiency[kConfigCount] = {1.0f, 0.97f, 0.9f, 0.85f, 0.75f,
                                                  1.0f, 0.97f, 0.9f, 0.85f, 0.75f};
  /* An H100's count where the device cannot be asked: a choice, never a failure. */
  int sms = 132;
  recap__cuda_device_facts f;
  if (recap__cuda_facts_of(device, &f) == RECAP_OK)
    sms = f.sms;
  else
    recap_clear_error();
  int best = 0;
  float best_cost = 0.0f;
  for (int c = 0; c < kConfigCount; ++c) {
    const int64_t bm = 64 * kConfigs[c].consumers, bn = kConfigs[c].bn;
    const int64_t tiles = RECAP_CEIL_DIV(p->m, bm) * RECAP_CEIL_DIV(p->n, bn);
    const int64_t waves = RECAP_CEIL_DIV(tiles, (int64_t)sms);
    float cost = (float)waves * (float)(bm * bn) / kEfficiency[c];
    if (kConfigs[c].cluster > 1) cost *= waves > 1 ? 0.9f : 1.05f;
    if (c == 0 || cost < best_cost) {
      best = c;
      best_cost = cost;
    }
  }
  return best;
}

/* Measured with `recap bench-gemm` (H100, operands read from memory, graph replays;
 * docs/perf/gemm_sweep.md), against PyTorch's cuBLASLt GEMM plus its activation pass, which
 * our cuBLASLt path plus epilogue pass matches or beats: the kernel wins where its grid of
 * 128 x 256 tiles is neither small (few tiles: cuBLASLt splits K; Llama 3 8B's down at
 * m = 256, 32 tiles, erf gelu 1.41x PyTorch's time) nor huge (8B's gate_up at m = 4096, 3584
 * tiles, 1.12x); in between it beats the pass by 6-24% (Llama 3.2 1B's o at m = 4096: 0.91x;
 * 8B's gate_up at 256: 0.92x; the transformer block's fc1, 128 tiles: 20.7 vs 22.0 us). silu
 * and sigmoid (an exponential and a division per element) make its epilogue the bottleneck:
 * those win only on long K at large m (down projections, k >= 14336, m >= 4096: 0.87-0.94x)
 * and lost everywhere else measured (1.05-1.98x). At m <= 64 the product streams W once, a
 * tile of 256 rows per SM at most, and cuBLASLt's small-m kernels stream it faster: on an H200
 * Llama 3 8B's gate_up (112 tiles) with tanh or a residual took 65 us at m = 1 and 16 against
 * 62 and 59 for cuBLASLt and the pass, 67-69 against 65-66 at m = 64; at m = 128 the kernel
 * was ahead again (gelu: 71.9 against 74.4). */
extern "C" bool recap__cuda_gemm_hopper_preferred(const recap__gemm_plan *p) {
  if (p->m <= 64) return false;
  const int64_t tiles = RECAP_CEIL_DIV(p->m, (int64_t)128) * RECAP_CEIL_DIV(p->n, (int64_t)256);
  if (tiles < 64 || tiles > 1024) return false;
  if (p->act == RECAP_ACT_SILU || p->act == RECAP_ACT_SIGMOID) return p->k >= 12288 && p->m >= 4096;
  return true;
}

extern "C" recap_status recap__cuda_gemm_hopper(const recap__gemm_plan *p, int device,
                                                void *cuda_stream, int config) {
  recap__cuda_launch_range range("recap hopper gemm");
  if (config < 0 || config >= kConfigCount || !recap__cuda_gemm_hopper_fits(p, device) || !p->a ||
      !p->b || !p->out)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "hopper gemm: the plan (m=%lld n=%lld k=%lld %s) or config %d does not fit "
                      "the kernel on device %d",
                      (long long)p->m, (long long)p->n, (long long)p->k, recap_dtype_name(p->dtype),
                      config, device);
  cudaStream_t stream = static_cast<cudaStream_t>(cuda_stream);
  if (p->dtype == RECAP_DTYPE_BF16) return launch_config<__nv_bfloat16>(p, config, device, stream);
  return launch_config<__half>(p, config, device, stream);
}
