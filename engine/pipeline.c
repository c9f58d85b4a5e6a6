/*
 * pipeline.c: the public pipeline API of include/recap.h ("Pipelines").
 *
 * Creation order, and why: the spec is loaded and checked completely (with the device's
 * capacity for the size checks, and the caller's dim overrides), every bucket's IR is built
 * and the largest is planned BEFORE anything touches the device, so a bad spec allocates
 * nothing. Then the params (once per model), the pipeline's streams, events and buffers.
 *
 * Bucket rows: a tensor whose shape carries the bucketed dim holds, for a run with b real
 * rows, the layout of bucket bk = the smallest bucket >= b (its rows along the bucketed axis
 * first, then zeroed padding rows). When the bucketed axis is the first, every bucket's
 * layout is a prefix of the largest's, which is the usual case (a batch).
 */
#include "engine/pipeline.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/fuse.h"
#include "kernels/expr.h"
#include "runtime/backend.h"
#include "runtime/env.h"
#include "runtime/error.h"
#include "runtime/struct_size.h"

enum { DEFAULT_MAX_RECAPTURES = 16 };

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* ---- the model: spec, IRs, plan, params ---- */

void recap__model_retain(recap__model *m) {
  atomic_fetch_add(&m->refs, 1);
}

static void model_free(recap__model *m) {
  recap__unbind_params(m);
  recap__model *source = m->param_source;
  recap__model_free_loaded(m);
  recap__model_release(source);
}

void recap__model_release(recap__model *m) {
  if (m && atomic_fetch_sub(&m->refs, 1) == 1) model_free(m);
}

/* ---- state sets (share.h) ---- */

/* A set for the tensors of `p`'s model (all NULL), one reference, retaining the model (whose
 * param stream allocates the blocks) and `source` (the shared pipeline's set, or NULL). */
static recap_status state_set_create(recap_pipeline *p, recap__state_set *source) {
  const recap__ir *ir = p->model->irs[p->model->num_buckets - 1];
  recap__state_set *set = calloc(1, sizeof *set);
  void **blocks = calloc(ir->num_tensors ? ir->num_tensors : 1, sizeof *blocks);
  if (!set || !blocks) {
    free(set);
    free(blocks);
    return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for a pipeline's state table");
  }
  atomic_init(&set->refs, 1);
  recap__model_retain(p->model);
  set->model = p->model;
  set->blocks = blocks;
  set->count = ir->num_tensors;
  if (source) atomic_fetch_add(&source->refs, 1);
  set->source = source;
  p->state = set;
  return RECAP_OK;
}

/* Drops a reference; the last frees the blocks (every pipeline using them has synchronized its
 * streams before letting go) and releases the model and the source set. */
static void state_set_release(recap__state_set *set) {
  while (set && atomic_fetch_sub(&set->refs, 1) == 1) {
    for (size_t t = 0; t < set->count; ++t)
      if (set->blocks[t]) recap_free(set->blocks[t]);
    free(set->blocks);
    recap__model_release(set->model);
    recap__state_set *source = set->source;
    free(set);
    set = source; /* a chain of sharers is released without recursion */
  }
}

/* ---- pipelines ---- */

static bool env_disables_graphs(void) {
  return recap__env_bool("RECAP_DISABLE_GRAPHS", 0) == 1;
}

