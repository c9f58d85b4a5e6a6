/* plan.c: lifetimes, in-place reuse, cross-stream waits and arena offsets (see plan.h). */
#include "engine/plan.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/env.h"
#include "runtime/error.h"
#include "runtime/text.h"

/* No tensor may exceed this many bytes: it keeps every sum of sizes below SIZE_MAX. */
#define MAX_TENSOR_BYTES ((size_t)1 << 56)

typedef struct {
  size_t bytes; /* rounded up to RECAP_PLAN_ALIGNMENT */
  int first, last;
  int root;
  bool live_to_end;
  bool merged; /* merged into another buffer by an in-place op; no longer a buffer itself */
} work_buffer;

typedef struct {
  const recap__ir *ir; /* the largest bucket's: sizes, offsets and lifetimes come from it */
  /* Every bucket's IR, ascending (irs[num_buckets - 1] == ir): a view or an in-place write is
   * chosen only where it works in all of them, since every bucket runs on this one plan. */
  const recap__ir *const *irs;
  int num_buckets;
  recap__plan *plan;
  int num_ops, num_tensors, num_streams;
  /* Per tensor: the tensor whose memory it uses, or -1: the IR's alias_of (kv_append), or
   * for a reshape the planner turned into a view, the reshape's input. */
  int *alias;
  int *root;          /* per tensor: alias followed to its end */
  int *producer;      /* per tensor: the op that lists it as an output, or -1 */
  int *last_consumer; /* per tensor: the last op that reads it, or -1 */
  int *readers;       /* per tensor: input slots reading it */
  /* Per bucket and tensor ([b * num_tensors + t]): its layout (shape, strides; data unused)
   * and element offset in its alias root's memory, as decided so far: contiguous at 0 until a
   * view decision changes it. view_scratch holds one op's candidate layouts per bucket. */
  recap_tensor *views;
  int64_t *view_offset;
  recap_tensor *view_scratch;
  int64_t *offset_scratch;
  bool refused_by_bucket; /* the last view tried worked in the largest bucket, not in another */
  size_t *bytes;          /* per tensor */
  /* Happens-before, only with several streams, as vector clocks: clock[j * S + s] is the
   * last op on stream s that ends before op j starts (stream order and waits, transitively),
   * or -1. Ops on one stream run in order, so op i happens before op j exactly when i is no
   * later on its stream than clock[j][stream of i]: n * S ints instead of an n * n table. */
  int *clock;
  size_t waits_capacity;
  /* Buffers while planning: one per arena root tensor, indexed like tensors (buffer_of maps a
   * group root to the buffer it ended up in after in-place merges). */
  work_buffer *work;
  int *buffer_of;
  /* Per buffer (same indexing as work) and stream: the last op accessing it there, or -1. */
  int *stream_last;
} planner;

static bool is_view_op(const planner *p, int j) {
  return p->plan->op_is_view[j];
}

static const char *tensor_name(const recap__ir *ir, int t) {
  const char *name = ir->tensors[t].name;
  return name ? name : "?";
}

static const char *op_name(const recap__ir *ir, int j) {
  const char *name = ir->ops[j].name;
  return name ? name : "?";
}

static size_t align_up(size_t bytes) {
  return (bytes + (RECAP_PLAN_ALIGNMENT - 1)) / RECAP_PLAN_ALIGNMENT * RECAP_PLAN_ALIGNMENT;
}

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
    if (x->shape[d] != 0 && bytes > MAX_TENSOR_BYTES / (uint64_t)x->shape[d])
      return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "tensor '%s' is larger than 2^56 bytes",
                        tensor_name(ir, t));
    bytes *= (size_t)x->shape[d];
  }
  *out = bytes;
  return RECAP_OK;
}

/* An intermediate that starts its own arena buffer (possibly merged into another later). */
static bool is_arena_root(const planner *p, int t) {
  const recap__ir_tensor *x = &p->ir->tensors[t];
  return x->role == RECAP_ROLE_INTERMEDIATE && !x->is_output && p->alias[t] < 0;
}

/* ---- checking the IR and deriving producers, consumers and alias roots ---------------- */

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

/* Follows alias[] from every tensor to its root; more steps than tensors means a cycle. */
static recap_status find_roots(planner *p) {
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

/* Whether output o of op j writes memory that already exists: an alias over the op's in-place
 * input (kv_append into its cache). A plain view (reshape) writes nothing. */
static bool writes_alias(const planner *p, int j, int o) {
  const recap__ir_op *op = &p->ir->ops[j];
  int y = op->outputs[o], k = op->def->in_place_input;
  return p->alias[y] >= 0 && k >= 0 && k < op->num_inputs && p->root[op->inputs[k]] == p->root[y];
}

/* ---- views ----------------------------------------------------------------------------- */

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
static shape_kind shape_op(const recap_op_def *def) {
  static const struct {
    const char *name;
    shape_kind kind;
  } table[] = {{"reshape", SHAPE_RESHAPE},
               {"permute", SHAPE_PERMUTE},
               {"transpose", SHAPE_TRANSPOSE},
               {"slice", SHAPE_SLICE},
               {"split", SHAPE_SPLIT}};
  const char *name = def && def->name ? def->name : "";
  for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
    if (strcmp(name, table[i].name) == 0) return table[i].kind;
  return SHAPE_NONE;
}

/* Whether op `def` writes its output 0 through the strides of `view` on every backend: the
 * op says it does (op.h, strided_output) for layouts whose last dim is unit-stride. */
static bool writes_strided_output(const recap_op_def *def, const recap_tensor *view) {
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
  const recap_op_attrs *a = &op->attrs;
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
  const recap_op_attrs *a = &op->attrs;
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
    recap_op_call call = {.def = op->def,
                          .num_inputs = op->num_inputs,
                          .num_outputs = op->num_outputs,
                          .attrs = op->attrs};
    for (int i = 0; i < op->num_inputs; i++) call.inputs[i] = views[op->inputs[i]];
    if (recap__op_infer(&call) != RECAP_OK) return false;
  }
  return true;
}

