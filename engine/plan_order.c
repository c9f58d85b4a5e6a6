/* plan_order.c: happens-before between streams, the cross-stream waits it calls for, the
 * arena buffers with the ops that access them, and in-place merging (docs/PLANNER.md). */
#include <limits.h>
#include <stdlib.h>

#include "engine/plan_internal.h"
#include "runtime/error.h"

static bool is_view_op(const planner *p, int j) {
  return p->plan->op_is_view[j];
}

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
 * unordered tensors apart (docs/PLANNER.md). */
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

bool recap__plan_buffer_ordered_before(const planner *p, int b, int j) {
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

/* Whether op j may write its output 0 over its in-place input, per the rules (docs/PLANNER.md). */
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
  return recap__plan_buffer_ordered_before(p, b, j);
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

recap_status recap__plan_order(planner *p) {
  if (p->num_streams > 1) RECAP_TRY(compute_waits(p));
  collect_buffers(p);
  for (int j = 0; j < p->num_ops && !p->plan->separate; j++)
    if (can_write_in_place(p, j)) merge_in_place(p, j);
  return RECAP_OK;
}