/* A new pipeline over `m` (which it takes a reference of) with `o`'s settings. */
static recap_status pipeline_new(recap__model *m, const recap_pipeline_options *o, bool bind_params,
                                 recap_pipeline **out) {
  recap_pipeline *p = calloc(1, sizeof *p);
  if (!p) return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for a pipeline");
  recap__model_retain(m);
  p->model = m;
  p->device = m->device;
  p->mode = o->override_mode ? o->mode : RECAP_MODE_GRAPH;
  if (env_disables_graphs()) p->mode = RECAP_MODE_EAGER;
  p->capture_mode = o->capture_mode_set ? o->capture_mode : RECAP_CAPTURE_MODE_THREAD_LOCAL;
  p->warmup = o->warmup_set || o->warmup > 0 ? o->warmup : m->spec->warmup;
  p->max_recaptures = o->max_recaptures > 0 ? o->max_recaptures : DEFAULT_MAX_RECAPTURES;
  p->oversize = o->oversize;
  recap_status st = RECAP_OK;
  if (o->stream) {
    recap_device sd = recap_stream_device(o->stream);
    if (sd.backend != p->device.backend || sd.index != p->device.index) {
      st = RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "the options' stream belongs to %s:%d, the pipeline to %s:%d",
                      recap_backend_name(sd.backend), sd.index,
                      recap_backend_name(p->device.backend), p->device.index);
      goto fail;
    }
    p->stream = o->stream;
  } else {
    RECAP_TRY_GOTO(st, recap_stream_create(p->device, 0, RECAP_STREAM_NON_BLOCKING, &p->stream),
                   fail);
    p->owns_stream = true;
  }
  if (o->share && (o->share->device.backend != p->device.backend ||
                   o->share->device.index != p->device.index)) {
    st = RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                    "pipeline '%s' is on %s:%d, the pipeline it shares params and state with "
                    "('%s') on %s:%d",
                    m->spec->name, recap_backend_name(p->device.backend), p->device.index,
                    o->share->model->spec->name, recap_backend_name(o->share->device.backend),
                    o->share->device.index);
    goto fail;
  }
  if (bind_params) {
    double t0 = now_ms();
    if (o->share) {
      recap__model_retain(o->share->model);
      m->param_source = o->share->model;
    }
    RECAP_TRY_GOTO(st, recap__bind_params(m, o->share), fail);
    p->stats.bind_ms += now_ms() - t0;
  }
  double t0 = now_ms();
  p->graphs = calloc(m->num_buckets, sizeof *p->graphs);
  if (!p->graphs) {
    st = RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for the pipeline's graphs");
    goto fail;
  }
  RECAP_TRY_GOTO(st, recap__exec_create_streams(p), fail);
  RECAP_TRY_GOTO(st, state_set_create(p, o->share ? o->share->state : NULL), fail);
  RECAP_TRY_GOTO(st, recap__bind_pipeline(p, o->share), fail);
  /* Generated kernels (expr ops, fused chains) are compiled and loaded now: never inside a
   * capture, and a missing NVRTC is reported at load, naming the op. */
  for (size_t c = 0; c < m->num_buckets * p->num_ops; ++c)
    RECAP_TRY_GOTO(st, recap__expr_prepare_call(&p->calls[c], p->device), fail);
  RECAP_TRY_GOTO(st, recap__exec_synchronize(p), fail);
  p->stats.bind_ms += now_ms() - t0;
  *out = p;
  return RECAP_OK;
fail:
  recap_pipeline_destroy(p);
  return st;
}

/* The caller's options (NULL: defaults) in this library's layout (runtime/struct_size.h). */
static recap_status read_options(const recap_pipeline_options *options, recap_pipeline_options *o) {
  if (!options) {
    *o = (recap_pipeline_options)RECAP_PIPELINE_OPTIONS_INIT;
    return RECAP_OK;
  }
  return recap__struct_read(options, sizeof *o, o, "RECAP_PIPELINE_OPTIONS_INIT");
}

/* Each field by name: a caller sees which one it set wrongly. `mode` counts only with
 * override_mode, as recap.h says. */
static recap_status check_options(const recap_pipeline_options *o) {
  if (o->override_mode && o->mode != RECAP_MODE_GRAPH && o->mode != RECAP_MODE_EAGER)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "recap_pipeline_options.mode = %d: RECAP_MODE_GRAPH or RECAP_MODE_EAGER",
                      (int)o->mode);
  if (o->oversize != RECAP_OVERSIZE_EAGER && o->oversize != RECAP_OVERSIZE_FAIL)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "recap_pipeline_options.oversize = %d: RECAP_OVERSIZE_EAGER or "
                      "RECAP_OVERSIZE_FAIL",
                      (int)o->oversize);
  if (o->warmup < 0)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "recap_pipeline_options.warmup = %d is negative", (int)o->warmup);
  if (o->max_recaptures < 0)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "recap_pipeline_options.max_recaptures = %d is negative",
                      (int)o->max_recaptures);
  return RECAP_OK;
}

recap_status recap__pipeline_create_model(recap__model *m, const recap_pipeline_options *options,
                                          recap_pipeline **out) {
  RECAP_CHECK_ARG(m && out);
  recap_pipeline_options o;
  RECAP_TRY(read_options(options, &o));
  RECAP_TRY(check_options(&o));
  /* The spec's seed drives its random ops, as torch.manual_seed at the top of a script. */
  if (m->has_random) RECAP_TRY(recap_rng_manual_seed(m->device, m->spec->seed));
  RECAP_TRY(pipeline_new(m, &o, true, out));
  (*out)->stats.load_ms = m->load_ms;
  return RECAP_OK;
}