/* Layout and offset of tensor t in bucket b, as decided so far. */
static recap_tensor *view_at(const planner *p, int b, int t) {
  return &p->views[(size_t)b * (size_t)p->num_tensors + (size_t)t];
}

static int64_t *offset_at(const planner *p, int b, int t) {
  return &p->view_offset[(size_t)b * (size_t)p->num_tensors + (size_t)t];
}

/* Backward view (plan.h): op j's input becomes a view of its output, if that layout forms
 * and x's producer writes it in every bucket (largest first, as try_forward). */
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

/* Forward views (plan.h): op j's outputs become views of its input, if every part forms, is
 * aligned and is accepted by its readers in every bucket. Buckets are tried largest first, so
 * a refusal by a smaller one is known (p->refused_by_bucket). The input's memory may have been
 * written in place before op j (a kv_append into a cache, then a permute of the cache for
 * attention): the view then reads what a copy would have read. A write after op j would show
 * through the view to its later readers, so that memory keeps the copy. */
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

/* Makes shape ops views where plan.h's rules allow, in op order (a view's layout derives from
 * its source's, decided earlier), backward first. alias_write[loc]: the last op that writes
 * location loc in place (an alias over its input), or -1. */
static recap_status choose_views(planner *p, int *alias_write) {
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
  return find_roots(p);
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
  RECAP_TRY(find_roots(p));
  for (int t = 0; t < p->num_tensors; t++)
    if (is_arena_root(p, t) && p->producer[t] < 0)
      return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                        "intermediate tensor '%s' is produced by no op", tensor_name(ir, t));
  return RECAP_OK;
}

/* ---- happens-before and waits ---------------------------------------------------------- */

static bool happens_before(const planner *p, int i, int j) {
  if (i >= j) return false;
  int s = p->ir->ops[i].stream;
  return s == p->ir->ops[j].stream || p->clock[(size_t)j * p->num_streams + s] >= i;
}

/* Op j starts after op i ends: j inherits everything before i, and i itself. */
static void clock_merge(planner *p, int j, int i) {
  int *dst = &p->clock[(size_t)j * p->num_streams];
  const int *src = &p->clock[(size_t)i * p->num_streams];
  for (int s = 0; s < p->num_streams; s++)
    if (src[s] > dst[s]) dst[s] = src[s];
  int *own = &dst[p->ir->ops[i].stream];
  if (i > *own) *own = i;
}

static recap_status add_wait(planner *p, int waiter, int waited) {
  recap__plan *plan = p->plan;
  if (plan->num_waits == p->waits_capacity) {
    size_t cap = p->waits_capacity ? 2 * p->waits_capacity : 16;
    recap__plan_wait *grown = realloc(plan->waits, cap * sizeof *grown);
    if (!grown) return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for plan waits");
    plan->waits = grown;
    p->waits_capacity = cap;
  }
  plan->waits[plan->num_waits++] = (recap__plan_wait){.waiter = waiter, .waited = waited};
  return RECAP_OK;
}

static int compare_int_desc(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  return (x < y) - (x > y);
}

/* Walks the ops in order keeping, per memory location (an alias root), its last writer and
 * its last reader on each stream since that write. An op needs every earlier access on
 * another stream that conflicts with its own (read after write, write after read or write)
 * ordered before it; one wait per such op unless stream order and earlier waits already
 * imply it. Candidates go latest first, since waiting on a late op often covers earlier ones.
 * Arena reuse between DIFFERENT tensors is not a data dependency and is handled by keeping
 * unordered tensors apart (see plan.h). */
static recap_status compute_waits(planner *p) {
  const recap__ir *ir = p->ir;
  recap_status st = RECAP_OK;
  int S = p->num_streams;
  size_t nt = p->num_tensors ? (size_t)p->num_tensors : 1;
  int *last_write = malloc(nt * sizeof *last_write);
  int *last_read = malloc(nt * (size_t)S * sizeof *last_read);
  int *prev_on_stream = malloc((size_t)S * sizeof *prev_on_stream);
  int *cand = malloc((size_t)(RECAP_OP_MAX_INPUTS + RECAP_OP_MAX_OUTPUTS * (1 + S)) * sizeof *cand);
  if (!last_write || !last_read || !prev_on_stream || !cand) {
    st = RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for stream dependencies");
    goto done;
  }
  for (int t = 0; t < p->num_tensors; t++) last_write[t] = -1;
  for (size_t i = 0; i < (size_t)p->num_tensors * (size_t)S; i++) last_read[i] = -1;
  for (int s = 0; s < S; s++) prev_on_stream[s] = -1;

  for (int j = 0; j < p->num_ops; j++) {
    const recap__ir_op *op = &ir->ops[j];
    int n = 0;
    if (is_view_op(p, j)) {
      /* Touches no memory: it only keeps its place in its stream's order. */
      if (prev_on_stream[op->stream] >= 0) clock_merge(p, j, prev_on_stream[op->stream]);
      prev_on_stream[op->stream] = j;
      continue;
    }
    for (int i = 0; i < op->num_inputs; i++) {
      int loc = p->root[op->inputs[i]];
      if (last_write[loc] >= 0) cand[n++] = last_write[loc];
    }
    for (int o = 0; o < op->num_outputs; o++) {
      /* Fresh memory has no earlier access to order against; memory that already exists
       * (a kv_append's cache, a backward view's root) may. */
      if (p->alias[op->outputs[o]] < 0) continue;
      int loc = p->root[op->outputs[o]];
      if (last_write[loc] >= 0) cand[n++] = last_write[loc];
      for (int s = 0; s < S; s++)
        if (last_read[(size_t)loc * S + s] >= 0) cand[n++] = last_read[(size_t)loc * S + s];
    }
    int prev = prev_on_stream[op->stream];
    if (prev >= 0) clock_merge(p, j, prev);
    qsort(cand, (size_t)n, sizeof *cand, compare_int_desc);
    for (int c = 0; c < n; c++) {
      int i = cand[c];
      if (i == j || (c > 0 && cand[c - 1] == i) || happens_before(p, i, j)) continue;
      RECAP_TRY_GOTO(st, add_wait(p, j, i), done);
      clock_merge(p, j, i);
    }
    /* Reads first: an op that reads and writes one location leaves only the write. */
    for (int i = 0; i < op->num_inputs; i++)
      last_read[(size_t)p->root[op->inputs[i]] * S + op->stream] = j;
    for (int o = 0; o < op->num_outputs; o++) {
      int loc = p->root[op->outputs[o]];
      last_write[loc] = j;
      for (int s = 0; s < S; s++) last_read[(size_t)loc * S + s] = -1;
    }
    prev_on_stream[op->stream] = j;
  }
done:
  free(last_write);
  free(last_read);
  free(prev_on_stream);
  free(cand);
  return st;
}

