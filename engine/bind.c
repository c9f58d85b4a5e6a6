/*
 * bind.c: gives every tensor of a pipeline its memory (engine/pipeline.h).
 *
 * Params live in one block per model (carved at RECAP_PLAN_ALIGNMENT offsets, ggml's habit of
 * one owner per resource) and are shared by clones. Inputs, state, scalars and outputs get
 * one block each per pipeline, sized for the largest bucket, so every smaller bucket's tensor
 * is a prefix of it. Intermediates live in the arena, which comes from the pipeline's private
 * pool: the graphs captured later allocate from the same pool, so the pool's statistics are
 * the pipeline's whole graph-mode footprint.
 *
 * Random inits (normal, uniform) draw Philox numbers keyed by the spec's seed, at offset =
 * the tensor's index, without touching the device generator: the same spec gives the same
 * params on every backend and in every process, whatever else has drawn before.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "allocator/allocator.h"
#include "engine/pipeline.h"
#include "engine/weight_load.h"
#include "runtime/backend.h"
#include "runtime/error.h"

static size_t align_up(size_t n) {
  return (n + RECAP_PLAN_ALIGNMENT - 1) / RECAP_PLAN_ALIGNMENT * RECAP_PLAN_ALIGNMENT;
}

static const recap__ir *largest_ir(const recap__model *m) {
  return m->irs[m->num_buckets - 1];
}

/* A contiguous view of a tensor with the largest bucket's shape. */
static recap_tensor full_view(const recap__ir_tensor *t, void *data) {
  recap_tensor v = {.data = data, .dtype = t->dtype, .ndim = t->ndim};
  for (int d = 0; d < t->ndim; ++d) v.shape[d] = t->shape[d];
  recap__tensor_set_contiguous(&v);
  return v;
}

/* Prepends "FILE:LINE:COL: error: <what> tensor 'name': " to a failure about tensor t at pos
 * in its spec, as the loader writes its errors: a bad weights file or a tensor too large to
 * allocate is then found in the spec, not only by its name. */
static recap_status tensor_failure(recap_status st, const recap__ir_tensor *t, recap__src_pos pos,
                                   const char *what) {
  if (pos.file && pos.line > 0) {
    char head[1024];
    recap__src_pos_head(pos, head, sizeof head);
    return recap__error_context(st, "%s%s tensor '%s': ", head, what, t->name);
  }
  return recap__error_context(st, "%s tensor '%s': ", what, t->name);
}

/* ---- initial contents ---- */

static recap_status run_host_call(void *args) {
  const recap__op_call *call = args;
  return call->def->run_host(call);
}

/* Launches a random op with an explicit Philox (seed, offset) instead of the device
 * generator's, as recap__op_launch would otherwise (it takes the next offset). */
static recap_status launch_seeded(recap__op_call *call, recap_stream *stream) {
  if (stream->backend->kind == RECAP_BACKEND_HOST)
    return stream->backend->launch_kernel(stream, run_host_call, call, sizeof *call);
  if (!call->def->launch_cuda)
    return RECAP_FAIL(RECAP_STATUS_NOT_SUPPORTED, "op %s has no CUDA implementation in this build",
                      call->def->name);
  return call->def->launch_cuda(call, recap_stream_native(stream));
}

/* Fills `view` by running the fill or random op `op_name` over it. */
static recap_status fill_with_op(const char *op_name, const recap__op_attrs *extra,
                                 recap_tensor view, uint64_t seed, uint64_t offset,
                                 recap_stream *stream) {
  recap__op_call call = {.def = recap__op_find(op_name), .num_inputs = 0};
  if (!call.def) return RECAP_FAIL(RECAP_STATUS_INTERNAL, "op %s is not registered", op_name);
  recap__op_attrs_set_defaults(call.def, &call.attrs);
  call.attrs.value = extra->value;
  call.attrs.mean = extra->mean;
  call.attrs.std = extra->std;
  call.attrs.low = extra->low;
  call.attrs.high = extra->high;
  call.attrs.dtype = view.dtype;
  call.attrs.num_sizes = view.ndim;
  for (int d = 0; d < view.ndim; ++d) call.attrs.sizes[d] = view.shape[d];
  RECAP_TRY(recap__op_infer(&call));
  call.outputs[0].data = view.data;
  if (!call.def->is_random) return recap__op_launch(&call, stream);
  call.rng_seed = seed;
  call.rng_offset = offset;
  return launch_seeded(&call, stream);
}

