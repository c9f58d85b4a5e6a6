/*
 * fuse.c: the fusion pass (fuse.h).
 *
 * Finding is one walk over the ops in order. Each fusable op v starts as a group of its own
 * and then, slot by slot, absorbs the group of the producer of each input it may swallow,
 * when the union still fits one kernel (parent[u] = v records it). A producer's group is
 * complete by then: its output has v as its only reader, so nothing after v can extend it.
 * The groups are therefore trees, and each is decided in one pass with no backtracking.
 *
 * Residual folds (fuse.h) are decided in the same walk, before an add could start a group:
 * an add that folds a linear in is never fusable itself.
 *
 * Rewriting builds everything new first (programs, names, the renumbered op and tensor
 * arrays) and only then swaps it into the IR, so a failure leaves the IR as it was.
 */
#include "engine/fuse.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/weight_plan.h"
#include "kernels/expr.h"
#include "kernels/op_codes.h"
#include "runtime/env.h"
#include "runtime/error.h"
#include "runtime/nvrtc.h"
#include "runtime/text.h"

enum { NO_ACT = -1 };
enum { MAX_NAME_BYTES = 160 };

/* How an op joins a fused kernel: its contract's fuse_form (op.h), for a deterministic op
 * with one output. */
static recap__fuse_form form_of(const recap__op_def *def) {
  if (!def || def->is_random || def->num_outputs != 1) return RECAP__FUSE_NONE;
  return def->fuse_form;
}

/* Whether the op has an activation attribute, which it applies last, to its output. */
static bool has_activation(const recap__op_def *def) {
  for (const recap__attr_def *a = def ? def->attrs : NULL; a && a->name; ++a)
    if (a->kind == RECAP_ATTR_ACTIVATION) return true;
  return false;
}

/* The activation of an op (a linear) that the fused kernel should apply instead: those
 * cuBLASLt has no epilogue for, which kernels/gemm/epilogue.cu applies in a second pass.
 * NO_ACT else. */
static int movable_activation(const recap__ir_op *op) {
  if (!has_activation(op->def)) return NO_ACT;
  switch (op->attrs.act) {
    case RECAP_ACT_GELU:
      return RECAP_EXPR_GELU;
    case RECAP_ACT_SILU:
      return RECAP_EXPR_SILU;
    case RECAP_ACT_SIGMOID:
      return RECAP_EXPR_SIGMOID;
    case RECAP_ACT_TANH:
      return RECAP_EXPR_TANH;
    default:
      return NO_ACT;
  }
}

/* The nodes an `expr` op adds to a group (those reachable from its root, inputs excepted)
 * and the levels it adds above its operands. False when the program is unusable here. */
static bool expr_size(const recap__expr_program *q, int *nodes, int *levels) {
  if (!q) return false;
  int count = 0;
  const recap__expr_node_data *d = recap__expr_nodes(q, &count);
  int root = recap__expr_root(q);
  if (!d || root < 0 || root >= count || count > RECAP_EXPR_MAX_NODES) return false;
  bool reached[RECAP_EXPR_MAX_NODES] = {false};
  reached[root] = true;
  int n = 0;
  for (int i = root; i >= 0; --i) {
    if (!reached[i]) continue;
    if (d[i].op != RECAP_EXPR_INPUT) n++;
    const int32_t operands[3] = {d[i].a, d[i].b, d[i].c};
    for (int k = 0; k < 3; ++k)
      if (operands[k] >= 0 && operands[k] < i) reached[operands[k]] = true;
  }
  *nodes = n;
  /* An operand substituted for an input leaf (depth 1) of depth k makes the tree at most
   * k - 1 deeper. */
  *levels = d[root].depth - 1;
  return true;
}

typedef struct {
  const recap__ir *ir;
  int no, nt;
  int *reader;     /* per tensor: the op of its only reading slot; -1 for none or several */
  bool *hazard;    /* per tensor: some op writes its memory through an alias */
  bool *fusable;   /* per op */
  int *levels;     /* per fusable op: the levels it adds above its operands */
  int *own_nodes;  /* per fusable op: the nodes it adds */
  int *parent;     /* per op: the op whose group absorbed it, -1 */
  int *act;        /* per tensor: the linear activation moved into its reader's group, NO_ACT */
  bool *dissolved; /* per op: its group was given up (fuse.h: the output dtype) */
  int *fold;       /* per op: for an add, the linear folded into it as its residual; -1 */
  /* Prologues (fuse.h): per op, for a linear, the norm or gated unit it computes on x's load
   * (-1: none); whether the op goes away into its readers' prologues (a norm, a gated unit and
   * the split feeding it); and its gated unit's activation. */
  int *prologue;
  bool *gone;
  recap__activation *glu;
  /* Norm epilogues (fuse.h): per op, the norm it computes as its second output (-1: none), and
   * for that norm, the op computing it (-1: none). */
  int *epilogue, *epilogue_of;
  /* Gated outputs (fuse.h): per linear, the gated unit it computes as its output (-1: none);
   * per op, for the unit and the split feeding it, the linear computing them (-1: none). */
  int *gated, *gated_by;
  /* Per op, valid while it roots its group: external inputs, nodes other than inputs
   * (members and moved activations), depth. */
  int (*in)[RECAP_OP_MAX_INPUTS];
  int *num_in, *body, *depth;
} finder;

static void finder_free(finder *f) {
  free(f->reader);
  free(f->hazard);
  free(f->fusable);
  free(f->levels);
  free(f->own_nodes);
  free(f->parent);
  free(f->act);
  free(f->dissolved);
  free(f->fold);
  free(f->prologue);
  free(f->gone);
  free(f->glu);
  free(f->epilogue);
  free(f->epilogue_of);
  free(f->gated);
  free(f->gated_by);
  free(f->in);
  free(f->num_in);
  free(f->body);
  free(f->depth);
}

/* Whether op v's group may take the group of t's producer. */
static bool swallowable(const finder *f, int t, int v) {
  const recap__ir_tensor *x = &f->ir->tensors[t];
  int u = x->producer;
  return u >= 0 && u < v && f->fusable[u] && f->reader[t] == v &&
         x->role == RECAP_ROLE_INTERMEDIATE && !x->is_output && x->alias_of < 0 &&
         f->ir->ops[u].stream == f->ir->ops[v].stream;
}

/* The activation of t's producer that op v's group may apply itself, or NO_ACT. */
static int movable_into(const finder *f, int t, int v) {
  const recap__ir_tensor *x = &f->ir->tensors[t];
  int u = x->producer;
  if (u < 0 || u >= v || f->reader[t] != v || x->role != RECAP_ROLE_INTERMEDIATE || x->is_output ||
      x->alias_of >= 0 || f->ir->ops[u].stream != f->ir->ops[v].stream)
    return NO_ACT;
  return movable_activation(&f->ir->ops[u]);
}

