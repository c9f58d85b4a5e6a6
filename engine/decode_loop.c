/*
 * decode_loop.c: decode loops, many decode steps in one graph launch (include/recap.h,
 * "Decode loops"; docs/SERVING.md, "The decode loop").
 *
 * Per bucket, one graph on the pipeline's stream:
 *   memcpy  launch block (mapped host memory) -> loop state (device): counters, K, limits
 *   WHILE   (condition 1 at launch)
 *     child graph                the bucket's captured decode step (decode_advance inside)
 *     publish kernel             beside the step: the previous step's entries handed to the
 *                                host, and with `timestamps` the step's start stamped
 *     control kernel             after both: ring entries, stop tests, ids packed again, the
 *                                RNG slot moved on, the WHILE node's condition
 *   publish kernel               the last step's entries, then `ended`
 * The publish kernel runs beside the step, not after the control kernel: its system-scope
 * fence waits for the entries to reach the host (0.5 us on an H100), which would lengthen every
 * step boundary; beside the next step it costs a token that much delay, and nothing else.
 * A step graph that draws random numbers has its RNG slot written once per launch with the
 * first of K steps' draws (reserved together); the control kernel moves it on after every
 * step, and once the launch has ended the draws of the steps that did not run go back to the
 * generator (runtime/rng.h, recap__rng_loop_*).
 * The body is captured on a stream of its own (a WHILE body is a graph of its own, captured
 * with cudaStreamBeginCaptureToGraph); the host backend runs the same graph with the same
 * semantics and enforces CUDA's rules for the body.
 *
 * Mapped host memory holds what crosses between host and device during a launch: the launch
 * block the host writes before it, the ring and its published count that the device writes,
 * and the step stamps. A return request goes the other way: the host copies the number of the
 * launch it wants ended into device memory, on a stream of the loop's own (the control kernel
 * looks at it every step, and a look at mapped memory would cross the bus each time: 0.8 us of
 * the step boundary on an H100). A launch ends on a request that names it, so a request that
 * lands late, after its launch, ends nothing.
 *
 * Across the ranks of a communicator (recap_decode_loop_create_dist), every rank's loop must
 * run the same iterations, or the collectives inside the step would not pair. The tokens are
 * the same on every rank (each samples the same gathered logits); the rest of the decision
 * comes from rank 0, broadcast inside the loop graph:
 *   memcpy     launch block -> loop state
 *   broadcast  loop state, ids, seqs (rank 0's: a follower's own are not looked at)
 *   WHILE
 *     ... the step ...
 *     broadcast  return request (rank 0's ends every rank's loop after the same step)
 *     control kernel
 * A peer that dies leaves the others' collectives waiting: a launch is a watchdog-bounded
 * stretch of the communicator, and poll reports its abort before handing out entries.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* clock_nanosleep under -std=c11 */
#endif
#include "kernels/decode_loop.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/comm.h"
#include "engine/ir.h"
#include "engine/pipeline.h"
#include "graph/graph.h"
#include "runtime/backend.h"
#include "runtime/error.h"

/* Mapped host memory, one allocation: each part on its own cache line. */
typedef struct {
  int32_t *block;        /* RECAP__LOOP_STATE_INTS + rows x RECAP__LOOP_LIMIT_WIDTH */
  int32_t *published;    /* ring entries the host may read */
  int32_t *ran;          /* iterations the launch has run (beside published) */
  int32_t *ended;        /* the launch's last iteration has published (beside published) */
  int32_t *return_asked; /* the newest launch whose return the host asked for */
  recap_loop_token *ring;
  uint64_t *stamps; /* 2 x max_steps, or NULL */
} mapped_parts;