/* Reads file-initialized tensors (jobs[i] for tensor indices[i] of ir) into device memory;
 * a failure names the tensor's `path:` in the spec. */
static recap_status load_files(const recap__ir *ir, const recap__weight_job *jobs,
                               const size_t *indices, size_t count, recap_stream *stream) {
  size_t failed = 0;
  recap_status st = recap__weights_load(jobs, count, stream, NULL, &failed);
  if (st == RECAP_OK || count == 0) return st;
  const recap__ir_tensor *t = &ir->tensors[indices[failed]];
  return tensor_failure(st, t, t->init_pos, "initializing");
}

/* Writes a tensor's initial contents as its spec says (the tensor's index is its Philox
 * offset). */
static recap_status init_tensor(const recap__ir_tensor *t, int index, void *data, uint64_t seed,
                                recap_stream *stream) {
  recap_tensor view = full_view(t, data);
  recap__op_attrs a = {.value = t->init.value,
                       .mean = t->init.mean,
                       .std = t->init.std,
                       .low = t->init.low,
                       .high = t->init.high};
  recap_status st = RECAP_OK;
  switch (t->init.kind) {
    case RECAP_INIT_NONE:
    case RECAP_INIT_ZEROS:
      st = stream->backend->memset_async(data, 0, (size_t)t->bytes, stream);
      break;
    case RECAP_INIT_ONES:
      a.value = 1.0;
      st = fill_with_op("fill", &a, view, 0, 0, stream);
      break;
    case RECAP_INIT_VALUE:
      st = fill_with_op("fill", &a, view, 0, 0, stream);
      break;
    case RECAP_INIT_NORMAL:
      st = fill_with_op("random_normal", &a, view, seed, (uint64_t)index, stream);
      break;
    case RECAP_INIT_UNIFORM:
      st = fill_with_op("random_uniform", &a, view, seed, (uint64_t)index, stream);
      break;
    case RECAP_INIT_FILE: {
      /* Only the largest bucket's IR has plans, and the binder reads only that IR. */
      if (!t->weights)
        return RECAP_FAIL(RECAP_STATUS_INTERNAL, "tensor '%s' has no checked file plan", t->name);
      recap__weight_job job = {t->weights, data, t->name};
      size_t failed;
      st = recap__weights_load(&job, 1, stream, NULL, &failed);
      break;
    }
  }
  if (st != RECAP_OK) return tensor_failure(st, t, t->init_pos, "initializing");
  return RECAP_OK;
}

/* ---- params ---- */

recap_status recap__bind_params(recap__model *m, const recap_pipeline *share) {
  const recap__ir *ir = largest_ir(m);
  RECAP_TRY(recap_stream_create(m->device, 0, RECAP_STREAM_NON_BLOCKING, &m->param_stream));
  recap_stream *stream = m->param_stream;
  m->param_data = calloc(ir->num_tensors ? ir->num_tensors : 1, sizeof *m->param_data);
  if (!m->param_data) return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for param table");
  /* Params the shared pipeline has are its memory (m->param_source keeps it): neither
   * allocated nor loaded again. */
  for (size_t t = 0; share && t < ir->num_tensors; ++t) {
    if (ir->tensors[t].role != RECAP_ROLE_PARAM) continue;
    RECAP_TRY(recap__share_find(share, m->spec->name, &ir->tensors[t], &m->param_data[t]));
  }
  size_t total = 0;
  for (size_t t = 0; t < ir->num_tensors; ++t)
    if (ir->tensors[t].role == RECAP_ROLE_PARAM && !m->param_data[t])
      total += align_up((size_t)ir->tensors[t].bytes);
  m->param_bytes = total;
  if (total == 0) return RECAP_OK;
  recap_status st = recap_malloc(m->device, total, stream, &m->param_block);
  if (st != RECAP_OK) {
    /* The params share one block: name the largest, the likely reason. */
    size_t largest = 0;
    for (size_t t = 0; t < ir->num_tensors; ++t)
      if (ir->tensors[t].role == RECAP_ROLE_PARAM && !m->param_data[t] &&
          (ir->tensors[largest].role != RECAP_ROLE_PARAM || m->param_data[largest] ||
           ir->tensors[t].bytes > ir->tensors[largest].bytes))
        largest = t;
    const recap__ir_tensor *big = &ir->tensors[largest];
    char what[96];
    snprintf(what, sizeof what, "allocating the params (%zu bytes); the largest (%llu bytes) is",
             total, (unsigned long long)big->bytes);
    return tensor_failure(st, big, big->pos, what);
  }
  /* Params from files are loaded together, on parallel threads (weight_load.h); the others
   * are filled on the stream. */
  recap__weight_job *jobs = calloc(ir->num_tensors, sizeof *jobs);
  size_t *indices = calloc(ir->num_tensors, sizeof *indices), count = 0;
  if (!jobs || !indices) {
    free(jobs);
    free(indices);
    return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for the param table");
  }
  size_t offset = 0;
  for (size_t t = 0; t < ir->num_tensors && st == RECAP_OK; ++t) {
    const recap__ir_tensor *tt = &ir->tensors[t];
    if (tt->role != RECAP_ROLE_PARAM || m->param_data[t]) continue;
    m->param_data[t] = (char *)m->param_block + offset;
    offset += align_up((size_t)tt->bytes);
    if (tt->init.kind == RECAP_INIT_FILE && tt->weights) {
      jobs[count] = (recap__weight_job){tt->weights, m->param_data[t], tt->name};
      indices[count++] = t;
    } else {
      st = init_tensor(tt, (int)t, m->param_data[t], ir->seed, stream);
    }
  }
  if (st == RECAP_OK) st = load_files(ir, jobs, indices, count, stream);
  free(jobs);
  free(indices);
  RECAP_TRY(st);
  /* The params are shared with clones on other streams: they must be complete before any
   * pipeline uses them. */
  return recap_stream_synchronize(stream);
}

