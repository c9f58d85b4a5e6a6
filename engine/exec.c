/*
 * exec.c: one run of a pipeline's bucket, op by op (engine/pipeline.h).
 *
 * The same code submits an eager run and the body of a capture, so a graph holds exactly the
 * work eager mode does. Order of one run:
 *   fork:  record `fork` on stream 0; every side stream with ops waits for it (inside a
 *          capture that wait is what makes the side stream join it);
 *   ops:   in index order, each on its stream, after the event waits of plan->waits; an op
 *          that another stream waits for records its event right after its launch;
 *   join:  every side stream records its event after its last op; stream 0 waits for each.
 * Views (reshapes the planner made free) launch nothing. Each launch is wrapped in an NVTX
 * range named after the op, and eager launches go through recap__after_launch so
 * RECAP_LAUNCH_BLOCKING names the op that faulted.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/pipeline.h"
#include "runtime/backend.h"
#include "runtime/debug.h"
#include "runtime/error.h"

static recap_stream *stream_of(const recap_pipeline *p, int s) {
  return s == 0 ? p->stream : p->side[s - 1];
}

recap_status recap__exec_create_streams(recap_pipeline *p) {
  const recap__plan *plan = p->model->plan;
  p->num_streams = plan->num_streams > 0 ? plan->num_streams : 1;
  size_t n = (size_t)p->num_streams, ops = plan->num_ops ? plan->num_ops : 1;
  p->side = calloc(n, sizeof *p->side);
  p->joins = calloc(n, sizeof *p->joins);
  p->op_done = calloc(ops, sizeof *p->op_done);
  if (!p->side || !p->joins || !p->op_done)
    return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for the pipeline's streams");
  int priority = recap_stream_priority(p->stream);
  RECAP_TRY(recap_event_create(p->device, RECAP_EVENT_DEFAULT, &p->fork));
  RECAP_TRY(recap_event_create(p->device, RECAP_EVENT_DEFAULT, &p->done));
  for (int s = 1; s < p->num_streams; ++s) {
    if (plan->stream_last_op[s] < 0) continue; /* declared by no op: never forked */
    RECAP_TRY(recap_stream_create(p->device, priority, RECAP_STREAM_NON_BLOCKING, &p->side[s - 1]));
    RECAP_TRY(recap_event_create(p->device, RECAP_EVENT_DEFAULT, &p->joins[s]));
  }
  for (size_t w = 0; w < plan->num_waits; ++w) {
    int op = plan->waits[w].waited;
    if (!p->op_done[op])
      RECAP_TRY(recap_event_create(p->device, RECAP_EVENT_DEFAULT, &p->op_done[op]));
  }
  return RECAP_OK;
}

void recap__exec_destroy_streams(recap_pipeline *p) {
  if (p->op_done)
    for (size_t o = 0; o < p->model->plan->num_ops; ++o) recap_event_destroy(p->op_done[o]);
  if (p->side && p->joins)
    for (int s = 1; s < p->num_streams; ++s) {
      recap_event_destroy(p->joins[s]);
      recap_stream_destroy(p->side[s - 1]);
    }
  recap_event_destroy(p->fork);
  recap_event_destroy(p->done);
  free(p->op_done);
  free(p->side);
  free(p->joins);
  p->op_done = NULL;
  p->side = NULL;
  p->joins = NULL;
  p->fork = p->done = NULL;
}

recap_status recap__exec_synchronize(recap_pipeline *p) {
  recap_status st = recap_stream_synchronize(p->stream);
  for (int s = 1; s < p->num_streams; ++s) {
    if (!p->side[s - 1]) continue;
    recap_status ss = recap_stream_synchronize(p->side[s - 1]);
    if (st == RECAP_OK) st = ss;
  }
  return st;
}

recap_status recap__exec_set_rows(recap_pipeline *p, int64_t rows) {
  if (!p->rows_device) return RECAP_OK;
  /* rows_host is constant while the pipeline lives, so the copy may complete later. */
  return p->stream->backend->memcpy_async(p->rows_device, &p->rows_host[rows], sizeof(int32_t),
                                          p->stream);
}

/* Launches op o after its waits. *wait is the cursor into plan->waits, which is sorted by
 * waiter, so a run visits each wait once. */
