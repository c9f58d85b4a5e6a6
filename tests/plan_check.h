/*
 * plan_check.h: what the memory planner tests (plan_*_test.c) share: IRs built by hand (a
 * graph of tensors and ops on streams), random DAGs, and check_plan, the independent checker.
 *
 * Every plan a test makes goes through check_plan, which re-derives from the IR alone what
 * a correct plan must satisfy and checks it exhaustively: no two tensors whose lifetimes
 * overlap share a byte (except a view with its source, and an in-place result with the input
 * it overwrites at the one op where both are live), tensors that share bytes one after the
 * other are ordered by stream order plus the plan's waits, every data dependency across
 * streams is ordered, nothing external is in the arena, the arena holds every buffer, and the
 * totals (naive sum, max live) match an independent count, with arena >= max live.
 */
#ifndef RECAP_TESTS_PLAN_CHECK_H
#define RECAP_TESTS_PLAN_CHECK_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "engine/plan.h"
#include "tests/test_util.h"

enum { MAX_T = 48, MAX_OPS = 24, U = RECAP_PLAN_ALIGNMENT };

/* Op definitions the planner reads: their contract (in_place_input, copy_view,
 * output_is_input), never their names. */
static const recap__op_def def_plain = {.name = "matmul", .in_place_input = -1};
static const recap__op_def def_inplace = {.name = "relu", .in_place_input = 0};
static const recap__op_def def_view = {
    .name = "reshape", .in_place_input = -1, .copy_view = RECAP__COPY_RESHAPE};
static const int append_output_is_input[] = {0};
static const recap__op_def def_append = {
    .name = "kv_append", .in_place_input = 0, .output_is_input = append_output_is_input};

typedef struct {
  recap__ir ir;
  recap__ir_tensor tensors[MAX_T];
  recap__ir_op ops[MAX_OPS];
  int outputs[MAX_T];
  char tensor_names[MAX_T][16];
  char op_names[MAX_OPS][16];
} graph;

static inline void graph_init(graph *g, int num_streams) {
  memset(g, 0, sizeof *g);
  g->ir.name = "test";
  g->ir.tensors = g->tensors;
  g->ir.ops = g->ops;
  g->ir.outputs = g->outputs;
  g->ir.num_streams = num_streams;
}

/* A 1-D f32 tensor of `bytes` bytes (a multiple of 4). */
static inline int tensor(graph *g, const char *name, recap_tensor_role role, int64_t bytes) {
  int t = (int)g->ir.num_tensors++;
  CU_ASSERT_FATAL(t < MAX_T);
  recap__ir_tensor *x = &g->tensors[t];
  snprintf(g->tensor_names[t], sizeof g->tensor_names[t], "%s", name);
  x->name = g->tensor_names[t];
  x->role = role;
  x->dtype = RECAP_DTYPE_F32;
  x->ndim = 1;
  x->shape[0] = bytes / 4;
  x->bucket_axis = -1;
  x->producer = -1;
  x->alias_of = -1;
  return t;
}

/* An op on `stream` reading the n tensors that follow, producing a new intermediate `out` of
 * `bytes` bytes (an alias of `alias` when alias >= 0). Returns the new tensor. */
static inline int op_alias(graph *g, const recap__op_def *def, int stream, const char *out,
                           int64_t bytes, int alias, int n, ...) {
  int j = (int)g->ir.num_ops++;
  CU_ASSERT_FATAL(j < MAX_OPS);
  int y = tensor(g, out, RECAP_ROLE_INTERMEDIATE, bytes);
  recap__ir_op *op = &g->ops[j];
  op->def = def;
  snprintf(g->op_names[j], sizeof g->op_names[j], "%s#%d", def->name, j);
  op->name = g->op_names[j];
  op->stream = stream;
  va_list ap;
  va_start(ap, n);
  for (int i = 0; i < n; i++) {
    op->inputs[op->num_inputs++] = va_arg(ap, int);
    g->tensors[op->inputs[i]].num_consumers++;
  }
  va_end(ap);
  op->outputs[op->num_outputs++] = y;
  g->tensors[y].producer = j;
  g->tensors[y].alias_of = alias;
  return y;
}

#define OP(g, def, stream, out, bytes, ...)          \
  op_alias((g), (def), (stream), (out), (bytes), -1, \
           (int)(sizeof((int[]){__VA_ARGS__}) / sizeof(int)), __VA_ARGS__)
