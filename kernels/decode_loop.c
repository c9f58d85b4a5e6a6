/*
 * decode_loop.c: the decode loop's body kernels (see decode_loop.h): the host implementation,
 * which is the reference, and the dispatch to the CUDA launchers.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* clock_gettime under -std=c11 */
#endif
#include "kernels/decode_loop.h"

#include <stdatomic.h>
#include <time.h>

#include "runtime/backend.h"
#include "runtime/error.h"
#if RECAP_WITH_CUDA
#include "runtime/cuda_check.h"
#endif

static uint64_t now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* The host kernel's arguments: the CUDA kernel's, and how it sets the condition. */
typedef struct {
  recap__decode_loop_args args;
  recap_status (*condition_store)(uint64_t handle, int32_t value);
} host_control_job;

static recap_status host_control(void *p) {
  const host_control_job *job = p;
  const recap__decode_loop_args *a = &job->args;
  int32_t *state = a->state;
  const int32_t iteration = state[RECAP__LOOP_ITERATION];
  int32_t written = state[RECAP__LOOP_WRITTEN];
  const uint64_t time = now_ns();
  int32_t running = 0;
  bool ended = false;
  for (int64_t r = 0; r < a->rows; r++) {
    int32_t *row = a->seqs + r * a->width;
    const int32_t *limits = state + RECAP__LOOP_STATE_INTS + r * RECAP__LOOP_LIMIT_WIDTH;
    const int32_t token = a->tokens[r];
    if (token >= 0) {
      if (written >= a->capacity)
        return RECAP_FAIL(RECAP_STATUS_INTERNAL,
                          "the decode loop's ring of %lld entries is full at iteration %d",
                          (long long)a->capacity, iteration);
      a->ring[written++] =
          (recap_loop_token){.step = iteration, .row = (int32_t)r, .token = token, .time_ns = time};
    }
    /* Outputs so far: decode_advance moved a running row's OUT_INDEX on, not a stopped one's. */
    const bool runs = row[RECAP_SEQ_Q_LEN] > 0;
    const int32_t outputs = row[RECAP_SEQ_OUT_INDEX] + (runs ? 0 : 1);
    const bool done = token >= 0 && recap__loop_row_done(limits, token, outputs);
    ended = ended || done;
    if (!runs) continue;
    if (done) {
      row[RECAP_SEQ_Q_LEN] = 0;
      row[RECAP_SEQ_Q_START] = 0;
      continue;
    }
    /* A running row's id is its token (decode_advance put it at the row's old rank). */
    a->ids[running] = token;
    row[RECAP_SEQ_Q_START] = running++;
  }
  state[RECAP__LOOP_ITERATION] = iteration + 1;
  state[RECAP__LOOP_WRITTEN] = written;
  if (a->stamps) a->stamps[2 * iteration + 1] = time;
  *a->ran = iteration + 1;
  const bool asked = *a->return_request == state[RECAP__LOOP_LAUNCH];
  if (a->rng_slot) a->rng_slot[1] += a->rng_increment;
  const int32_t more =
      recap__loop_continues(state[RECAP__LOOP_MAX_STEPS], state[RECAP__LOOP_RETURN_ON_STOP] != 0,
                            iteration, running, asked, ended);
  return job->condition_store(a->condition, more);
}

static recap_status host_publish(void *p) {
  const recap__decode_loop_publish_args *a = p;
  const uint64_t time = now_ns();
  if (a->stamps) a->stamps[2 * a->state[RECAP__LOOP_ITERATION]] = time;
  atomic_store_explicit((_Atomic int32_t *)a->published, a->state[RECAP__LOOP_WRITTEN],
                        memory_order_release);
  if (a->ended) atomic_store_explicit((_Atomic int32_t *)a->ended, 1, memory_order_release);
  return RECAP_OK;
}

recap_status recap__decode_loop_control(recap_stream *stream, const recap__decode_loop_args *args) {
  if (stream->backend->launch_kernel) {
    if (!stream->backend->condition_store)
      return RECAP_FAIL(RECAP_STATUS_NOT_SUPPORTED,
                        "the %s backend's kernels cannot set a WHILE node's condition",
                        stream->backend->name);
    host_control_job job = {*args, stream->backend->condition_store};
    return stream->backend->launch_kernel(stream, host_control, &job, sizeof job);
  }
#if RECAP_WITH_CUDA
  RECAP_CUDA_TRY((cudaError_t)recap__decode_loop_cuda_control(args, recap_stream_native(stream)));
  return RECAP_OK;
#else
  return RECAP_FAIL(RECAP_STATUS_NOT_SUPPORTED, "the decode loop has no CUDA kernel in this build");
#endif
}

recap_status recap__decode_loop_publish(recap_stream *stream,
                                        const recap__decode_loop_publish_args *args) {
  if (stream->backend->launch_kernel)
    return stream->backend->launch_kernel(stream, host_publish, args, sizeof *args);
#if RECAP_WITH_CUDA
  RECAP_CUDA_TRY(
      (cudaError_t)recap__decode_loop_cuda_publish(args, recap_stream_native(stream)));
  return RECAP_OK;
#else
  return RECAP_FAIL(RECAP_STATUS_NOT_SUPPORTED, "the decode loop has no CUDA kernel in this build");
#endif
}
