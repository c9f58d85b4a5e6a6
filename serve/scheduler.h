/*
 * scheduler.h: continuous batching as pure host logic (internal): which sequences run in the
 * next step, with how many tokens, and with which KV blocks. No pipeline, no thread: the
 * generator's engine thread drives it, and the unit tests drive it by hand.
 *
 *   recap__sched *s;
 *   recap__sched_create(&(recap__sched_config){.num_blocks = 64, .block_size = 16,
 *                                              .max_blocks_per_seq = 8, .max_running = 8,
 *                                              .prefill_budget = 256, .prefill_seqs = 4}, &s);
 *   recap__seq q;
 *   recap__seq_init(&q, s, 1, prompt, 12, 32, NULL, 0);
 *   recap__sched_enqueue(s, &q);
 *   while (!recap__sched_idle(s)) {
 *     const recap__step *step = recap__sched_plan(s);
 *     ... run step->chunks through prefill, step->decode through decode ...
 *     recap__sched_complete(s, prefill_tokens, decode_tokens);  // q.finish says when it ended
 *   }
 *   recap__seq_free(&q);
 *   recap__sched_destroy(s);
 *
 * A sequence's tokens are its prompt and then its outputs; `computed` of them are in the KV
 * cache. A step gives a sequence either a chunk of its uncomputed tokens (the prefill entry)
 * or, once its prefill has completed, the one token it last produced (the decode entry).
 * Policy, in the order plan() applies it:
 * 1. Decoding sequences, oldest first, get the block their next position needs. When the pool
 *    has none left, the NEWEST running sequence is preempted (possibly the one asking): its
 *    blocks go back, it returns to the FRONT of the waiting queue, and when admitted again its
 *    prompt and outputs so far are prefilled again (recompute). Its outputs keep their indices,
 *    so seeded sampling continues with the same tokens.
 * 2. Running sequences still in their prefill get chunks, oldest first, within the step's token
 *    budget and its sequence slots.
 * 3. The waiting queue is admitted in order (first in, first out; no skipping a head that does
 *    not fit, so nothing starves) while the budget, the slots and max_running allow and the
 *    pool has blocks for the sequence's tokens plus one (its first decode step).
 * Ages are the `order` each sequence was given (the request id): the waiting queue stays in
 * that order, since preempted sequences are older than every sequence never admitted.
 * A sequence ends (`finish`) on max_new outputs, a stop id (the last output), or when its
 * tokens reach the maximum sequence; complete() gives its blocks back then.
 */
#ifndef RECAP_SERVE_SCHEDULER_H
#define RECAP_SERVE_SCHEDULER_H

#include <stdbool.h>
#include <stdint.h>

#include "include/recap.h"
#include "serve/blocks.h"

typedef struct {
  int64_t num_blocks, block_size; /* the KV pool */
  int64_t max_blocks_per_seq;     /* block-table columns: a sequence's maximum length is this
                                     times block_size */
  int max_running;                /* sequences admitted at once: the decode step's rows */
  int64_t prefill_budget;         /* tokens per prefill step */
  int prefill_seqs;               /* sequences per prefill step */
} recap__sched_config;

/* What the sequence's rows of `seqs` carry besides positions and blocks. */
typedef struct {
  uint64_t seed;
  float temperature, top_p, min_p;
  int top_k;
} recap__sampling;

typedef enum { RECAP__SEQ_OUTSIDE, RECAP__SEQ_WAITING, RECAP__SEQ_RUNNING } recap__seq_place;

typedef struct recap__seq {
  uint64_t order;  /* age: lower is older */
  int32_t *tokens; /* the prompt, then the outputs */
  int64_t prompt_len, num_tokens, max_new;
  int64_t max_positions; /* the most positions its KV cache reaches (blocks it may hold) */
  int64_t computed;      /* tokens in the KV cache */
  int32_t stop_ids[RECAP_MAX_STOP_IDS];
  int num_stop_ids;
  recap__sampling sampling;
  recap__block_table blocks;
  bool prefilled; /* its prefill has completed since it was last admitted: it decodes */
  uint32_t preemptions;
  recap_finish_reason finish;
  recap__seq_place place;
  struct recap__seq *prev, *next; /* the waiting queue */
} recap__seq;