/* Tensors read through, and memory written by, ops: readers, and the alias roots written. */
static recap_status scan(finder *f) {
  const recap__ir *ir = f->ir;
  int *slots = calloc((size_t)f->nt + 1, sizeof *slots);
  bool *written = calloc((size_t)f->nt + 1, sizeof *written);
  if (!slots || !written) {
    free(slots);
    free(written);
    return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for the fusion pass");
  }
  recap_status st = RECAP_OK;
  for (int t = 0; t < f->nt; ++t) f->reader[t] = -1;
  for (int v = 0; v < f->no && st == RECAP_OK; ++v) {
    const recap__ir_op *op = &ir->ops[v];
    if (op->num_inputs < 0 || op->num_inputs > RECAP_OP_MAX_INPUTS || op->num_outputs < 0 ||
        op->num_outputs > RECAP_OP_MAX_OUTPUTS) {
      st = RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "op '%s' has %d inputs and %d outputs",
                      op->name, op->num_inputs, op->num_outputs);
      break;
    }
    for (int i = 0; i < op->num_inputs + op->num_outputs; ++i) {
      int t = i < op->num_inputs ? op->inputs[i] : op->outputs[i - op->num_inputs];
      if (t < 0 || t >= f->nt) {
        st = RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "op '%s' names tensor %d of %d", op->name, t,
                        f->nt);
        break;
      }
      if (i < op->num_inputs) {
        f->reader[t] = slots[t]++ == 0 ? v : -1;
        continue;
      }
      /* An output that is an alias writes the memory of its alias root. */
      int r = t, hops = 0;
      while (ir->tensors[r].alias_of >= 0 && ir->tensors[r].alias_of < f->nt && hops++ < f->nt)
        r = ir->tensors[r].alias_of;
      if (r != t) written[r] = true;
    }
  }
  for (int t = 0; t < f->nt && st == RECAP_OK; ++t) {
    int r = t, hops = 0;
    while (ir->tensors[r].alias_of >= 0 && ir->tensors[r].alias_of < f->nt && hops++ < f->nt)
      r = ir->tensors[r].alias_of;
    f->hazard[t] = written[r];
  }
  free(slots);
  free(written);
  return st;
}

static bool decide_fusable(finder *f, int v) {
  const recap__ir_op *op = &f->ir->ops[v];
  recap__fuse_form k = form_of(op->def);
  if (k == RECAP__FUSE_NONE || op->num_outputs != 1) return false;
  for (int i = 0; i < op->num_inputs; ++i)
    if (f->hazard[op->inputs[i]]) return false;
  if (f->ir->tensors[op->outputs[0]].alias_of >= 0) return false;
  if (k == RECAP__FUSE_PROGRAM)
    return expr_size(op->attrs.expr, &f->own_nodes[v], &f->levels[v]) &&
           recap__expr_num_inputs(op->attrs.expr) == op->num_inputs;
  if (k == RECAP__FUSE_UNARY ? op->num_inputs != 1 : op->num_inputs != 2) return false;
  f->own_nodes[v] = 1;
  f->levels[v] = 1;
  return true;
}

/* How many inputs an op that folds a residual may have with it: its last slot is a prologue's
 * (the norm's weight, after the residual) when it takes prologues. */
static int residual_room(const recap__op_def *def) {
  return def->max_inputs - (def->takes_prologue ? 1 : 0);
}

/* The linear that the add at v folds in (fuse.h, "Residual adds"), or -1. */
static int fold_source(const finder *f, int v) {
  const recap__ir *ir = f->ir;
  const recap__ir_op *add = &ir->ops[v];
  if (form_of(add->def) != RECAP__FUSE_BINARY || add->def->code != RECAP_BINARY_ADD ||
      add->num_inputs != 2)
    return -1;
  const recap__ir_tensor *y = &ir->tensors[add->outputs[0]];
  if (y->alias_of >= 0) return -1;
  for (int s = 0; s < 2; ++s) {
    const int t = add->inputs[s], r = add->inputs[1 - s];
    const recap__ir_tensor *x = &ir->tensors[t], *res = &ir->tensors[r];
    const int u = x->producer;
    if (u < 0 || u >= v || f->reader[t] != v || x->role != RECAP_ROLE_INTERMEDIATE ||
        x->is_output || x->alias_of >= 0)
      continue;
    const recap__ir_op *lin = &ir->ops[u];
    /* No residual yet (an optional bias before it may be absent: attrs.residual marks the
     * last input as the residual), and no activation in the way. */
    if (!lin->def || !lin->def->folds_residual || lin->attrs.residual || lin->attrs.rms_norm ||
        lin->num_inputs >= residual_room(lin->def) || lin->num_outputs != 1 ||
        lin->attrs.act != RECAP_ACT_NONE || lin->stream != add->stream)
      continue;
    /* No broadcast, in any bucket: the same shape here and the bucketed dim on the same
     * axes. */
    if (res->dtype != x->dtype || y->dtype != x->dtype || res->ndim != x->ndim ||
        res->bucket_axes != x->bucket_axes ||
        memcmp(res->shape, x->shape, (size_t)x->ndim * sizeof x->shape[0]) != 0)
      continue;
    /* The folded linear runs at the add's place: none of its reads may move past a write. */
    bool hazard = f->hazard[r];
    for (int i = 0; i < lin->num_inputs; ++i) hazard = hazard || f->hazard[lin->inputs[i]];
    if (!hazard) return u;
  }
  return -1;
}

/* Whether tensor t, the output of op u, may be replaced by a prologue in every op reading it:
 * an intermediate (not an output, not an alias) read by at least one op, each one a linear
 * that takes prologues (op.h), has none yet and room for one more input, reads t as its x
 * only, and runs on u's stream. */
static bool readers_take_prologue(const finder *f, int u, int t) {
  const recap__ir *ir = f->ir;
  const recap__ir_tensor *x = &ir->tensors[t];
  if (x->role != RECAP_ROLE_INTERMEDIATE || x->is_output || x->alias_of >= 0 || f->hazard[t])
    return false;
  int readers = 0;
  for (int v = u + 1; v < f->no; ++v) {
    const recap__ir_op *op = &ir->ops[v];
    bool reads = false;
    for (int i = 0; i < op->num_inputs; ++i) {
      if (op->inputs[i] != t) continue;
      if (i != 0) return false;
      reads = true;
    }
    if (!reads) continue;
    if (!op->def || !op->def->takes_prologue || op->attrs.rms_norm ||
        op->attrs.glu != RECAP_ACT_NONE || f->prologue[v] >= 0 ||
        op->num_inputs >= op->def->max_inputs || op->stream != ir->ops[u].stream)
      return false;
    readers++;
  }
  return readers > 0;
}

/* Marks every reader of op u's output as computing u (the norm or gated unit `source`). */
static void take_prologue(finder *f, int u, int source) {
  const int t = f->ir->ops[u].outputs[0];
  for (int v = u + 1; v < f->no; ++v)
    if (f->ir->ops[v].num_inputs > 0 && f->ir->ops[v].inputs[0] == t) f->prologue[v] = source;
}

/* Whether tensors g and up are the first and second halves of the last dim of the one split
 * producing both, and read by op e only; the split's op index, or -1. */
