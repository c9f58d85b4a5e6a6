/* cuda_rng.c: the CUDA side of rng.c: device selection, grid limit and status mapping around
 * rng.cu's launchers. */
#include <cuda_runtime_api.h>

#include "runtime/cuda_check.h"
#include "runtime/rng.h"

/* Blocks per SM the fill grid may use: enough resident threads to hide Philox's latency;
 * beyond that the grid-stride loop does the rest without extra launch cost. */
enum { FILL_BLOCKS_PER_SM = 8 };

/* Kernels must be launched with the stream's device current; the caller's current device is
 * restored afterwards so this call has no visible side effect. */
typedef struct {
  int previous;
  int changed;
} device_guard;

static recap_status guard_enter(device_guard *g, int device) {
  RECAP_CUDA_TRY(cudaGetDevice(&g->previous));
  g->changed = g->previous != device;
  if (g->changed) RECAP_CUDA_TRY(cudaSetDevice(device));
  return RECAP_OK;
}

static void guard_exit(const device_guard *g) {
  if (g->changed) cudaSetDevice(g->previous);
}

recap_status recap__cuda_rng_fill(recap_stream *stream, recap__rng_dist dist, void *out, size_t n,
                                  float a, float b, const recap__philox_args *philox) {
  const int device = stream->device.index;
  device_guard guard;
  RECAP_TRY(guard_enter(&guard, device));
  recap_status st = RECAP_OK;
  int sms = 0;
  RECAP_CUDA_TRY_GOTO(st, cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device),
                      done);
  RECAP_CUDA_TRY_GOTO(st,
                      (cudaError_t)recap__rng_cuda_launch_fill(dist, out, n, a, b, *philox,
                                                               (unsigned)sms * FILL_BLOCKS_PER_SM,
                                                               recap_stream_native(stream)),
                      done);
done:
  guard_exit(&guard);
  return st;
}

recap_status recap__cuda_rng_write_slot(recap_stream *stream, uint64_t *slot, uint64_t seed,
                                        uint64_t offset) {
  device_guard guard;
  RECAP_TRY(guard_enter(&guard, stream->device.index));
  recap_status st = RECAP_OK;
  RECAP_CUDA_TRY_GOTO(st,
                      (cudaError_t)recap__rng_cuda_launch_write_slot(slot, seed, offset,
                                                                     recap_stream_native(stream)),
                      done);
done:
  guard_exit(&guard);
  return st;
}
