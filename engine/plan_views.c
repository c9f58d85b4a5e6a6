/* plan_views.c: alias roots, and the shape ops the planner makes views of, forward (outputs
 * as strided views of the input) or backward (the input as a view of the output), decided
 * over every bucket (docs/PLANNER.md). */
#include <stdlib.h>
#include <string.h>

#include "engine/plan_internal.h"
#include "runtime/error.h"

/* Follows alias[] from every tensor to its root; more steps than tensors means a cycle. */
recap_status recap__plan_find_roots(planner *p) {
  for (int t = 0; t < p->num_tensors; t++) {
    int r = t, steps = 0;
    while (p->alias[r] >= 0) {
      int next = p->alias[r];
      if (next >= p->num_tensors || ++steps > p->num_tensors)
        return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                          "tensor '%s' has an alias chain that is out of range or cyclic",
                          tensor_name(p->ir, t));
      r = next;
    }
    p->root[t] = r;
  }
  return RECAP_OK;
}

/* Whether output o of op j writes memory that already exists: an output that is one of the
 * op's inputs (kv_append into its cache, paged_rope_kv_write into its pools). A plain view
 * (reshape) writes nothing. */
static bool writes_alias(const planner *p, int j, int o) {
  const recap__ir_op *op = &p->ir->ops[j];
  int y = op->outputs[o], k = recap__op_output_input(op->def, o);
  return p->alias[y] >= 0 && k >= 0 && k < op->num_inputs && p->root[op->inputs[k]] == p->root[y];
}

typedef enum {
  SHAPE_NONE,
  SHAPE_RESHAPE,
  SHAPE_PERMUTE,
  SHAPE_TRANSPOSE,
  SHAPE_SLICE,
  SHAPE_SPLIT
} shape_kind;

/* The shape ops the planner can make views of (kernels/shape.c defines them; their attrs are
 * normalized by infer, so axes and bounds are non-negative here). */
static shape_kind shape_op(const recap__op_def *def) {
  switch (def ? def->copy_view : RECAP__COPY_NONE) {
    case RECAP__COPY_RESHAPE:
      return SHAPE_RESHAPE;
    case RECAP__COPY_PERMUTE:
      return SHAPE_PERMUTE;
    case RECAP__COPY_TRANSPOSE:
      return SHAPE_TRANSPOSE;
    case RECAP__COPY_SLICE:
      return SHAPE_SLICE;
    case RECAP__COPY_SPLIT:
      return SHAPE_SPLIT;
    default: /* an explicit copy stays a copy */
      return SHAPE_NONE;
  }
}

/* Whether op `def` writes its output 0 through the strides of `view` on every backend: the
 * op says it does (op.h, strided_output) for layouts whose last dim is unit-stride. */
static bool writes_strided_output(const recap__op_def *def, const recap_tensor *view) {
  if (!def || !def->strided_output || view->ndim < 1) return false;
  int last = view->ndim - 1;
  return view->shape[last] == 1 || view->strides[last] == 1;
}

/* A contiguous layout of tensor t's IR shape. */
static recap_tensor contiguous_layout(const recap__ir_tensor *x) {
  recap_tensor v = {.dtype = x->dtype, .ndim = x->ndim};
  for (int d = 0; d < x->ndim; d++) v.shape[d] = x->shape[d];
  recap__tensor_set_contiguous(&v);
  return v;
}

/* Strides that read `src`'s elements, in row-major order, under shape[0..ndim): false when no
 * strides do (the reshape would have to copy). Dims of src that are laid out as one run
 * (stride[d - 1] == shape[d] * stride[d]) form a chunk; the new dims must split each chunk
 * exactly, and take their strides from it. */