struct recap_decode_loop {
  recap_pipeline *p;
  recap_comm *comm;     /* NULL: one device on its own */
  /* Device memory: what the host last copied from parts.return_asked (with comm, rank 0's,
   * broadcast every iteration). */
  int32_t *return_request;
  /* side: the publish branch of the body while it is captured; then the stream of return
   * requests. */
  recap_stream *body, *side;
  recap_event *fork, *join; /* the publish branch's */
  int32_t launches; /* numbers the launches (the launch block's RECAP__LOOP_LAUNCH) */
  int64_t max_steps, rows; /* rows: the largest bucket's */
  size_t block_bytes, capacity;
  void *mapped;
  mapped_parts parts;
  int32_t *state;       /* device copy of the launch block, updated by the control kernel */
  recap_graph **graphs; /* per bucket */
  /* Per bucket: the step graph's RNG binding the body moves on (NULL: it draws nothing). */
  const recap__rng_graph_binding **rng;
  size_t bucket; /* of the launch under way, or the last one */
  recap__rng_loop_reservation reserved;
  recap_event *done;
  bool running;       /* launched and not yet polled to its end */
  int32_t read;       /* entries handed out by poll */
  int64_t last_steps; /* steps the last finished launch ran */
  /* What recap_decode_loop_wait has learnt (see there): the device time of one step (an
   * average over the ring's entries, 0 until known), the host clock minus the device clock
   * (the fastest delivery seen), and the newest step seen in this launch. */
  double step_ns;
  /* How long after the predicted time a step's entries have become visible, tracked as the
   * LATE_QUANTILE quantile of what the looks found: the wait sleeps until prediction + late_ns,
   * so that one wake-up usually finds the entries (each wake-up costs the process a few
   * microseconds of CPU). */
  double late_ns;
  int64_t offset_ns;
  bool has_offset;
  int32_t seen_step; /* -1: none yet in this launch */
  uint64_t seen_device_ns, launched_ns;
  uint64_t queried_ns; /* poll's last look at the launch's event (host clock) */
};

static uint64_t host_now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* Learns from entries just handed out (arrived at host time `now`): the clocks' offset, and the
 * step time from consecutive steps' device stamps (each step's entries carry one stamp). */
static void learn(recap_decode_loop *loop, const recap_loop_token *e, size_t n, uint64_t now) {
  for (size_t i = 0; i < n; i++) {
    int64_t offset = (int64_t)(now - e[i].time_ns);
    if (!loop->has_offset || offset < loop->offset_ns) loop->offset_ns = offset;
    loop->has_offset = true;
    if (e[i].step <= loop->seen_step) continue;
    if (loop->seen_step >= 0 && e[i].time_ns > loop->seen_device_ns) {
      double step = (double)(e[i].time_ns - loop->seen_device_ns) / (e[i].step - loop->seen_step);
      loop->step_ns = loop->step_ns > 0 ? 0.875 * loop->step_ns + 0.125 * step : step;
    }
    loop->seen_step = e[i].step;
    loop->seen_device_ns = e[i].time_ns;
  }
}

static size_t round_up(size_t n, size_t to) {
  return (n + to - 1) / to * to;
}

static recap_status tensor_index(recap_pipeline *p, const char *name, int *out) {
  const recap__ir *ir = p->model->irs[p->model->num_buckets - 1];
  *out = recap__ir_find_tensor(ir, name);
  if (*out < 0)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "pipeline '%s' has no tensor '%s': a decode loop needs a paged decode "
                      "entry (ids, seqs, tokens)",
                      p->model->spec->name, name);
  return RECAP_OK;
}

static void *bucket_data(const recap_pipeline *p, size_t bucket, int t) {
  return p->views[bucket * p->num_tensors + (size_t)t].data;
}

/* Rank 0's launch block (now the loop state) and the step's inputs (ids, seqs: as
 * recap_pipeline_run_dist sends them) to every rank, in one group. */
static recap_status broadcast_launch(recap_decode_loop *loop, recap_stream *s) {
  return recap__dist_broadcast_step(loop->p, loop->comm, loop->state,
                                    loop->block_bytes / sizeof(int32_t), RECAP_DTYPE_I32, true, s);
}

/* In the body: rank 0's return request, as it stands after the step, to every rank. */
static recap_status broadcast_return_request(recap_decode_loop *loop) {
  return recap_comm_broadcast(loop->comm, loop->return_request, loop->return_request, 1,
                              RECAP_DTYPE_I32, 0, loop->body);
}

