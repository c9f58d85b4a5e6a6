/* plan_build.c: the planner's driver: checks the IR (and every bucket's against the largest),
 * runs the steps of plan_internal.h, fills in the finished plan, and checks a bucket against
 * it (docs/PLANNER.md). The driver is not named plan.c so that plan.h, whose types every
 * step reads, stays a header of its own and not part of a file that calls the steps. */
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>

#include "engine/plan.h"
#include "engine/plan_internal.h"
#include "runtime/env.h"
#include "runtime/error.h"

/* Bytes of a tensor's contiguous storage, refusing shapes that overflow. */
static recap_status tensor_bytes(const recap__ir *ir, int t, size_t *out) {
  const recap__ir_tensor *x = &ir->tensors[t];
  if ((unsigned)x->dtype >= RECAP_DTYPE_COUNT)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "tensor '%s' has an unknown dtype %d",
                      tensor_name(ir, t), (int)x->dtype);
  if (x->ndim < 0 || x->ndim > RECAP_MAX_DIMS)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "tensor '%s' has %d dims (0..%d allowed)",
                      tensor_name(ir, t), x->ndim, (int)RECAP_MAX_DIMS);
  size_t bytes = recap_dtype_size(x->dtype);
  for (int d = 0; d < x->ndim; d++) {
    if (x->shape[d] < 0)
      return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "tensor '%s' has a negative dim %lld",
                        tensor_name(ir, t), (long long)x->shape[d]);
    if (x->shape[d] != 0 && bytes > RECAP__MAX_TENSOR_BYTES / (uint64_t)x->shape[d])
      return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "tensor '%s' is larger than 2^56 bytes",
                        tensor_name(ir, t));
    bytes *= (size_t)x->shape[d];
  }
  *out = bytes;
  return RECAP_OK;
}

/* ---- checking the IR and deriving producers and consumers ------------------------------ */

static recap_status check_ops(planner *p) {
  const recap__ir *ir = p->ir;
  for (int t = 0; t < p->num_tensors; t++) {
    p->producer[t] = p->last_consumer[t] = -1;
    p->readers[t] = 0;
  }
  for (int j = 0; j < p->num_ops; j++) {
    const recap__ir_op *op = &ir->ops[j];
    if (!op->def)
      return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "op '%s' has no definition", op_name(ir, j));
    if (op->num_inputs < 0 || op->num_inputs > RECAP_OP_MAX_INPUTS || op->num_outputs < 0 ||
        op->num_outputs > RECAP_OP_MAX_OUTPUTS)
      return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "op '%s' has %d inputs and %d outputs",
                        op_name(ir, j), op->num_inputs, op->num_outputs);
    if (op->stream < 0 || op->stream >= p->num_streams)
      return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                        "op '%s' is on stream %d but the pipeline has %d stream(s)", op_name(ir, j),
                        op->stream, p->num_streams);
    for (int i = 0; i < op->num_inputs; i++) {
      int t = op->inputs[i];
      if (t < 0 || t >= p->num_tensors)
        return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "op '%s' input %d is tensor %d of %d",
                          op_name(ir, j), i, t, p->num_tensors);
      if (ir->tensors[t].producer >= j)
        return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                          "op '%s' reads tensor '%s' before op %d produces it", op_name(ir, j),
                          tensor_name(ir, t), ir->tensors[t].producer);
      p->last_consumer[t] = j;
      p->readers[t]++;
    }
    for (int o = 0; o < op->num_outputs; o++) {
      int t = op->outputs[o];
      if (t < 0 || t >= p->num_tensors)
        return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "op '%s' output %d is tensor %d of %d",
                          op_name(ir, j), o, t, p->num_tensors);
      if (p->producer[t] >= 0 || ir->tensors[t].producer != j)
        return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                          "tensor '%s' is an output of op '%s' but its producer is %d",
                          tensor_name(ir, t), op_name(ir, j),
                          p->producer[t] >= 0 ? p->producer[t] : ir->tensors[t].producer);
      p->producer[t] = j;
    }
  }
  return RECAP_OK;
}