static int glu_split(const finder *f, int e, int g, int up) {
  const recap__ir *ir = f->ir;
  const recap__ir_tensor *tg = &ir->tensors[g], *tu = &ir->tensors[up];
  const int s = tg->producer;
  if (s < 0 || s != tu->producer || f->reader[g] != e || f->reader[up] != e) return -1;
  const recap__ir_op *split = &ir->ops[s];
  if (!split->def || split->def->copy_view != RECAP__COPY_SPLIT || split->num_outputs != 2 ||
      split->num_inputs != 1 || split->outputs[0] != g || split->outputs[1] != up ||
      split->stream != ir->ops[e].stream)
    return -1;
  const recap__ir_tensor *z = &ir->tensors[split->inputs[0]];
  const int last = z->ndim - 1;
  if (f->hazard[split->inputs[0]] || (split->attrs.dim != -1 && split->attrs.dim != last))
    return -1;
  for (int k = 0; k < 2; ++k) {
    const recap__ir_tensor *h = k ? tu : tg;
    if (h->role != RECAP_ROLE_INTERMEDIATE || h->is_output || h->alias_of >= 0 ||
        h->dtype != z->dtype || h->ndim != z->ndim || h->bucket_axes != z->bucket_axes ||
        memcmp(h->shape, z->shape, (size_t)last * sizeof z->shape[0]) != 0)
      return -1;
  }
  return tg->shape[last] == tu->shape[last] && 2 * tg->shape[last] == z->shape[last] ? s : -1;
}

/* Whether op e computes act(gate) * up (its contract's as_glu) over the two halves of one
 * split read by e alone (glu_split): that split's op index, with *act and *gate (the gate
 * half's tensor) set; else -1. */
static int gated_unit(const finder *f, int e, recap__activation *act, int *gate) {
  const recap__ir_op *op = &f->ir->ops[e];
  int gi, ui;
  if (!op->def || !op->def->as_glu || op->num_outputs != 1 ||
      !op->def->as_glu(&op->attrs, op->num_inputs, act, &gi, &ui))
    return -1;
  *gate = op->inputs[gi];
  return glu_split(f, e, op->inputs[gi], op->inputs[ui]);
}

/* The prologue folds (fuse.h, "Prologues"), decided before anything else so that the ops they
 * remove join no group. */
static void decide_prologues(finder *f) {
  const recap__ir *ir = f->ir;
  for (int v = 0; v < f->no; ++v) {
    f->prologue[v] = -1;
    f->glu[v] = RECAP_ACT_NONE;
  }
  /* Opt-in (RECAP_FUSION_PROLOGUES=1): both folds measured slower than the ops apart. On an
   * H200 the Llama 3.2 1B shape's decode step took 1.085 ms at batch 1 with the norms folded
   * (gate_up keeping its gated output) against 1.037 ms apart, Qwen2 0.5B's 1.077 against
   * 1.026, and only Llama 3 8B's batch-1 step gained (4.608 against 4.75 ms; at batch 8 5.21
   * against 4.94); on the H100 the down projection with the gated unit in its prologue took
   * 67 us against 20 + 5 us for the GEMV and the unit apart (docs/SERVING.md, "Prologue
   * folds"): a folded GEMV pays the norm on every block's critical path, which costs more than
   * the launch it saves. */
  if (recap__env_bool("RECAP_FUSION_PROLOGUES", 0) != 1) return;
  for (int u = 0; u < f->no; ++u) {
    const recap__ir_op *op = &ir->ops[u];
    if (!op->def || op->num_outputs != 1) continue;
    const int t = op->outputs[0];
    if (op->def->prologue_form == RECAP__PROLOGUE_RMS_NORM && op->num_inputs == 2 &&
        !f->hazard[op->inputs[0]] && !f->hazard[op->inputs[1]] &&
        ir->tensors[op->inputs[0]].dtype == ir->tensors[t].dtype &&
        readers_take_prologue(f, u, t)) {
      take_prologue(f, u, u);
      f->gone[u] = true;
      continue;
    }
    /* Not on CUDA: the gated unit's prologue kernels gave different bits from run to run on
     * the H100 (gemm_prologue_test, 3 of 12 runs; docs/SERVING.md "Prologue folds") and were
     * removed, so CUDA refuses a linear with `glu` and the unit keeps its own launch. */
    if (ir->device == RECAP_BACKEND_CUDA) continue;
    recap__activation act;
    int g;
    const int s = gated_unit(f, u, &act, &g);
    if (s < 0 || ir->tensors[t].dtype != ir->tensors[g].dtype ||
        ir->tensors[t].ndim != ir->tensors[g].ndim ||
        memcmp(ir->tensors[t].shape, ir->tensors[g].shape, sizeof ir->tensors[t].shape) != 0 ||
        !readers_take_prologue(f, u, t))
      continue;
    take_prologue(f, u, u);
    f->glu[u] = act;
    f->gone[u] = f->gone[s] = true;
  }
}

/* The gated outputs (fuse.h, "Gated outputs"), decided after the prologues: a unit that the
 * down projection computes is gone already, and a linear with a prologue keeps its output. */
static void decide_gated_outputs(finder *f) {
  const recap__ir *ir = f->ir;
  for (int v = 0; v < f->no; ++v) f->gated[v] = f->gated_by[v] = -1;
  if (recap__env_bool("RECAP_FUSION_GATED", 1) != 1) return;
  for (int e = 0; e < f->no; ++e) {
    recap__activation act;
    int g;
    const int s = f->gone[e] ? -1 : gated_unit(f, e, &act, &g);
    if (s < 0 || f->gone[s]) continue;
    const recap__ir_op *unit = &ir->ops[e];
    const int y = unit->outputs[0];
    const int z = ir->ops[s].inputs[0];
    const recap__ir_tensor *tz = &ir->tensors[z], *ty = &ir->tensors[y], *tg = &ir->tensors[g];
    const int u = tz->producer;
    /* A norm's prologue goes with the unit (one launch for the norm, the projection and the
     * unit); a gated unit's prologue does not. */
    if (u < 0 || u >= s) continue;
    const bool glu_prologue = f->prologue[u] >= 0 && f->glu[f->prologue[u]] != RECAP_ACT_NONE;
    if (f->gone[u] || f->gated[u] >= 0 || glu_prologue || f->reader[z] != s ||
        tz->role != RECAP_ROLE_INTERMEDIATE || tz->is_output)
      continue;
    const recap__ir_op *lin = &ir->ops[u];
    if (!lin->def || !lin->def->takes_gated_output || lin->num_outputs != 1 ||
        lin->attrs.act != RECAP_ACT_NONE || lin->attrs.residual ||
        lin->attrs.glu != RECAP_ACT_NONE || lin->attrs.gated != RECAP_ACT_NONE ||
        lin->num_inputs > 3 + (lin->attrs.rms_norm ? 1 : 0) || lin->stream != unit->stream)
      continue;
    /* The unit's output is produced at the linear's place, earlier: a plain tensor of the
     * halves' shape and dtype, which nothing reads or writes in between. */
    if (ty->alias_of >= 0 || f->hazard[y] || ty->dtype != tz->dtype || ty->ndim != tg->ndim ||
        ty->bucket_axes != tg->bucket_axes ||
        memcmp(ty->shape, tg->shape, (size_t)tg->ndim * sizeof tg->shape[0]) != 0)
      continue;
    f->gated[u] = e;
    f->gated_by[s] = f->gated_by[e] = u;
  }
}

/* The norm epilogues (fuse.h, "Norm epilogues"), decided after the prologues: a norm that
 * linears compute is gone already. */