void recap__unbind_params(recap__model *m) {
  if (m->param_block) recap_free(m->param_block);
  m->param_block = NULL;
  if (m->param_stream) recap_stream_destroy(m->param_stream);
  m->param_stream = NULL;
  free(m->param_data);
  m->param_data = NULL;
}

/* ---- per pipeline ---- */

/* The memory where tensor t's alias root starts: its buffer for planned tensors (in the arena,
 * or its own allocation with arena planning off), else the external root's block. */
static void *root_memory(const recap_pipeline *p, int t) {
  const recap__plan *plan = p->model->plan;
  const recap__plan_tensor *pt = &plan->tensors[t];
  if (pt->buffer >= 0)
    return plan->separate ? p->owned[plan->buffers[pt->buffer].root]
                          : (char *)p->arena + pt->offset;
  /* A view of an external tensor: its root (plan views name the root directly). */
  if (pt->kind == RECAP_PLAN_VIEW && pt->shares_with >= 0) t = pt->shares_with;
  return p->data[t];
}

void recap__bind_views(recap_pipeline *p) {
  const recap__model *m = p->model;
  size_t T = p->num_tensors, O = p->num_ops;
  for (size_t b = 0; b < m->num_buckets; ++b) {
    const recap__ir *ir = m->irs[b];
    /* Layouts (shape, strides, offset) were computed once at bind; only memory changes. */
    for (size_t t = 0; t < T; ++t) {
      recap_tensor *v = &p->views[b * T + t];
      size_t esize = recap_dtype_size(ir->tensors[t].dtype);
      v->data = (char *)root_memory(p, (int)t) + p->view_offsets[b * T + t] * (int64_t)esize;
    }
    for (size_t o = 0; o < O; ++o) {
      const recap__ir_op *op = &ir->ops[o];
      recap__op_call *c = &p->calls[b * O + o];
      memset(c, 0, sizeof *c);
      c->def = op->def;
      c->attrs = op->attrs;
      c->num_inputs = op->num_inputs;
      c->num_outputs = op->num_outputs;
      for (int i = 0; i < op->num_inputs; ++i) c->inputs[i] = p->views[b * T + op->inputs[i]];
      for (int i = 0; i < op->num_outputs; ++i) c->outputs[i] = p->views[b * T + op->outputs[i]];
      /* An op's optional `rows` input (kv_append's): padding rows of a bucket must not reach
       * state. The engine owns it; a spec that passes its own keeps it. */
      if (p->rows_device && op->def->takes_rows && c->num_inputs == op->def->max_inputs - 1) {
        recap_tensor rows = {.data = p->rows_device, .dtype = RECAP_DTYPE_I32, .ndim = 1};
        rows.shape[0] = 1;
        rows.strides[0] = 1;
        c->inputs[c->num_inputs++] = rows;
      }
      if (p->workspaces && op->def->workspace_bytes) {
        c->workspace_bytes = op->def->workspace_bytes(c, p->device.backend);
        c->workspace = c->workspace_bytes ? p->workspaces[op->stream] : NULL;
      }
      if (p->call_states && p->call_states[b * O + o]) {
        c->call_state_bytes = op->def->call_state_bytes(c, p->device.backend);
        c->call_state = p->call_states[b * O + o];
      }
    }
  }
}

