/*
 * generator.h: the generator object, shared by the public API (generator.c) and the engine
 * thread (engine.c) (internal).
 *
 * Ownership and locking. `lock` guards every field marked so, and the fields of each record
 * that request.h marks. The scheduler, the runner and each record's `seq` belong to the engine
 * thread. A record lives in `requests` (by id) from submit until release or destroy; while it
 * has not ended it is also on the `live` list, which is how the engine finds what to cancel,
 * fail or stop. A record the engine has `pinned` (its callbacks are being called outside the
 * lock) is freed by the engine, not by release.
 */
#ifndef RECAP_SERVE_GENERATOR_H
#define RECAP_SERVE_GENERATOR_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "include/recap.h"
#include "serve/id_table.h"
#include "serve/request.h"
#include "serve/runner.h"
#include "serve/scheduler.h"

struct recap_generator {
  recap__runner *runner;
  const recap__runner_shape *shape;
  recap__sched *sched;
  int32_t *prefill_tokens, *decode_tokens; /* a step's samples, by row */
  /* Decode loops (engine thread only; NULL when the runner has none): each loop row's
   * sequence, and the entries polled and not yet handed to the scheduler. */
  recap__seq **loop_rows;
  recap_loop_token *loop_entries;
  size_t loop_capacity;
  recap_comm *comm; /* tensor parallelism: rank 0's communicator (world >= 2); else NULL */
  pthread_t thread;
  pthread_mutex_t lock;
  pthread_cond_t work;  /* to the engine: a request, a cancel, or stop */
  pthread_cond_t ended; /* to waiters: a request ended (or the engine did) */
  /* Under lock: */
  recap__id_table requests;
  recap__request *live_head, *live_tail;         /* not ended, in submit order */
  recap__request *incoming_head, *incoming_tail; /* submitted, not yet queued by the engine */
  size_t num_incoming;
  bool cancels_pending; /* some live record has cancel_requested */
  bool stopping;        /* destroy has begun: no more requests */
  bool engine_done;     /* the engine thread has ended every request and returned */
  recap_status failure; /* why the engine stopped early; RECAP_OK while it runs */
  uint64_t last_id, seed_base, seeds_drawn;
  recap_generator_stats stats;
};

/* The engine thread's body (engine.c); arg is the generator. */
void *recap__engine_main(void *arg);

#endif