/* In the body: a branch from the body's start publishes the previous step's entries (and
 * stamps the step's start); the body stream waits for it (loop->join) before the control
 * kernel, which writes the state it reads. */
static recap_status publish_beside_the_step(recap_decode_loop *loop) {
  const recap__decode_loop_publish_args args = {
      .state = loop->state, .published = loop->parts.published, .stamps = loop->parts.stamps};
  RECAP_TRY(recap_event_record(loop->fork, loop->body));
  RECAP_TRY(recap_stream_wait_event(loop->side, loop->fork));
  RECAP_TRY(recap__decode_loop_publish(loop->side, &args));
  return recap_event_record(loop->join, loop->side);
}

static recap_status capture_bucket(recap_decode_loop *loop, size_t bucket, int ids, int seqs,
                                   int tokens, int timestamps) {
  recap_pipeline *p = loop->p;
  const recap__backend *be = p->stream->backend;
  const recap_tensor *seqs_view = &p->views[bucket * p->num_tensors + (size_t)seqs];
  recap__decode_loop_args args = {
      .seqs = seqs_view->data,
      .rows = seqs_view->shape[0],
      .width = seqs_view->shape[1],
      .tokens = bucket_data(p, bucket, tokens),
      .ids = bucket_data(p, bucket, ids),
      .state = loop->state,
      .ring = loop->parts.ring,
      .capacity = (int64_t)loop->capacity,
      .ran = loop->parts.ran,
      .return_request = loop->return_request,
      .stamps = timestamps ? loop->parts.stamps : NULL,
  };
  const recap__rng_graph_binding *rng = NULL;
  recap_graph *g = NULL;
  RECAP_TRY(recap_graph_create(&g));
  loop->graphs[bucket] = g;
  recap_stream *s = p->stream;
  RECAP_TRY(recap_graph_capture_begin(g, s, p->has_pool ? &p->pool : NULL, p->capture_mode));
  uint64_t handle = 0;
  bool in_body = false;
  recap_status st = be->memcpy_async(loop->state, loop->parts.block, loop->block_bytes, s);
  if (st == RECAP_OK && loop->comm) st = broadcast_launch(loop, s);
  if (st == RECAP_OK) st = be->while_begin(s, loop->body, &handle);
  in_body = st == RECAP_OK;
  if (st == RECAP_OK) st = publish_beside_the_step(loop);
  if (st == RECAP_OK) st = recap__graph_replay_into_body(p->graphs[bucket], loop->body, &rng);
  if (st == RECAP_OK) st = recap_stream_wait_event(loop->body, loop->join);
  if (st == RECAP_OK) {
    loop->rng[bucket] = rng;
    args.rng_slot = rng ? rng->slot : NULL;
    args.rng_increment = rng ? rng->increment : 0;
    args.condition = handle;
    if (loop->comm) st = broadcast_return_request(loop);
    if (st == RECAP_OK) st = recap__decode_loop_control(loop->body, &args);
  }
  if (in_body) {
    recap_status end = be->while_end(loop->body);
    if (st == RECAP_OK) st = end;
  }
  if (st == RECAP_OK) {
    const recap__decode_loop_publish_args last = {
        .state = loop->state, .published = loop->parts.published, .ended = loop->parts.ended};
    st = recap__decode_loop_publish(s, &last);
  }
  recap_status end = recap_graph_capture_end(g);
  if (st == RECAP_OK) st = end;
  return st;
}

