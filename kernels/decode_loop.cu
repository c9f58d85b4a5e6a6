/*
 * decode_loop.cu: the CUDA half of the decode loop's body kernels (kernels/decode_loop.c holds
 * the host reference). One thread walks the rows in order (a second one does the kernel's
 * waits on host memory beside it: control_kernel says how): the ring's entries must come out in
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

/* Two warps, one thread of each at work, so that the kernel's two waits on the host's memory
 * overlap the rest: warp 1 reads the return request (mapped host memory: a round trip over
 * the bus) while warp 0 walks the rows, and warp 1 publishes the entries (a system-scope fence,
 * which waits for the entries' writes to reach the host) while warp 0 sets the condition. The
 * barrier between orders warp 0's entries before warp 1's fence (the fence is cumulative over
 * what the barrier made visible to it). */
constexpr int kControlThreads = 64, kRequestThread = 32;

__global__ void __launch_bounds__(kControlThreads) control_kernel(recap__decode_loop_args a) {
  __shared__ int32_t asked, written_shared;
  int32_t *state = a.state;
  /* Everything the decision reads, loaded up front so the loads' latencies overlap. */
  const int32_t iteration = state[RECAP__LOOP_ITERATION];
  const int32_t max_steps = state[RECAP__LOOP_MAX_STEPS];
  const bool return_on_stop = state[RECAP__LOOP_RETURN_ON_STOP] != 0;
  if (threadIdx.x == kRequestThread) asked = *(const volatile int32_t *)a.stop_request != 0;
  int32_t running = 0;
  bool ended = false;
  if (threadIdx.x == 0) {
    int32_t written = state[RECAP__LOOP_WRITTEN];
    const uint64_t time = global_time_ns();
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
    written_shared = written;
    if (a.stamps) a.stamps[2 * iteration + 1] = time;
    *(volatile int32_t *)a.ran = iteration + 1;
  }
  __syncthreads();
  if (threadIdx.x == kRequestThread) {
    /* The entries, then the count: the host reads the count with acquire semantics. */
    __threadfence_system();
    *(volatile int32_t *)a.published = written_shared;
    return;
  }
  if (threadIdx.x != 0) return;
  if (a.rng_slot) a.rng_slot[1] += a.rng_increment;
  const bool more =
      running > 0 && iteration + 1 < max_steps && !asked && !(ended && return_on_stop);
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
  control_kernel<<<1, kControlThreads, 0, static_cast<cudaStream_t>(cuda_stream)>>>(*args);
  return (int)cudaGetLastError();
}

extern "C" int recap__decode_loop_cuda_stamp(uint64_t *stamps, const int32_t *state,
                                             void *cuda_stream) {
  stamp_kernel<<<1, 1, 0, static_cast<cudaStream_t>(cuda_stream)>>>(stamps, state);
  return (int)cudaGetLastError();
}