static recap_status check_tensors(planner *p) {
  const recap__ir *ir = p->ir;
  for (int t = 0; t < p->num_tensors; t++) {
    const recap__ir_tensor *x = &ir->tensors[t];
    RECAP_TRY(tensor_bytes(ir, t, &p->bytes[t]));
    if (x->producer != p->producer[t])
      return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                        "tensor '%s' names op %d as producer but no op lists it as an output",
                        tensor_name(ir, t), x->producer);
    p->alias[t] = x->alias_of >= 0 ? x->alias_of : -1;
  }
  RECAP_TRY(recap__plan_find_roots(p));
  for (int t = 0; t < p->num_tensors; t++)
    if (is_arena_root(p, t) && p->producer[t] < 0)
      return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                        "intermediate tensor '%s' is produced by no op", tensor_name(ir, t));
  return RECAP_OK;
}

/* ---- the plan -------------------------------------------------------------------------- */

static int compare_waits(const void *l, const void *r) {
  const recap__plan_wait *a = l, *b = r;
  if (a->waiter != b->waiter) return a->waiter < b->waiter ? -1 : 1;
  return (a->waited > b->waited) - (a->waited < b->waited);
}

static recap_status finish(planner *p) {
  recap__plan *plan = p->plan;
  const recap__ir *ir = p->ir;
  recap_status st = RECAP_OK;
  int *compact = malloc((p->num_tensors ? (size_t)p->num_tensors : 1) * sizeof *compact);
  int *ids = NULL;
  size_t *live = NULL;
  if (!compact) return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for the plan");

  size_t n = 0;
  for (int t = 0; t < p->num_tensors; t++)
    if (p->buffer_of[t] == t && !p->work[t].merged) n++;
  plan->buffers = calloc(n ? n : 1, sizeof *plan->buffers);
  ids = malloc((n ? n : 1) * sizeof *ids);
  if (!plan->buffers || !ids) {
    st = RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for %zu plan buffers", n);
    goto done;
  }
  for (int t = 0; t < p->num_tensors; t++) {
    compact[t] = -1;
    if (p->buffer_of[t] != t || p->work[t].merged) continue;
    const work_buffer *w = &p->work[t];
    compact[t] = (int)plan->num_buffers;
    ids[plan->num_buffers] = t;
    plan->buffers[plan->num_buffers++] =
        (recap__plan_buffer){.bytes = w->bytes,
                             .first_op = w->first,
                             .last_op = w->live_to_end ? p->num_ops : w->last,
                             .root = t};
  }

  /* Bytes live at each op: +bytes where a buffer starts, -bytes after it ends. */
  live = calloc((size_t)p->num_ops + 2, sizeof *live);
  if (!live) {
    st = RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for the plan");
    goto done;
  }
  for (size_t b = 0; b < n; b++) {
    live[plan->buffers[b].first_op] += plan->buffers[b].bytes;
    live[plan->buffers[b].last_op + 1] -= plan->buffers[b].bytes;
  }
  size_t now = 0;
  for (int j = 0; j < p->num_ops; j++) {
    now += live[j];
    if (now > plan->max_live_bytes) plan->max_live_bytes = now;
  }
  plan->live_at_one_op_bytes = plan->max_live_bytes;
  RECAP_TRY_GOTO(st, recap__plan_place(p, ids), done);

  for (int t = 0; t < p->num_tensors; t++) {
    recap__plan_tensor *pt = &plan->tensors[t];
    int r = p->root[t];
    if (p->buffer_of[r] < 0) continue;
    pt->buffer = compact[p->buffer_of[r]];
    pt->offset = plan->buffers[pt->buffer].offset;
    if (pt->kind == RECAP_PLAN_ARENA || pt->kind == RECAP_PLAN_IN_PLACE) {
      if (plan->naive_bytes > SIZE_MAX - align_up(p->bytes[t])) {
        st = RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "the intermediates overflow size_t");
        goto done;
      }
      plan->naive_bytes += align_up(p->bytes[t]);
    }
  }

  for (int j = 0; j < p->num_ops; j++) plan->stream_last_op[ir->ops[j].stream] = j;
  if (plan->num_waits > 1) qsort(plan->waits, plan->num_waits, sizeof *plan->waits, compare_waits);
done:
  free(compact);
  free(ids);
  free(live);
  return st;
}

static void planner_free(planner *p) {
  free(p->alias);
  free(p->root);
  free(p->producer);
  free(p->last_consumer);
  free(p->readers);
  free(p->views);
  free(p->view_offset);
  free(p->view_scratch);
  free(p->offset_scratch);
  free(p->bytes);
  free(p->clock);
  free(p->work);
  free(p->buffer_of);
  free(p->stream_last);
}