recap_status recap_decode_loop_destroy(recap_decode_loop *loop) {
  if (!loop) return RECAP_OK;
  if (loop->running)
    return RECAP_FAIL(RECAP_STATUS_BUSY, "a decode loop launch is under way: poll it to its end");
  const recap__backend *be = loop->p->stream->backend;
  for (size_t b = 0; loop->graphs && b < loop->p->model->num_buckets; b++)
    recap_graph_destroy(loop->graphs[b]);
  free(loop->graphs);
  free(loop->rng);
  recap_event_destroy(loop->done);
  recap_stream_destroy(loop->body);
  if (loop->state) recap_free(loop->state);
  recap_stream_destroy(loop->side);
  recap_event_destroy(loop->fork);
  recap_event_destroy(loop->join);
  if (loop->return_request) recap_free(loop->return_request);
  if (loop->mapped) be->host_free_mapped(loop->p->device.index, loop->mapped);
  free(loop);
  return RECAP_OK;
}

static recap_status create_loop(recap_pipeline *p, recap_comm *comm, int64_t max_steps,
                                int timestamps, recap_decode_loop **out) {
  if (max_steps < 1 || max_steps > INT32_MAX / 4)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "max_steps %lld is outside [1, %d]",
                      (long long)max_steps, INT32_MAX / 4);
  const recap__backend *be = p->stream->backend;
  if (!be->while_begin || !be->host_alloc_mapped)
    return RECAP_FAIL(RECAP_STATUS_NOT_SUPPORTED, "the %s backend has no conditional graph nodes",
                      be->name);
  if (p->mode != RECAP_MODE_GRAPH || p->graphs_failed)
    return RECAP_FAIL(RECAP_STATUS_NOT_SUPPORTED,
                      "a decode loop replays captured graphs; pipeline '%s' runs eagerly",
                      p->model->spec->name);
  int ids, seqs, tokens;
  RECAP_TRY(tensor_index(p, "ids", &ids));
  RECAP_TRY(tensor_index(p, "seqs", &seqs));
  RECAP_TRY(tensor_index(p, "tokens", &tokens));
  if (!p->captured) RECAP_TRY(recap__graph_capture_all(p));
  if (p->graphs_failed)
    return RECAP_FAIL(RECAP_STATUS_NOT_SUPPORTED, "pipeline '%s' could not capture its graphs",
                      p->model->spec->name);

  recap_decode_loop *loop = calloc(1, sizeof *loop);
  if (!loop) return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for a decode loop");
  loop->p = p;
  loop->comm = comm;
  loop->max_steps = max_steps;
  const size_t num_buckets = p->model->num_buckets;
  loop->rows = p->views[(num_buckets - 1) * p->num_tensors + (size_t)seqs].shape[0];
  loop->capacity = (size_t)max_steps * (size_t)loop->rows;
  loop->block_bytes =
      sizeof(int32_t) * (size_t)(RECAP__LOOP_STATE_INTS + loop->rows * RECAP__LOOP_LIMIT_WIDTH);
  const size_t line = 128;
  size_t at_published = round_up(loop->block_bytes, line);
  size_t at_asked = at_published + line, at_ring = at_asked + line;
  size_t at_stamps = round_up(at_ring + loop->capacity * sizeof(recap_loop_token), line);
  size_t total = at_stamps + (timestamps ? 2 * (size_t)max_steps * sizeof(uint64_t) : 0);
  recap_status st = be->host_alloc_mapped(p->device.index, total, &loop->mapped);
  if (st == RECAP_OK) {
    char *m = loop->mapped;
    loop->parts = (mapped_parts){
        .block = (int32_t *)m,
        .published = (int32_t *)(m + at_published),
        .ran = (int32_t *)(m + at_published) + 1,
        .ended = (int32_t *)(m + at_published) + 2,
        .return_asked = (int32_t *)(m + at_asked),
        .ring = (recap_loop_token *)(m + at_ring),
        .stamps = timestamps ? (uint64_t *)(m + at_stamps) : NULL,
    };
    st = recap_malloc(p->device, loop->block_bytes, p->stream, (void **)&loop->state);
  }
  if (st == RECAP_OK)
    st = recap_malloc(p->device, sizeof(int32_t), p->stream, (void **)&loop->return_request);
  /* No launch has number 0. */
  if (st == RECAP_OK) st = be->memset_async(loop->return_request, 0, sizeof(int32_t), p->stream);
  if (st == RECAP_OK)
    st = recap_stream_create(p->device, 0, RECAP_STREAM_NON_BLOCKING, &loop->body);
  if (st == RECAP_OK)
    st = recap_stream_create(p->device, 0, RECAP_STREAM_NON_BLOCKING, &loop->side);
  if (st == RECAP_OK) st = recap_event_create(p->device, 0, &loop->fork);
  if (st == RECAP_OK) st = recap_event_create(p->device, 0, &loop->join);
  if (st == RECAP_OK) st = recap_event_create(p->device, 0, &loop->done);
  if (st == RECAP_OK) {
    loop->graphs = calloc(num_buckets, sizeof *loop->graphs);
    loop->rng = calloc(num_buckets, sizeof *loop->rng);
    if (!loop->graphs || !loop->rng)
      st = RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for loop graphs");
  }
  /* Captured in bucket order, each with the same calls: handles are created in one order. */
  for (size_t b = 0; st == RECAP_OK && b < num_buckets; b++)
    st = capture_bucket(loop, b, ids, seqs, tokens, timestamps);
  if (st == RECAP_OK) st = recap_stream_synchronize(p->stream);
  if (st != RECAP_OK) {
    recap_decode_loop_destroy(loop);
    return recap__error_context(st, "decode loop over '%s': ", p->model->spec->name);
  }
  *out = loop;
  return RECAP_OK;
}