static recap_status create(const char *path, const char *yaml, size_t length, const char *name,
                           const recap_pipeline_options *options, recap_pipeline **out) {
  RECAP_CHECK_ARG(out);
  recap_pipeline_options o;
  RECAP_TRY(read_options(options, &o));
  RECAP_TRY(check_options(&o));
  /* A pipeline sharing another's params and state runs on its device unless told otherwise
   * (pipeline_new refuses two different devices). */
  bool device_given = o.override_device != 0 || o.share;
  recap__load_options lo = {
      .spec = {.base_dir = o.base_dir, .dims = o.dims, .entry = o.entry},
      .device = o.override_device || !o.share ? o.device : o.share->device,
      .device_given = device_given,
      .capacity = RECAP__CAPACITY_REQUIRED,
      .no_fusion = o.no_fusion != 0,
  };
  recap__model *m = NULL;
  RECAP_TRY(path ? recap__load_file(path, &lo, &m, NULL)
                 : recap__load_string(yaml, length, name, &lo, &m, NULL));
  recap_status st = recap__pipeline_create_model(m, &o, out);
  recap__model_release(m); /* the pipeline holds its own reference */
  return st;
}

recap_status recap_pipeline_create_file(const char *path, const recap_pipeline_options *options,
                                        recap_pipeline **out) {
  RECAP_CHECK_ARG(path);
  return create(path, NULL, 0, NULL, options, out);
}

recap_status recap_pipeline_create_string(const char *yaml, size_t length, const char *name,
                                          const recap_pipeline_options *options,
                                          recap_pipeline **out) {
  RECAP_CHECK_ARG(yaml);
  return create(NULL, yaml, length, name, options, out);
}

recap_status recap_pipeline_clone(recap_pipeline *source, const recap_pipeline_options *options,
                                  recap_pipeline **out) {
  RECAP_CHECK_ARG(source && out);
  recap_pipeline_options o;
  RECAP_TRY(read_options(options, &o));
  if (o.override_device &&
      (o.device.backend != source->device.backend || o.device.index != source->device.index))
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "a clone shares its source's params and cannot change the device");
  RECAP_TRY(check_options(&o));
  return pipeline_new(source->model, &o, false, out);
}

recap_status recap_pipeline_destroy(recap_pipeline *p) {
  if (!p) return RECAP_OK;
  if (p->stream && recap_stream_is_capturing(p->stream))
    return RECAP_FAIL(RECAP_STATUS_BUSY, "the pipeline's stream is capturing");
  recap_status st = RECAP_OK;
  /* The wait's failure (a device fault earlier) is what destroy reports; the releases below
   * make calls of their own that would overwrite its message. */
  char why[512] = "";
  if (p->stream) {
    st = recap_stream_synchronize(p->stream);
    if (st != RECAP_OK) snprintf(why, sizeof why, "%s", recap_last_error());
    if (p->side)
      for (int s = 1; s < p->num_streams; ++s)
        if (p->side[s - 1]) recap_stream_synchronize(p->side[s - 1]);
  }
  recap__graph_destroy_all(p);
  free(p->graphs);
  recap__unbind_pipeline(p);
  state_set_release(p->state);
  recap__exec_destroy_streams(p);
  if (p->owns_stream) recap_stream_destroy(p->stream);
  recap__model_release(p->model);
  free(p);
  if (st != RECAP_OK)
    return RECAP_FAIL(st,
                      "the pipeline is destroyed and its memory released, but waiting for its "
                      "work failed: %s",
                      why);
  return RECAP_OK;
}

recap_status recap_pipeline_capture(recap_pipeline *p) {
  RECAP_CHECK_ARG(p);
  return recap__graph_capture_all(p);
}

recap_status recap_pipeline_run_async(recap_pipeline *p, int64_t batch, recap_event **done) {
  RECAP_CHECK_ARG(p);
  RECAP_TRY(recap__graph_run(p, batch, false));
  RECAP_TRY(recap_event_record(p->done, p->stream));
  if (done) *done = p->done;
  return RECAP_OK;
}

recap_status recap_pipeline_run(recap_pipeline *p, int64_t batch) {
  RECAP_CHECK_ARG(p);
  RECAP_TRY(recap__graph_run(p, batch, false));
  return recap_stream_synchronize(p->stream);
}

recap_status recap_pipeline_run_eager(recap_pipeline *p, int64_t batch) {
  RECAP_CHECK_ARG(p);
  RECAP_TRY(recap__graph_run(p, batch, true));
  return recap_stream_synchronize(p->stream);
}

