/*
 * profile.c: recap_pipeline_profile, where one eager run's device time goes op by op
 * (include/recap.h). Built on the eager path (exec.c) with an event pair around each launch,
 * on the op's own stream, so multi-stream plans are timed as they run.
 */
#include <stdlib.h>

#include "engine/pipeline.h"
#include "runtime/error.h"

static void destroy_events(recap_event **events, size_t n) {
  if (!events) return;
  for (size_t i = 0; i < n; ++i) recap_event_destroy(events[i]);
  free(events);
}

static recap_status create_events(recap_device device, size_t n, recap_event ***out) {
  *out = calloc(n ? n : 1, sizeof **out);
  if (!*out) return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for profiling events");
  for (size_t i = 0; i < n; ++i)
    RECAP_TRY(recap_event_create(device, RECAP_EVENT_TIMING, &(*out)[i]));
  return RECAP_OK;
}

recap_status recap_pipeline_profile(recap_pipeline *p, int64_t batch, recap_op_profile *out,
                                    size_t capacity, size_t *count) {
  RECAP_CHECK_ARG(p && count && (out || capacity == 0));
  if (batch < 0)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "batch %lld is negative", (long long)batch);
  const recap__model *m = p->model;
  size_t n = p->num_ops;
  *count = n;
  if (capacity < n)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "recap_pipeline_profile: room for %zu ops, the pipeline has %zu", capacity,
                      n);
  size_t b = recap__pipeline_bucket_for(p, batch);
  if (b == m->num_buckets) b = m->num_buckets - 1; /* above the largest: as an oversize run */
  int64_t rows = m->spec->bucket_dim < 0 ? 0 : batch == 0 ? m->bucket_values[b] : batch;
  if (rows > m->bucket_values[b] && m->spec->bucket_dim >= 0) rows = m->bucket_values[b];

  recap__exec_timing timing = {0};
  recap_status st = create_events(p->device, n, &timing.starts);
  if (st == RECAP_OK) st = create_events(p->device, n, &timing.ends);
  /* The untimed run does each op's first-use work (module loads, GEMM algorithm choice). */
  if (st == RECAP_OK) st = recap__exec_set_rows(p, rows);
  if (st == RECAP_OK) st = recap__exec_run(p, b, NULL);
  if (st == RECAP_OK) st = recap__exec_run_timed(p, b, NULL, &timing);
  if (st == RECAP_OK) st = recap__exec_synchronize(p);
  for (size_t o = 0; st == RECAP_OK && o < n; ++o) {
    const recap__ir_op *op = &m->irs[b]->ops[o];
    bool view = m->plan->op_is_view[o];
    float ms = 0;
    if (!view) st = recap_event_elapsed_ms(timing.starts[o], timing.ends[o], &ms);
    out[o] = (recap_op_profile){.name = op->name, .op = op->def->name, .ms = ms, .is_view = view};
  }
  if (st == RECAP_OK) p->stats.eager_runs += 2;
  destroy_events(timing.starts, timing.starts ? n : 0);
  destroy_events(timing.ends, timing.ends ? n : 0);
  return st;
}