static void decide_norm_epilogues(finder *f) {
  const recap__ir *ir = f->ir;
  for (int v = 0; v < f->no; ++v) f->epilogue[v] = f->epilogue_of[v] = -1;
  for (int v = 0; v < f->no; ++v) {
    const recap__ir_op *norm = &ir->ops[v];
    if (f->gone[v] || !norm->def || norm->def->prologue_form != RECAP__PROLOGUE_RMS_NORM ||
        norm->num_inputs != 2 || norm->num_outputs != 1)
      continue;
    const int t = norm->inputs[0], w = norm->inputs[1], y = norm->outputs[0];
    const int u = ir->tensors[t].producer;
    if (u < 0 || u >= v || f->epilogue[u] >= 0) continue;
    const recap__ir_op *op = &ir->ops[u];
    if (!op->def || !op->def->takes_norm_epilogue || op->num_outputs != 1 ||
        op->num_inputs + 1 != op->def->max_inputs || op->stream != norm->stream)
      continue;
    /* The norm runs at op u's place, earlier: its weight must exist by then and nothing may
     * write what it reads in between. */
    const recap__ir_tensor *tx = &ir->tensors[t], *tw = &ir->tensors[w], *ty = &ir->tensors[y];
    if (tw->producer >= u || f->hazard[t] || f->hazard[w] || tx->alias_of >= 0 ||
        ty->alias_of >= 0 || tw->dtype != tx->dtype || ty->dtype != tx->dtype)
      continue;
    f->epilogue[u] = v;
    f->epilogue_of[v] = u;
  }
}

/* Adds tensor t to the set in[0..*n) unless present; false when the set is full. */
static bool set_add(int *in, int *n, int cap, int t) {
  for (int i = 0; i < *n; ++i)
    if (in[i] == t) return true;
  if (*n == cap) return false;
  in[(*n)++] = t;
  return true;
}

/* Op v starts its group and absorbs what fits of its producers' groups. */
static void grow(finder *f, int v) {
  const recap__ir_op *op = &f->ir->ops[v];
  int operand_depth[RECAP_OP_MAX_INPUTS];
  f->num_in[v] = 0;
  f->body[v] = f->own_nodes[v];
  for (int i = 0; i < op->num_inputs; ++i) {
    int t = op->inputs[i];
    set_add(f->in[v], &f->num_in[v], RECAP_OP_MAX_INPUTS, t);
    operand_depth[i] = 1;
    int a = movable_into(f, t, v);
    if (a != NO_ACT) {
      f->act[t] = a;
      operand_depth[i] = 2;
      f->body[v]++;
    }
  }
  for (int i = 0; i < op->num_inputs; ++i) {
    int t = op->inputs[i];
    if (!swallowable(f, t, v)) continue;
    int u = f->ir->tensors[t].producer;
    /* Tentatively: t leaves the inputs, u's inputs join them. */
    int merged[2 * RECAP_OP_MAX_INPUTS], n = 0;
    for (int k = 0; k < f->num_in[v]; ++k)
      if (f->in[v][k] != t) merged[n++] = f->in[v][k];
    bool fits = true;
    for (int k = 0; k < f->num_in[u] && fits; ++k)
      fits = set_add(merged, &n, RECAP_OP_MAX_INPUTS, f->in[u][k]);
    int body = f->body[v] + f->body[u];
    if (!fits || body + n > RECAP_EXPR_MAX_NODES) continue;
    int deepest = f->depth[u];
    for (int k = 0; k < op->num_inputs; ++k)
      if (k != i && operand_depth[k] > deepest) deepest = operand_depth[k];
    if (f->levels[v] + deepest > RECAP_EXPR_MAX_BUILD_DEPTH) continue;
    f->parent[u] = v;
    memcpy(f->in[v], merged, (size_t)n * sizeof *merged);
    f->num_in[v] = n;
    f->body[v] = body;
    operand_depth[i] = f->depth[u];
  }
  int deepest = 1;
  for (int i = 0; i < op->num_inputs; ++i)
    if (operand_depth[i] > deepest) deepest = operand_depth[i];
  f->depth[v] = f->levels[v] + deepest;
}

/* ---- the members and inputs of a group, in the program's order ---- */

typedef struct {
  int *ops; /* members, in depth-first order (operands first) */
  int num_ops;
  int inputs[RECAP_OP_MAX_INPUTS];
  int num_inputs;
  int num_acts;
  bool overflow; /* more inputs than a kernel takes: a bug of grow() */
} walk;

static void collect(const finder *f, int v, walk *w) {
  const recap__ir_op *op = &f->ir->ops[v];
  for (int i = 0; i < op->num_inputs; ++i) {
    int t = op->inputs[i], u = f->ir->tensors[t].producer;
    if (u >= 0 && f->parent[u] == v) {
      collect(f, u, w);
      continue;
    }
    if (!set_add(w->inputs, &w->num_inputs, RECAP_OP_MAX_INPUTS, t)) w->overflow = true;
    if (f->act[t] != NO_ACT) w->num_acts++;
  }
  w->ops[w->num_ops++] = v;
}

static int cmp_int(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  return (x > y) - (x < y);
}

/* Until the expr op takes an explicit output dtype, a group's output must have the dtype the
 * expr op infers from its inputs (their common one, else f32). A root whose group does not is
 * left unfused, and its producers' groups are considered on their own. Roots are visited from
 * the last op down, so a released producer group is checked after its consumer. */
static void settle_dtypes(finder *f, int *scratch) {
  const recap__ir *ir = f->ir;
  for (int v = f->no - 1; v >= 0; --v) {
    if (!f->fusable[v] || f->parent[v] >= 0 || f->dissolved[v]) continue;
    walk w = {.ops = scratch};
    collect(f, v, &w);
    if (w.num_ops + w.num_acts < 2) continue;
    recap_tensor in[RECAP_OP_MAX_INPUTS];
    memset(in, 0, sizeof in);
    for (int k = 0; k < w.num_inputs; ++k) in[k].dtype = ir->tensors[w.inputs[k]].dtype;
    recap_dtype want = ir->tensors[ir->ops[v].outputs[0]].dtype;
    if (recap__expr_result_dtype(in, w.num_inputs) == want) continue;
    f->dissolved[v] = true;
    const recap__ir_op *op = &ir->ops[v];
    for (int i = 0; i < op->num_inputs; ++i) {
      int t = op->inputs[i], u = ir->tensors[t].producer;
      if (u >= 0 && f->parent[u] == v) f->parent[u] = -1;
      f->act[t] = NO_ACT;
    }
  }
}