/* ---- buffers and in-place reuse -------------------------------------------------------- */

/* Records that op j accesses the buffer starting at arena root r. */
static void note_access(planner *p, int r, int j) {
  work_buffer *b = &p->work[r];
  if (j < b->first) b->first = j;
  if (j > b->last) b->last = j;
  if (p->stream_last) {
    int *slot = &p->stream_last[(size_t)r * p->num_streams + p->ir->ops[j].stream];
    if (j > *slot) *slot = j;
  }
}

/* Every access of buffer b (other than op j itself) is ordered before op j. */
static bool buffer_ordered_before(const planner *p, int b, int j) {
  if (!p->stream_last) return p->work[b].last <= j;
  for (int s = 0; s < p->num_streams; s++) {
    int last = p->stream_last[(size_t)b * p->num_streams + s];
    if (last >= 0 && last != j && !happens_before(p, last, j)) return false;
  }
  return true;
}

/* One buffer per arena root holding the accesses of the root and of every view of it, by the
 * ops that really run (a shape op made a view touches nothing). It starts at the first of
 * them: the root's producer, or for a backward view's root the producer of the view. */
static void collect_buffers(planner *p) {
  const recap__ir *ir = p->ir;
  for (int t = 0; t < p->num_tensors; t++) {
    p->buffer_of[t] = -1;
    if (!is_arena_root(p, t)) continue;
    p->buffer_of[t] = t;
    p->work[t] =
        (work_buffer){.bytes = align_up(p->bytes[t]), .first = INT_MAX, .last = -1, .root = t};
  }
  if (p->stream_last)
    for (size_t i = 0; i < (size_t)p->num_tensors * p->num_streams; i++) p->stream_last[i] = -1;
  for (int j = 0; j < p->num_ops; j++) {
    const recap__ir_op *op = &ir->ops[j];
    if (is_view_op(p, j)) continue;
    for (int i = 0; i < op->num_inputs; i++)
      if (p->buffer_of[p->root[op->inputs[i]]] >= 0) note_access(p, p->root[op->inputs[i]], j);
    for (int o = 0; o < op->num_outputs; o++) {
      int y = op->outputs[o], r = p->root[y];
      if (p->buffer_of[r] < 0) continue;
      note_access(p, r, j);
      if (ir->tensors[y].is_output) p->work[r].live_to_end = true;
    }
  }
  /* Every arena root is written by a real op; the producer is a safe default regardless. */
  for (int t = 0; t < p->num_tensors; t++)
    if (p->buffer_of[t] == t && p->work[t].first == INT_MAX)
      p->work[t].first = p->work[t].last = p->producer[t];
}

/* Whether op j may write its output 0 over its in-place input, per plan.h's rules. */
static bool can_write_in_place(const planner *p, int j) {
  const recap__ir_op *op = &p->ir->ops[j];
  int k = op->def->in_place_input;
  if (k < 0 || k >= op->num_inputs || op->num_outputs < 1) return false;
  int y = op->outputs[0], x = op->inputs[k];
  if (!is_arena_root(p, y) || p->buffer_of[p->root[x]] < 0) return false;
  /* Writing element i over a strided or offset view would clobber elements not read yet;
   * the output overlays the input element for element, so their sizes must match. In every
   * bucket, since every bucket runs on this plan. */
  for (int b = 0; b < p->num_buckets; b++) {
    const recap__ir *bir = p->irs[b];
    if (*offset_at(p, b, x) != 0 || !recap__tensor_is_contiguous(view_at(p, b, x)) ||
        bir->tensors[y].dtype != bir->tensors[x].dtype ||
        recap__tensor_numel(view_at(p, b, y)) != recap__tensor_numel(view_at(p, b, x)))
      return false;
  }
  if (p->bytes[y] != p->bytes[x]) return false;
  int b = p->buffer_of[p->root[x]];
  const work_buffer *buf = &p->work[b];
  if (buf->live_to_end || buf->last != j) return false;
  for (int i = 0; i < op->num_inputs; i++)
    if (i != k && p->buffer_of[p->root[op->inputs[i]]] == b) return false;
  return buffer_ordered_before(p, b, j);
}

