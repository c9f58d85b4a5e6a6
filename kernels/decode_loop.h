/*
 * decode_loop.h: the kernels of a decode loop's body (internal; engine/decode_loop.c uses them).
 *
 * A decode loop (include/recap.h, recap_decode_loop_*) replays a decode step many times inside
 * one WHILE node. After each step, recap__decode_loop_control ends the iteration on the device:
 * it writes every token the step sampled to a ring in mapped host memory, stops the rows that
 * are done, packs the running rows' ids again, moves the step's RNG slot on to the next
 * iteration's draws, and sets the WHILE node's condition itself (cudaGraphSetConditional), so
 * the body ends with this one kernel. recap__decode_loop_publish hands the entries to the host
 * (a system-scope fence, then the count): in the body beside the next step, and once more after
 * the WHILE node for the last one, so that the fence's wait (0.5 us on an H100) is not on the
 * step boundary.
 *
 * The loop's state (device i32, RECAP__LOOP_* indices), then per row RECAP__LOOP_LIMIT_WIDTH
 * i32: the output count that ends the row, the number of stop ids, the stop ids.
 */
#ifndef RECAP_KERNELS_DECODE_LOOP_H
#define RECAP_KERNELS_DECODE_LOOP_H

#include <stdbool.h>
#include <stdint.h>

#include "include/recap.h"

#ifdef __cplusplus
extern "C" {
#endif

enum {
  RECAP__LOOP_ITERATION = 0,      /* iterations completed in this launch */
  RECAP__LOOP_MAX_STEPS = 1,      /* the launch's K */
  RECAP__LOOP_WRITTEN = 2,        /* ring entries written in this launch */
  RECAP__LOOP_RETURN_ON_STOP = 3, /* nonzero: end after an iteration in which a row ended */
  RECAP__LOOP_LAUNCH = 4,         /* the launch's number: a return request names it */
  RECAP__LOOP_STATE_INTS = 5,
  RECAP__LOOP_LIMIT_MAX_OUTPUTS = 0,
  RECAP__LOOP_LIMIT_NUM_STOP = 1,
  RECAP__LOOP_LIMIT_STOP_IDS = 2,
  RECAP__LOOP_LIMIT_WIDTH = 2 + RECAP_MAX_STOP_IDS,
};

typedef struct {
  int32_t *seqs; /* [rows, width]: the decode step's metadata, after decode_advance */
  int64_t rows, width;
  const int32_t *tokens;  /* [rows]: the step's samples (-1: the row had no token) */
  int32_t *ids;           /* the next step's packed ids */
  int32_t *state;         /* RECAP__LOOP_STATE_INTS, then the rows' limits */
  recap_loop_token *ring; /* mapped host memory: `capacity` entries */
  int64_t capacity;
  int32_t *ran;                /* mapped: iterations run so far in this launch */
  /* Device memory: the number of the launch whose return the host asked for (the host copies
   * it there on a stream of its own; device memory, because a read of mapped host memory
   * crosses the bus on every step boundary). */
  const int32_t *return_request;
  uint64_t *stamps;            /* mapped, or NULL: [2 x K] begin and end time of each step */
  /* The step graph's RNG slot {seed, offset} (graph/graph.h), or NULL when it draws nothing:
   * the offset moves on by rng_increment (the step's draws) after every step, so each
   * iteration draws what the next single replay would. */
  uint64_t *rng_slot;
  uint64_t rng_increment;
  uint64_t condition; /* the WHILE node's handle: set to whether another iteration follows */
} recap__decode_loop_args;

#ifdef __CUDACC__
#define RECAP__LOOP_FN __host__ __device__ static inline
#else
#define RECAP__LOOP_FN static inline
#endif

/* Whether a row's token ends it: `outputs` tokens so far (this one included) reach its limit,
 * or the token is one of its stop ids. Every limit is read whatever the others hold (the row's
 * limits are RECAP__LOOP_LIMIT_WIDTH ints), so on the device the loads go out together. */
RECAP__LOOP_FN bool recap__loop_row_done(const int32_t *limits, int32_t token, int32_t outputs) {
  const int32_t n = limits[RECAP__LOOP_LIMIT_NUM_STOP];
  bool done = outputs >= limits[RECAP__LOOP_LIMIT_MAX_OUTPUTS];
  for (int32_t k = 0; k < RECAP_MAX_STOP_IDS; k++)
    done |= (k < n) & (limits[RECAP__LOOP_LIMIT_STOP_IDS + k] == token);
  return done;
}

/* Whether another iteration follows the one that has just run (`iteration`, from 0), of
 * `max_steps`: `running` rows go on, `asked`: the host asked for a return, `ended`: a row ended
 * in it. */
RECAP__LOOP_FN bool recap__loop_continues(int32_t max_steps, bool return_on_stop,
                                          int32_t iteration, int32_t running, bool asked,
                                          bool ended) {
  return running > 0 && iteration + 1 < max_steps && !asked && !(ended && return_on_stop);
}

/* Ends one iteration (see the top of the file); runs inside the WHILE body of args->condition. A
 * row ends when its token is one of its stop ids or its outputs reach max_outputs; decode_advance
 * has already stopped rows whose next position has no KV block. The loop continues while a row
 * runs, fewer than K iterations have run, the host has not asked this launch to return, and
 * (with RETURN_ON_STOP) no row ended. */
recap_status recap__decode_loop_control(recap_stream *stream, const recap__decode_loop_args *args);
typedef struct {
  const int32_t *state; /* the loop state: RECAP__LOOP_WRITTEN entries are in the ring */
  int32_t *published;   /* mapped: entries the host may read (written after them) */
  int32_t *ended;       /* mapped, or NULL: set to 1 after publishing (the loop's last kernel) */
  uint64_t *stamps;     /* mapped, or NULL: the step's start time, at [2 x iteration] */
} recap__decode_loop_publish_args;

/* Publishes the entries the control kernels have written (what happened before it, then the
 * count: the host reads the count with acquire semantics), stamps the time with `stamps`, and
 * raises `ended` last when given. */
recap_status recap__decode_loop_publish(recap_stream *stream,
                                        const recap__decode_loop_publish_args *args);

#if RECAP_WITH_CUDA
/* decode_loop.cu's launchers: cudaError_t as int, on the current device. */
int recap__decode_loop_cuda_control(const recap__decode_loop_args *args, void *cuda_stream);
int recap__decode_loop_cuda_publish(const recap__decode_loop_publish_args *args,
                                    void *cuda_stream);
#endif

#ifdef __cplusplus
}
#endif

#endif