static bool needs_rows(const recap__model *m) {
  if (m->spec->bucket_dim < 0) return false;
  const recap__ir *ir = largest_ir(m);
  for (size_t o = 0; o < ir->num_ops; ++o)
    if (ir->ops[o].def->takes_rows && ir->ops[o].num_inputs == ir->ops[o].def->max_inputs - 1)
      return true;
  return false;
}

/* The state tensors: the shared pipeline's memory where it has them, else blocks of this
 * pipeline's state set (created by pipeline.c), allocated on the model's param stream (share.h says
 * why) and initialized as the spec says before the pipeline's stream uses them. */
static recap_status bind_state(recap_pipeline *p, const recap_pipeline *share) {
  recap__model *m = p->model;
  const recap__ir *ir = largest_ir(m);
  bool allocated = false;
  for (size_t t = 0; t < ir->num_tensors; ++t) {
    const recap__ir_tensor *tt = &ir->tensors[t];
    if (tt->role != RECAP_ROLE_STATE || m->plan->tensors[t].kind != RECAP_PLAN_EXTERNAL) continue;
    if (share) RECAP_TRY(recap__share_find(share, m->spec->name, tt, &p->data[t]));
    if (p->data[t]) continue;
    recap_status st =
        recap_malloc(p->device, (size_t)tt->bytes, m->param_stream, &p->state->blocks[t]);
    if (st != RECAP_OK) {
      char what[64];
      snprintf(what, sizeof what, "allocating %llu bytes for", (unsigned long long)tt->bytes);
      return tensor_failure(st, tt, tt->pos, what);
    }
    p->data[t] = p->state->blocks[t];
    RECAP_TRY(init_tensor(tt, (int)t, p->data[t], ir->seed, m->param_stream));
    allocated = true;
  }
  /* Stream-ordered allocators hand out a block in the param stream's order: it is the
   * pipeline stream's to use once that stream has run. */
  return allocated ? recap_stream_synchronize(m->param_stream) : RECAP_OK;
}

/* Sizes each stream's workspace from the calls recap__bind_views built (shapes only) and takes
 * it from the private pool before anything is captured (a graph replays with the addresses it
 * captured); recap__bind_views then binds the calls to it. */
static recap_status bind_workspaces(recap_pipeline *p) {
  const recap__model *m = p->model;
  size_t streams = m->plan->num_streams > 0 ? (size_t)m->plan->num_streams : 1;
  p->workspaces = calloc(streams, sizeof *p->workspaces);
  p->workspace_sizes = calloc(streams, sizeof *p->workspace_sizes);
  if (!p->workspaces || !p->workspace_sizes)
    return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for the op workspaces' table");
  p->num_workspaces = streams;
  bool any = false;
  for (size_t b = 0; b < m->num_buckets; ++b)
    for (size_t o = 0; o < p->num_ops; ++o) {
      const recap__ir_op *op = &m->irs[b]->ops[o];
      if (!op->def->workspace_bytes || m->plan->op_is_view[o]) continue;
      size_t need = op->def->workspace_bytes(&p->calls[b * p->num_ops + o], p->device.backend);
      if (need > p->workspace_sizes[op->stream]) p->workspace_sizes[op->stream] = need;
      any = any || need > 0;
    }
  if (!any) return RECAP_OK;
  if (p->has_pool) RECAP_TRY(recap_pool_route_begin(p->device, p->pool, p->stream));
  recap_status st = RECAP_OK;
  for (size_t s = 0; s < streams && st == RECAP_OK; ++s)
    if (p->workspace_sizes[s]) {
      st = recap_malloc(p->device, p->workspace_sizes[s], p->stream, &p->workspaces[s]);
      if (st != RECAP_OK)
        st = recap__error_context(st, "allocating the op workspace of stream %zu (%zu bytes): ", s,
                                  p->workspace_sizes[s]);
    }
  recap_status end = p->has_pool ? recap_pool_route_end(p->device, p->stream) : RECAP_OK;
  RECAP_TRY(st);
  return end;
}