recap_status recap_decode_loop_create(recap_pipeline *p, int64_t max_steps, int timestamps,
                                      recap_decode_loop **out) {
  RECAP_CHECK_ARG(p && out);
  return create_loop(p, NULL, max_steps, timestamps, out);
}

recap_status recap_decode_loop_create_dist(recap_pipeline *p, recap_comm *comm, int64_t max_steps,
                                           int timestamps, recap_decode_loop **out) {
  RECAP_CHECK_ARG(p && comm && out);
  *out = NULL;
  recap_device cd = recap_comm_device(comm);
  recap_decode_loop *loop = NULL;
  recap_status st = RECAP_OK;
  if (cd.backend != p->device.backend || cd.index != p->device.index)
    st = RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                    "the pipeline runs on %s:%d, the communicator (rank %d) on %s:%d",
                    recap_backend_name(p->device.backend), p->device.index, recap_comm_rank(comm),
                    recap_backend_name(cd.backend), cd.index);
  if (st == RECAP_OK && recap__comm_captures_events(comm))
    st = RECAP_FAIL(RECAP_STATUS_NOT_SUPPORTED,
                    "NCCL_GRAPH_MIXING_SUPPORT is not 0, so NCCL's captured collectives hold "
                    "event nodes, which a WHILE body cannot: set it to 0 before the "
                    "communicator is made (then a graph holding collectives must end before a "
                    "collective outside a graph starts on the communicator, as recap's "
                    "generator does)");
  if (st == RECAP_OK) st = create_loop(p, comm, max_steps, timestamps, &loop);
  /* Every rank runs loops or none does: the lowest rank that failed, or the world. */
  const int world = recap_comm_world_size(comm);
  int64_t failed = st == RECAP_OK ? world : recap_comm_rank(comm);
  char *why = st == RECAP_OK ? NULL : strdup(recap_last_error());
  recap_status agreed = recap_comm_agree_min(comm, &failed);
  if (agreed != RECAP_OK || st != RECAP_OK || failed < world) recap_decode_loop_destroy(loop);
  if (agreed != RECAP_OK) {
    free(why);
    return recap__error_context(agreed, "agreeing on the decode loop with the other ranks: ");
  }
  if (st != RECAP_OK) {
    if (why) recap__fail_plain(st, "%s", why);
    free(why);
    return st;
  }
  if (failed < world)
    return RECAP_FAIL(RECAP_STATUS_NOT_SUPPORTED,
                      "rank %lld could not build its decode loop (its own status says why), so "
                      "no rank runs one",
                      (long long)failed);
  *out = loop;
  return RECAP_OK;
}