/* ---- tensors ---- */

static recap_status find(recap_pipeline *p, const char *name, int *index) {
  RECAP_CHECK_ARG(p && name);
  const recap__ir *ir = p->model->irs[p->model->num_buckets - 1];
  int t = recap__ir_find_tensor(ir, name);
  if (t < 0)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "pipeline '%s' has no tensor '%s'",
                      p->model->spec->name, name);
  if (ir->tensors[t].role == RECAP_ROLE_INTERMEDIATE && !ir->tensors[t].is_output)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "tensor '%s' is an intermediate: its memory is reused within a run "
                      "(list it in outputs to read it)",
                      name);
  *index = t;
  return RECAP_OK;
}

/* Tensor t's memory (an output may be a view of a state, e.g. kv_append's cache). */
static void *memory_of(const recap_pipeline *p, int t) {
  return p->views[(p->model->num_buckets - 1) * p->num_tensors + (size_t)t].data;
}

recap_status recap_pipeline_tensor(recap_pipeline *p, const char *name, recap_tensor *out) {
  int t;
  RECAP_TRY(find(p, name, &t));
  RECAP_CHECK_ARG(out);
  *out = p->views[(p->model->num_buckets - 1) * p->num_tensors + (size_t)t];
  return RECAP_OK;
}

/* Where `rows` rows of tensor t live: the bucket's layout (see the top of this file). */
typedef struct {
  size_t outer;      /* blocks before the bucketed axis */
  size_t src_stride; /* bytes of one block in the host buffer: rows * inner */
  size_t dst_stride; /* bytes of one block in the device buffer: bucket rows * inner */
  size_t copy;       /* bytes copied per block */
} row_layout;

static recap_status layout_for(recap_pipeline *p, int t, size_t bytes, int64_t rows,
                               row_layout *out) {
  const recap__model *m = p->model;
  const recap__ir_tensor *tt = &m->irs[m->num_buckets - 1]->tensors[t];
  if (rows < 0) return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "rows is negative");
  if (rows == 0 || tt->bucket_axis < 0) {
    /* A spec with one bucket has no bucketed axis: a batch is then the whole tensor, and a
     * caller that counts its rows (as it would with buckets) gives the whole tensor's bytes. */
    bool whole_batch = m->num_buckets == 1 && bytes == tt->bytes;
    if (rows != 0 && !whole_batch)
      return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                        m->num_buckets == 1
                            ? "tensor '%s': the spec has one bucket, so rows count the whole "
                              "tensor: pass its bytes, or rows = 0"
                            : "tensor '%s' does not carry the bucketed dim: pass rows = 0",
                        tt->name);
    if (bytes != tt->bytes)
      return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "tensor '%s' has %llu bytes, %zu given",
                        tt->name, (unsigned long long)tt->bytes, bytes);
    *out = (row_layout){1, bytes, bytes, bytes};
    return RECAP_OK;
  }
  int64_t most = m->bucket_values[m->num_buckets - 1];
  if (rows > most)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "%lld rows of tensor '%s' exceed the largest bucket (%lld)", (long long)rows,
                      tt->name, (long long)most);
  size_t bk = recap__pipeline_bucket_for(p, rows);
  const recap__ir_tensor *bt = &m->irs[bk]->tensors[t];
  int a = tt->bucket_axis;
  if ((tt->bucket_axes & (tt->bucket_axes - 1)) != 0 || bt->shape[a] != m->bucket_values[bk])
    return RECAP_FAIL(RECAP_STATUS_NOT_SUPPORTED,
                      "tensor '%s' does not hold the bucketed dim as one axis of its rows; copy "
                      "it whole (rows = 0)",
                      tt->name);
  size_t outer = 1, inner = recap_dtype_size(bt->dtype);
  for (int d = 0; d < a; ++d) outer *= (size_t)bt->shape[d];
  for (int d = a + 1; d < bt->ndim; ++d) inner *= (size_t)bt->shape[d];
  if (bytes != (size_t)rows * outer * inner)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "%lld rows of tensor '%s' are %zu bytes, %zu given", (long long)rows,
                      tt->name, (size_t)rows * outer * inner, bytes);
  *out =
      (row_layout){outer, (size_t)rows * inner, (size_t)bt->shape[a] * inner, (size_t)rows * inner};
  return RECAP_OK;
}