static bool reshape_strides(const recap_tensor *src, int ndim, const int64_t *shape,
                            int64_t *strides) {
  int64_t src_numel = 1, new_numel = 1;
  for (int d = 0; d < src->ndim; d++) src_numel *= src->shape[d];
  for (int d = 0; d < ndim; d++) new_numel *= shape[d];
  if (src_numel != new_numel) return false;
  int nd = ndim - 1;
  if (src->ndim == 0) {
    for (int d = 0; d < ndim; d++) strides[d] = 1;
    return true;
  }
  int64_t base = src->strides[src->ndim - 1], chunk = 1, taken = 1;
  for (int d = src->ndim - 1; d >= 0; d--) {
    chunk *= src->shape[d];
    bool ends = d == 0 || (src->shape[d - 1] != 1 && src->strides[d - 1] != chunk * base);
    if (!ends) continue;
    while (nd >= 0 && (taken < chunk || shape[nd] == 1)) {
      strides[nd] = taken * base;
      taken *= shape[nd];
      nd--;
    }
    if (taken != chunk) return false;
    if (d > 0) {
      base = src->strides[d - 1];
      chunk = taken = 1;
    }
  }
  return nd < 0;
}

/* Forward: the layout of output o of shape op j (kind k) read from its input's layout `in`
 * at element offset in_off. False when no view expresses it. */
static bool derive_forward(const recap__ir *ir, int j, int o, const recap_tensor *in,
                           int64_t in_off, recap_tensor *out, int64_t *out_off) {
  const recap__ir_op *op = &ir->ops[j];
  const recap__op_attrs *a = &op->attrs;
  const recap__ir_tensor *y = &ir->tensors[op->outputs[o]];
  recap_tensor v = contiguous_layout(y);
  int64_t off = in_off;
  int n = in->ndim;
  switch (shape_op(op->def)) {
    case SHAPE_RESHAPE:
      if (!reshape_strides(in, y->ndim, y->shape, v.strides)) return false;
      break;
    case SHAPE_PERMUTE:
      if (y->ndim != n || a->num_sizes != n) return false;
      for (int d = 0; d < n; d++) {
        if (a->sizes[d] < 0 || a->sizes[d] >= n) return false;
        v.strides[d] = in->strides[a->sizes[d]];
      }
      break;
    case SHAPE_TRANSPOSE: {
      int64_t d0 = a->sizes[0], d1 = a->sizes[1];
      if (y->ndim != n || d0 < 0 || d0 >= n || d1 < 0 || d1 >= n) return false;
      for (int d = 0; d < n; d++) v.strides[d] = in->strides[d];
      v.strides[d0] = in->strides[d1];
      v.strides[d1] = in->strides[d0];
      break;
    }
    case SHAPE_SLICE:
    case SHAPE_SPLIT: {
      int64_t dim = a->dim, start = a->start;
      if (y->ndim != n || dim < 0 || dim >= n) return false;
      if (shape_op(op->def) == SHAPE_SPLIT) {
        start = 0;
        for (int i = 0; i < o && i < RECAP_MAX_DIMS; i++) start += a->sizes[i];
      }
      for (int d = 0; d < n; d++) v.strides[d] = in->strides[d];
      off += start * in->strides[dim];
      break;
    }
    case SHAPE_NONE:
      return false;
  }
  *out = v;
  *out_off = off;
  return true;
}

/* Backward: the layout of input 0 of shape op j when its output has layout `out` at element
 * offset off (the inverse of a permute, transpose or reshape). */
static bool derive_backward(const recap__ir *ir, int j, const recap_tensor *out, int64_t off,
                            recap_tensor *in, int64_t *in_off) {
  const recap__ir_op *op = &ir->ops[j];
  const recap__op_attrs *a = &op->attrs;
  const recap__ir_tensor *x = &ir->tensors[op->inputs[0]];
  recap_tensor v = contiguous_layout(x);
  int n = x->ndim;
  switch (shape_op(op->def)) {
    case SHAPE_RESHAPE:
      if (!reshape_strides(out, n, x->shape, v.strides)) return false;
      break;
    case SHAPE_PERMUTE:
      if (out->ndim != n || a->num_sizes != n) return false;
      for (int d = 0; d < n; d++) {
        if (a->sizes[d] < 0 || a->sizes[d] >= n) return false;
        v.strides[a->sizes[d]] = out->strides[d];
      }
      break;
    case SHAPE_TRANSPOSE: {
      int64_t d0 = a->sizes[0], d1 = a->sizes[1];
      if (out->ndim != n || d0 < 0 || d0 >= n || d1 < 0 || d1 >= n) return false;
      for (int d = 0; d < n; d++) v.strides[d] = out->strides[d];
      v.strides[d0] = out->strides[d1];
      v.strides[d1] = out->strides[d0];
      break;
    }
    default:
      return false;
  }
  *in = v;
  *in_off = off;
  return true;
}