static void merge_in_place(planner *p, int j) {
  const recap__ir_op *op = &p->ir->ops[j];
  int y = op->outputs[0], x = op->inputs[op->def->in_place_input];
  int b = p->buffer_of[p->root[x]];
  work_buffer *into = &p->work[b], *from = &p->work[y];
  if (from->bytes > into->bytes) into->bytes = from->bytes;
  if (from->last > into->last) into->last = from->last;
  into->live_to_end |= from->live_to_end;
  from->merged = true;
  if (p->stream_last)
    for (int s = 0; s < p->num_streams; s++) {
      int *dst = &p->stream_last[(size_t)b * p->num_streams + s];
      int src = p->stream_last[(size_t)y * p->num_streams + s];
      if (src > *dst) *dst = src;
    }
  p->buffer_of[y] = b;
  recap__plan_tensor *pt = &p->plan->tensors[y];
  pt->kind = RECAP_PLAN_IN_PLACE;
  pt->shares_with = x;
}

/* ---- offsets --------------------------------------------------------------------------- */

typedef struct {
  const recap__plan_buffer *buffers;
  /* With several streams, per buffer and stream: the first op on that stream that every
   * access of the buffer happens before (INT_MAX: none). NULL with one stream. */
  const int *ready;
  const int *first_stream; /* per buffer: the stream of its first op (with ready) */
  int num_streams;
} conflict_ctx;

/* Whether buffers a and b (compact indices) must not share bytes: their lifetimes overlap,
 * or the earlier one has an access not ordered before the later one's first write. */
static bool conflicts(const conflict_ctx *c, int a, int b) {
  const recap__plan_buffer *A = &c->buffers[a], *B = &c->buffers[b];
  if (A->first_op <= B->last_op && B->first_op <= A->last_op) return true;
  if (!c->ready) return false;
  int early = A->last_op < B->first_op ? a : b;
  int late_first = early == a ? B->first_op : A->first_op;
  int late_stream = c->first_stream[early == a ? b : a];
  return late_first < c->ready[(size_t)early * c->num_streams + late_stream];
}

/* Fills ready (see conflict_ctx). Along one stream "every access of b happens before op j"
 * can only turn from false to true, so a binary search over the stream's ops finds where. */
static recap_status compute_ready(const planner *p, const int *ids, size_t n, int **out,
                                  int **first_stream) {
  int S = p->num_streams;
  int *ready = malloc(n * (size_t)S * sizeof *ready);
  int *first = malloc(n * sizeof *first);
  int *by_stream = malloc((p->num_ops ? (size_t)p->num_ops : 1) * sizeof *by_stream);
  int *stream_start = calloc((size_t)S + 1, sizeof *stream_start);
  if (!ready || !first || !by_stream || !stream_start) {
    free(ready);
    free(first);
    free(by_stream);
    free(stream_start);
    return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for the stream order");
  }
  /* Ops grouped by stream, in index order (a counting sort). */
  for (int j = 0; j < p->num_ops; j++) stream_start[p->ir->ops[j].stream + 1]++;
  for (int s = 0; s < S; s++) stream_start[s + 1] += stream_start[s];
  for (int j = 0; j < p->num_ops; j++) by_stream[stream_start[p->ir->ops[j].stream]++] = j;
  /* Filling moved each start to the next stream's start: shift them back. */
  for (int s = S; s > 0; s--) stream_start[s] = stream_start[s - 1];
  stream_start[0] = 0;
  for (size_t b = 0; b < n; b++) first[b] = p->ir->ops[p->work[ids[b]].first].stream;
  for (size_t b = 0; b < n; b++)
    for (int s = 0; s < S; s++) {
      int lo = stream_start[s], hi = stream_start[s + 1]; /* answer in [lo, hi] */
      while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (buffer_ordered_before(p, ids[b], by_stream[mid]) &&
            by_stream[mid] > p->work[ids[b]].last)
          hi = mid;
        else
          lo = mid + 1;
      }
      ready[b * S + s] = lo < stream_start[s + 1] ? by_stream[lo] : INT_MAX;
    }
  free(by_stream);
  free(stream_start);
  *out = ready;
  *first_stream = first;
  return RECAP_OK;
}

static size_t span(const recap__plan_buffer *b) {
  return (size_t)(b->last_op - b->first_op);
}

/* A buffer's position in one greedy order: keys compared ascending, then the index, so every
 * order is total and the plan deterministic. (qsort takes no context, hence explicit keys.) */
typedef struct {
  size_t key[3];
  int index;
} sort_entry;

enum { NUM_ORDERS = 3 };

/* Order 0: largest first (TFLite's greedy by size); 1: longest lifetime first; 2: by start,
 * like a linear scan. Descending keys are stored as SIZE_MAX - value. */
static sort_entry sort_key(const recap__plan_buffer *b, int index, int order) {
  size_t size = SIZE_MAX - b->bytes, length = SIZE_MAX - span(b), start = (size_t)b->first_op;
  sort_entry e = {.index = index};
  if (order == 0) {
    e.key[0] = size, e.key[1] = length, e.key[2] = start;
  } else if (order == 1) {
    e.key[0] = length, e.key[1] = size, e.key[2] = start;
  } else {
    e.key[0] = start, e.key[1] = size, e.key[2] = length;
  }
  return e;
}

static int compare_entries(const void *l, const void *r) {
  const sort_entry *a = l, *b = r;
  for (int k = 0; k < 3; k++)
    if (a->key[k] != b->key[k]) return a->key[k] < b->key[k] ? -1 : 1;
  return (a->index > b->index) - (a->index < b->index);
}

