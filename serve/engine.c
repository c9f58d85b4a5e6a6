/*
 * engine.c: the generator's engine thread. Each step: (a) take new requests and cancels under
 * the lock; (b) plan with the scheduler; (c) a prefill run of the step's chunks; (d) a decode
 * run of its decoding sequences; (e) publish the tokens and ends under the lock, then call the
 * callbacks outside it. The pipelines run with the lock released, so submit, poll, cancel and
 * stats never wait for a step.
 *
 * A step that only decodes, with nothing waiting, runs as a decode loop when the runner has
 * one: one launch runs up to K steps on the device (docs/SERVING.md, "The decode loop"). The
 * engine reserves the KV blocks for them first, then hands the tokens to the scheduler one
 * iteration at a time as the ring delivers them, each iteration exactly as a step would have
 * been (its plan, complete, publish, callbacks), so streaming and every count stay the same. A
 * new request, a cancel or destroy asks the loop to return, so they wait one step at most.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* prctl's timer slack */
#endif
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__linux__)
#include <sys/prctl.h>
#endif

#include "runtime/error.h"
#include "serve/generator.h"

static recap__request *request_of(recap__seq *seq) {
  return (recap__request *)((char *)seq - offsetof(recap__request, seq));
}

/* ---- under the lock ---- */

/* Queues a record's callbacks for the next delivery. */
static void pin(recap__request *q, recap__request **pinned) {
  if (!q->on_token || q->pinned) return;
  q->pinned = true;
  q->next_pinned = *pinned;
  *pinned = q;
}

static void live_unlink(recap_generator *g, recap__request *q) {
  if (q->prev_live)
    q->prev_live->next_live = q->next_live;
  else
    g->live_head = q->next_live;
  if (q->next_live)
    q->next_live->prev_live = q->prev_live;
  else
    g->live_tail = q->prev_live;
  q->prev_live = q->next_live = NULL;
}

/* Ends a record that has left the scheduler. A released one is freed here unless its
 * callbacks are pending (then after they ran). */
static void end_request(recap_generator *g, recap__request *q, recap_request_state state,
                        recap_status error, recap__request **pinned) {
  q->state = state;
  q->finish = q->seq.finish;
  q->error = error;
  live_unlink(g, q);
  if (state == RECAP_REQUEST_FINISHED) g->stats.finished++;
  if (state == RECAP_REQUEST_CANCELLED) g->stats.cancelled++;
  pin(q, pinned);
  if (q->released && !q->pinned) recap__request_destroy(q);
  pthread_cond_broadcast(&g->ended);
}

/* (a) New requests join the waiting queue in submit order; cancelled ones leave. */
static void take_requests(recap_generator *g, recap__request **pinned) {
  for (recap__request *q = g->incoming_head; q; q = q->next_incoming)
    recap__sched_enqueue(g->sched, &q->seq);
  g->incoming_head = g->incoming_tail = NULL;
  g->num_incoming = 0;
  if (!g->cancels_pending) return;
  g->cancels_pending = false;
  for (recap__request *q = g->live_head, *next; q; q = next) {
    next = q->next_live;
    if (!q->cancel_requested) continue;
    recap__sched_remove(g->sched, &q->seq);
    end_request(g, q, RECAP_REQUEST_CANCELLED, RECAP_OK, pinned);
  }
}

/* Ends every live request: CANCELLED when stopping, FAILED with the engine's error. */
static void end_all(recap_generator *g, recap_request_state state, recap_status error,
                    recap__request **pinned) {
  g->incoming_head = g->incoming_tail = NULL;
  g->num_incoming = 0;
  while (g->live_head) {
    recap__request *q = g->live_head;
    recap__sched_remove(g->sched, &q->seq);
    end_request(g, q, state, error, pinned);
  }
}

static void publish_counts(recap_generator *g) {
  recap__sched_counts c = recap__sched_counts_get(g->sched);
  g->stats.preemptions = c.preemptions;
  g->stats.kv_blocks_used = (size_t)c.blocks_used;
  g->stats.kv_blocks_peak = (size_t)c.blocks_peak;
  g->stats.running = (size_t)c.running;
  g->stats.waiting = (size_t)c.waiting + g->num_incoming;
}

/* A sequence's newest token, now an output of its request. */
static void publish_token(recap_generator *g, recap__seq *seq, recap__request **pinned) {
  recap__request *q = request_of(seq);
  q->outputs[q->num_outputs++] = seq->tokens[seq->num_tokens - 1];
  if (q->num_outputs == 1) q->ttft_ms = recap__now_ms() - q->submit_ms;
  g->stats.tokens_out++;
  q->state = RECAP_REQUEST_RUNNING;
  pin(q, pinned);
  if (seq->finish != RECAP_FINISH_NONE) end_request(g, q, RECAP_REQUEST_FINISHED, RECAP_OK, pinned);
}