static bool offset_aligned(const recap__ir *ir, int t, int64_t off) {
  return (off * (int64_t)recap_dtype_size(ir->tensors[t].dtype)) % RECAP_PLAN_VIEW_ALIGNMENT == 0;
}

/* Whether every reader of tensor t (views[] holding each tensor's layout) accepts it: its
 * op's infer passes with the layouts of all its inputs. Shape ops always accept: one that
 * does not become a view runs as a strided copy, which reads any layout. */
static bool readers_accept(const recap__ir *ir, const recap_tensor *views, int t) {
  if (recap__tensor_is_contiguous(&views[t])) return true;
  for (size_t j = 0; j < ir->num_ops; j++) {
    const recap__ir_op *op = &ir->ops[j];
    bool reads = false;
    for (int i = 0; i < op->num_inputs; i++) reads |= op->inputs[i] == t;
    if (!reads || shape_op(op->def) != SHAPE_NONE) continue;
    if (!op->def->infer) return false;
    recap__op_call call = {.def = op->def,
                           .num_inputs = op->num_inputs,
                           .num_outputs = op->num_outputs,
                           .attrs = op->attrs};
    for (int i = 0; i < op->num_inputs; i++) call.inputs[i] = views[op->inputs[i]];
    if (recap__op_infer(&call) != RECAP_OK) return false;
  }
  return true;
}

/* Backward view (docs/PLANNER.md): op j's input becomes a view of its output, if that layout
 * forms and x's producer writes it in every bucket (largest first, as try_forward). */
static bool try_backward(planner *p, int j, const int *alias_write) {
  const recap__ir *ir = p->ir;
  const recap__ir_op *op = &ir->ops[j];
  shape_kind kind = shape_op(op->def);
  if (kind != SHAPE_RESHAPE && kind != SHAPE_PERMUTE && kind != SHAPE_TRANSPOSE) return false;
  if (op->num_inputs != 1 || op->num_outputs != 1) return false;
  int x = op->inputs[0], y = op->outputs[0];
  const recap__ir_tensor *X = &ir->tensors[x], *Y = &ir->tensors[y];
  if (x == y || X->role != RECAP_ROLE_INTERMEDIATE || X->is_output || p->alias[x] >= 0 ||
      p->readers[x] != 1 || alias_write[x] >= 0)
    return false;
  if (Y->role != RECAP_ROLE_INTERMEDIATE || Y->is_output || p->alias[y] >= 0 ||
      alias_write[y] >= 0 || p->bytes[x] != p->bytes[y])
    return false;
  int w = p->producer[x];
  if (w < 0 || shape_op(ir->ops[w].def) != SHAPE_NONE || ir->ops[w].outputs[0] != x) return false;
  recap_tensor *v = p->view_scratch;
  int64_t *off = p->offset_scratch;
  for (int b = p->num_buckets - 1; b >= 0; b--)
    if (!derive_backward(p->irs[b], j, view_at(p, b, y), *offset_at(p, b, y), &v[b], &off[b]) ||
        !writes_strided_output(p->irs[b]->ops[w].def, &v[b])) {
      if (b < p->num_buckets - 1) p->refused_by_bucket = true;
      return false;
    }
  for (int b = 0; b < p->num_buckets; b++) {
    *view_at(p, b, x) = v[b];
    *offset_at(p, b, x) = off[b];
  }
  p->alias[x] = y;
  p->root[x] = p->root[y];
  p->plan->tensors[x].view_of = y;
  p->plan->tensors[x].view_op = j;
  p->plan->op_is_view[j] = true;
  return true;
}

/* Puts bucket b's candidate layouts for op j's outputs (v[b * n + o]) in place, keeping the
 * old ones in v: calling it twice restores them. */
static void swap_layouts(planner *p, const recap__ir_op *op, int b, recap_tensor *v) {
  int n = op->num_outputs;
  for (int o = 0; o < n; o++) {
    recap_tensor keep = *view_at(p, b, op->outputs[o]);
    *view_at(p, b, op->outputs[o]) = v[b * n + o];
    v[b * n + o] = keep;
  }
}