/* Every call's call_state from one block of the pool (a graph replays with the addresses it
 * captured), zeroed on the pipeline's stream before anything runs on it. */
static recap_status bind_call_states(recap_pipeline *p) {
  const recap__model *m = p->model;
  const size_t calls = m->num_buckets * p->num_ops, align = 256, none = SIZE_MAX;
  /* Each call's offset in the block (none: it asks for no state), sizes asked once. */
  size_t *at = malloc((calls ? calls : 1) * sizeof *at), total = 0;
  if (!at) return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for call states");
  for (size_t i = 0; i < calls; ++i) {
    const recap__ir_op *op = &m->irs[i / p->num_ops]->ops[i % p->num_ops];
    at[i] = none;
    if (!op->def->call_state_bytes || m->plan->op_is_view[i % p->num_ops]) continue;
    const size_t need = op->def->call_state_bytes(&p->calls[i], p->device.backend);
    if (need == 0) continue;
    at[i] = total;
    total += (need + align - 1) / align * align;
  }
  recap_status st = RECAP_OK;
  if (total == 0) goto done;
  p->call_states = calloc(calls, sizeof *p->call_states);
  if (!p->call_states) {
    st = RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for call states");
    goto done;
  }
  if (p->has_pool) RECAP_TRY_GOTO(st, recap_pool_route_begin(p->device, p->pool, p->stream), done);
  st = recap_malloc(p->device, total, p->stream, &p->call_state_block);
  recap_status end = p->has_pool ? recap_pool_route_end(p->device, p->stream) : RECAP_OK;
  if (st != RECAP_OK) {
    st = recap__error_context(st, "allocating the ops' call states (%zu bytes): ", total);
    goto done;
  }
  RECAP_TRY_GOTO(st, end, done);
  RECAP_TRY_GOTO(st, p->stream->backend->memset_async(p->call_state_block, 0, total, p->stream),
                 done);
  for (size_t i = 0; i < calls; ++i)
    if (at[i] != none) p->call_states[i] = (char *)p->call_state_block + at[i];
done:
  free(at);
  return st;
}