recap_status recap_decode_loop_launch(recap_decode_loop *loop, int64_t batch, int64_t steps,
                                      const recap_loop_limits *limits, unsigned flags) {
  RECAP_CHECK_ARG(loop && (limits || batch == 0));
  recap_pipeline *p = loop->p;
  if (loop->running)
    return RECAP_FAIL(RECAP_STATUS_BUSY,
                      "the previous decode loop launch has not been polled to its end");
  if (steps < 1 || steps > loop->max_steps)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "steps %lld is outside [1, %lld]",
                      (long long)steps, (long long)loop->max_steps);
  if (flags & ~(unsigned)RECAP_LOOP_RETURN_ON_STOP)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "unknown decode loop flags 0x%x", flags);
  if (batch < 1 || batch > loop->rows)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "batch %lld is outside [1, %lld]",
                      (long long)batch, (long long)loop->rows);
  size_t b = recap__pipeline_bucket_for(p, batch);
  int32_t *block = loop->parts.block;
  memset(block, 0, loop->block_bytes);
  block[RECAP__LOOP_MAX_STEPS] = (int32_t)steps;
  block[RECAP__LOOP_RETURN_ON_STOP] = (flags & RECAP_LOOP_RETURN_ON_STOP) != 0;
  /* Wraps after 2^31 launches to 1, never 0 (no launch's number: see create_loop). */
  loop->launches = loop->launches == INT32_MAX ? 1 : loop->launches + 1;
  block[RECAP__LOOP_LAUNCH] = loop->launches;
  for (int64_t r = 0; r < batch; r++) {
    int32_t *l = block + RECAP__LOOP_STATE_INTS + r * RECAP__LOOP_LIMIT_WIDTH;
    if (limits[r].num_stop_ids < 0 || limits[r].num_stop_ids > RECAP_MAX_STOP_IDS)
      return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "row %lld has %d stop ids (at most %d)",
                        (long long)r, limits[r].num_stop_ids, RECAP_MAX_STOP_IDS);
    l[RECAP__LOOP_LIMIT_MAX_OUTPUTS] = limits[r].max_outputs;
    l[RECAP__LOOP_LIMIT_NUM_STOP] = limits[r].num_stop_ids;
    memcpy(l + RECAP__LOOP_LIMIT_STOP_IDS, limits[r].stop_ids,
           sizeof(int32_t) * (size_t)limits[r].num_stop_ids);
  }
  atomic_store_explicit((_Atomic int32_t *)loop->parts.published, 0, memory_order_relaxed);
  atomic_store_explicit((_Atomic int32_t *)loop->parts.ran, 0, memory_order_relaxed);
  atomic_store_explicit((_Atomic int32_t *)loop->parts.ended, 0, memory_order_relaxed);
  loop->read = 0;
  loop->seen_step = -1;
  loop->launched_ns = host_now_ns();
  loop->queried_ns = loop->launched_ns;
  /* The clocks drift apart slowly: let the offset be learnt again, 1 us per launch. */
  loop->offset_ns += 1000;
  int64_t rows = p->model->spec->bucket_dim < 0 ? 0 : batch;
  RECAP_TRY(recap__exec_set_rows(p, rows));
  const recap__rng_graph_binding *rng = loop->rng[b];
  if (recap__graph_rng(p->graphs[b]) != rng)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "pipeline '%s' captured its decode graphs again after the decode loop was "
                      "created: create the loop again",
                      p->model->spec->name);
  if (rng) RECAP_TRY(recap__rng_loop_prepare(rng, p->stream, (uint64_t)steps, &loop->reserved));
  loop->bucket = b;
  RECAP_TRY(recap_graph_replay(loop->graphs[b], p->stream));
  RECAP_TRY(recap_event_record(loop->done, p->stream));
  loop->running = true;
  /* Until poll sees the end, a peer that stopped answering makes the watchdog abort. */
  recap__comm_busy_begin(loop->comm);
  p->stats.replays++;
  return RECAP_OK;
}

/* The launch is over for the host: ended, or failed. */
static void end_launch(recap_decode_loop *loop) {
  loop->running = false;
  recap__comm_busy_end(loop->comm);
}

