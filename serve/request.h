/*
 * request.h: a generation request as the generator keeps it (internal): checked at submit
 * (recap_request_check, public in include/recap.h), its prompt and stop ids copied into a
 * scheduler sequence, and the part other threads read.
 *
 *   if (recap_request_check(&r, vocab, max_seq) != RECAP_OK) ...  // INVALID_ARGUMENT, a field
 *   recap__request *q;
 *   recap__request_create(&r, id, seed, sched, &q);  // owns copies of r's arrays
 *   ...
 *   recap__request_destroy(q);
 *
 * Two sets of fields: `seq` belongs to the engine thread alone (the scheduler moves it); the
 * rest are guarded by the generator's lock, and are how submit, poll, wait, cancel and release
 * on other threads see the request.
 */
#ifndef RECAP_SERVE_REQUEST_H
#define RECAP_SERVE_REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "include/recap.h"
#include "serve/runner.h"
#include "serve/scheduler.h"

typedef struct recap__request {
  uint64_t id;
  recap__seq seq; /* engine thread only */
  /* Under the generator's lock: */
  recap_request_state state;
  recap_finish_reason finish;
  int32_t *outputs; /* max_new_tokens of room */
  size_t num_outputs;
  uint32_t preemptions;
  double submit_ms, ttft_ms;
  recap_status error;
  bool cancel_requested; /* the engine ends it at its next step */
  bool released;         /* forgotten by the caller: freed once it has ended */
  bool pinned;           /* on the engine's list of callbacks to call outside the lock */
  recap_token_callback on_token;
  void *user;
  struct recap__request *prev_live, *next_live; /* while not ended */
  struct recap__request *next_incoming;         /* submitted, not yet taken by the engine */
  struct recap__request *next_pinned;
  /* The engine thread's, for callbacks: outputs called so far, and the end. */
  size_t delivered;
  bool end_delivered;
} recap__request;

/* recap_request_check (include/recap.h) refuses a request the model cannot serve; the pool
 * check is recap__seq_init's, which request_create calls: with a pool that create accepted
 * (one sequence of the maximum length fits) it never refuses a request that passed the first. */
/* recap_request_check's checks of a request already read at this library's size
 * (recap__struct_read), for a model with vocab and max_seq of at least 1. */
recap_status recap__request_check(const recap_request *r, int64_t vocab, int64_t max_seq);
/* A WAITING record with copies of the request's arrays, `seed` in its sampling, submitted
 * now. */
recap_status recap__request_create(const recap_request *r, uint64_t id, uint64_t seed,
                                   const recap__sched *sched, recap__request **out);
void recap__request_destroy(recap__request *q);
/* Whether the request has ended (FINISHED, CANCELLED or FAILED). */
bool recap__request_ended(const recap__request *q);
/* Milliseconds of a monotonic clock (submit times, time to first token). */
double recap__now_ms(void);

#endif
