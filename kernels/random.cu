/*
 * random.cu: random_uniform and random_normal into f32/f16/bf16 tensors from the runtime's
 * Philox4x32-10 generator (runtime/philox.h holds the generator and the transforms, shared
 * with the host reference, so both backends draw the same numbers).
 *
 * One thread computes one Philox block (elements 4c .. 4c+3) per loop trip and stores the
 * block's elements rounded to the output dtype. The (seed, offset) pair is resolved in the
 * kernel: inside a captured graph it comes from the device slot that each replay rewrites.
 * The kernel starts with recap__pdl_begin and is launched through recap__cuda_launch
 * (programmatic dependent launch, cuda_common.cuh): the slot is read only after the wait.
 */
#include <cuda_runtime.h>
#include <stdint.h>

#include "kernels/cuda_common.cuh"
#include "kernels/cuda_ops.h"
#include "runtime/cuda_check.h"
#include "runtime/philox.h"

namespace {

constexpr int kThreads = 256;

/* ================================ kernels ================================================ */

/* kNormal: a = mean, b = std; otherwise a = low, b = high. */
template <typename T, bool kNormal>
__global__ void random_kernel(T *__restrict__ out, int64_t n, float a, float b,
                              recap__philox_args philox) {
  recap__pdl_begin();
  uint64_t seed, offset;
  recap__philox_resolve(&philox, &seed, &offset);
  const int64_t blocks = RECAP_CEIL_DIV(n, (int64_t)4);
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; c < blocks; c += stride) {
    const recap__philox4x32 w = recap__philox_draw(seed, offset, (uint64_t)c);
    float vals[4];
    if (kNormal) {
      recap__philox_normal4(w, a, b, vals);
    } else {
#pragma unroll
      for (int e = 0; e < 4; ++e) vals[e] = recap__philox_uniform(w.v[e], a, b);
    }
    const int64_t base = 4 * c;
#pragma unroll
    for (int e = 0; e < 4; ++e)
      if (base + e < n) out[base + e] = recap__from_float<T>(vals[e]);
  }
}

}  // namespace

/* ================================ launchers ============================================== */

extern "C" recap_status recap__cuda_random(const recap__op_call *call, void *cuda_stream) {
  recap__cuda_launch_range range(call->def->name);
  const recap_tensor *out = &call->outputs[0];
  const char *name = call->def->name;
  const int code = call->def->code;
  if (!recap__tensor_is_contiguous(out) || (code != 0 && code != 1))
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "op '%s': needs a contiguous output and code 0 (uniform) or 1 (normal)",
                      name);
  const int64_t n = recap__tensor_numel(out);
  if (n == 0) return RECAP_OK;
  recap__philox_args philox;
  philox.seed = call->rng_seed;
  philox.offset = call->rng_offset;
  philox.slot = call->rng_slot;
  philox.slot_delta = call->rng_slot_delta;
  const bool normal = code == 1;
  const float a = (float)(normal ? call->attrs.mean : call->attrs.low);
  const float b = (float)(normal ? call->attrs.std : call->attrs.high);
  const unsigned grid = recap__cuda_grid_for(RECAP_CEIL_DIV(n, (int64_t)4), kThreads);
  cudaStream_t stream = static_cast<cudaStream_t>(cuda_stream);
  return recap__cuda_dispatch_float(out->dtype, name, [&](auto tag) {
    using T = decltype(tag);
    T *y = static_cast<T *>(out->data);
    RECAP_CUDA_TRY(recap__cuda_launch(normal ? random_kernel<T, true> : random_kernel<T, false>,
                                      grid, kThreads, 0, stream, y, n, a, b, philox));
    return RECAP_OK;
  });
}