/* A reshape of src (same bytes); the planner decides whether it is a view. */
#define RESHAPE(g, stream, out, src) \
  op_alias((g), &def_view, (stream), (out), (int64_t)(g)->tensors[src].shape[0] * 4, -1, 1, (src))
/* kv_append: writes `rows` into `cache` and returns the cache (an IR alias of it). */
#define APPEND(g, stream, out, cache, rows)                                                       \
  op_alias((g), &def_append, (stream), (out), (int64_t)(g)->tensors[cache].shape[0] * 4, (cache), \
           2, (cache), (rows))

static inline void mark_output(graph *g, int t) {
  g->tensors[t].is_output = true;
  g->outputs[g->ir.num_outputs++] = t;
}

/* ---- the independent checker ------------------------------------------------------------ */

/* What the checker derives from the IR and the plan's decisions (views, waits). */
typedef struct {
  const recap__ir *ir;
  const recap__plan *plan;
  int alias[MAX_T];      /* the IR's alias_of, or the input of a reshape the plan made a view */
  int last_write[MAX_T]; /* by IR aliases only: the last op (a kv_append) writing it, or -1 */
  /* The plan's layout of each tensor is contiguous from the start of its memory: only such an
   * input may be written over in place (element i of the output lands on element i). */
  bool dense[MAX_T];
  uint64_t hb[64]; /* hb[j] bit i: op i ends before op j starts */
} checker;

static inline int root_of(const checker *c, int t) {
  while (c->alias[t] >= 0) t = c->alias[t];
  return t;
}

static inline int ir_root_of(const recap__ir *ir, int t) {
  while (ir->tensors[t].alias_of >= 0) t = ir->tensors[t].alias_of;
  return t;
}

/* Op j's output o is an IR alias that writes the memory of its in-place input (kv_append). */
static inline bool writes_alias(const recap__ir *ir, int j, int o) {
  const recap__ir_op *op = &ir->ops[j];
  int y = op->outputs[o], k = op->def->in_place_input;
  return ir->tensors[y].alias_of >= 0 && k >= 0 && k < op->num_inputs &&
         ir_root_of(ir, op->inputs[k]) == ir_root_of(ir, y);
}

static inline size_t bytes_of(const recap__ir *ir, int t) {
  const recap__ir_tensor *x = &ir->tensors[t];
  size_t bytes = recap_dtype_size(x->dtype);
  for (int d = 0; d < x->ndim; d++) bytes *= (size_t)x->shape[d];
  return bytes;
}

/* Stream order plus the plan's waits, and the memory each tensor really uses. Also checks
 * that the plan made exactly the reshapes views that may be (docs/PLANNER.md's rule). */
static inline void checker_init(checker *c, const recap__ir *ir, const recap__plan *plan) {
  memset(c, 0, sizeof *c);
  c->ir = ir;
  c->plan = plan;
  int n = (int)ir->num_ops;
  CU_ASSERT_FATAL(n <= 64 && ir->num_tensors <= MAX_T);
  for (int j = 0; j < n; j++) {
    for (int i = j - 1; i >= 0; i--)
      if (ir->ops[i].stream == ir->ops[j].stream) {
        c->hb[j] |= c->hb[i] | (1ull << i);
        break;
      }
    for (size_t w = 0; w < plan->num_waits; w++)
      if (plan->waits[w].waiter == j) {
        int i = plan->waits[w].waited;
        CU_ASSERT_FATAL(i >= 0 && i < j);
        CU_ASSERT(ir->ops[i].stream != ir->ops[j].stream);
        c->hb[j] |= c->hb[i] | (1ull << i);
      }
  }
  for (int t = 0; t < MAX_T; t++) c->last_write[t] = -1;
  for (int j = 0; j < n; j++)
    for (int o = 0; o < ir->ops[j].num_outputs; o++)
      if (writes_alias(ir, j, o)) c->last_write[ir_root_of(ir, ir->ops[j].outputs[o])] = j;
  for (int t = 0; t < (int)ir->num_tensors; t++) c->alias[t] = ir->tensors[t].alias_of;
  static recap_tensor views[MAX_T];
  static int64_t offsets[MAX_T];
  CHECK_OK(recap__plan_views(ir, plan, views, offsets));
  for (int t = 0; t < (int)ir->num_tensors; t++)
    c->dense[t] = offsets[t] == 0 && recap__tensor_is_contiguous(&views[t]);
  for (int j = 0; j < n; j++) {
    const recap__ir_op *op = &ir->ops[j];
    int y = op->outputs[0], x = op->num_inputs ? op->inputs[0] : -1;
    /* The 1-D reshapes built by RESHAPE are always contiguous: exactly these may be views.
     * Tests of the strided views (real op definitions) state their expectations themselves. */
    if (op->def == &def_view) {
      bool may_view = x >= 0 && ir->tensors[y].alias_of < 0 && !ir->tensors[y].is_output &&
                      bytes_of(ir, x) == bytes_of(ir, y) && c->last_write[ir_root_of(ir, x)] <= j &&
                      c->last_write[y] < 0;
      CU_ASSERT_EQUAL(plan->op_is_view[j], may_view);
    }
    if (!plan->op_is_view[j]) continue;
    if (x >= 0 && plan->tensors[x].view_op == j) {
      c->alias[x] = y; /* backward: the input is a view of the output */
    } else {
      for (int o = 0; o < op->num_outputs; o++) {
        CU_ASSERT_EQUAL(plan->tensors[op->outputs[o]].view_op, j);
        c->alias[op->outputs[o]] = x;
      }
    }
  }
}

