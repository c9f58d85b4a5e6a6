/*
 * cuda_common.cuh: device helpers shared by the op kernels in kernels/ (internal; only the .cu
 * files include it).
 *
 * - Element access: f16/bf16/f32 storage is loaded as float and stored from float (round to
 *   nearest even, as runtime/half.h does on the host), so every kernel computes in f32.
 * - recap__cuda_view4: a recap_tensor's shape and strides right-aligned to 4 dimensions, so a
 *   kernel turns a linear element index into a strided offset the same way for any rank.
 * - recap__fast_div: division by a launch-time constant without a hardware divide, for index
 *   arithmetic in kernels that split linear indices.
 * - Warp and block sums built on warp shuffles.
 * - recap__cuda_facts_of: a device's multiprocessor count, compute capability and shared
 *   memory, read once.
 * - recap__cuda_launch_range: the NVTX range every launcher opens (popped on return), and the
 *   launch-size helpers (CEIL_DIV, the grid cap of grid-stride kernels).
 * - recap__cuda_launch: the one way a launcher in kernels/ starts a kernel, as a programmatic
 *   dependent launch (PDL) on Hopper and later; recap__pdl_begin: what every kernel so
 *   launched runs first.
 *
 * Everything here is inline or a template, so each .cu file gets its own copy and no symbol
 * is defined twice when the files are linked together.
 */
#ifndef RECAP_KERNELS_CUDA_COMMON_CUH
#define RECAP_KERNELS_CUDA_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <utility>

#include "include/recap.h"
#include "runtime/cuda_check.h"
#include "runtime/env.h"
#include "runtime/error.h"

#define RECAP_CEIL_DIV(a, b) (((a) + (b)-1) / (b))

/* Grid-stride kernels never need more blocks than this to fill a GPU (132 SMs x 16 resident
 * blocks of 256 threads is far below it); capping keeps grid.x within its limit for any n. */
constexpr int64_t kRecapMaxGridBlocks = 65535;

static inline unsigned recap__cuda_grid_for(int64_t work_items, int threads) {
  int64_t blocks = RECAP_CEIL_DIV(work_items, (int64_t)threads);
  if (blocks > kRecapMaxGridBlocks) blocks = kRecapMaxGridBlocks;
  if (blocks < 1) blocks = 1;
  return (unsigned)blocks;
}

/* The grid of a kernel that gives each of `work_items` threads one piece of work (no loop):
 * the blocks of `threads` that cover them. Fails (INVALID_ARGUMENT) past grid.x's limit of
 * 2^31 - 1 blocks, which no tensor that fits in device memory reaches. */
static inline recap_status recap__cuda_grid_cover(int64_t work_items, int threads, unsigned *grid) {
  const int64_t blocks = RECAP_CEIL_DIV(work_items, (int64_t)threads);
  if (blocks > INT32_MAX)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "%lld work items need more than 2^31 - 1 blocks of %d threads",
                      (long long)work_items, threads);
  *grid = blocks < 1 ? 1u : (unsigned)blocks;
  return RECAP_OK;
}

/* What launchers size grids and choose kernels by, for one device: multiprocessor count,
 * compute capability and shared memory per multiprocessor. These cannot change while the
 * process runs, so each device's are read once (per .cu file: the cache is this inline
 * function's static) and the launch path, eager or under capture, does not repeat the queries.
 * Two threads racing to fill an entry store the same values; the release store of `sms`, read
 * with acquire, publishes the others. */
struct recap__cuda_device_facts {
  int sms, major, minor, smem_per_sm;
};
constexpr int kRecapMaxDevices = 64;