/* Places buffers in `order`, each into the smallest gap between the already placed buffers
 * it conflicts with that holds it, else above them. `placed` is kept sorted by offset, so
 * the gaps come out in one sweep without sorting per buffer. Returns the arena size. */
static size_t place_greedy(const conflict_ctx *c, size_t n, const int *order, size_t *offsets,
                           int *placed) {
  size_t num_placed = 0, arena = 0;
  for (size_t k = 0; k < n; k++) {
    int b = order[k];
    size_t size = c->buffers[b].bytes, cursor = 0, best = SIZE_MAX, best_gap = SIZE_MAX;
    for (size_t q = 0; q < num_placed && size > 0; q++) {
      int other = placed[q];
      if (!conflicts(c, b, other)) continue;
      size_t start = offsets[other], end = start + c->buffers[other].bytes;
      if (start > cursor && start - cursor >= size && start - cursor < best_gap) {
        best = cursor;
        best_gap = start - cursor;
      }
      if (end > cursor) cursor = end;
    }
    offsets[b] = size == 0 ? 0 : best != SIZE_MAX ? best : cursor;
    if (offsets[b] + size > arena) arena = offsets[b] + size;
    size_t at = num_placed;
    while (at > 0 && offsets[placed[at - 1]] > offsets[b]) at--;
    memmove(&placed[at + 1], &placed[at], (num_placed - at) * sizeof *placed);
    placed[at] = b;
    num_placed++;
  }
  return arena;
}

/* Work allowed for improving the greedy orders, in buffer pairs examined (one greedy pass over
 * n buffers examines about n^2 / 2): a fraction of a second at most, whatever the pipeline. */
#define IMPROVE_BUDGET ((uint64_t)1 << 24)

/* trial = order with the element at position `from` moved to position `to`. */
static void move_one(const int *order, size_t n, size_t from, size_t to, int *trial) {
  size_t w = 0;
  for (size_t r = 0; r < n; r++) {
    if (r == from) continue;
    if (w == to) trial[w++] = order[from];
    trial[w++] = order[r];
  }
  if (w == to) trial[w] = order[from];
}

/* Local search over greedy orders: move one buffer to another position, re-run the greedy,
 * keep the first order that shrinks the arena, and start over, until no move helps, the arena
 * reaches the lower bound, or the budget is spent. The optimum is the greedy result of SOME
 * order (sort the buffers by their optimal offsets), so searching orders is searching the
 * right space; single moves repair what size-sorted orders typically get wrong (a large buffer
 * placed first where smaller ones with the same lifetime should have gone). */
static size_t improve_order(const conflict_ctx *c, size_t n, int *order, size_t best,
                            size_t lower_bound, int *trial, int *placed, size_t *offsets,
                            uint64_t *spent) {
  uint64_t cost = (uint64_t)n * n / 2 + 1;
  bool improved = true;
  while (improved && best > lower_bound) {
    improved = false;
    for (size_t from = 0; from < n && !improved; from++)
      for (size_t to = 0; to < n && !improved; to++) {
        if (to == from || to == from + 1) continue; /* no move, or the same as from+1 -> from */
        if (*spent + cost > IMPROVE_BUDGET) return best;
        *spent += cost;
        move_one(order, n, from, to, trial);
        size_t arena = place_greedy(c, n, trial, offsets, placed);
        if (arena >= best) continue;
        best = arena;
        memcpy(order, trial, n * sizeof *order);
        improved = true;
      }
  }
  return best;
}

/* ---- the lower bound with several streams ---------------------------------------------- */

/* A flow network for Dinic's max flow: edge e goes to to[e] with residual capacity cap[e];
 * e ^ 1 is its reverse; next[e] chains the edges out of one node from head[node]. */
typedef struct {
  int num_nodes, num_edges;
  int *to, *next, *head, *level, *iter, *queue, *path;
  uint64_t *cap;
} flow_net;

static void flow_edge(flow_net *f, int from, int to, uint64_t cap) {
  int e = f->num_edges;
  f->to[e] = to, f->cap[e] = cap, f->next[e] = f->head[from], f->head[from] = e;
  f->to[e + 1] = from, f->cap[e + 1] = 0, f->next[e + 1] = f->head[to], f->head[to] = e + 1;
  f->num_edges += 2;
}

/* Levels by breadth-first search over edges with capacity left; whether the sink is reached. */
static bool flow_levels(flow_net *f, int src, int sink) {
  for (int v = 0; v < f->num_nodes; v++) f->level[v] = -1;
  int qh = 0, qt = 0;
  f->queue[qt++] = src;
  f->level[src] = 0;
  while (qh < qt) {
    int u = f->queue[qh++];
    for (int e = f->head[u]; e >= 0; e = f->next[e])
      if (f->cap[e] > 0 && f->level[f->to[e]] < 0) {
        f->level[f->to[e]] = f->level[u] + 1;
        f->queue[qt++] = f->to[e];
      }
  }
  return f->level[sink] >= 0;
}

/* One augmenting path along increasing levels (iteratively: paths may be as long as the
 * op chains); its flow, 0 when none is left in this phase. Dead ends leave the level graph. */
static uint64_t flow_augment(flow_net *f, int src, int sink) {
  int depth = 0, u = src;
  for (;;) {
    if (u == sink) {
      uint64_t pushed = UINT64_MAX;
      for (int i = 0; i < depth; i++)
        if (f->cap[f->path[i]] < pushed) pushed = f->cap[f->path[i]];
      for (int i = 0; i < depth; i++) {
        f->cap[f->path[i]] -= pushed;
        f->cap[f->path[i] ^ 1] += pushed;
      }
      return pushed;
    }
    int e = f->iter[u];
    while (e >= 0 && (f->cap[e] == 0 || f->level[f->to[e]] != f->level[u] + 1)) e = f->next[e];
    f->iter[u] = e;
    if (e >= 0) {
      f->path[depth++] = e;
      u = f->to[e];
      continue;
    }
    f->level[u] = -1;
    if (depth == 0) return 0;
    u = f->to[f->path[--depth] ^ 1];
    f->iter[u] = f->next[f->iter[u]];
  }
}