/* Ops that run: a shape op planned as a view touches no memory. */
static inline bool op_runs(const checker *c, int j) {
  return !c->plan->op_is_view[j];
}

static inline bool hb_before(const checker *c, int i, int j) {
  return i < j && ((c->hb[j] >> i) & 1);
}

static inline bool op_reads(const recap__ir *ir, int j, int t) {
  for (int i = 0; i < ir->ops[j].num_inputs; i++)
    if (ir->ops[j].inputs[i] == t) return true;
  return false;
}

/* The ops that really write tensor t's memory as t: its producer when that runs, and for a
 * backward view's root, the producer of the view (which writes it through the view). */
static inline int writer_of(const checker *c, int t) {
  int p = c->ir->tensors[t].producer;
  if (p >= 0 && op_runs(c, p)) return p;
  for (int x = 0; x < (int)c->ir->num_tensors; x++)
    if (c->alias[x] == t && c->plan->tensors[x].view_op == p && p >= 0) return writer_of(c, x);
  return -1;
}

/* A tensor's own lifetime, over the ops that run: from the write of its memory (its root's
 * writer: a view's bytes must survive from there) to its last reader (empty, first > last,
 * when nothing runs); outputs live past the last op. */
static inline void lifetime(const checker *c, int t, int *first, int *last) {
  const recap__ir *ir = c->ir;
  *first = writer_of(c, root_of(c, t));
  *last = *first;
  for (int j = 0; j < (int)ir->num_ops; j++)
    if (op_runs(c, j) && op_reads(ir, j, t)) {
      if (*first < 0) *first = *last = j;
      if (j > *last) *last = j;
    }
  if (*first < 0) {
    *first = (int)ir->num_ops + 1;
    *last = -1;
  }
  if (ir->tensors[t].is_output) *last = (int)ir->num_ops;
}

/* The lifetime of the memory of root r: its write .. the last read of r or of any view of it
 * (outputs: past the last op), over the ops that run. */
static inline void group_lifetime(const checker *c, int r, int *first, int *last) {
  *first = *last = -1;
  for (int t = 0; t < (int)c->ir->num_tensors; t++) {
    if (root_of(c, t) != r) continue;
    int f, l;
    lifetime(c, t, &f, &l);
    if (f > l) continue;
    if (*first < 0 || f < *first) *first = f;
    if (l > *last) *last = l;
  }
}

/* Every op that touches root r's memory (its writer, and readers of r or a view of it), except
 * `except`, ends before op j starts. */
static inline bool all_accesses_before(const checker *c, int r, int j, int except) {
  int p = writer_of(c, r);
  if (p >= 0 && p != except && !hb_before(c, p, j)) return false;
  for (int t = 0; t < (int)c->ir->num_tensors; t++) {
    if (root_of(c, t) != r) continue;
    for (int q = 0; q < (int)c->ir->num_ops; q++)
      if (q != except && op_runs(c, q) && op_reads(c->ir, q, t) && !hb_before(c, q, j))
        return false;
  }
  return true;
}

/* Whether arena tensors t and u may occupy the same bytes (the rule check_plan enforces and
 * the exhaustive optimum respects). Views count as their root's memory. */
