/*
 * graph_mode.c: warmup, one captured graph per bucket, replay, rebind (engine/pipeline.h).
 *
 * Warmup runs every bucket eagerly first (cuBLAS handles, workspaces and algorithm choice
 * happen there, never inside a capture: cuBLASLt heuristics may synchronize), with the
 * state tensors and the RNG put back afterwards so that capturing is invisible to the
 * caller. Then each bucket is captured, LARGEST first, into its own graph, all sharing the
 * pipeline's private pool (vLLM and SGLang do the same: the largest capture sizes the pool
 * and the smaller ones reuse its memory). A batch of b rows replays the smallest bucket
 * >= b; kv_append reads the real row count from a device scalar written before each run, so
 * padding rows never write state and no graph needs updating.
 *
 * Failures: a capture that fails is ended and discarded by the graph layer; the pipeline
 * then drops every graph and runs eagerly from then on, and says so on stderr. A rebind
 * re-captures every graph, and the graph layer applies the new capture to the existing
 * executable in place; past max_recaptures the graphs are dropped and runs go eager.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/pipeline.h"
#include "kernels/op.h"
#include "runtime/backend.h"
#include "runtime/error.h"

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

size_t recap__pipeline_bucket_for(const recap_pipeline *p, int64_t batch) {
  const recap__model *m = p->model;
  if (m->spec->bucket_dim < 0 || batch == 0) return m->num_buckets - 1;
  for (size_t b = 0; b < m->num_buckets; ++b)
    if (m->bucket_values[b] >= batch) return b;
  return m->num_buckets;
}

/* Adds what a graph's counters did since `before` to the pipeline's. */
static void count_graph(recap_pipeline *p, const recap_graph_info *before,
                        const recap_graph_info *after) {
  p->stats.captures += after->captures - before->captures;
  p->stats.updates += after->updates - before->updates;
  p->stats.instantiations += after->instantiations - before->instantiations;
}

void recap__graph_destroy_all(recap_pipeline *p) {
  if (!p->graphs) return;
  for (size_t b = 0; b < p->model->num_buckets; ++b) {
    recap_graph_destroy(p->graphs[b]);
    p->graphs[b] = NULL;
  }
  p->captured = false;
}

/* Copies of the state and input tensors, so warmup runs leave no trace in them. */
typedef struct {
  void **copies;
  size_t count;
} state_backup;

/* Saves every state tensor and every input, then zeroes the inputs: warmup runs each bucket
 * on zeroed inputs, not on what the caller last wrote for one batch size (the step metadata a
 * server wrote for 8 sequences is not valid for bucket 1; all-zero metadata describes no
 * sequence, so the paged ops write nothing), and ops that write their inputs in place
 * (decode_advance) leave nothing behind. */
/* Whether a warmup run on zeroed inputs may write state tensor t: some op writes it in place
 * (an output that is an input, reached directly or through a view of it) without promising to
 * write nothing when its inputs are zero. A paged KV pool, written only by paged_kv_write or
 * paged_rope_kv_write, needs no copy then, which matters: it can be most of the device's
 * memory. */
static bool warmup_may_write(const recap__model *m, const recap__ir *ir, size_t t) {
  for (size_t j = 0; j < ir->num_ops; ++j) {
    const recap__ir_op *op = &ir->ops[j];
    if (op->def->zero_meta_writes_nothing) continue;
    for (int o = 0; o < op->num_outputs; ++o) {
      const int aliased = recap__op_output_input(op->def, o);
      if (aliased < 0 || aliased >= op->num_inputs) continue;
      int x = op->inputs[aliased];
      const recap__plan_tensor *pt = &m->plan->tensors[x];
      if (pt->kind == RECAP_PLAN_VIEW && pt->shares_with >= 0) x = pt->shares_with;
      if ((size_t)x == t) return true;
    }
  }
  return false;
}

static recap_status backup_states(recap_pipeline *p, state_backup *bk) {
  const recap__ir *ir = p->model->irs[p->model->num_buckets - 1];
  bk->count = ir->num_tensors;
  bk->copies = calloc(bk->count ? bk->count : 1, sizeof *bk->copies);
  if (!bk->copies) return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for state backups");
  for (size_t t = 0; t < ir->num_tensors; ++t) {
    recap_tensor_role role = ir->tensors[t].role;
    if ((role != RECAP_ROLE_STATE && role != RECAP_ROLE_INPUT) || ir->tensors[t].bytes == 0)
      continue;
    if (role == RECAP_ROLE_STATE && !warmup_may_write(p->model, ir, t)) continue;
    size_t bytes = (size_t)ir->tensors[t].bytes;
    RECAP_TRY(recap_malloc(p->device, bytes, p->stream, &bk->copies[t]));
    RECAP_TRY(p->stream->backend->memcpy_async(bk->copies[t], p->data[t], bytes, p->stream));
    if (role == RECAP_ROLE_INPUT)
      RECAP_TRY(p->stream->backend->memset_async(p->data[t], 0, bytes, p->stream));
  }
  return RECAP_OK;
}