/* (e) What the step did, as other threads see it. */
static void publish_step(recap_generator *g, const recap__step *step, recap__request **pinned) {
  for (int i = 0; i < step->num_preempted; i++) {
    recap__request *q = request_of(step->preempted[i]);
    q->state = RECAP_REQUEST_WAITING;
    q->preemptions = step->preempted[i]->preemptions;
  }
  for (int i = 0; i < step->num_chunks; i++)
    if (step->chunks[i].completes) publish_token(g, step->chunks[i].seq, pinned);
  for (int i = 0; i < step->num_decode; i++) publish_token(g, step->decode[i], pinned);
}

/* ---- outside the lock ---- */

/* Calls the pinned records' callbacks: their new outputs, then their end. The engine alone
 * appends outputs and ends records, and a pinned record is not freed by release, so reading
 * them here without the lock is safe. */
static void deliver(recap__request *pinned) {
  for (recap__request *q = pinned; q; q = q->next_pinned) {
    while (q->delivered < q->num_outputs)
      q->on_token(q->user, q->id, q->outputs[q->delivered++], RECAP_REQUEST_RUNNING);
    if (recap__request_ended(q) && !q->end_delivered) {
      q->end_delivered = true;
      q->on_token(q->user, q->id, -1, q->state);
    }
  }
}

/* Delivers, then unpins under the lock (freeing what was released meanwhile). */
static void deliver_and_unpin(recap_generator *g, recap__request **pinned) {
  if (!*pinned) return;
  pthread_mutex_unlock(&g->lock);
  deliver(*pinned);
  pthread_mutex_lock(&g->lock);
  for (recap__request *q = *pinned, *next; q; q = next) {
    next = q->next_pinned;
    q->pinned = false;
    q->next_pinned = NULL;
    if (q->released && recap__request_ended(q)) recap__request_destroy(q);
  }
  *pinned = NULL;
  pthread_cond_broadcast(&g->ended); /* waiters wait for the last callback too */
}

/* (b) to (d): one step's runs. Counts go to `stats` (published under the lock after). */
static recap_status run_step(recap_generator *g, const recap__step *step,
                             recap_generator_stats *stats) {
  int32_t *prefill_tokens = g->prefill_tokens, *decode_tokens = g->decode_tokens;
  bool replayed;
  if (step->num_chunks) {
    RECAP_TRY(recap__runner_prefill(g->runner, step, prefill_tokens, &replayed));
    stats->prefill_steps++;
    replayed ? stats->graph_steps++ : stats->eager_steps++;
  }
  if (step->num_decode) {
    RECAP_TRY(recap__runner_decode(g->runner, step, decode_tokens, &replayed));
    stats->decode_steps++;
    replayed ? stats->graph_steps++ : stats->eager_steps++;
  }
  for (int i = 0; i < step->num_chunks; i++)
    if (step->chunks[i].completes &&
        (prefill_tokens[i] < 0 || prefill_tokens[i] >= g->shape->vocab))
      return RECAP_FAIL(RECAP_STATUS_INTERNAL, "the prefill step sampled token %d for row %d",
                        prefill_tokens[i], i);
  for (int i = 0; i < step->num_decode; i++)
    if (decode_tokens[i] < 0 || decode_tokens[i] >= g->shape->vocab)
      return RECAP_FAIL(RECAP_STATUS_INTERNAL, "the decode step sampled token %d for row %d",
                        decode_tokens[i], i);
  recap__sched_complete(g->sched, prefill_tokens, decode_tokens);
  return RECAP_OK;
}

/* ---- decode loops ---- */

/* The longest the engine sleeps waiting for a running loop's next step: it also looks for
 * submits and cancels when it wakes. The wait itself sleeps until the next step is due, then
 * looks at 1/16 of a step (recap_decode_loop_wait). */
static const int64_t LOOP_WAIT_NS = 2000000;

/* Whether the planned step may run as a loop: decode rows only (so whatever waits could not
 * be admitted), no preemption, and a runner with a loop. */
static bool loop_fits(const recap_generator *g, const recap__step *step) {
  return g->loop_entries && step->num_chunks == 0 && step->num_decode > 0 &&
         step->num_preempted == 0;
}