static recap_status find(const recap__ir *ir, finder *f) {
  memset(f, 0, sizeof *f);
  if (!ir) return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "no IR to fuse");
  f->ir = ir;
  f->no = (int)ir->num_ops;
  f->nt = (int)ir->num_tensors;
  size_t no = (size_t)f->no + 1, nt = (size_t)f->nt + 1;
  f->reader = calloc(nt, sizeof *f->reader);
  f->hazard = calloc(nt, sizeof *f->hazard);
  f->act = calloc(nt, sizeof *f->act);
  f->fusable = calloc(no, sizeof *f->fusable);
  f->levels = calloc(no, sizeof *f->levels);
  f->own_nodes = calloc(no, sizeof *f->own_nodes);
  f->parent = calloc(no, sizeof *f->parent);
  f->dissolved = calloc(no, sizeof *f->dissolved);
  f->fold = calloc(no, sizeof *f->fold);
  f->prologue = calloc(no, sizeof *f->prologue);
  f->gone = calloc(no, sizeof *f->gone);
  f->glu = calloc(no, sizeof *f->glu);
  f->epilogue = calloc(no, sizeof *f->epilogue);
  f->epilogue_of = calloc(no, sizeof *f->epilogue_of);
  f->gated = calloc(no, sizeof *f->gated);
  f->gated_by = calloc(no, sizeof *f->gated_by);
  f->in = calloc(no, sizeof *f->in);
  f->num_in = calloc(no, sizeof *f->num_in);
  f->body = calloc(no, sizeof *f->body);
  f->depth = calloc(no, sizeof *f->depth);
  int *scratch = calloc(no, sizeof *scratch);
  if (!f->reader || !f->hazard || !f->act || !f->fusable || !f->levels || !f->own_nodes ||
      !f->parent || !f->dissolved || !f->fold || !f->prologue || !f->gone || !f->glu ||
      !f->epilogue || !f->epilogue_of || !f->gated || !f->gated_by || !f->in || !f->num_in ||
      !f->body || !f->depth || !scratch) {
    free(scratch);
    finder_free(f);
    return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for the fusion pass");
  }
  recap_status st = scan(f);
  if (st != RECAP_OK) {
    free(scratch);
    finder_free(f);
    return st;
  }
  for (int t = 0; t < f->nt; ++t) f->act[t] = NO_ACT;
  decide_prologues(f);
  decide_gated_outputs(f);
  decide_norm_epilogues(f);
  for (int v = 0; v < f->no; ++v) {
    f->parent[v] = -1;
    f->fold[v] = f->gated_by[v] < 0 ? fold_source(f, v) : -1;
    f->fusable[v] = f->fold[v] < 0 && !f->gone[v] && f->epilogue_of[v] < 0 && f->gated_by[v] < 0 &&
                    f->gated[v] < 0 && decide_fusable(f, v);
    if (f->fusable[v]) grow(f, v);
  }
  settle_dtypes(f, scratch);
  free(scratch);
  return RECAP_OK;
}

/* Whether op v roots a group that is rewritten; its walk in *w (w->ops has room for every
 * op). */
static bool rooted_group(const finder *f, int v, walk *w) {
  if (!f->fusable[v] || f->parent[v] >= 0 || f->dissolved[v]) return false;
  w->num_ops = w->num_inputs = w->num_acts = 0;
  w->overflow = false;
  collect(f, v, w);
  return w->num_ops + w->num_acts >= 2;
}

void recap__fuse_groups_free(recap__fuse_groups *g) {
  if (!g) return;
  for (size_t i = 0; i < g->count; ++i) free(g->groups[i].ops);
  free(g->groups);
  g->groups = NULL;
  g->count = 0;
}

recap_status recap__fuse_find(const recap__ir *ir, recap__fuse_groups *out) {
  RECAP_CHECK_ARG(ir && out);
  out->groups = NULL;
  out->count = 0;
  finder f;
  RECAP_TRY(find(ir, &f));
  recap_status st = RECAP_OK;
  walk w = {.ops = calloc((size_t)f.no + 1, sizeof(int))};
  recap__fuse_groups g = {.groups = calloc((size_t)f.no + 1, sizeof *g.groups)};
  if (!w.ops || !g.groups) {
    st = RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for the fusion groups");
    goto done;
  }
  for (int v = 0; v < f.no; ++v) {
    if (!rooted_group(&f, v, &w)) continue;
    recap__fuse_group *x = &g.groups[g.count];
    x->ops = malloc((size_t)w.num_ops * sizeof *x->ops);
    if (!x->ops) {
      st = RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for the fusion groups");
      goto done;
    }
    g.count++;
    memcpy(x->ops, w.ops, (size_t)w.num_ops * sizeof *x->ops);
    qsort(x->ops, (size_t)w.num_ops, sizeof *x->ops, cmp_int);
    x->num_ops = w.num_ops;
    x->root = v;
    memcpy(x->inputs, w.inputs, sizeof x->inputs);
    x->num_inputs = w.num_inputs;
    x->num_acts = w.num_acts;
  }
done:
  free(w.ops);
  finder_free(&f);
  if (st != RECAP_OK) {
    recap__fuse_groups_free(&g);
    return st;
  }
  *out = g;
  return RECAP_OK;
}

/* ---- building one group's program ---- */

typedef struct {
  const finder *f;
  recap__expr_program *p;
  const walk *w;
  recap__expr_node input_node[RECAP_OP_MAX_INPUTS];
} builder;

static recap__expr_node leaf(builder *b, int t) {
  int k = 0;
  while (k < b->w->num_inputs && b->w->inputs[k] != t) ++k;
  if (k == b->w->num_inputs) return RECAP_EXPR_NONE;
  if (b->input_node[k] == RECAP_EXPR_NONE) b->input_node[k] = recap__expr_input(b->p, k);
  recap__expr_node n = b->input_node[k];
  int a = b->f->act[t];
  return a == NO_ACT ? n : recap__expr_unary(b->p, (recap__expr_op)a, n);
}

/* Copies the nodes of an `expr` op's program that its root reaches, its inputs replaced by
 * the operands. */
static recap__expr_node inline_expr(builder *b, const recap__expr_program *q,
                                    const recap__expr_node *operand, int num_operands) {
  int count = 0;
  const recap__expr_node_data *d = recap__expr_nodes(q, &count);
  int root = recap__expr_root(q);
  recap__expr_node map[RECAP_EXPR_MAX_NODES];
  bool reached[RECAP_EXPR_MAX_NODES] = {false};
  reached[root] = true;
  for (int i = root; i >= 0; --i)
    if (reached[i]) {
      if (d[i].a >= 0) reached[d[i].a] = true;
      if (d[i].b >= 0) reached[d[i].b] = true;
      if (d[i].c >= 0) reached[d[i].c] = true;
    }
  for (int i = 0; i <= root; ++i) {
    if (!reached[i]) continue;
    const recap__expr_node_data *x = &d[i];
    recap__expr_node a = x->a >= 0 ? map[x->a] : RECAP_EXPR_NONE;
    recap__expr_node bb = x->b >= 0 ? map[x->b] : RECAP_EXPR_NONE;
    recap__expr_node c = x->c >= 0 ? map[x->c] : RECAP_EXPR_NONE;
    switch (x->op) {
      case RECAP_EXPR_INPUT:
        map[i] = x->index >= 0 && x->index < num_operands ? operand[x->index] : RECAP_EXPR_NONE;
        break;
      case RECAP_EXPR_CONST:
        map[i] = recap__expr_const(b->p, x->value);
        break;
      case RECAP_EXPR_SCALE:
        map[i] = recap__expr_scale(b->p, a, x->value);
        break;
      case RECAP_EXPR_CAST:
        map[i] = recap__expr_cast(b->p, a, x->dtype);
        break;
      case RECAP_EXPR_SELECT:
        map[i] = recap__expr_select(b->p, a, bb, c);
        break;
      default:
        map[i] = x->op >= RECAP_EXPR_ADD ? recap__expr_binary(b->p, x->op, a, bb)
                                         : recap__expr_unary(b->p, x->op, a);
        break;
    }
  }
  return map[root];
}

static recap__expr_node node_of(builder *b, int v) {
  const recap__ir_op *op = &b->f->ir->ops[v];
  recap__expr_node operand[RECAP_OP_MAX_INPUTS];
  for (int i = 0; i < op->num_inputs; ++i) {
    int t = op->inputs[i], u = b->f->ir->tensors[t].producer;
    operand[i] = u >= 0 && b->f->parent[u] == v ? node_of(b, u) : leaf(b, t);
  }
  switch (form_of(op->def)) {
    case RECAP__FUSE_UNARY:
      return recap__expr_from_unary_code(b->p, op->def->code, operand[0], &op->attrs);
    case RECAP__FUSE_BINARY:
      return recap__expr_from_binary_code(b->p, op->def->code, operand[0], operand[1]);
    case RECAP__FUSE_PROGRAM:
      return inline_expr(b, op->attrs.expr, operand, op->num_inputs);
    default:
      return RECAP_EXPR_NONE;
  }
}