/* Puts the states and inputs back and frees the copies; stream-ordered, so the copies are
 * reused only after the copy back. */
static recap_status restore_states(recap_pipeline *p, state_backup *bk) {
  const recap__ir *ir = p->model->irs[p->model->num_buckets - 1];
  recap_status st = RECAP_OK;
  for (size_t t = 0; bk->copies && t < bk->count; ++t) {
    if (!bk->copies[t]) continue;
    if (st == RECAP_OK)
      st = p->stream->backend->memcpy_async(p->data[t], bk->copies[t], (size_t)ir->tensors[t].bytes,
                                            p->stream);
    recap_free(bk->copies[t]);
  }
  free(bk->copies);
  bk->copies = NULL;
  return st;
}

/* Warmups and captures of different pipelines run on different threads at once. A warmup does
 * the first-time work that CUDA and cuBLAS do lazily (loading kernel modules, creating
 * handles, choosing algorithms, growing workspaces), and some of it synchronizes the context,
 * which invalidates a capture under way on another thread (seen on the H100 as
 * CUBLAS_STATUS_EXECUTION_FAILED in a concurrent capture). Copies between host and device
 * memory may do the same (pageable memory goes through the driver's staging buffers). So
 * captures share this lock and still run concurrently, while a warmup or a host copy holds it
 * alone. Replays never take it. */
static pthread_rwlock_t warmup_lock = PTHREAD_RWLOCK_INITIALIZER;

void recap__graph_exclusive_begin(void) { pthread_rwlock_wrlock(&warmup_lock); }

void recap__graph_exclusive_end(void) { pthread_rwlock_unlock(&warmup_lock); }

static recap_status warmup_locked(recap_pipeline *p);

recap_status recap__graph_warmup(recap_pipeline *p) {
  pthread_rwlock_wrlock(&warmup_lock);
  recap_status st = warmup_locked(p);
  pthread_rwlock_unlock(&warmup_lock);
  return st;
}

static recap_status warmup_locked(recap_pipeline *p) {
  const recap__model *m = p->model;
  double t0 = now_ms();
  /* Each launched op's first-time work (GEMM handles and algorithm choice), for every
   * bucket's shapes on the streams they use; views launch nothing. */
  for (size_t b = 0; b < m->num_buckets; ++b)
    for (size_t o = 0; o < p->num_ops; ++o) {
      if (m->plan->op_is_view[o]) continue;
      const recap__ir_op *op = &m->irs[b]->ops[o];
      recap_stream *s = op->stream == 0 ? p->stream : p->side[op->stream - 1];
      recap_status st = recap__op_prepare(&p->calls[b * p->num_ops + o], s);
      /* recap__op_prepare names the op's kind; the spec's name says which. */
      if (st != RECAP_OK) return recap__error_context(st, "op '%s': ", op->name);
    }
  recap_rng_state rng;
  if (m->has_random) RECAP_TRY(recap_rng_get_state(p->device, &rng));
  state_backup bk = {0};
  recap_status st = backup_states(p, &bk);
  for (size_t b = 0; st == RECAP_OK && b < m->num_buckets; ++b)
    for (int i = 0; st == RECAP_OK && i < p->warmup; ++i) {
      st = recap__exec_set_rows(p, m->bucket_values[b]);
      if (st == RECAP_OK) st = recap__exec_run(p, b, NULL);
    }
  /* Restored on failure too: a warmup that fails after a kv_append has written rows of the
   * state (a padding row of the largest bucket, say) must not leave them for later runs. A
   * failed run may not have joined its side streams, so they are waited for first. */
  if (st != RECAP_OK) recap__exec_synchronize(p);
  recap_status fin = restore_states(p, &bk);
  if (st == RECAP_OK) st = fin;
  if (st == RECAP_OK) st = recap__exec_synchronize(p);
  if (m->has_random) {
    recap_status rs = recap_rng_set_state(p->device, &rng);
    if (st == RECAP_OK) st = rs;
  }
  p->stats.warmup_ms += now_ms() - t0;
  return st;
}