static recap_status launch_op(recap_pipeline *p, size_t bucket, size_t o, bool capturing,
                              size_t *wait, const recap__exec_timing *timing) {
  const recap__ir_op *op = &p->model->irs[bucket]->ops[o];
  const recap__plan *plan = p->model->plan;
  recap_stream *s = stream_of(p, op->stream);
  while (*wait < plan->num_waits && plan->waits[*wait].waiter < (int)o) ++*wait;
  for (; *wait < plan->num_waits && plan->waits[*wait].waiter == (int)o; ++*wait) {
    size_t w = *wait;
    recap_status st = recap_stream_wait_event(s, p->op_done[plan->waits[w].waited]);
    if (st != RECAP_OK)
      return recap__error_context(st, "op '%s': waiting for '%s': ", op->name,
                                  p->model->irs[bucket]->ops[plan->waits[w].waited].name);
  }
  if (!plan->op_is_view[o]) {
    if (timing) RECAP_TRY(recap_event_record(timing->starts[o], s));
    recap_nvtx_range_push(op->name);
    recap_status st = recap__op_launch(&p->calls[bucket * p->num_ops + o], s);
    recap_nvtx_range_pop();
    if (st == RECAP_OK && timing) st = recap_event_record(timing->ends[o], s);
    /* recap__op_launch names the op's kind ("op 'linear': "); the spec's name says which. */
    if (st != RECAP_OK) return recap__error_context(st, "op '%s': ", op->name);
    if (!capturing) RECAP_TRY(recap__after_launch(s, op->name));
  }
  if (p->op_done[o]) {
    recap_status st = recap_event_record(p->op_done[o], s);
    if (st != RECAP_OK) return recap__error_context(st, "op '%s': ", op->name);
  }
  return RECAP_OK;
}

recap_status recap__exec_run(recap_pipeline *p, size_t bucket, recap_graph *graph) {
  return recap__exec_run_timed(p, bucket, graph, NULL);
}

recap_status recap__exec_run_timed(recap_pipeline *p, size_t bucket, recap_graph *graph,
                                   const recap__exec_timing *timing) {
  const recap__plan *plan = p->model->plan;
  char label[160];
  snprintf(label, sizeof label, "%s %s bucket %lld", p->model->spec->name,
           graph ? "capture" : "eager", (long long)p->model->bucket_values[bucket]);
  recap_nvtx_range_push(label);
  recap_status st = RECAP_OK;
  if (p->num_streams > 1) {
    RECAP_TRY_GOTO(st, recap_event_record(p->fork, p->stream), done);
    for (int s = 1; s < p->num_streams; ++s) {
      if (!p->side[s - 1]) continue;
      RECAP_TRY_GOTO(st, recap_stream_wait_event(p->side[s - 1], p->fork), done);
      /* The side stream is now part of the capture: its allocations and draws belong to the
       * graph. */
      if (graph) RECAP_TRY_GOTO(st, recap_graph_capture_join(graph, p->side[s - 1]), done);
    }
  }
  size_t wait = 0;
  for (size_t o = 0; o < plan->num_ops; ++o)
    RECAP_TRY_GOTO(st, launch_op(p, bucket, o, graph != NULL, &wait, timing), done);
  for (int s = 1; s < p->num_streams; ++s) {
    if (!p->side[s - 1]) continue;
    RECAP_TRY_GOTO(st, recap_event_record(p->joins[s], p->side[s - 1]), done);
    RECAP_TRY_GOTO(st, recap_stream_wait_event(p->stream, p->joins[s]), done);
  }
done:
  if (st != RECAP_OK && graph) {
    /* Join what was forked anyway, so that ending the failed capture finds every side
     * stream joined and only the real cause is reported (its message is kept). */
    char *why = strdup(recap_last_error());
    for (int s = 1; s < p->num_streams; ++s)
      if (p->side[s - 1] && recap_event_record(p->joins[s], p->side[s - 1]) == RECAP_OK)
        recap_stream_wait_event(p->stream, p->joins[s]);
    if (why) recap__fail_plain(st, "%s", why);
    free(why);
  }
  recap_nvtx_range_pop();
  return st;
}