static inline bool may_share_in(const checker *c, int t, int u, bool in_place);

static inline bool may_share(const checker *c, int t, int u) {
  return may_share_in(c, t, u, true);
}

/* may_share_in without in-place: buffers the plan kept apart could only have shared bytes one
 * after the other. */
static inline bool may_share_in(const checker *c, int t, int u, bool in_place) {
  const recap__ir *ir = c->ir;
  t = root_of(c, t);
  u = root_of(c, u);
  if (t == u) return true; /* a view and its source */
  int ft, lt, fu, lu;
  group_lifetime(c, t, &ft, &lt);
  group_lifetime(c, u, &fu, &lu);
  if (ft < 0 || fu < 0) return true; /* one of them is never touched */
  if (fu < ft || (fu == ft && u < t)) {
    int s = t;
    t = u;
    u = s;
    int f = ft, l = lt;
    ft = fu, lt = lu, fu = f, lu = l;
  }
  /* t starts first. Disjoint: every access of t ordered before u's writer. */
  if (lt < fu) return all_accesses_before(c, t, fu, -1);
  if (!in_place) return false;
  /* Touching at one op: only op fu writing u in place over (a view of) t, with every other
   * access of t ordered before it. */
  if (lt != fu || ir->tensors[u].producer != fu) return false;
  const recap__ir_op *op = &ir->ops[fu];
  int k = op->def->in_place_input;
  if (k < 0 || k >= op->num_inputs || op->outputs[0] != u || root_of(c, op->inputs[k]) != t ||
      bytes_of(ir, u) != bytes_of(ir, op->inputs[k]) || !c->dense[op->inputs[k]])
    return false;
  /* Another input reading the same memory would see it half overwritten. */
  for (int i = 0; i < op->num_inputs; i++)
    if (i != k && root_of(c, op->inputs[i]) == t) return false;
  return all_accesses_before(c, t, fu, fu);
}

static inline bool ranges_overlap(size_t a, size_t an, size_t b, size_t bn) {
  return an > 0 && bn > 0 && a < b + bn && b < a + an;
}

static inline size_t round_up(size_t n) {
  return (n + U - 1) / U * U;
}

/* Whether buffers a and b must be apart: some tensor of one may not share bytes with some
 * tensor of the other (may_share, the happens-before oracle). */
static inline bool buffers_conflict(const checker *c, int a, int b) {
  const recap__plan *plan = c->plan;
  for (int t = 0; t < (int)plan->num_tensors; t++)
    for (int u = 0; u < (int)plan->num_tensors; u++)
      if (plan->tensors[t].buffer == a && plan->tensors[u].buffer == b &&
          !may_share_in(c, t, u, false))
        return true;
  return false;
}

/* The heaviest set of pairwise conflicting buffers among `candidates` (bit i: buffer i), by
 * exhaustive search: no placement can be smaller than that set's sum. */
static inline size_t heaviest_clique(const recap__plan *plan, const uint64_t *neighbours,
                                     uint64_t candidates) {
  size_t best = 0;
  for (int v = 0; v < 64 && candidates; v++) {
    if (!((candidates >> v) & 1)) continue;
    candidates &= ~(1ull << v);
    size_t with =
        plan->buffers[v].bytes + heaviest_clique(plan, neighbours, candidates & neighbours[v]);
    if (with > best) best = with;
  }
  return best;
}