/* ---- text ---- */

/* How an op appears in a fused op's name: its spec `name:`, or its kind when it has none. */
static const char *member_label(const recap__ir_op *op) {
  return strchr(op->name, '#') ? op->def->name : op->name;
}

/* "fused[add,mul,gelu]"; past MAX_NAME_BYTES the rest is counted ("fused[add,...,+96 more]").
 * Members in op order, a moved activation just before the op that reads it. */
static char *fused_name(const finder *f, const int *members, int count) {
  recap__text b = {0};
  recap__text_put(&b, "fused[");
  int shown = 0, total = 0;
  for (int m = 0; m < count; ++m) {
    const recap__ir_op *op = &f->ir->ops[members[m]];
    const char *labels[RECAP_OP_MAX_INPUTS + 1];
    int n = 0;
    for (int i = 0; i < op->num_inputs; ++i) {
      int t = op->inputs[i], u = f->ir->tensors[t].producer;
      if (f->act[t] != NO_ACT && !(u >= 0 && f->parent[u] == members[m]))
        labels[n++] = recap__expr_op_name((recap__expr_op)f->act[t]);
    }
    labels[n++] = member_label(op);
    for (int k = 0; k < n; ++k, ++total) {
      if (b.len + strlen(labels[k]) + 16 > MAX_NAME_BYTES) continue;
      recap__text_put(&b, "%s%s", shown ? "," : "", labels[k]);
      shown++;
    }
  }
  if (shown < total) recap__text_put(&b, ",+%d more", total - shown);
  recap__text_put(&b, "]");
  if (b.failed) {
    free(b.data);
    return NULL;
  }
  return b.data;
}

/* ---- rewriting ---- */

/* What one group becomes: the fused op (not yet in the IR). */
typedef struct {
  int root;
  recap__ir_op op;
} fused_op;

static void fused_op_free(fused_op *x) {
  free(x->op.name);
  free(x->op.fused_from);
  recap__expr_program_destroy(x->op.program);
}

/* The fused op must infer exactly the output of the ops it replaces (an expr op: the
 * broadcast of every input, which the group's output is too); a disagreement is a bug of this
 * pass. */
static recap_status check_output(const recap__ir *ir, const recap__ir_op *op,
                                 const char *root_name) {
  recap__op_call call = {.def = op->def, .num_inputs = op->num_inputs, .attrs = op->attrs};
  for (int k = 0; k < op->num_inputs; ++k) {
    const recap__ir_tensor *x = &ir->tensors[op->inputs[k]];
    call.inputs[k].dtype = x->dtype;
    call.inputs[k].ndim = x->ndim;
    memcpy(call.inputs[k].shape, x->shape, sizeof x->shape);
    recap__tensor_set_contiguous(&call.inputs[k]);
  }
  const recap__ir_tensor *y = &ir->tensors[op->outputs[0]];
  recap_status st = recap__op_infer(&call);
  bool same = st == RECAP_OK && call.num_outputs == op->num_outputs;
  for (int o = 0; same && o < op->num_outputs; ++o) {
    y = &ir->tensors[op->outputs[o]];
    same = call.outputs[o].dtype == y->dtype && call.outputs[o].ndim == y->ndim;
    for (int d = 0; same && d < y->ndim; ++d) same = call.outputs[o].shape[d] == y->shape[d];
  }
  if (same) return RECAP_OK;
  char why[512];
  snprintf(why, sizeof why, "%s", st == RECAP_OK ? "its output differs" : recap_last_error());
  return RECAP_FAIL(RECAP_STATUS_INTERNAL,
                    "fusion: the fused op for '%s' does not reproduce tensor '%s' (%s)", root_name,
                    y->name, why);
}

/* Builds the fused op of the group rooted at v and checks it against the group's output. */
static recap_status make_fused(const finder *f, const recap__op_def *expr_def, int v, walk *w,
                               fused_op *out) {
  const recap__ir *ir = f->ir;
  const recap__ir_op *root = &ir->ops[v];
  memset(out, 0, sizeof *out);
  out->root = v;
  recap__ir_op *op = &out->op;
  if (w->overflow)
    return RECAP_FAIL(RECAP_STATUS_INTERNAL, "fusion: the group of op '%s' has too many inputs",
                      root->name);
  qsort(w->ops, (size_t)w->num_ops, sizeof *w->ops, cmp_int);
  op->fused_from = malloc((size_t)w->num_ops * sizeof *op->fused_from);
  op->name = fused_name(f, w->ops, w->num_ops);
  if (!op->fused_from || !op->name) {
    fused_op_free(out);
    return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for a fused op");
  }
  memcpy(op->fused_from, w->ops, (size_t)w->num_ops * sizeof *op->fused_from);
  op->num_fused = w->num_ops;
  recap_status st = recap__expr_program_create(w->num_inputs, &op->program);
  if (st != RECAP_OK) {
    fused_op_free(out);
    return st;
  }
  builder b = {.f = f, .p = op->program, .w = w};
  for (int k = 0; k < RECAP_OP_MAX_INPUTS; ++k) b.input_node[k] = RECAP_EXPR_NONE;
  st = recap__expr_program_finish(op->program, node_of(&b, v));
  if (st != RECAP_OK) {
    fused_op_free(out);
    return recap__error_context(st, "fusing the group of op '%s': ", root->name);
  }
  op->def = expr_def;
  op->pos = root->pos;
  op->stream = root->stream;
  op->num_inputs = w->num_inputs;
  memcpy(op->inputs, w->inputs, sizeof op->inputs);
  op->num_outputs = 1;
  op->outputs[0] = root->outputs[0];
  recap__op_attrs_set_defaults(expr_def, &op->attrs);
  op->attrs.expr = op->program;

  st = check_output(ir, op, root->name);
  if (st != RECAP_OK) fused_op_free(out);
  return st;
}

/* Rewrites linear op (a copy of IR op v) to compute its prologue: x becomes the norm's input
 * (and the norm's weight its last input) or the split's input (and attrs.glu the unit's
 * activation). Appends the ops it replaces to members[*count]. */
static void apply_prologue(const finder *f, int v, recap__ir_op *op, int *members, int *count) {
  const recap__ir *ir = f->ir;
  const int u = f->prologue[v];
  if (u < 0) return;
  const recap__ir_op *src = &ir->ops[u];
  if (f->glu[u] == RECAP_ACT_NONE) {
    op->inputs[0] = src->inputs[0];
    op->inputs[op->num_inputs++] = src->inputs[1];
    op->attrs.rms_norm = 1;
    op->attrs.eps = src->attrs.eps;
    members[(*count)++] = u;
    return;
  }
  const int s = ir->tensors[src->inputs[0]].producer;
  op->inputs[0] = ir->ops[s].inputs[0];
  op->attrs.glu = f->glu[u];
  members[(*count)++] = s;
  members[(*count)++] = u;
}

/* Ends a fold's linear in out->op: its spec ops `members` (sorted here) as fused_from and its
 * name, and its output checked against the spec op `was` whose place it takes. Frees out on
 * a failure. */