/* One prefill chunk: tokens [start, start + count) of seq. */
typedef struct {
  recap__seq *seq;
  int64_t start, count;
  bool completes; /* the chunk reaches the sequence's last token: its sample is an output */
} recap__chunk;

typedef struct {
  recap__chunk *chunks; /* the prefill step's rows, in row order */
  int num_chunks;
  int64_t prefill_tokens; /* the chunks' counts summed */
  recap__seq **decode;    /* the decode step's rows, in row order */
  int num_decode;
  recap__seq **preempted; /* by this plan (they may have been admitted again in it) */
  int num_preempted;
} recap__step;

typedef struct recap__sched recap__sched;

/* INVALID_ARGUMENT for a config with a zero or negative field; OUT_OF_MEMORY. */
recap_status recap__sched_create(const recap__sched_config *config, recap__sched **out);
/* Forgets every sequence (their blocks with the pool); the sequences stay the caller's. */
void recap__sched_destroy(recap__sched *s);

/* Copies the prompt and stop ids into a new sequence of age `order` (sampling zero: greedy).
 * INVALID_ARGUMENT when it could never run: an empty prompt, max_new < 1, a prompt longer than
 * the maximum sequence, or more KV blocks than the pool has; OUT_OF_MEMORY. */
recap_status recap__seq_init(recap__seq *seq, const recap__sched *s, uint64_t order,
                             const int32_t *prompt, int64_t prompt_len, int64_t max_new,
                             const int32_t *stop_ids, int num_stop_ids);
void recap__seq_free(recap__seq *seq);
/* Outputs produced so far (OUT_INDEX of the next one). */
int64_t recap__seq_outputs(const recap__seq *seq);

/* Appends a sequence (OUTSIDE, not finished) to the waiting queue: orders must grow. */
void recap__sched_enqueue(recap__sched *s, recap__seq *seq);
/* Takes a waiting or running sequence out (a cancel), giving its blocks back. */
void recap__sched_remove(recap__sched *s, recap__seq *seq);

/* Decides the next step (see the policy above). The step lives in the scheduler until the next
 * plan; sequences in it must not be removed before complete(). */
const recap__step *recap__sched_plan(recap__sched *s);
/* Applies the step's results: prefill_tokens[i] is chunk i's sample (read only for chunks that
 * complete), decode_tokens[i] row i's. Sequences that end get `finish`, leave the running set
 * (place OUTSIDE) and give their blocks back. */
void recap__sched_complete(recap__sched *s, const int32_t *prefill_tokens,
                           const int32_t *decode_tokens);

/* Nothing waiting or running. */
bool recap__sched_idle(const recap__sched *s);

/* The most outputs a sequence can reach before it ends on max_new or on the maximum sequence
 * length (a stop id may end it sooner): a decode loop stops its row there. */
int64_t recap__seq_output_limit(const recap__sched *s, const recap__seq *seq);
/* For a decode loop of up to max_steps steps over the planned step's decode rows (a step with
 * no prefill chunks, nothing waiting): gives each row the blocks its next k positions need
 * (never past its max_positions) for the largest k <= max_steps the free pool allows, and
 * returns k (at least 1: plan() has given every row its next block). k is also capped at the
 * most outputs any row still has to produce. The next k - 1 plans then find every block in
 * place: they neither allocate nor preempt. */
int64_t recap__sched_reserve_steps(recap__sched *s, int64_t max_steps);

typedef struct {
  int64_t running, waiting, blocks_used, blocks_peak;
  uint64_t preemptions;
} recap__sched_counts;
recap__sched_counts recap__sched_counts_get(const recap__sched *s);

#endif