/* Forward views (docs/PLANNER.md): op j's outputs become views of its input, if every part
 * forms, is aligned and is accepted by its readers in every bucket. Buckets are tried largest
 * first, so a refusal by a smaller one is known (p->refused_by_bucket). The input's memory may
 * have been written in place before op j (a kv_append into a cache, then a permute of the
 * cache for attention): the view then reads what a copy would have read. A write after op j
 * would show through the view to its later readers, so that memory keeps the copy. */
static bool try_forward(planner *p, int j, const int *alias_write) {
  const recap__ir *ir = p->ir;
  const recap__ir_op *op = &ir->ops[j];
  int n = op->num_outputs, B = p->num_buckets;
  if (op->num_inputs != 1 || n < 1 || n > RECAP_OP_MAX_OUTPUTS) return false;
  int x = op->inputs[0];
  if (alias_write[p->root[x]] > j) return false;
  for (int o = 0; o < n; o++) {
    int y = op->outputs[o];
    const recap__ir_tensor *Y = &ir->tensors[y];
    if (y == x || p->alias[y] >= 0 || Y->is_output || Y->role != RECAP_ROLE_INTERMEDIATE ||
        alias_write[y] >= 0)
      return false;
  }
  /* Candidates per bucket and output: v[b * n + o]. Readers are checked with a bucket's new
   * layouts in place (an op may read two of the parts). */
  recap_tensor *v = p->view_scratch;
  int64_t *off = p->offset_scratch;
  int b = B - 1;
  for (; b >= 0; b--) {
    bool ok = true;
    for (int o = 0; o < n && ok; o++)
      ok = derive_forward(p->irs[b], j, o, view_at(p, b, x), *offset_at(p, b, x), &v[b * n + o],
                          &off[b * n + o]) &&
           offset_aligned(p->irs[b], op->outputs[o], off[b * n + o]);
    if (!ok) break;
    swap_layouts(p, op, b, v);
    for (int o = 0; o < n && ok; o++)
      ok = readers_accept(p->irs[b], view_at(p, b, 0), op->outputs[o]);
    if (!ok) {
      swap_layouts(p, op, b, v);
      break;
    }
  }
  if (b >= 0) {
    /* Back to the old layouts (contiguous at 0: these outputs were no view yet). */
    for (int k = b + 1; k < B; k++) swap_layouts(p, op, k, v);
    if (b < B - 1) p->refused_by_bucket = true;
    return false;
  }
  for (int o = 0; o < n; o++) {
    int y = op->outputs[o];
    for (int k = 0; k < B; k++) *offset_at(p, k, y) = off[k * n + o];
    p->alias[y] = x;
    p->root[y] = p->root[x];
    p->plan->tensors[y].view_of = x;
    p->plan->tensors[y].view_op = j;
  }
  p->plan->op_is_view[j] = true;
  return true;
}

/* Makes shape ops views where the rules allow (docs/PLANNER.md), in op order (a view's layout
 * derives from its source's, decided earlier), backward first. alias_write[loc]: the last op
 * that writes location loc in place (an alias over its input), or -1. */
recap_status recap__plan_choose_views(planner *p, int *alias_write) {
  const recap__ir *ir = p->ir;
  for (int t = 0; t < p->num_tensors; t++) {
    alias_write[t] = -1;
    for (int b = 0; b < p->num_buckets; b++) {
      *view_at(p, b, t) = contiguous_layout(&p->irs[b]->tensors[t]);
      *offset_at(p, b, t) = 0;
    }
    p->plan->tensors[t].view_of = p->alias[t];
    p->plan->tensors[t].view_op = -1;
  }
  for (int j = 0; j < p->num_ops; j++)
    for (int o = 0; o < ir->ops[j].num_outputs; o++)
      if (writes_alias(p, j, o)) alias_write[p->root[ir->ops[j].outputs[o]]] = j;
  for (int j = 0; j < p->num_ops; j++) {
    if (shape_op(ir->ops[j].def) == SHAPE_NONE) continue;
    p->refused_by_bucket = false;
    if (!try_backward(p, j, alias_write) && !try_forward(p, j, alias_write))
      p->plan->op_copies_for_buckets[j] = p->refused_by_bucket;
  }
  return recap__plan_find_roots(p);
}