static inline recap_status recap__cuda_facts_of(int device, recap__cuda_device_facts *out) {
  static recap__cuda_device_facts cache[kRecapMaxDevices];
  if (device < 0 || device >= kRecapMaxDevices)
    return RECAP_FAIL(RECAP_STATUS_NOT_SUPPORTED, "device %d is beyond the %d supported", device,
                      kRecapMaxDevices);
  recap__cuda_device_facts f;
  f.sms = __atomic_load_n(&cache[device].sms, __ATOMIC_ACQUIRE);
  f.major = __atomic_load_n(&cache[device].major, __ATOMIC_RELAXED);
  f.minor = __atomic_load_n(&cache[device].minor, __ATOMIC_RELAXED);
  f.smem_per_sm = __atomic_load_n(&cache[device].smem_per_sm, __ATOMIC_RELAXED);
  if (f.sms == 0) {
    RECAP_CUDA_TRY(cudaDeviceGetAttribute(&f.sms, cudaDevAttrMultiProcessorCount, device));
    RECAP_CUDA_TRY(cudaDeviceGetAttribute(&f.major, cudaDevAttrComputeCapabilityMajor, device));
    RECAP_CUDA_TRY(cudaDeviceGetAttribute(&f.minor, cudaDevAttrComputeCapabilityMinor, device));
    RECAP_CUDA_TRY(cudaDeviceGetAttribute(&f.smem_per_sm,
                                          cudaDevAttrMaxSharedMemoryPerMultiprocessor, device));
    __atomic_store_n(&cache[device].major, f.major, __ATOMIC_RELAXED);
    __atomic_store_n(&cache[device].minor, f.minor, __ATOMIC_RELAXED);
    __atomic_store_n(&cache[device].smem_per_sm, f.smem_per_sm, __ATOMIC_RELAXED);
    __atomic_store_n(&cache[device].sms, f.sms, __ATOMIC_RELEASE);
  }
  *out = f;
  return RECAP_OK;
}

/* The facts of the calling thread's current device. */
static inline recap_status recap__cuda_current_facts(recap__cuda_device_facts *out) {
  int device = 0;
  RECAP_CUDA_TRY(cudaGetDevice(&device));
  return recap__cuda_facts_of(device, out);
}

/* Opens an NVTX range in recap's domain for the launcher's scope; every return path pops it. */
struct recap__cuda_launch_range {
  explicit recap__cuda_launch_range(const char *name) {
    recap_nvtx_range_push(name);
  }
  ~recap__cuda_launch_range() {
    recap_nvtx_range_pop();
  }
  recap__cuda_launch_range(const recap__cuda_launch_range &) = delete;
  recap__cuda_launch_range &operator=(const recap__cuda_launch_range &) = delete;
};

/* ---- programmatic dependent launch ------------------------------------------------------ */

/* A chain of small kernels is bound by launch latency: ordinarily a kernel is not even
 * scheduled until the one before it on the stream has finished, so each link pays the whole
 * launch (about 1 us as a graph node on an H100) on top of its work. On compute capability 9.0
 * and later, a launch with cudaLaunchAttributeProgrammaticStreamSerialization may begin while
 * the kernel before it still runs (stream capture records the pair as a programmatic graph
 * edge), and the hardware orders memory only where the kernel asks: griddepcontrol.wait
 * blocks until every earlier kernel of the stream has COMPLETED and its writes are visible.
 *
 * The contract, therefore: every kernel launched through recap__cuda_launch calls
 * recap__pdl_begin() before its first access to global memory, reads and writes alike (a
 * write may hit a buffer an earlier kernel still reads, when the planner reuses memory), and
 * in every block (a block that returned before waiting would let the grid complete before its
 * predecessor, and a later kernel would wait on the wrong thing). Just before its wait, the
 * kernel lets the next one on the stream launch (griddepcontrol.launch_dependents), so that
 * launch overlaps both this kernel's wait and its work. The trigger orders nothing: the next
 * kernel still waits for this one to COMPLETE, and this one completes only after each of its
 * blocks has passed its own wait, i.e. after everything before it on the stream completed.
 * Nor can waiting blocks starve this kernel: the next one launches only once every block of
 * this one has triggered, i.e. is already resident. Kernels launched the ordinary way (cuBLAS,
 * other .cu files) need nothing: a launch without the attribute waits for everything before
 * it, and a PDL kernel after a foreign one waits in recap__pdl_begin.
 *
 * RECAP_PDL=0 (a boolean switch, runtime/env.h; read once per process) turns the attribute
 * off, for A/B timing; devices below 9.0 never get it. */