static recap_status loop_disagrees(int32_t iteration, const char *what) {
  return RECAP_FAIL(RECAP_STATUS_INTERNAL,
                    "decode loop iteration %d: the device and the scheduler disagree: %s",
                    iteration, what);
}

/* Hands iteration `iteration`'s tokens (entries[0, n)) to the scheduler and the requests as
 * the step `step` (its plan) would have had them. Entered and left without the lock; *asked
 * says whether something now waits for the loop to return. */
static recap_status complete_iteration(recap_generator *g, const recap__step *step, int rows,
                                       const recap_loop_token *entries, size_t n, int32_t iteration,
                                       recap__request **pinned, bool *asked) {
  if ((size_t)step->num_decode != n) return loop_disagrees(iteration, "another number of rows ran");
  for (int i = 0; i < step->num_decode; i++) {
    int row = 0;
    while (row < rows && g->loop_rows[row] != step->decode[i]) row++;
    size_t e = 0;
    while (e < n && entries[e].row != row) e++;
    if (row == rows || e == n) return loop_disagrees(iteration, "a running sequence got no token");
    int32_t token = entries[e].token;
    if (token < 0 || token >= g->shape->vocab)
      return RECAP_FAIL(RECAP_STATUS_INTERNAL, "the decode loop sampled token %d for row %d", token,
                        row);
    g->decode_tokens[i] = token;
  }
  recap__sched_complete(g->sched, g->prefill_tokens, g->decode_tokens);
  pthread_mutex_lock(&g->lock);
  g->stats.steps++;
  g->stats.decode_steps++;
  g->stats.graph_steps++; /* a step of a graph launch: prefill + decode = graph + eager */
  g->stats.loop_steps++;
  publish_step(g, step, pinned);
  publish_counts(g);
  deliver_and_unpin(g, pinned);
  /* After the callbacks: a callback may have cancelled or submitted. */
  *asked = g->num_incoming > 0 || g->cancels_pending || g->stopping;
  pthread_mutex_unlock(&g->lock);
  return RECAP_OK;
}

/* Ends the launch and waits for it, so the runner is free again; what it still produces is
 * dropped (the steps after the last completed iteration run again, with the same tokens: the
 * KV positions they wrote are written again, and sampling is keyed by the output index). A
 * failure of the launch (a fault, a dead peer) is returned: poll has ended the launch then. */
static recap_status drain_loop(recap_generator *g) {
  int finished = 0;
  recap__runner_loop_return(g->runner);
  while (!finished) {
    size_t got;
    RECAP_TRY(
        recap__runner_loop_poll(g->runner, g->loop_entries, g->loop_capacity, &got, &finished));
    if (!finished) recap__runner_loop_wait(g->runner, LOOP_WAIT_NS);
  }
  return RECAP_OK;
}

/* (c) to (e) for a step run as a decode loop: `first` is its first iteration's plan, every
 * later iteration's is planned after the one before it completed. A submit, a cancel or
 * destroy ends it at the next iteration boundary, as it would end a run of steps. */
static recap_status run_loop(recap_generator *g, const recap__step *first,
                             recap__request **pinned) {
  int64_t k = recap__sched_reserve_steps(g->sched, recap__runner_loop_max_steps(g->runner));
  const int rows = first->num_decode;
  memcpy(g->loop_rows, first->decode, sizeof *g->loop_rows * (size_t)rows);
  /* With requests waiting, the first sequence to end frees what they wait for: the loop
   * returns then, so the next plan can admit them. */
  bool waiting = recap__sched_counts_get(g->sched).waiting > 0;
  RECAP_TRY(recap__runner_loop_launch(g->runner, g->sched, first, k, waiting));
  pthread_mutex_lock(&g->lock);
  g->stats.loop_launches++;
  pthread_mutex_unlock(&g->lock);
  const recap__step *step = first;
  recap_loop_token *entries = g->loop_entries;
  int32_t iteration = 0;
  size_t have = 0;
  int finished = 0;
  bool asked = false;
  recap_status st = RECAP_OK;
  while (st == RECAP_OK) {
    size_t got = 0;
    st = recap__runner_loop_poll(g->runner, entries + have, g->loop_capacity - have, &got,
                                 &finished);
    have += got;
    /* The control kernel publishes an iteration's entries together, and the buffer holds a
     * whole launch's: what arrived is whole iterations. */
    while (st == RECAP_OK && have > 0) {
      size_t n = 0;
      while (n < have && entries[n].step == iteration) n++;
      if (n == 0) {
        st = loop_disagrees(iteration, "the ring skipped an iteration");
        break;
      }
      if (!step) {
        step = recap__sched_plan(g->sched);
        if (step->num_chunks || step->num_preempted || step->num_decode == 0) {
          st = loop_disagrees(iteration, "the scheduler planned more than the loop's rows");
          break;
        }
      }
      st = complete_iteration(g, step, rows, entries, n, iteration, pinned, &asked);
      memmove(entries, entries + n, sizeof *entries * (have - n));
      have -= n;
      iteration++;
      step = NULL;
      if (asked) break;
    }
    if (st != RECAP_OK || finished || asked) break;
    if (got == 0) {
      /* Something else may need the engine: a submit or cancel since the last iteration. */
      pthread_mutex_lock(&g->lock);
      asked = g->num_incoming > 0 || g->cancels_pending || g->stopping;
      pthread_mutex_unlock(&g->lock);
      if (asked) break;
      st = recap__runner_loop_wait(g->runner, LOOP_WAIT_NS);
    }
  }
  if (!finished) {
    recap_status drained = drain_loop(g);
    if (st == RECAP_OK) st = drained;
  }
  return st;
}

