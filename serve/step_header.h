/*
 * step_header.h: what rank 0 of a tensor-parallel generator tells the other ranks before each
 * step (internal; docs/MULTI_GPU.md, "Tensor-parallel serving").
 *
 * The scheduler runs on rank 0 only. Each step rank 0 runs, it first broadcasts a header of
 * RECAP__STEP_WORDS int64 words naming the entry (prefill or decode) and the step's token and
 * row counts; every follower reads it, then joins recap_pipeline_run_dist on the entry it
 * names, which carries the step's ids and seqs (positions, block tables, sampling) from rank 0
 * with its own run header. A `loop` header has every rank launch its decode loop for the
 * same rows and steps (recap_decode_loop_create_dist: the loop graph brings rank 0's ids,
 * seqs and limits). A `wait` header keeps an idle follower's bounded wait alive; a `stop`
 * header ends the follower's loop.
 *
 *   int64_t words[RECAP__STEP_WORDS];
 *   recap__step_header h = {.kind = RECAP__STEP_DECODE, .index = 7, .tokens = 3, .rows = 3};
 *   recap__step_header_encode(&h, words);          // rank 0, before the broadcast
 *   recap__step_header_decode(words, 7, &h);       // a follower, after it: checks everything
 */
#ifndef RECAP_SERVE_STEP_HEADER_H
#define RECAP_SERVE_STEP_HEADER_H

#include <stdint.h>

#include "include/recap.h"

enum { RECAP__STEP_WORDS = 6 };

typedef enum {
  RECAP__STEP_PREFILL = 1, /* run the prefill entry on rank 0's ids and seqs */
  RECAP__STEP_DECODE = 2,  /* run the decode entry likewise */
  RECAP__STEP_WAIT = 3,    /* nothing to run: rank 0 is idle and alive */
  RECAP__STEP_STOP = 4,    /* the generator on rank 0 is gone: leave the loop */
  RECAP__STEP_LOOP = 5,    /* launch the decode loop for `rows` rows and up to `steps` steps */
} recap__step_kind;

typedef struct {
  recap__step_kind kind;
  int64_t index;  /* headers rank 0 has sent before this one (a follower counts them too) */
  int64_t tokens; /* the run's batch: ids rows (recap_pipeline_run_dist's batch) */
  int64_t rows;   /* seqs rows in use (sequences in the step) */
  int64_t steps;  /* a loop's K; 0 for every other kind */
} recap__step_header;

void recap__step_header_encode(const recap__step_header *h, int64_t *words);
/* INVALID_ARGUMENT naming what is wrong: another magic (not a generator's header: do all
 * ranks run a generator?), an unknown kind, an index other than `expected_index` (a header
 * lost or repeated), negative counts, rows above tokens for a run, a loop whose rows are not
 * its tokens (one per sequence) or without steps, or steps on another kind. */
recap_status recap__step_header_decode(const int64_t *words, int64_t expected_index,
                                       recap__step_header *out);

#endif