/* Whether launches on the current device use PDL. The environment is read once; the compute
 * capability comes from the device's facts (read once). A device that cannot be asked launches
 * the ordinary way, and is asked again next time. */
static inline bool recap__cuda_pdl_enabled() {
  static const bool env_on = recap__env_bool("RECAP_PDL", 1) == 1;
  if (!env_on) return false;
  recap__cuda_device_facts f;
  if (recap__cuda_current_facts(&f) != RECAP_OK) {
    recap_clear_error();
    return false;
  }
  return f.major >= 9;
}

/* Launches kernel<<<grid, threads, smem, stream>>>(args...), programmatically dependent on
 * the previous kernel of the stream where recap__cuda_pdl_enabled() says so. The kernel must
 * start with recap__pdl_begin() (see above). Returns what cudaGetLastError() after
 * <<<...>>> would: the launch's error, else one an earlier call left pending on this thread
 * (taking it, so that it is reported here, as the launchers always did, and not by the next
 * library call that checks cudart's last error). */
template <typename... KArgs, typename... Args>
static inline cudaError_t recap__cuda_launch(void (*kernel)(KArgs...), dim3 grid, dim3 threads,
                                             size_t smem, cudaStream_t stream, Args &&...args) {
  cudaLaunchConfig_t config;
  memset(&config, 0, sizeof config);
  config.gridDim = grid;
  config.blockDim = threads;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  memset(attribute, 0, sizeof attribute);
  if (recap__cuda_pdl_enabled()) {
    attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute[0].val.programmaticStreamSerializationAllowed = 1;
    config.attrs = attribute;
    config.numAttrs = 1;
  }
  const cudaError_t launched = cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
  return launched != cudaSuccess ? launched : cudaGetLastError();
}

/* The first statement of every kernel launched by recap__cuda_launch. Both instructions are
 * no-ops for a launch without the attribute; before sm_90 there is nothing to wait for. The
 * trigger comes first, so that the next kernel's blocks can already be resident and waiting
 * when this one's wait returns (measured faster than the other order: docs/perf/launch.md). */
__device__ __forceinline__ void recap__pdl_begin() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

/* Calls fn(T{}) with T the storage type of a float dtype (float, __half, __nv_bfloat16), so a
 * launcher instantiates its kernel per dtype with one generic lambda. Other dtypes fail with
 * RECAP_STATUS_NOT_SUPPORTED naming `what`. */
template <typename Fn>
static recap_status recap__cuda_dispatch_float(recap_dtype dtype, const char *what, Fn &&fn) {
  switch (dtype) {
    case RECAP_DTYPE_F32:
      return fn(float{});
    case RECAP_DTYPE_F16:
      return fn(__half{});
    case RECAP_DTYPE_BF16:
      return fn(__nv_bfloat16{});
    default:
      return RECAP_FAIL(RECAP_STATUS_NOT_SUPPORTED, "%s: dtype %s is not supported on CUDA", what,
                        recap_dtype_name(dtype) ? recap_dtype_name(dtype) : "(invalid)");
  }
}

/* As above over all five dtypes (the two index types as int32_t and int64_t). */
template <typename Fn>
static recap_status recap__cuda_dispatch_any(recap_dtype dtype, const char *what, Fn &&fn) {
  switch (dtype) {
    case RECAP_DTYPE_I32:
      return fn(int32_t{});
    case RECAP_DTYPE_I64:
      return fn(int64_t{});
    default:
      return recap__cuda_dispatch_float(dtype, what, fn);
  }
}

/* ---- element loads and stores -------------------------------------------------------- */