static recap__plan_options env_options(void) {
  return (recap__plan_options){.separate = recap__env_bool("RECAP_ARENA", 1) == 0};
}

/* Whether a smaller bucket's IR has the largest's tensors and ops (only shapes may differ),
 * so that indices mean the same in both; its sizes must not overflow either. */
static recap_status check_bucket(const recap__ir *largest, const recap__ir *ir, int b) {
  if (ir->num_tensors != largest->num_tensors || ir->num_ops != largest->num_ops ||
      (ir->num_tensors && !ir->tensors) || (ir->num_ops && !ir->ops))
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "bucket %d's IR has %zu tensors and %zu ops but the largest bucket's has "
                      "%zu and %zu",
                      b, ir->num_tensors, ir->num_ops, largest->num_tensors, largest->num_ops);
  for (size_t j = 0; j < ir->num_ops; j++) {
    const recap__ir_op *a = &ir->ops[j], *z = &largest->ops[j];
    bool same = a->def == z->def && a->stream == z->stream && a->num_inputs == z->num_inputs &&
                a->num_outputs == z->num_outputs;
    for (int i = 0; same && i < z->num_inputs && i < RECAP_OP_MAX_INPUTS; i++)
      same = a->inputs[i] == z->inputs[i];
    for (int o = 0; same && o < z->num_outputs && o < RECAP_OP_MAX_OUTPUTS; o++)
      same = a->outputs[o] == z->outputs[o];
    if (!same)
      return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                        "op '%s' differs between bucket %d and the largest bucket (only shapes "
                        "may)",
                        op_name(largest, (int)j), b);
  }
  for (size_t t = 0; t < ir->num_tensors; t++) {
    const recap__ir_tensor *a = &ir->tensors[t], *z = &largest->tensors[t];
    if (a->role != z->role || a->is_output != z->is_output || a->alias_of != z->alias_of ||
        a->producer != z->producer || a->dtype != z->dtype || a->ndim != z->ndim)
      return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                        "tensor '%s' differs between bucket %d and the largest bucket (only "
                        "shapes may)",
                        tensor_name(largest, (int)t), b);
    size_t bytes;
    RECAP_TRY(tensor_bytes(ir, (int)t, &bytes));
  }
  return RECAP_OK;
}

static recap_status plan_irs(const recap__ir *const *irs, int num_buckets,
                             const recap__plan_options *options, recap__plan **out);

recap_status recap__plan_build(const recap__ir *ir, recap__plan **out) {
  recap__plan_options options = env_options();
  return recap__plan_build_with(ir, &options, out);
}

recap_status recap__plan_build_with(const recap__ir *ir, const recap__plan_options *options,
                                    recap__plan **out) {
  RECAP_CHECK_ARG(ir && options && out);
  return plan_irs(&ir, 1, options, out);
}

recap_status recap__plan_build_buckets(recap__ir *const *irs, size_t count,
                                       const recap__plan_options *options, recap__plan **out) {
  RECAP_CHECK_ARG(irs && count > 0 && out);
  if (count > INT_MAX / 2)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "%zu buckets is too many", count);
  recap__plan_options env = env_options();
  const recap__ir **all = malloc(count * sizeof *all);
  if (!all) return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for %zu buckets", count);
  recap_status st = RECAP_OK;
  for (size_t b = 0; b < count; b++) {
    all[b] = irs[b];
    if (!irs[b]) st = RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "bucket %zu has no IR", b);
  }
  if (st == RECAP_OK) st = plan_irs(all, (int)count, options ? options : &env, out);
  free(all);
  return st;
}

