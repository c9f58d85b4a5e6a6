/*
 * generator.c: the public generation API (include/recap.h, "Generation"): create and destroy,
 * and the calls any thread makes (submit, poll, wait, cancel, release, stats). The steps run on
 * the engine thread (engine.c).
 */
#include "serve/generator.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/error.h"
#include "runtime/struct_size.h"

/* ---- seeds ---- */

/* splitmix64's output function: the k-th seed a generator draws is mix(base + k x gamma), a
 * counter-based sequence, so a generator's seeds depend only on the order of the submits that
 * asked for one. */
static uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static uint64_t draw_seed(recap_generator *g) {
  return mix(g->seed_base + ++g->seeds_drawn * 0x9E3779B97F4A7C15ull);
}

/* ---- create and destroy ---- */

static recap_status check_limits(const recap_generator_options *o, const recap__runner_shape *s,
                                 recap__sched_config *c) {
  if (o->max_running < 0 || o->max_running > s->decode_rows)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "max_running %d is outside [0, %" PRId64
                      "] (the decode entry's largest "
                      "bucket; 0: all of it)",
                      o->max_running, s->decode_rows);
  if (o->prefill_budget < 0 || o->prefill_budget > s->prefill_tokens)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "prefill_budget %d is outside [0, %" PRId64
                      "] (the prefill entry's "
                      "largest bucket; 0: all of it)",
                      o->prefill_budget, s->prefill_tokens);
  *c = (recap__sched_config){
      .num_blocks = s->num_blocks,
      .block_size = s->block_size,
      .max_blocks_per_seq = s->max_blocks_per_seq,
      .max_running = o->max_running ? o->max_running : (int)s->decode_rows,
      .prefill_budget = o->prefill_budget ? o->prefill_budget : s->prefill_tokens,
      .prefill_seqs = (int)s->prefill_seqs,
  };
  return RECAP_OK;
}

/* glibc's mutex and condition initializers cannot fail; the monotonic clock makes wait()'s
 * timeout (and the engine's idle wait under tensor parallelism) immune to changes of the wall
 * clock. */
static void init_sync(recap_generator *g) {
  pthread_condattr_t attr;
  pthread_mutex_init(&g->lock, NULL);
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  pthread_cond_init(&g->ended, &attr);
  pthread_cond_init(&g->work, &attr);
  pthread_condattr_destroy(&attr);
}

static void free_generator(recap_generator *g) {
  for (size_t i = 0; i < g->requests.capacity; i++)
    if (g->requests.ids[i]) recap__request_destroy(g->requests.values[i]);
  recap__id_table_free(&g->requests);
  recap__sched_destroy(g->sched);
  recap__runner_close(g->runner);
  free(g->prefill_tokens);
  free(g->decode_tokens);
  free(g->loop_rows);
  free(g->loop_entries);
  pthread_cond_destroy(&g->work);
  pthread_cond_destroy(&g->ended);
  pthread_mutex_destroy(&g->lock);
  free(g);
}

recap_status recap_generator_create(const char *spec_path, const recap_generator_options *options,
                                    recap_generator **out) {
  RECAP_CHECK_ARG(spec_path && out);
  recap_generator_options read = RECAP_GENERATOR_OPTIONS_INIT;
  if (options)
    RECAP_TRY(recap__struct_read(options, sizeof read, &read, "RECAP_GENERATOR_OPTIONS_INIT"));
  const recap_generator_options *o = &read;
  if (o->comm && recap_comm_rank(o->comm) != 0)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "rank %d of a tensor-parallel generator calls recap_generator_follow: "
                      "only rank 0 creates the generator (it schedules every step)",
                      recap_comm_rank(o->comm));
  recap_generator *g = calloc(1, sizeof *g);
  if (!g) return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for a generator");
  init_sync(g);
  if (o->comm && recap_comm_world_size(o->comm) > 1) g->comm = o->comm;
  recap__sched_config config;
  recap_status st = recap__runner_open(spec_path, o, &g->runner);
  if (st == RECAP_OK) {
    g->shape = recap__runner_shape_get(g->runner);
    st = check_limits(o, g->shape, &config);
  }
  if (st == RECAP_OK) st = recap__sched_create(&config, &g->sched);
  if (st == RECAP_OK) {
    g->prefill_tokens = calloc((size_t)config.prefill_seqs, sizeof *g->prefill_tokens);
    g->decode_tokens = calloc((size_t)config.max_running, sizeof *g->decode_tokens);
    if (!g->prefill_tokens || !g->decode_tokens)
      st = RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for a step's tokens");
  }
  int64_t loop_steps = g->runner ? recap__runner_loop_max_steps(g->runner) : 0;
  if (st == RECAP_OK && loop_steps > 0) {
    g->loop_capacity = (size_t)loop_steps * (size_t)config.max_running;
    g->loop_rows = calloc((size_t)config.max_running, sizeof *g->loop_rows);
    g->loop_entries = calloc(g->loop_capacity, sizeof *g->loop_entries);
    if (!g->loop_rows || !g->loop_entries)
      st = RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for a decode loop's tokens");
  }
  if (st == RECAP_OK) st = recap_rng_initial_seed(g->shape->device, &g->seed_base);
  if (st != RECAP_OK) {
    free_generator(g);
    return st;
  }
  g->stats.kv_blocks = (size_t)g->shape->num_blocks;
  g->stats.block_size = (size_t)g->shape->block_size;
  g->stats.ready_ms = recap__runner_ready_ms(g->runner);
  if (pthread_create(&g->thread, NULL, recap__engine_main, g) != 0) {
    free_generator(g);
    return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "cannot start the generator's engine thread");
  }
  *out = g;
  return RECAP_OK;
}