recap_status recap_pipeline_copy_in(recap_pipeline *p, const char *name, const void *host,
                                    size_t bytes, int64_t rows) {
  int t;
  RECAP_TRY(find(p, name, &t));
  RECAP_CHECK_ARG(host || bytes == 0);
  const recap__ir_tensor *tt = &p->model->irs[p->model->num_buckets - 1]->tensors[t];
  if (tt->role != RECAP_ROLE_INPUT && tt->role != RECAP_ROLE_STATE && tt->role != RECAP_ROLE_SCALAR)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "tensor '%s' is not an input, state or scalar",
                      name);
  row_layout l;
  RECAP_TRY(layout_for(p, t, bytes, rows, &l));
  const recap__backend *be = p->stream->backend;
  void *dst = memory_of(p, t);
  /* The caller's (usually pageable) buffer is copied into pinned staging memory, from which
   * the device copy runs truly asynchronously: the caller may reuse its buffer at once, and
   * copy_in returns without waiting for the work already queued on the stream (a replay).
   * The staging block is reused only once the stream has passed the copy. */
  void *staging = NULL;
  recap_status st = recap_host_malloc(bytes, &staging);
  if (st != RECAP_OK) return st;
  if (bytes) memcpy(staging, host, bytes);
  recap__graph_exclusive_begin();
  /* Padding rows hold zeros, so a bucket's padding computes on defined values. */
  if (l.copy != (size_t)tt->bytes)
    RECAP_TRY_GOTO(st, be->memset_async(dst, 0, (size_t)tt->bytes, p->stream), done);
  for (size_t o = 0; o < l.outer; ++o)
    RECAP_TRY_GOTO(st,
                   be->memcpy_async((char *)dst + o * l.dst_stride,
                                    (const char *)staging + o * l.src_stride, l.copy, p->stream),
                   done);
done:
  /* Recorded even after a failed copy: an earlier block of it may still be queued. */
  if (staging) {
    recap_status rs = recap_host_record_stream(staging, p->stream);
    if (st == RECAP_OK) st = rs;
  }
  recap__graph_exclusive_end();
  recap_host_free(staging);
  return st;
}

recap_status recap_pipeline_copy_out(recap_pipeline *p, const char *name, void *host, size_t bytes,
                                     int64_t rows) {
  int t;
  RECAP_TRY(find(p, name, &t));
  RECAP_CHECK_ARG(host || bytes == 0);
  row_layout l;
  RECAP_TRY(layout_for(p, t, bytes, rows, &l));
  const recap__backend *be = p->stream->backend;
  recap_status st = RECAP_OK;
  recap__graph_exclusive_begin();
  for (size_t o = 0; o < l.outer; ++o)
    RECAP_TRY_GOTO(
        st,
        be->memcpy_async((char *)host + o * l.src_stride,
                         (const char *)memory_of(p, t) + o * l.dst_stride, l.copy, p->stream),
        done);
  st = recap_stream_synchronize(p->stream);
done:
  recap__graph_exclusive_end();
  return st;
}

recap_status recap_pipeline_rebind(recap_pipeline *p, const char *name, void *device_memory) {
  RECAP_CHECK_ARG(p && name);
  /* An op's output is refused for what it is, listed in outputs or not (find's advice to list
   * an intermediate in outputs is for reading it, and would lead nowhere here). */
  const recap__ir *ir = p->model->irs[p->model->num_buckets - 1];
  int found = recap__ir_find_tensor(ir, name);
  if (found >= 0 && ir->tensors[found].role == RECAP_ROLE_INTERMEDIATE)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "tensor '%s' is an op's output; only inputs, params, states and scalars "
                      "can be rebound",
                      name);
  int t;
  RECAP_TRY(find(p, name, &t));
  RECAP_CHECK_ARG(device_memory);
  p->data[t] = device_memory;
  recap__bind_views(p);
  return recap__graph_rebind(p);
}

recap_status recap_pipeline_stats_get(recap_pipeline *p, recap_pipeline_stats *out) {
  RECAP_CHECK_ARG(p && out);
  recap_pipeline_stats s = p->stats;
  s.arena_bytes = p->model->plan->arena_bytes;
  s.param_bytes = p->model->param_bytes;
  s.num_buckets = p->model->num_buckets;
  s.num_ops = p->num_ops;
  recap_pool_stats ps;
  if (p->has_pool && recap_pool_stats_get(p->device, p->pool, &ps) == RECAP_OK)
    s.pool_reserved_bytes = ps.reserved_bytes;
  *out = s;
  return RECAP_OK;
}

recap_stream *recap_pipeline_stream(recap_pipeline *p) {
  return p ? p->stream : NULL;
}