/* The heaviest set of buffers that must pairwise be apart (conflicts(): live at one op, or
 * on streams where one's accesses are not ordered before the other's write): no placement can
 * be smaller. "May share" is a partial order here (A before B when every access of A happens
 * before B's first op; happens-before is transitive), so that set is its heaviest antichain,
 * which Dilworth's theorem with weights turns into a flow: the antichain weighs the total
 * minus the max flow of
 *   source -> out(A) (A's bytes), out(A) -> in(B) (unbounded) for A before B,
 *   in(B) -> out(B) (unbounded: orders compose), in(B) -> sink (B's bytes),
 * where "A before B" runs through a chain of nodes per stream: out(A) -> the first op of each
 * stream that every access of A happens before (ready) -> the ops after it on that stream ->
 * in(B) from B's first op. O(B * S + ops) edges. Single-stream plans need none of this:
 * there conflicts are lifetime overlaps only, and the largest set live at one op is exact. */
static recap_status antichain_bound(const planner *p, const int *ready, uint64_t *out) {
  const recap__plan *plan = p->plan;
  int n = (int)plan->num_buffers, S = p->num_streams, ops = p->num_ops;
  uint64_t total = 0;
  for (int b = 0; b < n; b++) {
    if (plan->buffers[b].bytes > UINT64_MAX / 4 - total)
      return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "the intermediates overflow size_t");
    total += plan->buffers[b].bytes;
  }
  int src = 2 * n + ops, sink = src + 1, nodes = sink + 1;
  size_t max_edges = 2 * ((size_t)n * (size_t)(4 + S) + (size_t)ops);
  flow_net f = {.num_nodes = nodes};
  f.to = malloc(max_edges * sizeof *f.to);
  f.next = malloc(max_edges * sizeof *f.next);
  f.cap = malloc(max_edges * sizeof *f.cap);
  f.head = malloc((size_t)nodes * sizeof *f.head);
  f.level = malloc((size_t)nodes * sizeof *f.level);
  f.iter = malloc((size_t)nodes * sizeof *f.iter);
  f.queue = malloc((size_t)nodes * sizeof *f.queue);
  f.path = malloc((size_t)nodes * sizeof *f.path);
  int *prev_on_stream = malloc((size_t)S * sizeof *prev_on_stream);
  recap_status st = RECAP_OK;
  if (!f.to || !f.next || !f.cap || !f.head || !f.level || !f.iter || !f.queue || !f.path ||
      !prev_on_stream) {
    st = RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for the arena's lower bound");
    goto done;
  }
  uint64_t unbounded = total + 1;
  for (int v = 0; v < nodes; v++) f.head[v] = -1;
  /* Nodes: in(b) = b, out(b) = n + b, op j = 2n + j. */
  for (int s = 0; s < S; s++) prev_on_stream[s] = -1;
  for (int j = 0; j < ops; j++) {
    int s = p->ir->ops[j].stream;
    if (prev_on_stream[s] >= 0) flow_edge(&f, 2 * n + prev_on_stream[s], 2 * n + j, unbounded);
    prev_on_stream[s] = j;
  }
  for (int b = 0; b < n; b++) {
    const recap__plan_buffer *buf = &plan->buffers[b];
    flow_edge(&f, src, n + b, buf->bytes);
    flow_edge(&f, b, sink, buf->bytes);
    flow_edge(&f, b, n + b, unbounded);
    flow_edge(&f, 2 * n + buf->first_op, b, unbounded);
    /* A buffer live past the end comes before nothing. */
    for (int s = 0; s < S && buf->last_op < ops; s++)
      if (ready[(size_t)b * S + s] != INT_MAX)
        flow_edge(&f, n + b, 2 * n + ready[(size_t)b * S + s], unbounded);
  }
  uint64_t flow = 0;
  while (flow_levels(&f, src, sink)) {
    for (int v = 0; v < nodes; v++) f.iter[v] = f.head[v];
    for (uint64_t pushed; (pushed = flow_augment(&f, src, sink)) > 0;) flow += pushed;
  }
  *out = total - flow;
done:
  free(f.to);
  free(f.next);
  free(f.cap);
  free(f.head);
  free(f.level);
  free(f.iter);
  free(f.queue);
  free(f.path);
  free(prev_on_stream);
  return st;
}