recap_status recap__bind_pipeline(recap_pipeline *p, const recap_pipeline *share) {
  const recap__model *m = p->model;
  const recap__ir *ir = largest_ir(m);
  const recap__plan *plan = m->plan;
  p->num_tensors = ir->num_tensors;
  p->num_ops = ir->num_ops;
  size_t T = p->num_tensors ? p->num_tensors : 1, O = p->num_ops ? p->num_ops : 1;
  p->data = calloc(T, sizeof *p->data);
  p->owned = calloc(T, sizeof *p->owned);
  p->views = calloc(m->num_buckets * T, sizeof *p->views);
  p->view_offsets = calloc(m->num_buckets * T, sizeof *p->view_offsets);
  p->calls = calloc(m->num_buckets * O, sizeof *p->calls);
  if (!p->data || !p->owned || !p->views || !p->view_offsets || !p->calls)
    return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for the pipeline's tables");
  /* Every bucket's layouts: views of shape ops are strided, the rest contiguous. */
  for (size_t b = 0; b < m->num_buckets; ++b)
    RECAP_TRY(recap__plan_views(m->irs[b], plan, &p->views[b * T], &p->view_offsets[b * T]));

  /* The private pool that the graphs will share holds the arena and the op outputs the caller
   * reads (what a capture produces, as in PyTorch's graph pools); inputs, states and scalars
   * live outside it. backend:cudaMallocAsync has no private pools: everything is then
   * allocated from the driver's pool before any capture, and the graphs allocate nothing. */
  if (recap__allocator_has_pools(p->device)) {
    RECAP_TRY(recap_pool_create(p->device, &p->pool));
    p->has_pool = true;
  }
  for (size_t t = 0; t < ir->num_tensors; ++t) {
    const recap__ir_tensor *tt = &ir->tensors[t];
    if (plan->tensors[t].kind != RECAP_PLAN_EXTERNAL) continue;
    if (tt->role == RECAP_ROLE_PARAM) {
      p->data[t] = m->param_data[t];
      continue;
    }
    if (tt->role == RECAP_ROLE_STATE) continue; /* bind_state's */
    bool in_pool = p->has_pool && tt->role == RECAP_ROLE_INTERMEDIATE;
    if (in_pool) RECAP_TRY(recap_pool_route_begin(p->device, p->pool, p->stream));
    recap_status st = recap_malloc(p->device, (size_t)tt->bytes, p->stream, &p->owned[t]);
    if (in_pool) {
      recap_status end = recap_pool_route_end(p->device, p->stream);
      if (st == RECAP_OK) st = end;
    }
    if (st != RECAP_OK) {
      char what[64];
      snprintf(what, sizeof what, "allocating %llu bytes for", (unsigned long long)tt->bytes);
      return tensor_failure(st, tt, tt->pos, what);
    }
    p->data[t] = p->owned[t];
    /* Op outputs start zeroed, so copy_out before the first run returns defined bytes. */
    RECAP_TRY(init_tensor(tt, (int)t, p->data[t], ir->seed, p->stream));
  }

  RECAP_TRY(bind_state(p, share));

  if (plan->arena_bytes > 0) {
    if (p->has_pool) RECAP_TRY(recap_pool_route_begin(p->device, p->pool, p->stream));
    recap_status st = RECAP_OK;
    if (!plan->separate) {
      st = recap_malloc(p->device, plan->arena_bytes, p->stream, &p->arena);
      if (st != RECAP_OK)
        st = recap__error_context(
            st, "allocating the arena of intermediates (%zu bytes): ", plan->arena_bytes);
    } else {
      /* Arena planning off: one allocation per buffer (its root tensor owns it), so an
       * out-of-bounds access between two intermediates leaves an allocation. */
      for (size_t b = 0; b < plan->num_buffers && st == RECAP_OK; ++b) {
        int root = plan->buffers[b].root;
        st = recap_malloc(p->device, plan->buffers[b].bytes, p->stream, &p->owned[root]);
        if (st != RECAP_OK)
          st = recap__error_context(st, "allocating intermediate '%s' (%zu bytes): ",
                                    ir->tensors[root].name, (size_t)plan->buffers[b].bytes);
      }
    }
    recap_status end = p->has_pool ? recap_pool_route_end(p->device, p->stream) : RECAP_OK;
    RECAP_TRY(st);
    RECAP_TRY(end);
  }

  if (needs_rows(m)) {
    int64_t most = m->bucket_values[m->num_buckets - 1];
    p->rows_host = malloc((size_t)(most + 1) * sizeof *p->rows_host);
    if (!p->rows_host) return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for row counts");
    for (int64_t i = 0; i <= most; ++i) p->rows_host[i] = (int32_t)i;
    void *rows = NULL;
    RECAP_TRY(recap_malloc(p->device, sizeof(int32_t), p->stream, &rows));
    p->rows_device = rows;
    RECAP_TRY(
        p->stream->backend->memcpy_async(rows, &p->rows_host[most], sizeof(int32_t), p->stream));
  }

  for (size_t o = 0; o < ir->num_ops; ++o)
    if (!plan->op_is_view[o]) p->launches++;
  recap__bind_views(p);
  RECAP_TRY(bind_workspaces(p));
  RECAP_TRY(bind_call_states(p));
  recap__bind_views(p);
  return RECAP_OK;
}

void recap__unbind_pipeline(recap_pipeline *p) {
  if (p->owned)
    for (size_t t = 0; t < p->num_tensors; ++t)
      if (p->owned[t]) recap_free(p->owned[t]);
  for (size_t s = 0; p->workspaces && s < p->num_workspaces; ++s)
    if (p->workspaces[s]) recap_free(p->workspaces[s]);
  free(p->workspaces);
  free(p->workspace_sizes);
  p->workspaces = NULL;
  p->workspace_sizes = NULL;
  if (p->call_state_block) recap_free(p->call_state_block);
  free(p->call_states);
  p->call_state_block = NULL;
  p->call_states = NULL;
  if (p->rows_device) recap_free(p->rows_device);
  if (p->arena) recap_free(p->arena);
  if (p->has_pool) recap_pool_release(p->device, p->pool);
  free(p->rows_host);
  free(p->owned);
  free(p->data);
  free(p->views);
  free(p->view_offsets);
  free(p->calls);
  p->rows_device = NULL;
  p->rows_host = NULL;
  p->arena = NULL;
  p->has_pool = false;
  p->owned = NULL;
  p->data = NULL;
  p->views = NULL;
  p->view_offsets = NULL;
  p->calls = NULL;
}