/* A launch that failed (`symptom`) or whose communicator failed: across ranks, the
 * communicator's cause when it has one (a dead peer's abort makes the launch fail too, with
 * only a symptom such as an aborted kernel), else the symptom as it was reported. */
static recap_status peer_failure(recap_decode_loop *loop, recap_status symptom) {
  if (!loop->comm) return symptom;
  char *seen = strdup(recap_last_error());
  recap_status cause = recap_comm_check(loop->comm);
  if (cause != RECAP_OK) {
    free(seen);
    return recap__error_context(cause, "across ranks: ");
  }
  if (seen) recap__fail_plain(symptom, "%s", seen);
  free(seen);
  return symptom;
}

recap_status recap_decode_loop_poll(recap_decode_loop *loop, recap_loop_token *out, size_t capacity,
                                    size_t *count, int *finished) {
  RECAP_CHECK_ARG(loop && (out || capacity == 0) && count && finished);
  *count = 0;
  *finished = !loop->running;
  if (!loop->running) return RECAP_OK;
  /* Whether the launch has completed is a driver call, asked only where it may have: its last
   * iteration has published, the step time is not known yet, or nothing has come for two
   * steps (a fault stops the count). Asked before the count is read: entries published before
   * completion are all visible after it. */
  const uint64_t now = host_now_ns();
  bool ending = atomic_load_explicit((_Atomic int32_t *)loop->parts.ended, memory_order_relaxed);
  bool stalled =
      atomic_load_explicit((_Atomic int32_t *)loop->parts.published, memory_order_acquire) ==
          loop->read &&
      (double)(now - loop->queried_ns) >= 2 * loop->step_ns;
  recap_status done = RECAP_STATUS_NOT_READY;
  if (ending || loop->step_ns <= 0 || stalled) {
    done = recap_event_query(loop->done);
    loop->queried_ns = now;
  }
  if (done != RECAP_OK && done != RECAP_STATUS_NOT_READY) {
    end_launch(loop);
    return peer_failure(loop, done);
  }
  int32_t published =
      atomic_load_explicit((_Atomic int32_t *)loop->parts.published, memory_order_acquire);
  /* Looked at after the count: entries published before a healthy look were computed with
   * every peer's collectives; later ones may follow an abort (aborted collectives return
   * without their data, and the loop runs on to its end on garbage). */
  if (loop->comm && recap_comm_check(loop->comm) != RECAP_OK) {
    /* The aborted collectives return and the launch ends: its memory stays until then. */
    recap_stream_synchronize(loop->p->stream);
    end_launch(loop);
    return peer_failure(loop, RECAP_STATUS_INTERNAL);
  }
  size_t n = (size_t)(published - loop->read);
  if (n > capacity) n = capacity;
  if (n) {
    memcpy(out, loop->parts.ring + loop->read, n * sizeof *out);
    learn(loop, out, n, host_now_ns());
  }
  loop->read += (int32_t)n;
  *count = n;
  if (done == RECAP_OK && loop->read == published) {
    end_launch(loop);
    *finished = 1;
    /* Complete: everything the launch wrote to mapped memory is visible. */
    loop->last_steps =
        atomic_load_explicit((_Atomic int32_t *)loop->parts.ran, memory_order_acquire);
    recap__rng_loop_settle(loop->rng[loop->bucket], &loop->reserved, (uint64_t)loop->last_steps);
  }
  return RECAP_OK;
}

recap_status recap_decode_loop_request_return(recap_decode_loop *loop) {
  RECAP_CHECK_ARG(loop);
  if (!loop->running) return RECAP_OK;
  /* The copy's source is the mapped slot, written here only, so a copy that runs late reads
   * its own launch's number (which a later launch ignores) or a newer request's. */
  atomic_store_explicit((_Atomic int32_t *)loop->parts.return_asked, loop->launches,
                        memory_order_release);
  const recap__backend *be = loop->p->stream->backend;
  return be->memcpy_async(loop->return_request, loop->parts.return_asked, sizeof(int32_t),
                          loop->side);
}

