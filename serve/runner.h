/*
 * runner.h: the two entries of a paged serving spec as the generator runs them (internal):
 * `prefill` and `decode` pipelines over one set of weights and KV pools, the pool sized from
 * the generator's options, every bucket captured, and one function per kind of step that
 * writes the step's `ids` and `seqs` rows from the scheduler's plan, runs it and reads the
 * sampled tokens back. A client of the public pipeline API only (docs/SERVING.md).
 *
 *   recap__runner *r;
 *   recap__runner_open("llama.yaml", &options, &r);    // loads, sizes the pool, captures
 *   const recap__step *step = recap__sched_plan(s);
 *   int32_t prefill_tokens[...], decode_tokens[...];
 *   bool replayed;
 *   if (step->num_chunks) recap__runner_prefill(r, step, prefill_tokens, &replayed);
 *   if (step->num_decode) recap__runner_decode(r, step, decode_tokens, &replayed);
 *   recap__runner_close(r);
 *
 * One thread at a time, as for any pipeline.
 */
#ifndef RECAP_SERVE_RUNNER_H
#define RECAP_SERVE_RUNNER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "include/recap.h"
#include "serve/scheduler.h"

/* What the generator needs to know of the model and the pool. */
typedef struct {
  recap_device device;
  int64_t vocab;
  int64_t num_blocks, block_size;       /* the KV pool */
  int64_t max_blocks_per_seq;           /* block-table columns of a `seqs` row */
  int64_t max_seq;                      /* max_blocks_per_seq x block_size */
  int64_t prefill_tokens, prefill_seqs; /* the prefill entry's largest step */
  int64_t decode_rows;                  /* the decode entry's largest bucket */
  size_t block_bytes;                   /* one block in every layer's K and V pools */
} recap__runner_shape;

typedef struct recap__runner recap__runner;

/* RECAP_DECODE_LOOP: 0 off, N > 0 the most decode steps per graph launch; unset: 32.
 * INVALID_ARGUMENT naming the variable for anything else (the CLI checks it before loading). */
recap_status recap__decode_loop_steps_from_env(int64_t *out);

/* INVALID_ARGUMENT for a spec without the serving layout (saying what is missing) or a bad
 * kv_fraction; OUT_OF_MEMORY when the pool cannot hold one sequence of the maximum length;
 * whatever creating or capturing the pipelines returns. */
recap_status recap__runner_open(const char *spec_path, const recap_generator_options *options,
                                recap__runner **out);
void recap__runner_close(recap__runner *r);
const recap__runner_shape *recap__runner_shape_get(const recap__runner *r);
/* Milliseconds from the end of weight loading to every bucket of both entries captured
 * (warmup, GEMM choice, capture and instantiate); 0 when eager. */
double recap__runner_ready_ms(const recap__runner *r);

/* Runs the step's prefill chunks; tokens[i] gets chunk i's sample, *replayed whether a graph
 * ran (not an eager run). */
recap_status recap__runner_prefill(recap__runner *r, const recap__step *step, int32_t *tokens,
                                   bool *replayed);
/* Runs the step's decode rows; tokens[i] gets row i's sample. */
recap_status recap__runner_decode(recap__runner *r, const recap__step *step, int32_t *tokens,
                                  bool *replayed);

/* Decode loops (docs/SERVING.md, "The decode loop"): the most steps one launch runs, 0 when
 * the runner has no loop (RECAP_DECODE_LOOP=0, eager, or no conditional nodes: then every
 * decode step is a launch of its own). */
int64_t recap__runner_loop_max_steps(const recap__runner *r);
/* Launches up to `steps` decode steps of the step's decode rows (row i: step->decode[i]); each
 * row stops on its stop ids, at recap__seq_output_limit, or where its blocks end, and with
 * return_on_stop the loop ends after a step in which a row ended. Returns at once; poll it to
 * its end before anything else runs. */
recap_status recap__runner_loop_launch(recap__runner *r, const recap__sched *s,
                                       const recap__step *step, int64_t steps, bool return_on_stop);
/* The tokens that arrived since the last poll (see recap_decode_loop_poll). */
recap_status recap__runner_loop_poll(recap__runner *r, recap_loop_token *out, size_t capacity,
                                     size_t *count, int *finished);
/* Sleeps until the loop has tokens to poll or has ended, at most max_ns (see
 * recap_decode_loop_wait). */
recap_status recap__runner_loop_wait(recap__runner *r, int64_t max_ns);
/* Asks the running loop to end after its current step. */
recap_status recap__runner_loop_return(recap__runner *r);

/* Tensor parallelism (docs/MULTI_GPU.md), for a runner opened with options->comm. Rank 0:
 * prefill and decode above announce each step to the other ranks before running it;
 * keepalive sends a step that runs nothing (an idle rank 0 sends one well within the
 * communicator's timeout, so a follower's bounded wait only expires when rank 0 is gone),
 * and close sends the stop. The other ranks: follow runs what each step header names, in
 * order, until the stop (RECAP_OK), a bad header (INVALID_ARGUMENT) or a failed run (the
 * communicator's TIMEOUT when a peer died); *runs counts the runs. `source` NULL takes the
 * headers from rank 0's broadcasts (receive); tests give their own. */
typedef recap_status (*recap__step_source)(void *ctx, recap__runner *r, int64_t *words);
recap_status recap__runner_keepalive(recap__runner *r);
recap_status recap__runner_receive(recap__runner *r, int64_t *words);
recap_status recap__runner_follow(recap__runner *r, recap__step_source source, void *ctx,
                                  int64_t *runs);

#endif