recap_status recap__plan_views(const recap__ir *ir, const recap__plan *plan, recap_tensor *views,
                               int64_t *offsets) {
  RECAP_CHECK_ARG(ir && plan && views && offsets);
  if (ir->num_tensors != plan->num_tensors || ir->num_ops != plan->num_ops)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "the plan was made for another IR (%zu/%zu tensors, %zu/%zu ops)",
                      plan->num_tensors, ir->num_tensors, plan->num_ops, ir->num_ops);
  size_t n = ir->num_tensors;
  unsigned char *done = malloc(n ? n : 1);
  if (!done) return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for %zu views", n);
  for (size_t t = 0; t < n; t++) {
    views[t] = contiguous_layout(&ir->tensors[t]);
    offsets[t] = 0;
    done[t] = plan->tensors[t].kind != RECAP_PLAN_VIEW || plan->tensors[t].view_of < 0;
  }
  recap_status st = RECAP_OK;
  /* Each pass resolves the views whose source is resolved; a chain of k views takes k. */
  for (bool progress = true; progress;) {
    progress = false;
    for (size_t t = 0; t < n; t++) {
      const recap__plan_tensor *pt = &plan->tensors[t];
      if (done[t]) continue;
      if (pt->view_of < 0 || (size_t)pt->view_of >= n ||
          (pt->view_op >= 0 && (size_t)pt->view_op >= ir->num_ops)) {
        st = RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "tensor '%s' is a view of nothing valid",
                        tensor_name(ir, (int)t));
        goto done;
      }
      int src = pt->view_of;
      if (!done[src]) continue;
      bool ok = true;
      if (pt->view_op < 0) {
        /* The IR's alias: the memory and layout of its source (kv_append's cache). */
        for (int d = 0; d < views[t].ndim; d++) views[t].strides[d] = views[src].strides[d];
        offsets[t] = offsets[src];
        ok = views[t].ndim == views[src].ndim;
      } else {
        const recap__ir_op *op = &ir->ops[pt->view_op];
        int o = -1;
        for (int k = 0; k < op->num_outputs; k++)
          if (op->outputs[k] == (int)t) o = k;
        if (o >= 0 && op->num_inputs > 0 && op->inputs[0] == src)
          ok =
              derive_forward(ir, pt->view_op, o, &views[src], offsets[src], &views[t], &offsets[t]);
        else if (op->num_inputs > 0 && op->inputs[0] == (int)t && op->num_outputs == 1 &&
                 op->outputs[0] == src)
          ok = derive_backward(ir, pt->view_op, &views[src], offsets[src], &views[t], &offsets[t]);
        else
          ok = false;
        ok = ok && offset_aligned(ir, (int)t, offsets[t]);
      }
      if (!ok) {
        st = RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                        "tensor '%s' is planned as a view of '%s', but no view expresses it "
                        "with these shapes",
                        tensor_name(ir, (int)t), tensor_name(ir, src));
        goto done;
      }
      done[t] = 1;
      progress = true;
    }
  }
  for (size_t t = 0; t < n; t++)
    if (!done[t]) {
      st = RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "tensor '%s' has a cyclic view chain",
                      tensor_name(ir, (int)t));
      goto done;
    }
  for (size_t t = 0; t < n; t++) {
    const recap__plan_tensor *pt = &plan->tensors[t];
    if (pt->kind != RECAP_PLAN_VIEW || pt->view_op < 0) continue;
    bool ok = readers_accept(ir, views, (int)t);
    /* A backward view is written by its producer through its strides. */
    int w = ir->tensors[t].producer;
    if (ok && ir->ops[pt->view_op].inputs[0] == (int)t)
      ok = w >= 0 && (size_t)w < ir->num_ops && writes_strided_output(ir->ops[w].def, &views[t]);
    if (!ok) {
      st = RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "tensor '%s' is planned as a strided view, but with these shapes an op "
                      "cannot use that layout",
                      tensor_name(ir, (int)t));
      goto done;
    }
  }
done:
  free(done);
  return st;
}
