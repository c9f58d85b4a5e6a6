/*
 * decode_loop.cu: the CUDA half of the decode loop's body kernels (kernels/decode_loop.c holds
 * the host reference). One thread walks the rows in order: the ring's entries must come out in
 * row order and the running rows' ranks are a running count, and a decode batch is at most a
 * few hundred rows, far less work than the step it follows. It also sets the WHILE node's
 * condition (cudaGraphSetConditional), so a step boundary crosses the control kernel, the
 * node's next iteration and the step's first kernel, nothing else.
 */
#include <cuda_runtime.h>
#include <stdint.h>

#include "kernels/decode_loop.h"

namespace {

__device__ __forceinline__ uint64_t global_time_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void control_kernel(recap__decode_loop_args a) {
  int32_t *state = a.state;
  const int32_t iteration = state[RECAP__LOOP_ITERATION];
  int32_t written = state[RECAP__LOOP_WRITTEN];
  const uint64_t time = global_time_ns();
  int32_t running = 0;
  bool ended = false;
  for (int64_t r = 0; r < a.rows; ++r) {
    int32_t *row = a.seqs + r * a.width;
    const int32_t *limits = state + RECAP__LOOP_STATE_INTS + r * RECAP__LOOP_LIMIT_WIDTH;
    const int32_t token = a.tokens[r];
    if (token >= 0) {
      if (written >= a.capacity) __trap(); /* the host sizes the ring for K x rows */
      volatile recap_loop_token *e = a.ring + written++;
      e->step = iteration;
      e->row = (int32_t)r;
      e->token = token;
      e->reserved = 0;
      e->time_ns = time;
    }
    /* Outputs so far: decode_advance moved a running row's OUT_INDEX on, not a stopped one's. */
    const bool runs = row[RECAP_SEQ_Q_LEN] > 0;
    bool done = false;
    if (token >= 0) {
      done = row[RECAP_SEQ_OUT_INDEX] + (runs ? 0 : 1) >= limits[RECAP__LOOP_LIMIT_MAX_OUTPUTS];
      const int n = limits[RECAP__LOOP_LIMIT_NUM_STOP];
      for (int k = 0; k < n && k < RECAP_MAX_STOP_IDS && !done; ++k)
        done = limits[RECAP__LOOP_LIMIT_STOP_IDS + k] == token;
    }
    ended = ended || done;
    if (!runs) continue;
    if (done) {
      row[RECAP_SEQ_Q_LEN] = 0;
      row[RECAP_SEQ_Q_START] = 0;
      continue;
    }
    a.ids[running] = a.ids[row[RECAP_SEQ_Q_START]];
    row[RECAP_SEQ_Q_START] = running++;
  }
  state[RECAP__LOOP_ITERATION] = iteration + 1;
  state[RECAP__LOOP_WRITTEN] = written;
  if (a.stamps) a.stamps[2 * iteration + 1] = time;
  *(volatile int32_t *)a.ran = iteration + 1;
  /* The entries, then the count: the host reads the count with acquire semantics. */
  __threadfence_system();
  *(volatile int32_t *)a.published = written;
  const bool asked = *(const volatile int32_t *)a.stop_request != 0;
  if (a.rng_slot) a.rng_slot[1] += a.rng_increment;
  const bool more = running > 0 && iteration + 1 < state[RECAP__LOOP_MAX_STEPS] && !asked &&
                    !(ended && state[RECAP__LOOP_RETURN_ON_STOP]);
  state[RECAP__LOOP_CONTINUE] = more ? 1 : 0;
  *(volatile int32_t *)a.ended = more ? 0 : 1;
  /* The body ends with this kernel: no condition kernel after it (one node launch less per
   * step boundary). */
  cudaGraphSetConditional(static_cast<cudaGraphConditionalHandle>(a.condition), more ? 1u : 0u);
}

__global__ void stamp_kernel(uint64_t *stamps, const int32_t *state) {
  stamps[2 * state[RECAP__LOOP_ITERATION]] = global_time_ns();
}

}  // namespace

extern "C" int recap__decode_loop_cuda_control(const recap__decode_loop_args *args,
                                               void *cuda_stream) {
  control_kernel<<<1, 1, 0, static_cast<cudaStream_t>(cuda_stream)>>>(*args);
  return (int)cudaGetLastError();
}

extern "C" int recap__decode_loop_cuda_stamp(uint64_t *stamps, const int32_t *state,
                                             void *cuda_stream) {
  stamp_kernel<<<1, 1, 0, static_cast<cudaStream_t>(cuda_stream)>>>(stamps, state);
  return (int)cudaGetLastError();
}