static recap_status place_all(const planner *p, const int *ids) {
  recap__plan *plan = p->plan;
  size_t n = plan->num_buffers;
  if (n == 0) return RECAP_OK;
  recap_status st = RECAP_OK;
  int *ready = NULL, *first_stream = NULL;
  if (p->stream_last) {
    RECAP_TRY(compute_ready(p, ids, n, &ready, &first_stream));
    uint64_t bound = 0;
    st = antichain_bound(p, ready, &bound);
    if (st != RECAP_OK) {
      free(ready);
      free(first_stream);
      return st;
    }
    if (bound > plan->max_live_bytes) plan->max_live_bytes = (size_t)bound;
  }
  if (plan->separate) {
    /* No sharing at all: each buffer above the previous one (the binder allocates each on
     * its own anyway; the offsets keep the plan's invariants, and the sum is the naive size). */
    size_t at = 0;
    for (size_t b = 0; b < n; b++) {
      plan->buffers[b].offset = at;
      at += plan->buffers[b].bytes;
    }
    plan->arena_bytes = at;
    free(ready);
    free(first_stream);
    return RECAP_OK;
  }
  sort_entry *entries = malloc(n * sizeof *entries);
  int *order = malloc(n * sizeof *order);
  int *best_order = malloc(n * sizeof *best_order);
  int *start = malloc(n * sizeof *start);
  int *placed = malloc(n * sizeof *placed);
  size_t *offsets = malloc(n * sizeof *offsets);
  if (!entries || !order || !best_order || !start || !placed || !offsets) {
    st = RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for %zu plan buffers", n);
    goto done;
  }
  conflict_ctx c = {.buffers = plan->buffers,
                    .ready = ready,
                    .first_stream = first_stream,
                    .num_streams = p->num_streams};
  size_t best = SIZE_MAX;
  uint64_t spent = 0; /* shared by the starts: the first gets the most */
  for (int o = 0; o < NUM_ORDERS && best > plan->max_live_bytes; o++) {
    for (size_t b = 0; b < n; b++) entries[b] = sort_key(&plan->buffers[b], (int)b, o);
    qsort(entries, n, sizeof *entries, compare_entries);
    for (size_t b = 0; b < n; b++) start[b] = entries[b].index;
    size_t arena = place_greedy(&c, n, start, offsets, placed);
    arena =
        improve_order(&c, n, start, arena, plan->max_live_bytes, order, placed, offsets, &spent);
    if (arena >= best) continue;
    best = arena;
    memcpy(best_order, start, n * sizeof *start);
  }
  plan->arena_bytes = place_greedy(&c, n, best_order, offsets, placed);
  for (size_t b = 0; b < n; b++) plan->buffers[b].offset = offsets[b];
done:
  free(ready);
  free(first_stream);
  free(entries);
  free(order);
  free(best_order);
  free(start);
  free(placed);
  free(offsets);
  return st;
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
  RECAP_TRY_GOTO(st, place_all(p, ids), done);

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
  RECAP_TRY_GOTO(st, choose_views(&p, alias_write), fail);

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
  if (p.num_streams > 1) RECAP_TRY_GOTO(st, compute_waits(&p), fail);
  collect_buffers(&p);
  for (int j = 0; j < p.num_ops && !plan->separate; j++)
    if (can_write_in_place(&p, j)) merge_in_place(&p, j);
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

/* ---- recap plan's text ----------------------------------------------------------------- */

static const char *role_name(recap_tensor_role role) {
  switch (role) {
    case RECAP_ROLE_INPUT:
      return "input";
    case RECAP_ROLE_PARAM:
      return "param";
    case RECAP_ROLE_STATE:
      return "state";
    case RECAP_ROLE_SCALAR:
      return "scalar";
    case RECAP_ROLE_INTERMEDIATE:
      return "intermediate";
  }
  return "?";
}

/* "1.50 MiB (1572864 B)"-style size, into a caller's buffer. */
static const char *human(size_t bytes, char *out, size_t cap) {
  static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = (double)bytes;
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    u++;
  }
  if (u == 0)
    snprintf(out, cap, "%zu B", bytes);
  else
    snprintf(out, cap, "%.2f %s (%zu B)", v, units[u], bytes);
  return out;
}

/* Whether some op runs on stream s; stream 0, the pipeline's, counts always (the side streams
 * join it). */
static bool stream_used(const recap__ir *ir, const recap__plan *plan, int s) {
  for (size_t j = 0; s > 0 && j < plan->num_ops; j++)
    if (ir->ops[j].stream == s) return true;
  return s == 0;
}