/* Checks everything plan.h promises about `plan` for `ir`. */
static inline void check_plan(const recap__ir *ir, const recap__plan *plan) {
  int nt = (int)ir->num_tensors, no = (int)ir->num_ops;
  static checker c;
  checker_init(&c, ir, plan);
  CU_ASSERT_EQUAL(plan->num_tensors, ir->num_tensors);
  CU_ASSERT_TRUE(plan->arena_bytes >= plan->max_live_bytes);

  /* Where each tensor lives. */
  for (int t = 0; t < nt; t++) {
    const recap__ir_tensor *x = &ir->tensors[t];
    const recap__plan_tensor *pt = &plan->tensors[t];
    CU_ASSERT_EQUAL(pt->bytes, bytes_of(ir, t));
    int r = root_of(&c, t);
    bool arena_root = ir->tensors[r].role == RECAP_ROLE_INTERMEDIATE && !ir->tensors[r].is_output;
    if (c.alias[t] >= 0) {
      CU_ASSERT_EQUAL(pt->kind, RECAP_PLAN_VIEW);
      CU_ASSERT_EQUAL(pt->shares_with, r);
    } else if (!arena_root) {
      CU_ASSERT_EQUAL(pt->kind, RECAP_PLAN_EXTERNAL);
    } else {
      CU_ASSERT(pt->kind == RECAP_PLAN_ARENA || pt->kind == RECAP_PLAN_IN_PLACE);
    }
    if (!arena_root) {
      CU_ASSERT_EQUAL(pt->buffer, -1);
      continue;
    }
    CU_ASSERT_FATAL(pt->buffer >= 0 && (size_t)pt->buffer < plan->num_buffers);
    const recap__plan_buffer *b = &plan->buffers[pt->buffer];
    CU_ASSERT_EQUAL(pt->offset, b->offset);
    CU_ASSERT_EQUAL(b->offset % U, 0);
    CU_ASSERT_EQUAL(b->bytes % U, 0);
    CU_ASSERT_TRUE(pt->bytes <= b->bytes);
    CU_ASSERT_TRUE(b->offset + b->bytes <= plan->arena_bytes);
    if (c.alias[t] >= 0) CU_ASSERT_EQUAL(pt->offset, plan->tensors[r].offset);
    if (pt->kind == RECAP_PLAN_IN_PLACE) {
      const recap__ir_op *op = &ir->ops[x->producer];
      CU_ASSERT(op->def->in_place_input >= 0 &&
                op->inputs[op->def->in_place_input] == pt->shares_with);
      CU_ASSERT_EQUAL(plan->tensors[pt->shares_with].buffer, pt->buffer);
    }
  }

  /* No forbidden sharing, over every pair of arena tensors. */
  for (int t = 0; t < nt; t++)
    for (int u = t + 1; u < nt; u++) {
      const recap__plan_tensor *a = &plan->tensors[t], *b = &plan->tensors[u];
      if (a->buffer < 0 || b->buffer < 0) continue;
      if (!ranges_overlap(a->offset, a->bytes, b->offset, b->bytes)) continue;
      if (!may_share(&c, t, u)) {
        fprintf(stderr, "\n  tensors '%s' and '%s' share bytes but may not\n", ir->tensors[t].name,
                ir->tensors[u].name);
        CU_FAIL("two tensors that are live together, or not ordered, share bytes");
      }
    }

  /* Every cross-stream data dependency is ordered: a read after every earlier write of that
   * memory, an aliasing write after every earlier read. */
  static bool depends[64][64];
  memset(depends, 0, sizeof depends);
  for (int j = 0; j < no; j++) {
    const recap__ir_op *op = &ir->ops[j];
    if (!op_runs(&c, j)) continue;
    for (int i = 0; i < j; i++) {
      bool conflict = false;
      if (!op_runs(&c, i)) continue;
      for (int a = 0; a < op->num_inputs; a++) {
        int r = root_of(&c, op->inputs[a]);
        for (int o = 0; o < ir->ops[i].num_outputs; o++) {
          int y = ir->ops[i].outputs[o];
          if (root_of(&c, y) == r) conflict = true;
        }
      }
      for (int o = 0; o < op->num_outputs; o++) {
        if (!writes_alias(ir, j, o)) continue;
        int r = root_of(&c, op->outputs[o]);
        for (int a = 0; a < ir->ops[i].num_inputs; a++)
          if (root_of(&c, ir->ops[i].inputs[a]) == r) conflict = true;
      }
      depends[j][i] = conflict;
      if (conflict && !hb_before(&c, i, j)) {
        fprintf(stderr, "\n  op %d depends on op %d but is not ordered after it\n", j, i);
        CU_FAIL("a cross-stream dependency has no wait");
      }
    }
  }
  /* ... and nothing else waits: no wait is added to reuse memory, which would serialize the
   * streams the spec meant to overlap. */
  for (size_t w = 0; w < plan->num_waits; w++) {
    int j = plan->waits[w].waiter, i = plan->waits[w].waited;
    if (!depends[j][i]) {
      fprintf(stderr, "\n  op %d waits for op %d but does not depend on it\n", j, i);
      CU_FAIL("a wait that no data dependency needs");
    }
  }

  /* Totals, counted independently: buffer lifetimes from their tensors. */
  size_t naive = 0, max_live = 0, arena = 0;
  for (int t = 0; t < nt; t++)
    if (plan->tensors[t].kind == RECAP_PLAN_ARENA || plan->tensors[t].kind == RECAP_PLAN_IN_PLACE)
      naive += round_up(plan->tensors[t].bytes);
  for (int j = 0; j < no; j++) {
    size_t live = 0;
    for (size_t b = 0; b < plan->num_buffers; b++) {
      bool alive = false;
      for (int t = 0; t < nt; t++) {
        int f, l;
        if (plan->tensors[t].buffer != (int)b) continue;
        lifetime(&c, t, &f, &l);
        if (f <= j && j <= l) alive = true;
      }
      if (alive) live += plan->buffers[b].bytes;
    }
    if (live > max_live) max_live = live;
  }
  for (size_t b = 0; b < plan->num_buffers; b++)
    if (plan->buffers[b].offset + plan->buffers[b].bytes > arena)
      arena = plan->buffers[b].offset + plan->buffers[b].bytes;
  CU_ASSERT_EQUAL(plan->naive_bytes, naive);
  CU_ASSERT_EQUAL(plan->live_at_one_op_bytes, max_live);
  CU_ASSERT_EQUAL(plan->arena_bytes, arena);
  /* The lower bound is exactly the heaviest set of buffers that pairwise must be apart by the
   * oracle: not below it (a bound that ignores the streams), not above (no longer a bound). */
  CU_ASSERT_FATAL(plan->num_buffers <= 64);
  uint64_t neighbours[64] = {0};
  for (int a = 0; a < (int)plan->num_buffers; a++)
    for (int b = 0; b < (int)plan->num_buffers; b++)
      if (a != b && buffers_conflict(&c, a, b)) neighbours[a] |= 1ull << b;
  uint64_t all = plan->num_buffers == 64 ? ~0ull : (1ull << plan->num_buffers) - 1;
  size_t clique = heaviest_clique(plan, neighbours, all);
  if (plan->max_live_bytes != clique)
    fprintf(stderr, "\n  lower bound %zu but the heaviest conflicting set is %zu\n",
            plan->max_live_bytes, clique);
  CU_ASSERT_EQUAL(plan->max_live_bytes, clique);
  CU_ASSERT_TRUE(plan->max_live_bytes >= plan->live_at_one_op_bytes);
  if (ir->num_streams <= 1) CU_ASSERT_EQUAL(plan->max_live_bytes, plan->live_at_one_op_bytes);

  /* Each stream's last op, for the final join. */
  for (int s = 0; s < plan->num_streams; s++) {
    int last = -1;
    for (int j = 0; j < no; j++)
      if (ir->ops[j].stream == s) last = j;
    CU_ASSERT_EQUAL(plan->stream_last_op[s], last);
  }
}