/* Plans irs[num_buckets - 1] (the largest) for every bucket in irs. */
static recap_status plan_irs(const recap__ir *const *irs, int num_buckets,
                             const recap__plan_options *options, recap__plan **out) {
  const recap__ir *ir = irs[num_buckets - 1];
  RECAP_CHECK_ARG(ir);
  RECAP_CHECK_ARG(ir->num_tensors == 0 || ir->tensors);
  RECAP_CHECK_ARG(ir->num_ops == 0 || ir->ops);
  if (ir->num_ops > INT_MAX / 2 || ir->num_tensors > INT_MAX / 2)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "%zu ops and %zu tensors is too many",
                      ir->num_ops, ir->num_tensors);
  if (ir->num_tensors > SIZE_MAX / sizeof(recap_tensor) / (size_t)num_buckets)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "%zu tensors in %d buckets is too many",
                      ir->num_tensors, num_buckets);
  for (int b = 0; b + 1 < num_buckets; b++) RECAP_TRY(check_bucket(ir, irs[b], b));
  recap_status st = RECAP_OK;
  int *alias_write = NULL;
  planner p = {.ir = ir,
               .irs = irs,
               .num_buckets = num_buckets,
               .num_ops = (int)ir->num_ops,
               .num_tensors = (int)ir->num_tensors,
               .num_streams = ir->num_streams > 1 ? ir->num_streams : 1};
  size_t nt = ir->num_tensors ? ir->num_tensors : 1;
  recap__plan *plan = calloc(1, sizeof *plan);
  if (!plan) return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for a plan");
  p.plan = plan;
  plan->num_tensors = ir->num_tensors;
  plan->num_ops = ir->num_ops;
  plan->num_streams = p.num_streams;
  plan->separate = options->separate;
  plan->tensors = calloc(nt, sizeof *plan->tensors);
  plan->stream_last_op = malloc((size_t)p.num_streams * sizeof *plan->stream_last_op);
  plan->op_is_view = calloc(ir->num_ops ? ir->num_ops : 1, sizeof *plan->op_is_view);
  plan->op_copies_for_buckets =
      calloc(ir->num_ops ? ir->num_ops : 1, sizeof *plan->op_copies_for_buckets);
  p.alias = malloc(nt * sizeof *p.alias);
  p.root = malloc(nt * sizeof *p.root);
  p.producer = malloc(nt * sizeof *p.producer);
  p.last_consumer = malloc(nt * sizeof *p.last_consumer);
  p.readers = malloc(nt * sizeof *p.readers);
  size_t nb = (size_t)num_buckets;
  p.views = malloc(nb * nt * sizeof *p.views);
  p.view_offset = malloc(nb * nt * sizeof *p.view_offset);
  p.view_scratch = malloc(nb * RECAP_OP_MAX_OUTPUTS * sizeof *p.view_scratch);
  p.offset_scratch = malloc(nb * RECAP_OP_MAX_OUTPUTS * sizeof *p.offset_scratch);
  p.bytes = malloc(nt * sizeof *p.bytes);
  p.work = calloc(nt, sizeof *p.work);
  p.buffer_of = malloc(nt * sizeof *p.buffer_of);
  alias_write = malloc(nt * sizeof *alias_write);
  if (!plan->tensors || !plan->stream_last_op || !plan->op_is_view ||
      !plan->op_copies_for_buckets || !p.alias || !p.root || !p.producer || !p.last_consumer ||
      !p.readers || !p.views || !p.view_offset || !p.view_scratch || !p.offset_scratch ||
      !p.bytes || !p.work || !p.buffer_of || !alias_write) {
    st = RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory to plan %zu tensors", ir->num_tensors);
    goto fail;
  }
  for (int s = 0; s < p.num_streams; s++) plan->stream_last_op[s] = -1;
  /* Ordering between streams only matters with several of them; one stream orders every op
   * by index. */
  if (p.num_streams > 1) {
    size_t clocks = (p.num_ops ? (size_t)p.num_ops : 1) * (size_t)p.num_streams;
    p.clock = malloc(clocks * sizeof *p.clock);
    p.stream_last = malloc(nt * (size_t)p.num_streams * sizeof *p.stream_last);
    if (p.clock)
      for (size_t i = 0; i < clocks; i++) p.clock[i] = -1;
    if (!p.clock || !p.stream_last) {
      st = RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY,
                      "no memory for the stream order of %d ops on %d streams", p.num_ops,
                      p.num_streams);
      goto fail;
    }
  }
  RECAP_TRY_GOTO(st, check_ops(&p), fail);
  RECAP_TRY_GOTO(st, check_tensors(&p), fail);
  RECAP_TRY_GOTO(st, recap__plan_choose_views(&p, alias_write), fail);

  for (int t = 0; t < p.num_tensors; t++) {
    const recap__ir_tensor *x = &ir->tensors[t];
    recap__plan_tensor *pt = &plan->tensors[t];
    pt->bytes = p.bytes[t];
    pt->buffer = -1;
    pt->shares_with = p.alias[t] >= 0 ? p.root[t] : -1;
    pt->kind = p.alias[t] >= 0        ? RECAP_PLAN_VIEW
               : is_arena_root(&p, t) ? RECAP_PLAN_ARENA
                                      : RECAP_PLAN_EXTERNAL;
    pt->first_op = p.producer[t];
    pt->last_op = p.last_consumer[t] > pt->first_op ? p.last_consumer[t] : pt->first_op;
    if (x->is_output) pt->last_op = p.num_ops;
  }
  RECAP_TRY_GOTO(st, recap__plan_order(&p), fail);
  RECAP_TRY_GOTO(st, finish(&p), fail);
  /* What the plan chose holds in every bucket by construction; this checks the sizes too (a
   * tensor larger in a smaller bucket does not fit its bytes). */
  for (int b = 0; b + 1 < num_buckets; b++)
    RECAP_TRY_GOTO(st, recap__plan_check_fits(plan, irs[b]), fail);
  planner_free(&p);
  free(alias_write);
  *out = plan;
  return RECAP_OK;