recap_status recap__plan_format(const recap__ir *ir, const recap__plan *plan, char **text) {
  RECAP_CHECK_ARG(ir && plan && text);
  if (ir->num_tensors != plan->num_tensors || ir->num_ops != plan->num_ops)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "the plan was made for another IR (%zu/%zu tensors, %zu/%zu ops)",
                      plan->num_tensors, ir->num_tensors, plan->num_ops, ir->num_ops);
  recap__text b = {0};
  char h1[64], h2[64], h3[64];
  size_t nt = plan->num_tensors ? plan->num_tensors : 1, num_views = 0;
  recap_tensor *views = malloc(nt * sizeof *views);
  int64_t *offsets = malloc(nt * sizeof *offsets);
  if (!views || !offsets) {
    free(views);
    free(offsets);
    return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for the plan's text");
  }
  /* The plan was checked when built; should its views not form for this IR, the table says
   * so by leaving their strides out. */
  recap_status views_st = recap__plan_views(ir, plan, views, offsets);
  if (views_st == RECAP_STATUS_OUT_OF_MEMORY) {
    free(views);
    free(offsets);
    return views_st;
  }
  if (views_st != RECAP_OK) {
    free(views);
    free(offsets);
    views = NULL;
    offsets = NULL;
  }
  for (size_t j = 0; j < plan->num_ops; j++) num_views += plan->op_is_view[j];
  /* Streams are numbered by the spec (0 to 63): count the ones in use, not the highest + 1. */
  int used = 0;
  for (int s = 0; s < plan->num_streams; s++) used += stream_used(ir, plan, s);
  recap__text_put(&b, "plan for '%s': %zu ops, %zu tensors, %d stream%s", ir->name ? ir->name : "?",
                  plan->num_ops, plan->num_tensors, used, used == 1 ? "" : "s");
  for (int s = 0, listed = 0; used > 1 && s < plan->num_streams; s++)
    if (stream_used(ir, plan, s)) recap__text_put(&b, "%s%d", listed++ ? ", " : " (", s);
  recap__text_put(&b, "%s, %zu arena buffer(s)\n", used > 1 ? ")" : "", plan->num_buffers);
  recap__text_put(
      &b, "views: %zu shape op(s) planned as views (they launch nothing and copy nothing)\n",
      num_views);
  for (size_t j = 0; j < plan->num_ops; j++)
    if (plan->op_copies_for_buckets[j])
      recap__text_put(&b,
                      "  '%s' copies: a view of it works in this bucket but not in a smaller one\n",
                      op_name(ir, (int)j));
  if (plan->separate)
    recap__text_put(
        &b,
        "arena planning: off (RECAP_ARENA=0): no reuse, every intermediate buffer is its "
        "own allocation\n");
  recap__text_put(&b, "%-24s %-12s %12s %12s %-11s %-6s %s\n", "tensor", "role", "bytes", "offset",
                  "lifetime", "stream", "notes");
  for (size_t t = 0; t < plan->num_tensors; t++) {
    const recap__plan_tensor *pt = &plan->tensors[t];
    const recap__ir_tensor *x = &ir->tensors[t];
    char offset[32] = "-", life[32] = "-", stream[16] = "-";
    if (pt->buffer >= 0) snprintf(offset, sizeof offset, "%zu", pt->offset);
    if (pt->first_op >= 0) {
      if (pt->last_op >= (int)plan->num_ops)
        snprintf(life, sizeof life, "%d..end", pt->first_op);
      else
        snprintf(life, sizeof life, "%d..%d", pt->first_op, pt->last_op);
      snprintf(stream, sizeof stream, "%d", ir->ops[pt->first_op].stream);
    }
    recap__text_put(&b, "%-24s %-12s %12zu %12s %-11s %-6s", tensor_name(ir, (int)t),
                    role_name(x->role), pt->bytes, offset, life, stream);
    switch (pt->kind) {
      case RECAP_PLAN_EXTERNAL:
        recap__text_put(&b, " own buffer");
        break;
      case RECAP_PLAN_ARENA:
        recap__text_put(&b, " buffer %d", pt->buffer);
        break;
      case RECAP_PLAN_IN_PLACE:
        recap__text_put(&b, " buffer %d, in place over '%s'", pt->buffer,
                        tensor_name(ir, pt->shares_with));
        break;
      case RECAP_PLAN_VIEW:
        recap__text_put(&b, " view of '%s'", tensor_name(ir, pt->shares_with));
        if (pt->view_op >= 0) {
          const recap__ir_op *op = &ir->ops[pt->view_op];
          bool backward = op->num_inputs > 0 && op->inputs[0] == (int)t;
          recap__text_put(&b, " (%s '%s', no copy", op->def->name ? op->def->name : "?",
                          op_name(ir, pt->view_op));
          if (backward && x->producer >= 0)
            recap__text_put(&b, "; '%s' writes it in this layout", op_name(ir, x->producer));
          recap__text_put(&b, ")");
        }
        if (views && offsets) {
          recap__text_put(&b, " strides [");
          for (int d = 0; d < views[t].ndim; d++)
            recap__text_put(&b, "%s%lld", d ? "," : "", (long long)views[t].strides[d]);
          recap__text_put(&b, "] at +%lld", (long long)offsets[t]);
        }
        if (pt->buffer >= 0) recap__text_put(&b, " (extends its buffer's lifetime)");
        break;
    }
    recap__text_put(&b, "%s\n", x->is_output ? ", output" : "");
  }
  int joins = 0;
  for (int s = 1; s < plan->num_streams; s++) joins += plan->stream_last_op[s] >= 0;
  if (plan->num_waits || joins)
    recap__text_put(&b, "waits (%zu between ops, %d end-of-pipeline join%s):\n", plan->num_waits,
                    joins, joins == 1 ? "" : "s");
  for (size_t w = 0; w < plan->num_waits; w++) {
    int a = plan->waits[w].waiter, c = plan->waits[w].waited;
    recap__text_put(&b, "  op %d '%s' (stream %d) waits for op %d '%s' (stream %d)\n", a,
                    op_name(ir, a), ir->ops[a].stream, c, op_name(ir, c), ir->ops[c].stream);
  }
  for (int s = 1; s < plan->num_streams; s++)
    if (plan->stream_last_op[s] >= 0)
      recap__text_put(&b, "  end of pipeline joins stream %d after op %d '%s'\n", s,
                      plan->stream_last_op[s], op_name(ir, plan->stream_last_op[s]));
  recap__text_put(&b, "arena:    %s\n", human(plan->arena_bytes, h1, sizeof h1));
  recap__text_put(&b, "naive:    %s (every intermediate in its own allocation)\n",
                  human(plan->naive_bytes, h2, sizeof h2));
  if (plan->live_at_one_op_bytes < plan->max_live_bytes) {
    char h4[64];
    recap__text_put(
        &b,
        "max live: %s (lower bound for any placement)\n"
        "          with streams: buffers another stream may still use count too; by op index "
        "alone, %s\n",
        human(plan->max_live_bytes, h3, sizeof h3),
        human(plan->live_at_one_op_bytes, h4, sizeof h4));
  } else {
    recap__text_put(&b, "max live: %s (lower bound for any placement)\n",
                    human(plan->max_live_bytes, h3, sizeof h3));
  }
  if (plan->naive_bytes)
    recap__text_put(
        &b, "saved:    %.1f%% of naive; arena is %.3fx the lower bound\n",
        100.0 * (1.0 - (double)plan->arena_bytes / (double)plan->naive_bytes),
        plan->max_live_bytes ? (double)plan->arena_bytes / (double)plan->max_live_bytes : 1.0);
  free(views);
  free(offsets);
  if (b.failed) {
    free(b.data);
    return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for the plan's text");
  }
  *text = b.data;
  return RECAP_OK;
}