static inline recap__plan *plan_checked(const recap__ir *ir) {
  recap__plan *plan = NULL;
  CHECK_OK(recap__plan_build(ir, &plan));
  CU_ASSERT_PTR_NOT_NULL_FATAL(plan);
  check_plan(ir, plan);
  return plan;
}

static inline bool has_wait(const recap__plan *plan, int waiter, int waited) {
  for (size_t w = 0; w < plan->num_waits; w++)
    if (plan->waits[w].waiter == waiter && plan->waits[w].waited == waited) return true;
  return false;
}

static inline bool disjoint(const recap__plan *plan, int t, int u) {
  const recap__plan_tensor *a = &plan->tensors[t], *b = &plan->tensors[u];
  return !ranges_overlap(a->offset, a->bytes, b->offset, b->bytes);
}

/* ---- IRs for several files ------------------------------------------------------------- */

/* One bucket of a small chain: x -> a (plain) -> b (in place) -> y, batch rows. */
static inline void build_bucket(graph *g, int64_t batch) {
  graph_init(g, 1);
  int x = tensor(g, "x", RECAP_ROLE_INPUT, batch * U);
  int w = tensor(g, "w", RECAP_ROLE_PARAM, 4 * U);
  int a = OP(g, &def_plain, 0, "a", batch * 2 * U, x, w);
  int b = OP(g, &def_inplace, 0, "b", batch * 2 * U, a);
  int y = OP(g, &def_plain, 0, "y", batch * U, b);
  mark_output(g, y);
}

/* ---- random DAGs ---------------------------------------------------------------------- */