fail:
  planner_free(&p);
  free(alias_write);
  recap__plan_destroy(plan);
  return st;
}

void recap__plan_destroy(recap__plan *plan) {
  if (!plan) return;
  free(plan->tensors);
  free(plan->buffers);
  free(plan->waits);
  free(plan->stream_last_op);
  free(plan->op_is_view);
  free(plan->op_copies_for_buckets);
  free(plan);
}

recap_status recap__plan_check_fits(const recap__plan *largest, const recap__ir *smaller) {
  RECAP_CHECK_ARG(largest && smaller);
  if (smaller->num_tensors != largest->num_tensors || smaller->num_ops != largest->num_ops)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "the IR has %zu tensors and %zu ops but the plan was made for %zu and %zu",
                      smaller->num_tensors, smaller->num_ops, largest->num_tensors,
                      largest->num_ops);
  for (size_t t = 0; t < smaller->num_tensors; t++) {
    const recap__ir_tensor *x = &smaller->tensors[t];
    const recap__plan_tensor *pt = &largest->tensors[t];
    /* What the IR alone says (before the planner's views and in-place choices). */
    recap__plan_kind kind = x->alias_of >= 0 ? RECAP_PLAN_VIEW
                            : x->role == RECAP_ROLE_INTERMEDIATE && !x->is_output
                                ? RECAP_PLAN_ARENA
                                : RECAP_PLAN_EXTERNAL;
    recap__plan_kind planned = pt->kind == RECAP_PLAN_IN_PLACE                   ? RECAP_PLAN_ARENA
                               : pt->kind == RECAP_PLAN_VIEW && pt->view_op >= 0 ? RECAP_PLAN_ARENA
                                                                                 : pt->kind;
    if (kind != planned)
      return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                        "tensor '%s' has a different role or alias than in the planned IR",
                        tensor_name(smaller, (int)t));
    size_t bytes;
    RECAP_TRY(tensor_bytes(smaller, (int)t, &bytes));
    if (bytes > pt->bytes)
      return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                        "tensor '%s' needs %zu bytes in this bucket but the plan holds %zu",
                        tensor_name(smaller, (int)t), bytes, pt->bytes);
    /* An in-place result overlays its input element for element: sizes must still match. */
    if (pt->kind != RECAP_PLAN_IN_PLACE) continue;
    int over = pt->shares_with;
    if (over < 0 || (size_t)over >= smaller->num_tensors)
      return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "tensor '%s' overlays tensor %d of %zu",
                        tensor_name(smaller, (int)t), over, smaller->num_tensors);
    size_t over_bytes;
    RECAP_TRY(tensor_bytes(smaller, over, &over_bytes));
    if (over_bytes != bytes)
      return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                        "tensor '%s' is written in place over '%s' but in this bucket their "
                        "sizes differ (%zu and %zu bytes)",
                        tensor_name(smaller, (int)t), tensor_name(smaller, over), bytes,
                        over_bytes);
  }
  /* Every view must still be formable, aligned and accepted by its readers. */
  size_t nt = smaller->num_tensors ? smaller->num_tensors : 1;
  recap_tensor *views = malloc(nt * sizeof *views);
  int64_t *offsets = malloc(nt * sizeof *offsets);
  recap_status st = views && offsets
                        ? recap__plan_views(smaller, largest, views, offsets)
                        : RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory to check views");
  free(views);
  free(offsets);
  return st;
}
