/* rng.cu: the CUDA kernels of the Philox fills and the replay's slot write, and their
 * launchers (status mapping and device selection live in cuda_rng.c). */
#include <cuda_runtime.h>
#include <stdint.h>

#include "runtime/rng.h"

namespace {

constexpr unsigned kThreads = 256;

/* One thread computes one Philox block (4 elements) per loop trip; the loop strides by the
 * grid so any n fits a grid sized for the device. The (seed, offset) pair is resolved in the
 * kernel, since in a graph it comes from the slot the replay has just written. `vector`
 * (the output is 16-byte aligned) lets full blocks be stored with one 16-byte store. */
template <recap__rng_dist Dist>
__global__ void fill_kernel(void *out, uint64_t n, float a, float b, recap__philox_args philox,
                            bool vector) {
  uint64_t seed, offset;
  recap__philox_resolve(&philox, &seed, &offset);
  const uint64_t blocks = (n + 3) / 4;
  const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
  for (uint64_t c = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; c < blocks; c += stride) {
    recap__philox4x32 w = recap__philox_draw(seed, offset, c);
    const uint64_t base = 4 * c;
    const bool full = base + 4 <= n;
    if constexpr (Dist == RECAP__RNG_BITS) {
      uint32_t *dst = static_cast<uint32_t *>(out) + base;
      if (full && vector) {
        *reinterpret_cast<uint4 *>(dst) = make_uint4(w.v[0], w.v[1], w.v[2], w.v[3]);
      } else {
        for (uint64_t k = 0; k < 4 && base + k < n; ++k) dst[k] = w.v[k];
      }
    } else {
      float v[4];
      if constexpr (Dist == RECAP__RNG_UNIFORM) {
        for (int k = 0; k < 4; ++k) v[k] = recap__philox_uniform(w.v[k], a, b);
      } else {
        recap__philox_normal4(w, a, b, v);
      }
      float *dst = static_cast<float *>(out) + base;
      if (full && vector) {
        *reinterpret_cast<float4 *>(dst) = make_float4(v[0], v[1], v[2], v[3]);
      } else {
        for (uint64_t k = 0; k < 4 && base + k < n; ++k) dst[k] = v[k];
      }
    }
  }
}

__global__ void write_slot_kernel(uint64_t *slot, uint64_t seed, uint64_t offset) {
  slot[0] = seed;
  slot[1] = offset;
}

}  // namespace

extern "C" int recap__rng_cuda_launch_fill(recap__rng_dist dist, void *out, size_t n, float a,
                                           float b, recap__philox_args philox, unsigned max_blocks,
                                           void *cuda_stream) {
  const uint64_t blocks = ((uint64_t)n + 3) / 4;
  uint64_t grid = (blocks + kThreads - 1) / kThreads;
  if (grid > max_blocks) grid = max_blocks;
  if (grid == 0) grid = 1;
  const bool vector = ((uintptr_t)out & 15u) == 0;
  cudaStream_t stream = static_cast<cudaStream_t>(cuda_stream);
  switch (dist) {
    case RECAP__RNG_BITS:
      fill_kernel<RECAP__RNG_BITS>
          <<<(unsigned)grid, kThreads, 0, stream>>>(out, n, a, b, philox, vector);
      break;
    case RECAP__RNG_UNIFORM:
      fill_kernel<RECAP__RNG_UNIFORM>
          <<<(unsigned)grid, kThreads, 0, stream>>>(out, n, a, b, philox, vector);
      break;
    case RECAP__RNG_NORMAL:
      fill_kernel<RECAP__RNG_NORMAL>
          <<<(unsigned)grid, kThreads, 0, stream>>>(out, n, a, b, philox, vector);
      break;
    default:
      return (int)cudaErrorInvalidValue;
  }
  return (int)cudaGetLastError();
}

extern "C" int recap__rng_cuda_launch_write_slot(uint64_t *slot, uint64_t seed, uint64_t offset,
                                                 void *cuda_stream) {
  write_slot_kernel<<<1, 1, 0, static_cast<cudaStream_t>(cuda_stream)>>>(slot, seed, offset);
  return (int)cudaGetLastError();
}