static inline uint64_t next_random(uint64_t *state) {
  test_rng r = {*state};
  uint64_t v = test_rng_next(&r);
  *state = r.state;
  return v;
}

static inline int pick(uint64_t *state, int n) {
  return (int)(next_random(state) % (uint64_t)n);
}

/* A random pipeline: a few inputs and a param, 3..8 ops of every kind the planner treats
 * differently (plain, in-place capable, view), sizes in 256-byte units with repeats so
 * in-place happens, inputs drawn mostly from recent tensors, 1..3 streams, some outputs.
 * At most 8 ops, so at most 8 intermediates. */
static inline void random_graph(graph *g, uint64_t *state) {
  int streams = 1 + pick(state, 3);
  graph_init(g, streams);
  int avail[MAX_T], navail = 0;
  int ninputs = 1 + pick(state, 2);
  for (int i = 0; i < ninputs; i++)
    avail[navail++] = tensor(g, i ? "x1" : "x0", RECAP_ROLE_INPUT, (1 + pick(state, 4)) * U);
  if (pick(state, 2)) avail[navail++] = tensor(g, "w", RECAP_ROLE_PARAM, 2 * U);
  /* A KV cache that kv_append ops write (each append returns the cache it wrote). */
  int cache = pick(state, 2) ? tensor(g, "kv", RECAP_ROLE_STATE, 4 * U) : -1;
  if (cache >= 0) avail[navail++] = cache;
  int nops = 5 + pick(state, 4);
  for (int j = 0; j < nops; j++) {
    char name[16];
    snprintf(name, sizeof name, "t%d", j);
    int stream = pick(state, streams);
    int kind = pick(state, 10); /* 0: reshape, 1-3: in-place capable, 9: append, else plain */
    int in[3], nin = kind == 0 ? 1 : 1 + pick(state, 3);
    for (int i = 0; i < nin; i++) {
      int back = pick(state, 3) ? pick(state, navail < 3 ? navail : 3) : pick(state, navail);
      in[i] = avail[navail - 1 - back];
    }
    int64_t bytes = (1 + pick(state, 8)) * U;
    if (kind >= 1 && kind <= 3 && pick(state, 3)) bytes = g->tensors[in[0]].shape[0] * 4;
    int y;
    if (kind == 0) {
      y = RESHAPE(g, stream, name, in[0]);
    } else if (kind == 9 && cache >= 0) {
      y = APPEND(g, stream, name, cache, in[0]);
      cache = y;
    } else if (nin == 1)
      y = OP(g, kind <= 3 ? &def_inplace : &def_plain, stream, name, bytes, in[0]);
    else if (nin == 2)
      y = OP(g, kind <= 3 ? &def_inplace : &def_plain, stream, name, bytes, in[0], in[1]);
    else
      y = OP(g, kind <= 3 ? &def_inplace : &def_plain, stream, name, bytes, in[0], in[1], in[2]);
    avail[navail++] = y;
    if (j == nops - 1 || !pick(state, 8)) mark_output(g, y);
  }
}

/* 10..20 plain or in-place ops on 2..4 streams, each reading one to three recent tensors. */
static inline void random_wide_graph(graph *g, uint64_t *state) {
  int streams = 2 + pick(state, 3);
  graph_init(g, streams);
  int avail[MAX_T], navail = 0;
  avail[navail++] = tensor(g, "x", RECAP_ROLE_INPUT, 2 * U);
  int nops = 10 + pick(state, 11);
  for (int j = 0; j < nops; j++) {
    char name[16];
    snprintf(name, sizeof name, "t%d", j);
    int stream = pick(state, streams), nin = 1 + pick(state, 3), in[3];
    for (int i = 0; i < nin; i++) in[i] = avail[navail - 1 - pick(state, navail < 4 ? navail : 4)];
    const recap__op_def *def = pick(state, 3) ? &def_plain : &def_inplace;
    int64_t bytes = def == &def_inplace ? g->tensors[in[0]].shape[0] * 4 : (1 + pick(state, 4)) * U;
    int y = nin == 1   ? OP(g, def, stream, name, bytes, in[0])
            : nin == 2 ? OP(g, def, stream, name, bytes, in[0], in[1])
                       : OP(g, def, stream, name, bytes, in[0], in[1], in[2]);
    avail[navail++] = y;
    if (j == nops - 1) mark_output(g, y);
  }
}

#endif /* RECAP_TESTS_PLAN_CHECK_H */