recap_status recap_decode_loop_stamps(recap_decode_loop *loop, const uint64_t **stamps,
                                      int64_t *steps) {
  RECAP_CHECK_ARG(loop && stamps && steps);
  *stamps = loop->parts.stamps;
  *steps = loop->parts.stamps ? loop->last_steps : 0;
  return RECAP_OK;
}

/* The shortest and longest sleep between looks once an entry is due, and the one before the
 * step time is known. */
static const int64_t MIN_POLL_NS = 2000, MAX_POLL_NS = 20000;
/* late_ns tracks this quantile of the entries' lateness: a look after the predicted time that
 * finds nothing moves it up by LATE_QUANTILE x LATE_STEP_NS, one that finds entries moves it
 * down by (1 - LATE_QUANTILE) x LATE_STEP_NS, so it settles where one look in twenty misses. It
 * stays under a quarter of a step, so a token waits at most that long past its prediction. */
static const double LATE_QUANTILE = 0.95, LATE_STEP_NS = 1000;

static void learn_lateness(recap_decode_loop *loop, bool found) {
  loop->late_ns += found ? -(1 - LATE_QUANTILE) * LATE_STEP_NS : LATE_QUANTILE * LATE_STEP_NS;
  if (loop->late_ns > loop->step_ns / 4) loop->late_ns = loop->step_ns / 4;
  if (loop->late_ns < 0) loop->late_ns = 0;
}

recap_status recap_decode_loop_wait(recap_decode_loop *loop, int64_t max_ns) {
  RECAP_CHECK_ARG(loop && max_ns >= 0);
  const uint64_t deadline = host_now_ns() + (uint64_t)max_ns;
  /* Whether the last sleep ended at a predicted time (its look teaches late_ns). */
  bool predicted = false;
  for (;;) {
    if (!loop->running) return RECAP_OK;
    int32_t published =
        atomic_load_explicit((_Atomic int32_t *)loop->parts.published, memory_order_acquire);
    if (predicted) learn_lateness(loop, published != loop->read);
    predicted = false;
    if (published != loop->read) return RECAP_OK;
    bool ending = atomic_load_explicit((_Atomic int32_t *)loop->parts.ended, memory_order_relaxed);
    /* The event is asked only where the launch may have ended: a query is a driver call. */
    if (ending || loop->step_ns <= 0) {
      recap_status done = recap_event_query(loop->done);
      if (done != RECAP_STATUS_NOT_READY) return RECAP_OK; /* ended, or poll reports the fault */
    }
    const uint64_t now = host_now_ns();
    if (now >= deadline) return RECAP_OK;
    int64_t poll = (int64_t)(loop->step_ns / 16);
    poll = loop->step_ns <= 0   ? MAX_POLL_NS
           : poll < MIN_POLL_NS ? MIN_POLL_NS
           : poll > MAX_POLL_NS ? MAX_POLL_NS
                                : poll;
    if (ending) poll = MIN_POLL_NS;
    /* The next step's entries are due one step after the newest one's device stamp (on the
     * host's clock through the offset), or one step after the launch for its first step. */
    uint64_t due = now;
    if (!ending && loop->step_ns > 0) {
      if (loop->seen_step >= 0 && loop->has_offset)
        due = loop->seen_device_ns + (uint64_t)loop->offset_ns + (uint64_t)loop->step_ns;
      else if (loop->seen_step < 0)
        due = loop->launched_ns + (uint64_t)loop->step_ns;
      due += (uint64_t)loop->late_ns;
    }
    predicted = due > now + (uint64_t)poll;
    uint64_t wake = predicted ? due : now + (uint64_t)poll;
    if (wake > deadline) {
      wake = deadline;
      predicted = false;
    }
    struct timespec t = {.tv_sec = (time_t)(wake / 1000000000u),
                         .tv_nsec = (long)(wake % 1000000000u)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &t, NULL) == EINTR) {
    }
  }
}