/* Captures bucket b into its graph (a new one, or over the existing executable). */
static recap_status capture_bucket(recap_pipeline *p, size_t b) {
  if (!p->graphs[b]) RECAP_TRY(recap_graph_create(&p->graphs[b]));
  recap_graph *g = p->graphs[b];
  recap_graph_info before, after;
  RECAP_TRY(recap_graph_info_get(g, &before));
  double t0 = now_ms();
  pthread_rwlock_rdlock(&warmup_lock);
  recap_status st = recap_graph_capture_begin(g, p->stream, p->has_pool ? &p->pool : NULL,
                                              p->capture_mode);
  if (st != RECAP_OK) {
    pthread_rwlock_unlock(&warmup_lock);
    return st;
  }
  st = recap__exec_run(p, b, g);
  double t1 = now_ms();
  /* Ending also discards a capture that a launch broke; keep the launch's message, which
   * names the op, over the end's. */
  char *why = st != RECAP_OK ? strdup(recap_last_error()) : NULL;
  recap_status end = recap_graph_capture_end(g);
  pthread_rwlock_unlock(&warmup_lock);
  p->stats.capture_ms += t1 - t0;
  p->stats.instantiate_ms += now_ms() - t1;
  if (st != RECAP_OK) {
    if (why) recap__fail_plain(st, "%s", why);
    free(why);
    /* A capture that ended "successfully" around a failed launch holds a partial graph. */
    if (end == RECAP_OK) recap_graph_reset(g);
    return st;
  }
  RECAP_TRY(end);
  RECAP_TRY(recap_graph_info_get(g, &after));
  count_graph(p, &before, &after);
  return RECAP_OK;
}

/* Graph mode is over for this pipeline: every run from now on is eager. */
static void give_up_graphs(recap_pipeline *p, recap_status st, const char *what) {
  recap__exec_synchronize(p);
  recap__graph_destroy_all(p);
  p->graphs_failed = true;
  fprintf(stderr, "recap: warning: pipeline '%s': %s failed (%s: %s); running eagerly\n",
          p->model->spec->name, what, recap_status_name(st), recap_last_error());
}

recap_status recap__graph_capture_buckets(recap_pipeline *p) {
  for (size_t i = p->model->num_buckets; i-- > 0;) {
    recap_status st = capture_bucket(p, i);
    if (st != RECAP_OK) {
      st = recap__error_context(st, "capturing bucket %lld of '%s': ",
                                (long long)p->model->bucket_values[i], p->model->spec->name);
      p->stats.capture_failures++;
      give_up_graphs(p, st, "graph capture");
      return st;
    }
  }
  p->captured = true;
  return RECAP_OK;
}

recap_status recap__graph_capture_all(recap_pipeline *p) {
  if (p->mode != RECAP_MODE_GRAPH || p->graphs_failed || p->captured) return RECAP_OK;
  recap_status st = recap__graph_warmup(p);
  if (st != RECAP_OK) return recap__error_context(st, "warmup of '%s': ", p->model->spec->name);
  return recap__graph_capture_buckets(p);
}

recap_status recap__graph_run(recap_pipeline *p, int64_t batch, bool eager) {
  const recap__model *m = p->model;
  if (batch < 0)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "batch %lld is negative", (long long)batch);
  size_t b = recap__pipeline_bucket_for(p, batch);
  bool oversize = b == m->num_buckets;
  if (oversize) {
    if (p->oversize == RECAP_OVERSIZE_FAIL)
      return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                        "batch %lld is above the largest bucket (%lld) of '%s'", (long long)batch,
                        (long long)m->bucket_values[m->num_buckets - 1], m->spec->name);
    b = m->num_buckets - 1;
  }
  int64_t rows = m->spec->bucket_dim < 0 ? 0 : batch == 0 || oversize ? m->bucket_values[b] : batch;

  bool graph = !eager && p->mode == RECAP_MODE_GRAPH && !p->graphs_failed && !oversize;
  if (graph && !p->captured) {
    recap_status st = recap__graph_capture_all(p);
    /* A failed capture leaves graph mode off: this run, and the following ones, run eagerly
     * (give_up_graphs has said why on stderr). */
    if (st != RECAP_OK && !p->graphs_failed) return st;
    graph = !p->graphs_failed;
  }
  RECAP_TRY(recap__exec_set_rows(p, rows));
  if (graph) {
    char label[160];
    snprintf(label, sizeof label, "%s replay bucket %lld", m->spec->name,
             (long long)m->bucket_values[b]);
    recap_nvtx_range_push(label);
    recap_status st = recap_graph_replay(p->graphs[b], p->stream);
    recap_nvtx_range_pop();
    RECAP_TRY(st);
    p->stats.replays++;
    return RECAP_OK;
  }
  RECAP_TRY(recap__exec_run(p, b, NULL));
  p->stats.eager_runs++;
  if (oversize) p->stats.oversize_eager++;
  return RECAP_OK;
}

recap_status recap__graph_rebind(recap_pipeline *p) {
  if (!p->captured) return RECAP_OK; /* the first capture will see the new memory */
  if (p->recaptures >= p->max_recaptures) {
    p->stats.recaptures_refused++;
    fprintf(stderr,
            "recap: warning: pipeline '%s': rebind past max_recaptures (%d); graphs dropped, "
            "running eagerly\n",
            p->model->spec->name, p->max_recaptures);
    RECAP_TRY(recap__exec_synchronize(p));
    recap__graph_destroy_all(p);
    p->graphs_failed = true;
    return RECAP_OK;
  }
  p->recaptures++;
  p->captured = false;
  return recap__graph_capture_buckets(p);
}