static bool has_work(const recap_generator *g) {
  return g->incoming_head || g->cancels_pending || !recap__sched_idle(g->sched);
}

/* Waits under the lock for work or stop. Under tensor parallelism the followers wait for the
 * next step header under the communicator's timeout, so an idle rank 0 tells them it is alive
 * four times per timeout (a step that runs nothing); a failure to (a follower gone) is the
 * engine's failure. */
static recap_status wait_for_work(recap_generator *g) {
  if (!g->comm) {
    while (!g->stopping && !has_work(g)) pthread_cond_wait(&g->work, &g->lock);
    return RECAP_OK;
  }
  double interval_s = recap_comm_timeout(g->comm) / 4;
  while (!g->stopping && !has_work(g)) {
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    double end = (double)until.tv_sec + (double)until.tv_nsec * 1e-9 + interval_s;
    until.tv_sec = (time_t)end;
    until.tv_nsec = (long)((end - (double)until.tv_sec) * 1e9);
    if (pthread_cond_timedwait(&g->work, &g->lock, &until) != ETIMEDOUT) continue;
    if (g->stopping || has_work(g)) break;
    pthread_mutex_unlock(&g->lock);
    recap_status st = recap__runner_keepalive(g->runner);
    pthread_mutex_lock(&g->lock);
    if (st != RECAP_OK) return st;
  }
  return RECAP_OK;
}

void *recap__engine_main(void *arg) {
  recap_generator *g = arg;
  recap__request *pinned = NULL;
#if defined(__linux__)
  /* 1 us of timer slack instead of 50: the loop's waits sleep until a step is due, and a late
   * wake is a late token. Only this thread's sleeps are affected. */
  prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
#endif
  /* Runs target the pipelines' device; set it here too, as the creating thread had it. */
  recap_status st = recap_device_set(g->shape->device);
  pthread_mutex_lock(&g->lock);
  while (st == RECAP_OK) {
    st = wait_for_work(g);
    if (st != RECAP_OK || g->stopping) break;
    take_requests(g, &pinned);
    publish_counts(g);
    if (!recap__sched_idle(g->sched)) {
      recap_generator_stats counts = {0};
      pthread_mutex_unlock(&g->lock);
      const recap__step *step = recap__sched_plan(g->sched);
      if (loop_fits(g, step)) {
        st = run_loop(g, step, &pinned);
        pthread_mutex_lock(&g->lock);
        publish_counts(g);
        deliver_and_unpin(g, &pinned);
        continue;
      }
      st = run_step(g, step, &counts);
      pthread_mutex_lock(&g->lock);
      g->stats.steps++;
      g->stats.prefill_steps += counts.prefill_steps;
      g->stats.decode_steps += counts.decode_steps;
      g->stats.graph_steps += counts.graph_steps;
      g->stats.eager_steps += counts.eager_steps;
      if (st == RECAP_OK) publish_step(g, step, &pinned);
      publish_counts(g);
    }
    deliver_and_unpin(g, &pinned);
  }
  if (st != RECAP_OK) {
    fprintf(stderr, "recap generator: the engine stopped: %s: %s\n", recap_status_name(st),
            recap_last_error());
    g->failure = st;
  }
  end_all(g, st == RECAP_OK ? RECAP_REQUEST_CANCELLED : RECAP_REQUEST_FAILED, st, &pinned);
  publish_counts(g);
  deliver_and_unpin(g, &pinned);
  g->engine_done = true;
  pthread_cond_broadcast(&g->ended);
  pthread_mutex_unlock(&g->lock);
  return NULL;
}