static recap_status finish_fused(const finder *f, int *members, int count, const char *was,
                                 fused_op *out) {
  recap__ir_op *op = &out->op;
  qsort(members, (size_t)count, sizeof *members, cmp_int);
  op->fused_from = malloc((size_t)count * sizeof *members);
  op->name = fused_name(f, members, count);
  if (!op->fused_from || !op->name) {
    fused_op_free(out);
    return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for a fused op");
  }
  memcpy(op->fused_from, members, (size_t)count * sizeof *members);
  op->num_fused = count;
  recap_status st = check_output(f->ir, op, was);
  if (st != RECAP_OK) fused_op_free(out);
  return st;
}

/* Builds the linear that computes the prologue of linear v in place of it (fuse.h,
 * "Prologues"): v's place, stream and output. */
static recap_status make_prologue(const finder *f, int v, fused_op *out) {
  const recap__ir *ir = f->ir;
  memset(out, 0, sizeof *out);
  out->root = v;
  recap__ir_op *op = &out->op;
  *op = ir->ops[v];
  op->program = NULL;
  /* A linear whose activation moved into its consumer's group stops applying it. */
  if (f->act[op->outputs[0]] != NO_ACT) op->attrs.act = RECAP_ACT_NONE;
  int members[4], count = 0;
  apply_prologue(f, v, op, members, &count);
  members[count++] = v;
  return finish_fused(f, members, count, ir->ops[v].name, out);
}

/* Builds the linear that replaces the add at v and the linear it folds in: the add's place,
 * stream and output; the linear's inputs and attributes, and the add's other operand as its
 * last input, marked as the residual (attrs.residual) whether or not a bias comes before it. */
static recap_status make_fold(const finder *f, int v, fused_op *out) {
  const recap__ir *ir = f->ir;
  const recap__ir_op *add = &ir->ops[v];
  const int u = f->fold[v];
  const int t = ir->ops[u].outputs[0];
  memset(out, 0, sizeof *out);
  out->root = v;
  recap__ir_op *op = &out->op;
  *op = ir->ops[u];
  op->program = NULL;
  op->pos = add->pos;
  op->stream = add->stream;
  op->inputs[op->num_inputs++] = add->inputs[0] == t ? add->inputs[1] : add->inputs[0];
  op->attrs.residual = 1;
  op->outputs[0] = add->outputs[0];
  /* The prologue's input (the norm's weight) comes after the residual. */
  int members[5], count = 0;
  apply_prologue(f, u, op, members, &count);
  members[count++] = u;
  members[count++] = v;
  return finish_fused(f, members, count, add->name, out);
}

/* Builds op u computing its norm epilogue (fuse.h, "Norm epilogues"): u's place and stream,
 * the norm's weight as its last input, the norm's output as its second. */
static recap_status make_norm_epilogue(const finder *f, int u, fused_op *out) {
  const recap__ir *ir = f->ir;
  const recap__ir_op *norm = &ir->ops[f->epilogue[u]];
  memset(out, 0, sizeof *out);
  out->root = u;
  recap__ir_op *op = &out->op;
  *op = ir->ops[u];
  op->program = NULL;
  op->inputs[op->num_inputs++] = norm->inputs[1];
  op->attrs.eps = norm->attrs.eps;
  op->outputs[op->num_outputs++] = norm->outputs[0];
  int members[2] = {u, f->epilogue[u]};
  return finish_fused(f, members, 2, ir->ops[u].name, out);
}

/* Builds linear u computing its gated output (fuse.h, "Gated outputs"): u's place, stream
 * and inputs, the unit's output as its own. */
static recap_status make_gated(const finder *f, int u, fused_op *out) {
  const recap__ir *ir = f->ir;
  const int e = f->gated[u];
  recap__activation act;
  int g;
  const int s = gated_unit(f, e, &act, &g);
  memset(out, 0, sizeof *out);
  out->root = u;
  recap__ir_op *op = &out->op;
  *op = ir->ops[u];
  op->program = NULL;
  op->attrs.gated = act;
  op->outputs[0] = ir->ops[e].outputs[0];
  int members[5], count = 0;
  apply_prologue(f, u, op, members, &count);
  members[count++] = u;
  members[count++] = s;
  members[count++] = e;
  return finish_fused(f, members, count, ir->ops[u].name, out);
}

/* Everything the rewrite allocates before it commits. */
typedef struct {
  fused_op *fused;
  size_t num_fused;
  int *op_map, *tensor_map; /* old index -> new, -1 when removed */
  recap__ir_op *ops;
  recap__ir_tensor *tensors;
} rewrite;

static void rewrite_free(rewrite *r) {
  if (r->fused)
    for (size_t i = 0; i < r->num_fused; ++i) fused_op_free(&r->fused[i]);
  free(r->fused);
  free(r->op_map);
  free(r->tensor_map);
  free(r->ops);
  free(r->tensors);
}

/* Whether linear v is folded into a later add (which then builds it, prologue included). */
static bool folded_linear(const finder *f, int v) {
  for (int w = v + 1; w < f->no; ++w)
    if (f->fold[w] == v) return true;
  return false;
}