recap_status recap_generator_destroy(recap_generator *g) {
  if (!g) return RECAP_OK;
  pthread_mutex_lock(&g->lock);
  g->stopping = true;
  pthread_cond_signal(&g->work);
  pthread_mutex_unlock(&g->lock);
  pthread_join(g->thread, NULL);
  free_generator(g);
  return RECAP_OK;
}

recap_status recap_generator_follow(const char *spec_path, const recap_generator_options *options) {
  RECAP_CHECK_ARG(spec_path && options);
  recap_generator_options o = RECAP_GENERATOR_OPTIONS_INIT;
  RECAP_TRY(recap__struct_read(options, sizeof o, &o, "RECAP_GENERATOR_OPTIONS_INIT"));
  if (!o.comm || recap_comm_rank(o.comm) == 0 || recap_comm_world_size(o.comm) < 2)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "recap_generator_follow needs the communicator of a rank >= 1 of a world "
                      "of 2 or more (got %s): rank 0 calls recap_generator_create",
                      o.comm ? "rank 0 or a world of 1" : "no communicator");
  recap__runner *r = NULL;
  RECAP_TRY(recap__runner_open(spec_path, &o, &r));
  int64_t runs = 0;
  recap_status st = recap__runner_follow(r, NULL, NULL, &runs);
  if (st == RECAP_OK) {
    recap__runner_close(r);
    return RECAP_OK;
  }
  /* Logged now, as the engine logs its failure on rank 0: after an abort of the communicator,
   * closing the pipelines waits for NCCL's teardown, which may take long. The message
   * survives the close's own failures. */
  st = recap__error_context(st, "rank %d, after %" PRId64 " runs: ", recap_comm_rank(o.comm), runs);
  char *why = strdup(recap_last_error());
  fprintf(stderr, "recap generator: following rank 0 failed: %s: %s\n", recap_status_name(st),
          why ? why : "(no memory for the message)");
  recap__runner_close(r);
  if (why) recap__fail_plain(st, "%s", why);
  free(why);
  return st;
}

/* ---- requests ---- */

/* Why no request is taken any more (under the lock), or RECAP_OK. */
static recap_status refusing(const recap_generator *g) {
  if (g->stopping)
    return RECAP_FAIL(RECAP_STATUS_BUSY, "the generator is shutting down: no new requests");
  if (g->failure != RECAP_OK)
    return RECAP_FAIL(RECAP_STATUS_BUSY,
                      "the generator's engine stopped after a failure (%s): no new requests",
                      recap_status_name(g->failure));
  return RECAP_OK;
}

recap_status recap_generator_submit(recap_generator *g, const recap_request *request, uint64_t *id,
                                    uint64_t *seed) {
  RECAP_CHECK_ARG(g && id);
  if (!request) return recap_request_check(NULL, g->shape->vocab, g->shape->max_seq);
  recap_request r;
  RECAP_TRY(recap__struct_read(request, sizeof r, &r, "RECAP_REQUEST_INIT"));
  request = &r;
  RECAP_TRY(recap__request_check(request, g->shape->vocab, g->shape->max_seq));
  pthread_mutex_lock(&g->lock);
  recap_status st = refusing(g);
  recap__request *q = NULL;
  if (st == RECAP_OK) {
    uint64_t s = request->has_seed ? request->seed : draw_seed(g);
    st = recap__request_create(request, g->last_id + 1, s, g->sched, &q);
  }
  if (st == RECAP_OK) st = recap__id_table_put(&g->requests, q->id, q);
  if (st != RECAP_OK) {
    pthread_mutex_unlock(&g->lock);
    recap__request_destroy(q);
    return st;
  }
  g->last_id = q->id;
  q->prev_live = g->live_tail;
  if (g->live_tail)
    g->live_tail->next_live = q;
  else
    g->live_head = q;
  g->live_tail = q;
  if (g->incoming_tail)
    g->incoming_tail->next_incoming = q;
  else
    g->incoming_head = q;
  g->incoming_tail = q;
  g->num_incoming++;
  g->stats.submitted++;
  g->stats.waiting++;
  pthread_cond_signal(&g->work);
  *id = q->id;
  if (seed) *seed = q->seq.sampling.seed;
  pthread_mutex_unlock(&g->lock);
  return RECAP_OK;
}

