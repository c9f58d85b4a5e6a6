/*
 * decode_loop.cu: the CUDA half of the decode loop's body kernels (kernels/decode_loop.c holds
 * the host reference; the rules both follow are in decode_loop.h). One warp walks the rows, 32
 * at a time: the ring's entries must come out in row order and the running rows' ranks are a
 * running count, and a decode batch is at most a few hundred rows, far less work than the step
 * it follows. It also sets the WHILE node's condition (cudaGraphSetConditional), so a step
 * boundary crosses the control kernel, the node's next iteration and the step's first kernel,
 * nothing else; the publish kernel runs beside the next step.
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

/* One warp, a row per lane and 32 rows at a time: the ring positions and the running rows' new
 * ranks are prefix counts over the lanes (ballots), so a chunk of rows costs one round trip to
 * memory. Lane 0 then ends the iteration. */
constexpr int kLanes = 32;

__global__ void __launch_bounds__(kLanes) control_kernel(recap__decode_loop_args a) {
  const int lane = threadIdx.x;
  const unsigned below = (1u << lane) - 1u;
  int32_t *state = a.state;
  const int32_t iteration = state[RECAP__LOOP_ITERATION];
  const int32_t max_steps = state[RECAP__LOOP_MAX_STEPS];
  const bool return_on_stop = state[RECAP__LOOP_RETURN_ON_STOP] != 0;
  const bool asked = *(const volatile int32_t *)a.return_request == state[RECAP__LOOP_LAUNCH];
  int32_t written = state[RECAP__LOOP_WRITTEN];
  /* One time for the step's entries: lane 0's. */
  const uint64_t time = __shfl_sync(0xffffffffu, global_time_ns(), 0);
  int32_t running = 0;
  bool ended = false;
  for (int64_t base = 0; base < a.rows; base += kLanes) {
    const int64_t r = base + lane;
    int32_t *row = r < a.rows ? a.seqs + r * a.width : nullptr;
    int32_t token = -1;
    bool runs = false, done = false;
    if (row) {
      const int32_t *limits = state + RECAP__LOOP_STATE_INTS + r * RECAP__LOOP_LIMIT_WIDTH;
      token = a.tokens[r];
      /* decode_advance moved a running row's OUT_INDEX on, not a stopped one's. */
      runs = row[RECAP_SEQ_Q_LEN] > 0;
      const int32_t outputs = row[RECAP_SEQ_OUT_INDEX] + (runs ? 0 : 1);
      done = recap__loop_row_done(limits, token, outputs) && token >= 0;
    }
    const unsigned with_token = __ballot_sync(0xffffffffu, token >= 0);
    if (token >= 0) {
      const int32_t at = written + __popc(with_token & below);
      if (at >= a.capacity) __trap(); /* the host sizes the ring for K x rows */
      volatile recap_loop_token *e = a.ring + at;
      e->step = iteration;
      e->row = (int32_t)r;
      e->token = token;
      e->reserved = 0;
      e->time_ns = time;
    }
    written += __popc(with_token);
    const bool goes_on = runs && !done;
    const unsigned going = __ballot_sync(0xffffffffu, goes_on);
    if (runs && done) {
      row[RECAP_SEQ_Q_LEN] = 0;
      row[RECAP_SEQ_Q_START] = 0;
    } else if (goes_on) {
      /* A running row's id is its token (decode_advance put it at the row's old rank); ranks
       * only fall, and no lane reads ids, so the chunk's writes cannot meet one still due. */
      const int32_t rank = running + __popc(going & below);
      a.ids[rank] = token;
      row[RECAP_SEQ_Q_START] = rank;
    }
    running += __popc(going);
    ended = __any_sync(0xffffffffu, ended || done);
  }
  if (lane != 0) return;
  state[RECAP__LOOP_ITERATION] = iteration + 1;
  state[RECAP__LOOP_WRITTEN] = written;
  if (a.stamps) a.stamps[2 * iteration + 1] = time;
  *(volatile int32_t *)a.ran = iteration + 1;
  if (a.rng_slot) a.rng_slot[1] += a.rng_increment;
  const bool more =
      recap__loop_continues(max_steps, return_on_stop, iteration, running, asked, ended);
  /* The body ends with this kernel: no condition kernel after it (one node launch less per
   * step boundary). */
  cudaGraphSetConditional(static_cast<cudaGraphConditionalHandle>(a.condition), more ? 1u : 0u);
}

/* The control kernel that wrote the entries ran before this one (a graph edge), and the
 * system-scope fence is cumulative: the entries reach the host before the count. */
__global__ void __launch_bounds__(1) publish_kernel(recap__decode_loop_publish_args a) {
  const uint64_t time = global_time_ns();
  const int32_t written = a.state[RECAP__LOOP_WRITTEN];
  if (a.stamps) a.stamps[2 * a.state[RECAP__LOOP_ITERATION]] = time;
  __threadfence_system();
  *(volatile int32_t *)a.published = written;
  if (a.ended) *(volatile int32_t *)a.ended = 1;
}

}  // namespace

extern "C" int recap__decode_loop_cuda_control(const recap__decode_loop_args *args,
                                               void *cuda_stream) {
  control_kernel<<<1, kLanes, 0, static_cast<cudaStream_t>(cuda_stream)>>>(*args);
  return (int)cudaGetLastError();
}

extern "C" int recap__decode_loop_cuda_publish(const recap__decode_loop_publish_args *args,
                                               void *cuda_stream) {
  publish_kernel<<<1, 1, 0, static_cast<cudaStream_t>(cuda_stream)>>>(*args);
  return (int)cudaGetLastError();
}