static recap_status build_rewrite(const finder *f, rewrite *r) {
  const recap__ir *ir = f->ir;
  const recap__op_def *expr_def = recap__op_find("expr");
  if (!expr_def) return recap__error_context(RECAP_STATUS_INTERNAL, "fusion needs the expr op: ");
  size_t no = (size_t)f->no + 1, nt = (size_t)f->nt + 1;
  walk w = {.ops = calloc(no, sizeof(int))};
  r->fused = calloc(no, sizeof *r->fused);
  r->op_map = calloc(no, sizeof *r->op_map);
  r->tensor_map = calloc(nt, sizeof *r->tensor_map);
  if (!w.ops || !r->fused || !r->op_map || !r->tensor_map) {
    free(w.ops);
    return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for the fusion pass");
  }
  /* Members other than roots disappear, with the intermediates they produce. */
  for (int v = 0; v < f->no; ++v) r->op_map[v] = 0;
  for (int t = 0; t < f->nt; ++t) r->tensor_map[t] = 0;
  recap_status st = RECAP_OK;
  for (int v = 0; v < f->no && st == RECAP_OK; ++v) {
    if (f->gated_by[v] >= 0) {
      /* The split and the unit: computed by the linear; only the unit's output stays. */
      r->op_map[v] = -1;
      if (f->gated[f->gated_by[v]] != v)
        for (int o = 0; o < ir->ops[v].num_outputs; ++o) r->tensor_map[ir->ops[v].outputs[o]] = -1;
      continue;
    }
    if (f->gated[v] >= 0) {
      st = make_gated(f, v, &r->fused[r->num_fused]);
      if (st != RECAP_OK) break;
      r->num_fused++;
      r->tensor_map[ir->ops[v].outputs[0]] = -1;
      continue;
    }
    if (f->epilogue_of[v] >= 0) {
      /* Computed by the op it reads; its output stays, produced there. */
      r->op_map[v] = -1;
      continue;
    }
    if (f->epilogue[v] >= 0) {
      st = make_norm_epilogue(f, v, &r->fused[r->num_fused]);
      if (st != RECAP_OK) break;
      r->num_fused++;
      continue;
    }
    if (f->gone[v]) {
      /* Computed in its readers' prologues. */
      r->op_map[v] = -1;
      for (int o = 0; o < ir->ops[v].num_outputs; ++o) r->tensor_map[ir->ops[v].outputs[o]] = -1;
      continue;
    }
    if (f->prologue[v] >= 0 && !folded_linear(f, v)) {
      st = make_prologue(f, v, &r->fused[r->num_fused]);
      if (st != RECAP_OK) break;
      r->num_fused++;
      continue;
    }
    if (f->fold[v] >= 0) {
      st = make_fold(f, v, &r->fused[r->num_fused]);
      if (st != RECAP_OK) break;
      r->num_fused++;
      r->op_map[f->fold[v]] = -1;
      r->tensor_map[ir->ops[f->fold[v]].outputs[0]] = -1;
      continue;
    }
    if (!rooted_group(f, v, &w)) continue;
    st = make_fused(f, expr_def, v, &w, &r->fused[r->num_fused]);
    if (st != RECAP_OK) break;
    r->num_fused++;
    for (int m = 0; m < w.num_ops; ++m)
      if (w.ops[m] != v) {
        r->op_map[w.ops[m]] = -1;
        r->tensor_map[ir->ops[w.ops[m]].outputs[0]] = -1;
      }
  }
  free(w.ops);
  if (st != RECAP_OK) return st;
  int n = 0;
  for (int v = 0; v < f->no; ++v) r->op_map[v] = r->op_map[v] < 0 ? -1 : n++;
  int m = 0;
  for (int t = 0; t < f->nt; ++t) r->tensor_map[t] = r->tensor_map[t] < 0 ? -1 : m++;
  r->ops = calloc((size_t)n + 1, sizeof *r->ops);
  r->tensors = calloc((size_t)m + 1, sizeof *r->tensors);
  if (!r->ops || !r->tensors)
    return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for the fused IR");

  size_t next_fused = 0;
  for (int v = 0; v < f->no; ++v) {
    int nv = r->op_map[v];
    if (nv < 0) continue;
    recap__ir_op *op = &r->ops[nv];
    if (next_fused < r->num_fused && r->fused[next_fused].root == v) {
      *op = r->fused[next_fused++].op; /* moved: the fused entry no longer owns it */
      memset(&r->fused[next_fused - 1].op, 0, sizeof(recap__ir_op));
    } else {
      *op = ir->ops[v];
      /* A linear whose activation moved into its consumer's group stops applying it. */
      if (op->num_outputs == 1 && f->act[op->outputs[0]] != NO_ACT) op->attrs.act = RECAP_ACT_NONE;
    }
    for (int i = 0; i < op->num_inputs; ++i) op->inputs[i] = r->tensor_map[op->inputs[i]];
    for (int o = 0; o < op->num_outputs; ++o) op->outputs[o] = r->tensor_map[op->outputs[o]];
  }
  for (int t = 0; t < f->nt; ++t) {
    int nt2 = r->tensor_map[t];
    if (nt2 < 0) continue;
    recap__ir_tensor *x = &r->tensors[nt2];
    *x = ir->tensors[t];
    if (x->producer >= 0) x->producer = r->op_map[x->producer];
    if (x->alias_of >= 0) x->alias_of = r->tensor_map[x->alias_of];
    x->num_consumers = 0;
  }
  for (int v = 0; v < f->no; ++v) {
    if (f->epilogue[v] >= 0)
      r->tensors[r->tensor_map[ir->ops[f->epilogue[v]].outputs[0]]].producer = r->op_map[v];
    if (f->gated[v] >= 0)
      r->tensors[r->tensor_map[ir->ops[f->gated[v]].outputs[0]]].producer = r->op_map[v];
  }
  for (int v = 0; v < n; ++v)
    for (int i = 0; i < r->ops[v].num_inputs; ++i) r->tensors[r->ops[v].inputs[i]].num_consumers++;
  return RECAP_OK;
}

recap_status recap__fuse(recap__ir *ir) {
  RECAP_CHECK_ARG(ir);
  finder f;
  RECAP_TRY(find(ir, &f));
  rewrite r = {0};
  recap_status st = build_rewrite(&f, &r);
  if (st != RECAP_OK || r.num_fused == 0) {
    rewrite_free(&r);
    finder_free(&f);
    return st;
  }
  /* Commit: free what the removed ops and tensors owned, then swap the arrays in. */
  size_t fused_ops = 0, n = 0, m = 0;
  for (size_t v = 0; v < ir->num_ops; ++v) {
    if (r.op_map[v] >= 0) n++;
    /* Every member's name (the root's too: the fused op has its own) goes. */
    const recap__ir_op *nop = r.op_map[v] >= 0 ? &r.ops[r.op_map[v]] : NULL;
    if (!nop || nop->num_fused > 0) free(ir->ops[v].name);
  }
  for (size_t t = 0; t < ir->num_tensors; ++t) {
    if (r.tensor_map[t] >= 0) {
      m++;
      continue;
    }
    free(ir->tensors[t].name);
    free(ir->tensors[t].init.path);
    free(ir->tensors[t].init.key);
    recap__weight_plan_destroy(ir->tensors[t].weights);
  }
  for (size_t o = 0; o < ir->num_outputs; ++o)
    if (ir->outputs[o] >= 0) ir->outputs[o] = r.tensor_map[ir->outputs[o]];
  /* Every op that went away was replaced, and so was each fused op's own root: a norm that
   * several linears compute counts once. */
  for (size_t v = 0; v < n; ++v) fused_ops += r.ops[v].num_fused > 0;
  fused_ops += ir->num_ops - n;
  free(ir->ops);
  free(ir->tensors);
  ir->ops = r.ops;
  ir->tensors = r.tensors;
  ir->num_ops = n;
  ir->num_tensors = m;
  ir->fused_ops = fused_ops;
  r.ops = NULL;
  r.tensors = NULL;
  rewrite_free(&r);
  finder_free(&f);
  return RECAP_OK;
}

bool recap__fuse_enabled(bool option_off) {
  if (option_off) return false;
  return recap__env_bool("RECAP_FUSION", 1) == 1;
}

bool recap__fuse_enabled_on(bool option_off, recap_backend_kind backend) {
  if (!recap__fuse_enabled(option_off)) return false;
  if (backend != RECAP_BACKEND_CUDA) return true;
  int major = 0, minor = 0;
  if (recap__nvrtc_version(&major, &minor) == RECAP_OK) return true;
  fprintf(stderr, "recap: warning: fusion is off: the fused kernels need NVRTC (%s)\n",
          recap_last_error());
  return false;
}

recap_status recap__fuse_expression_text(const recap__ir *ir, const recap__ir_op *op, char **text) {
  RECAP_CHECK_ARG(ir && op && text && op->num_inputs <= RECAP_OP_MAX_INPUTS);
  *text = NULL;
  if (!op->program)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "op '%s' is no fused expression",
                      op->name ? op->name : "?");
  const char *names[RECAP_OP_MAX_INPUTS];
  for (int i = 0; i < op->num_inputs; ++i) names[i] = ir->tensors[op->inputs[i]].name;
  /* recap__expr_format truncates: grow until the text fits with room to spare. */
  for (size_t size = 256;; size *= 2) {
    char *buf = malloc(size);
    if (!buf) return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for an expression");
    recap__expr_format(op->program, names, buf, size);
    if (strlen(buf) + 1 < size) {
      *text = buf;
      return RECAP_OK;
    }
    free(buf);
  }
}