static recap_status unknown_id(uint64_t id) {
  return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                    "request %" PRIu64 " is unknown (never submitted, or released)", id);
}

recap_status recap_generator_poll(recap_generator *g, uint64_t id, int32_t *tokens, size_t capacity,
                                  recap_request_status *status) {
  RECAP_CHECK_ARG(g && (tokens || capacity == 0));
  pthread_mutex_lock(&g->lock);
  const recap__request *q = recap__id_table_get(&g->requests, id);
  if (!q) {
    pthread_mutex_unlock(&g->lock);
    return unknown_id(id);
  }
  size_t n = q->num_outputs < capacity ? q->num_outputs : capacity;
  for (size_t i = 0; i < n; i++) tokens[i] = q->outputs[i];
  if (status)
    *status = (recap_request_status){
        .state = q->state,
        .finish = q->finish,
        .num_tokens = q->num_outputs,
        .seed = q->seq.sampling.seed,
        .preemptions = q->preemptions,
        .ttft_ms = q->ttft_ms,
        .error = q->error,
    };
  pthread_mutex_unlock(&g->lock);
  return RECAP_OK;
}

/* The monotonic time `seconds` from now. */
static struct timespec deadline_after(double seconds) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  double whole = floor(seconds);
  t.tv_sec += (time_t)whole;
  t.tv_nsec += (long)((seconds - whole) * 1e9);
  if (t.tv_nsec >= 1000000000L) {
    t.tv_sec++;
    t.tv_nsec -= 1000000000L;
  }
  return t;
}

/* Longer than any run: waits without a limit (and keeps the deadline's seconds in range). */
static const double FOREVER_S = 1e9;

recap_status recap_generator_wait(recap_generator *g, uint64_t id, double timeout_s) {
  RECAP_CHECK_ARG(g && !isnan(timeout_s));
  if (timeout_s > FOREVER_S) timeout_s = -1;
  struct timespec deadline = deadline_after(timeout_s > 0 ? timeout_s : 0);
  pthread_mutex_lock(&g->lock);
  recap_status st = RECAP_OK;
  const recap__request *q;
  /* Until its last callback has returned too: a caller may then free what `user` points to. */
  while ((q = recap__id_table_get(&g->requests, id)) && (!recap__request_ended(q) || q->pinned)) {
    if (timeout_s < 0) {
      pthread_cond_wait(&g->ended, &g->lock);
    } else if (pthread_cond_timedwait(&g->ended, &g->lock, &deadline) == ETIMEDOUT) {
      st = RECAP_FAIL(RECAP_STATUS_TIMEOUT, "request %" PRIu64 " has not ended after %g s", id,
                      timeout_s);
      break;
    }
  }
  if (!q) st = unknown_id(id);
  pthread_mutex_unlock(&g->lock);
  return st;
}

/* Asks the engine to end q at its next step. */
static void request_cancel(recap_generator *g, recap__request *q) {
  if (recap__request_ended(q) || q->cancel_requested) return;
  q->cancel_requested = true;
  g->cancels_pending = true;
  pthread_cond_signal(&g->work);
}

recap_status recap_generator_cancel(recap_generator *g, uint64_t id) {
  RECAP_CHECK_ARG(g);
  pthread_mutex_lock(&g->lock);
  recap__request *q = recap__id_table_get(&g->requests, id);
  if (q) request_cancel(g, q);
  pthread_mutex_unlock(&g->lock);
  return RECAP_OK;
}

recap_status recap_generator_release(recap_generator *g, uint64_t id) {
  RECAP_CHECK_ARG(g);
  pthread_mutex_lock(&g->lock);
  recap__request *q = recap__id_table_get(&g->requests, id);
  if (q) {
    recap__id_table_delete(&g->requests, id);
    q->released = true;
    /* A live or pinned record is the engine's to free once it has ended and been delivered. */
    if (recap__request_ended(q) && !q->pinned)
      recap__request_destroy(q);
    else
      request_cancel(g, q);
  }
  pthread_cond_broadcast(&g->ended); /* waiters on this id see it gone */
  pthread_mutex_unlock(&g->lock);
  return RECAP_OK;
}

recap_status recap_generator_stats_get(recap_generator *g, recap_generator_stats *out) {
  RECAP_CHECK_ARG(g && out);
  pthread_mutex_lock(&g->lock);
  *out = g->stats;
  pthread_mutex_unlock(&g->lock);
  return RECAP_OK;
}