__device__ __forceinline__ float recap__to_float(float v) {
  return v;
}
__device__ __forceinline__ float recap__to_float(__half v) {
  return __half2float(v);
}
__device__ __forceinline__ float recap__to_float(__nv_bfloat16 v) {
  return __bfloat162float(v);
}

template <typename T>
__device__ __forceinline__ T recap__from_float(float v);
template <>
__device__ __forceinline__ float recap__from_float<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __half recap__from_float<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 recap__from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

/* N elements moved by one load or store (16 bytes for the widest uses). */
template <typename T, int N>
struct alignas(sizeof(T) * N) recap__vec {
  T v[N];
};

/* An index (i32 or i64) read from device memory. */
__device__ __forceinline__ int64_t recap__load_index(const void *p, recap_dtype dtype, int64_t i) {
  return dtype == RECAP_DTYPE_I64 ? static_cast<const int64_t *>(p)[i]
                                  : (int64_t) static_cast<const int32_t *>(p)[i];
}

/* ---- strided views --------------------------------------------------------------------- */

/* A tensor's dims right-aligned to 4 (leading dims of size 1, stride 0). Plain data: passed to
 * kernels by value. */
struct recap__cuda_view4 {
  int64_t shape[4];
  int64_t stride[4];
};

static inline recap__cuda_view4 recap__cuda_view4_of(const recap_tensor *t) {
  recap__cuda_view4 v;
  const int lead = 4 - t->ndim;
  for (int d = 0; d < 4; ++d) {
    v.shape[d] = d < lead ? 1 : t->shape[d - lead];
    v.stride[d] = d < lead ? 0 : t->strides[d - lead];
  }
  return v;
}

/* Division by a divisor fixed at launch, as a multiply-high, an add and a shift instead of a
 * 64-bit division (dozens of instructions each): for kernels that split a linear index into
 * coordinates once per element or vector. Exact for divisors in [1, 2^31) and dividends below
 * 2^31 (then __umulhi(n, m) + n cannot overflow). With s = ceil(log2 d) and
 * m = floor(2^32 (2^s - d) / d) + 1, which fits 32 bits, q = (umulhi(n, m) + n) >> s. */
struct recap__fast_div {
  uint32_t d, m, s;
};

static inline recap__fast_div recap__fast_div_make(uint32_t d) {
  recap__fast_div f;
  f.d = d;
  f.s = 0;
  while ((1ull << f.s) < d) ++f.s;
  f.m = (uint32_t)((((1ull << 32) * ((1ull << f.s) - d)) / d) + 1);
  return f;
}

__device__ __forceinline__ uint32_t recap__fast_div_q(const recap__fast_div &f, uint32_t n) {
  return (__umulhi(n, f.m) + n) >> f.s;
}

/* The element offset of row-major linear index `i` of the view's shape. */
__device__ __forceinline__ int64_t recap__view4_offset(const recap__cuda_view4 &v, int64_t i) {
  int64_t off = 0;
  for (int d = 3; d > 0; --d) {
    const int64_t q = i / v.shape[d];
    off += (i - q * v.shape[d]) * v.stride[d];
    i = q;
  }
  return off + i * v.stride[0];
}

/* ---- reductions ------------------------------------------------------------------------- */

__device__ __forceinline__ float recap__warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

/* Sum over the whole block, returned to every thread. `scratch` holds 32 floats in shared
 * memory; the trailing barrier lets the caller reuse it for the next reduction. blockDim.x
 * must be a multiple of 32. */
__device__ __forceinline__ float recap__block_sum(float v, float *scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = recap__warp_sum(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : 0.0f;
  v = recap__warp_sum(v);
  __syncthreads();
  return v;
}

__device__ __forceinline__ float recap__warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

/* As recap__block_sum, for the maximum (-inf from an empty block). */
__device__ __forceinline__ float recap__block_max(float v, float *scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = recap__warp_max(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : -INFINITY;
  v = recap__warp_max(v);
  __syncthreads();
  return v;
}

#endif
