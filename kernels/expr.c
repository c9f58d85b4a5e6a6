/*
 * expr.c: building and reading expression programs (kernels/expr.h), the dtype and
 * broadcast rules shared by the host evaluator and the CUDA launcher.
 *
 * Nodes live in one growing array in construction order; an operand is always an earlier
 * node, so the array is a topological order and the program cannot hold a cycle. Finishing
 * marks the nodes reachable from the root (`live`), which is all evaluation and codegen visit.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/expr_impl.h"
#include "kernels/op_codes.h"
#include "runtime/error.h"
#include "runtime/half.h"

recap_status recap__expr_program_create(int num_inputs, recap__expr_program **out) {
  RECAP_CHECK_ARG(out);
  if (num_inputs < 1 || num_inputs > RECAP_OP_MAX_INPUTS)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "an expression takes 1 to %d inputs, not %d",
                      RECAP_OP_MAX_INPUTS, num_inputs);
  recap__expr_program *p = calloc(1, sizeof *p);
  if (!p) return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for an expression");
  if (pthread_mutex_init(&p->lock, NULL) != 0) {
    free(p);
    return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "cannot create an expression's lock");
  }
  p->num_inputs = num_inputs;
  p->max_nodes = RECAP_EXPR_MAX_NODES;
  p->max_depth = RECAP_EXPR_MAX_BUILD_DEPTH; /* the parser lowers it to RECAP_EXPR_MAX_DEPTH */
  p->root = RECAP_EXPR_NONE;
  *out = p;
  return RECAP_OK;
}

void recap__expr_program_destroy(recap__expr_program *p) {
  if (!p) return;
  if (p->compiled) p->free_compiled(p->compiled);
  pthread_mutex_destroy(&p->lock);
  free(p->nodes);
  free(p->live);
  free(p);
}

void recap__expr_program_set_limits(recap__expr_program *p, int max_nodes, int max_depth) {
  if (max_nodes > 0 && max_nodes < p->max_nodes) p->max_nodes = max_nodes;
  if (max_depth > 0 && max_depth < p->max_depth) p->max_depth = max_depth;
}

/* Records the program's first error (later ones are consequences) and returns NONE. */
static recap__expr_node fail(recap__expr_program *p, recap_status status, const char *fmt, ...)
    RECAP__PRINTF(3, 4);
static recap__expr_node fail(recap__expr_program *p, recap_status status, const char *fmt, ...) {
  if (p->error == RECAP_OK) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->error_message, sizeof p->error_message, fmt, ap);
    va_end(ap);
    p->error = status;
  }
  return RECAP_EXPR_NONE;
}

bool recap__expr_is_unary_fn(recap__expr_op op) {
  return op >= RECAP_EXPR_RELU && op <= RECAP_EXPR_NEG;
}

bool recap__expr_is_binary(recap__expr_op op) {
  return op >= RECAP_EXPR_ADD && op <= RECAP_EXPR_NE;
}

/* Appends a node whose operands (-1: unused) were checked by the caller's validity test. */
static recap__expr_node add_node(recap__expr_program *p, recap__expr_node_data node) {
  if (p->finished)
    return fail(p, RECAP_STATUS_INVALID_ARGUMENT, "the expression is already finished");
  if (p->error != RECAP_OK) return RECAP_EXPR_NONE;
  int depth = 0;
  const int32_t operands[3] = {node.a, node.b, node.c};
  for (int k = 0; k < 3; ++k) {
    if (operands[k] == -1) continue;
    if (operands[k] < 0 || operands[k] >= p->count)
      return fail(p, RECAP_STATUS_INVALID_ARGUMENT, "operand %d of '%s' is not a node (%d)", k,
                  recap__expr_op_name(node.op), (int)operands[k]);
    if (p->nodes[operands[k]].depth > depth) depth = p->nodes[operands[k]].depth;
  }
  node.depth = depth + 1;
  if (node.depth > p->max_depth)
    return fail(p, RECAP_STATUS_INVALID_ARGUMENT,
                "the expression nests deeper than %d levels (the limit)", p->max_depth);
  if (p->count >= p->max_nodes)
    return fail(p, RECAP_STATUS_INVALID_ARGUMENT,
                "the expression has more than %d nodes (the limit)", p->max_nodes);
  if (p->count == p->capacity) {
    int capacity = p->capacity ? p->capacity * 2 : 16;
    if (capacity > p->max_nodes) capacity = p->max_nodes;
    recap__expr_node_data *nodes = realloc(p->nodes, (size_t)capacity * sizeof *nodes);
    if (!nodes) return fail(p, RECAP_STATUS_OUT_OF_MEMORY, "no memory for an expression's nodes");
    p->nodes = nodes;
    p->capacity = capacity;
  }
  p->nodes[p->count] = node;
  return p->count++;
}

static recap__expr_node_data blank(recap__expr_op op) {
  return (recap__expr_node_data){.op = op, .a = -1, .b = -1, .c = -1, .dtype = RECAP_DTYPE_F32};
}

/* An operand that is NONE means an earlier constructor failed: propagate quietly (its error
 * is recorded), or record one when the caller passed NONE without an earlier failure. */
static bool operands_ok(recap__expr_program *p, recap__expr_op op, int n, recap__expr_node a,
                        recap__expr_node b, recap__expr_node c) {
  const recap__expr_node operands[3] = {a, b, c};
  for (int k = 0; k < n; ++k)
    if (operands[k] == RECAP_EXPR_NONE) {
      fail(p, RECAP_STATUS_INVALID_ARGUMENT, "operand %d of '%s' is missing", k,
           recap__expr_op_name(op));
      return false;
    }
  return true;
}

recap__expr_node recap__expr_input(recap__expr_program *p, int index) {
  if (!p) return RECAP_EXPR_NONE;
  if (index < 0 || index >= p->num_inputs)
    return fail(p, RECAP_STATUS_INVALID_ARGUMENT, "input %d does not exist (the expression has %d)",
                index, p->num_inputs);
  recap__expr_node_data n = blank(RECAP_EXPR_INPUT);
  n.index = index;
  return add_node(p, n);
}

recap__expr_node recap__expr_const(recap__expr_program *p, double value) {
  if (!p) return RECAP_EXPR_NONE;
  if (!isfinite(value) || !isfinite((float)value))
    return fail(p, RECAP_STATUS_INVALID_ARGUMENT, "constant %g is not a finite f32 value", value);
  recap__expr_node_data n = blank(RECAP_EXPR_CONST);
  n.value = (float)value;
  return add_node(p, n);
}

recap__expr_node recap__expr_unary(recap__expr_program *p, recap__expr_op op, recap__expr_node a) {
  if (!p) return RECAP_EXPR_NONE;
  if (!recap__expr_is_unary_fn(op))
    return fail(p, RECAP_STATUS_INVALID_ARGUMENT, "op %d is not a unary function", (int)op);
  if (!operands_ok(p, op, 1, a, 0, 0)) return RECAP_EXPR_NONE;
  recap__expr_node_data n = blank(op);
  n.a = a;
  return add_node(p, n);
}

recap__expr_node recap__expr_scale(recap__expr_program *p, recap__expr_node a, double factor) {
  if (!p) return RECAP_EXPR_NONE;
  if (!isfinite(factor) || !isfinite((float)factor))
    return fail(p, RECAP_STATUS_INVALID_ARGUMENT, "scale factor %g is not a finite f32 value",
                factor);
  if (!operands_ok(p, RECAP_EXPR_SCALE, 1, a, 0, 0)) return RECAP_EXPR_NONE;
  recap__expr_node_data n = blank(RECAP_EXPR_SCALE);
  n.a = a;
  /* The scale op multiplies by (float)attrs.scale on CUDA; the program keeps that value. */
  n.value = (float)factor;
  return add_node(p, n);
}

recap__expr_node recap__expr_cast(recap__expr_program *p, recap__expr_node a, recap_dtype dtype) {
  if (!p) return RECAP_EXPR_NONE;
  if (dtype != RECAP_DTYPE_F32 && dtype != RECAP_DTYPE_F16 && dtype != RECAP_DTYPE_BF16)
    return fail(p, RECAP_STATUS_INVALID_ARGUMENT, "cast to %s: only f32, f16 and bf16",
                recap_dtype_name(dtype) ? recap_dtype_name(dtype) : "an invalid dtype");
  if (!operands_ok(p, RECAP_EXPR_CAST, 1, a, 0, 0)) return RECAP_EXPR_NONE;
  recap__expr_node_data n = blank(RECAP_EXPR_CAST);
  n.a = a;
  n.dtype = dtype;
  return add_node(p, n);
}

recap__expr_node recap__expr_binary(recap__expr_program *p, recap__expr_op op, recap__expr_node a,
                                    recap__expr_node b) {
  if (!p) return RECAP_EXPR_NONE;
  if (!recap__expr_is_binary(op))
    return fail(p, RECAP_STATUS_INVALID_ARGUMENT, "op %d is not a binary operator", (int)op);
  if (!operands_ok(p, op, 2, a, b, 0)) return RECAP_EXPR_NONE;
  recap__expr_node_data n = blank(op);
  n.a = a;
  n.b = b;
  return add_node(p, n);
}

recap__expr_node recap__expr_select(recap__expr_program *p, recap__expr_node cond,
                                    recap__expr_node if_true, recap__expr_node if_false) {
  if (!p) return RECAP_EXPR_NONE;
  if (!operands_ok(p, RECAP_EXPR_SELECT, 3, cond, if_true, if_false)) return RECAP_EXPR_NONE;
  recap__expr_node_data n = blank(RECAP_EXPR_SELECT);
  n.a = cond;
  n.b = if_true;
  n.c = if_false;
  return add_node(p, n);
}

recap__expr_node recap__expr_from_unary_code(recap__expr_program *p, int unary_code,
                                             recap__expr_node a, const recap__op_attrs *attrs) {
  if (!p) return RECAP_EXPR_NONE;
  switch (unary_code) {
    case RECAP_UNARY_RELU:
      return recap__expr_unary(p, RECAP_EXPR_RELU, a);
    case RECAP_UNARY_GELU:
      return recap__expr_unary(p, RECAP_EXPR_GELU, a);
    case RECAP_UNARY_GELU_TANH:
      return recap__expr_unary(p, RECAP_EXPR_GELU_TANH, a);
    case RECAP_UNARY_SILU:
      return recap__expr_unary(p, RECAP_EXPR_SILU, a);
    case RECAP_UNARY_SIGMOID:
      return recap__expr_unary(p, RECAP_EXPR_SIGMOID, a);
    case RECAP_UNARY_TANH:
      return recap__expr_unary(p, RECAP_EXPR_TANH, a);
    case RECAP_UNARY_EXP:
      return recap__expr_unary(p, RECAP_EXPR_EXP, a);
    case RECAP_UNARY_NEG:
      return recap__expr_unary(p, RECAP_EXPR_NEG, a);
    case RECAP_UNARY_SCALE:
      if (!attrs) return fail(p, RECAP_STATUS_INVALID_ARGUMENT, "scale needs its attributes");
      return recap__expr_scale(p, a, attrs->scale);
    case RECAP_UNARY_CAST:
      if (!attrs) return fail(p, RECAP_STATUS_INVALID_ARGUMENT, "cast needs its attributes");
      return recap__expr_cast(p, a, attrs->dtype);
    default:
      return fail(p, RECAP_STATUS_INVALID_ARGUMENT, "unknown unary code %d", unary_code);
  }
}

recap__expr_node recap__expr_from_binary_code(recap__expr_program *p, int binary_code,
                                              recap__expr_node a, recap__expr_node b) {
  if (!p) return RECAP_EXPR_NONE;
  switch (binary_code) {
    case RECAP_BINARY_ADD:
      return recap__expr_binary(p, RECAP_EXPR_ADD, a, b);
    case RECAP_BINARY_SUB:
      return recap__expr_binary(p, RECAP_EXPR_SUB, a, b);
    case RECAP_BINARY_MUL:
      return recap__expr_binary(p, RECAP_EXPR_MUL, a, b);
    case RECAP_BINARY_DIV:
      return recap__expr_binary(p, RECAP_EXPR_DIV, a, b);
    default:
      return fail(p, RECAP_STATUS_INVALID_ARGUMENT, "unknown binary code %d", binary_code);
  }
}

recap_status recap__expr_program_finish(recap__expr_program *p, recap__expr_node root) {
  RECAP_CHECK_ARG(p);
  if (p->finished)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "the expression is already finished");
  if (p->error != RECAP_OK) return RECAP_FAIL(p->error, "%s", p->error_message);
  if (root < 0 || root >= p->count)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "the expression's result is not a node (%d)",
                      (int)root);
  /* Reachability, walking down from root: operands are always earlier nodes. */
  unsigned char *mark = calloc((size_t)p->count, 1);
  p->live = malloc((size_t)p->count * sizeof *p->live);
  if (!mark || !p->live) {
    free(mark);
    free(p->live);
    p->live = NULL;
    return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory to finish an expression");
  }
  mark[root] = 1;
  for (int i = root; i >= 0; --i) {
    if (!mark[i]) continue;
    const recap__expr_node_data *n = &p->nodes[i];
    if (n->a >= 0) mark[n->a] = 1;
    if (n->b >= 0) mark[n->b] = 1;
    if (n->c >= 0) mark[n->c] = 1;
  }
  p->num_live = 0;
  for (int i = 0; i <= root; ++i)
    if (mark[i]) p->live[p->num_live++] = i;
  free(mark);
  p->root = root;
  p->finished = true;
  return RECAP_OK;
}

int recap__expr_num_inputs(const recap__expr_program *p) {
  return p ? p->num_inputs : 0;
}

const recap__expr_node_data *recap__expr_nodes(const recap__expr_program *p, int *count) {
  if (count) *count = p ? p->count : 0;
  return p ? p->nodes : NULL;
}

recap__expr_node recap__expr_root(const recap__expr_program *p) {
  return p && p->finished ? p->root : RECAP_EXPR_NONE;
}

const char *recap__expr_op_name(recap__expr_op op) {
  static const char *const names[RECAP_EXPR_OP_COUNT] = {
      [RECAP_EXPR_INPUT] = "input",
      [RECAP_EXPR_CONST] = "constant",
      [RECAP_EXPR_RELU] = "relu",
      [RECAP_EXPR_GELU] = "gelu",
      [RECAP_EXPR_GELU_TANH] = "gelu_tanh",
      [RECAP_EXPR_SILU] = "silu",
      [RECAP_EXPR_SIGMOID] = "sigmoid",
      [RECAP_EXPR_TANH] = "tanh",
      [RECAP_EXPR_EXP] = "exp",
      [RECAP_EXPR_NEG] = "neg",
      [RECAP_EXPR_SCALE] = "scale",
      [RECAP_EXPR_CAST] = "cast",
      [RECAP_EXPR_ADD] = "+",
      [RECAP_EXPR_SUB] = "-",
      [RECAP_EXPR_MUL] = "*",
      [RECAP_EXPR_DIV] = "/",
      [RECAP_EXPR_LT] = "<",
      [RECAP_EXPR_LE] = "<=",
      [RECAP_EXPR_GT] = ">",
      [RECAP_EXPR_GE] = ">=",
      [RECAP_EXPR_EQ] = "==",
      [RECAP_EXPR_NE] = "!=",
      [RECAP_EXPR_SELECT] = "select",
  };
  return op >= 0 && op < RECAP_EXPR_OP_COUNT ? names[op] : "?";
}

/* ---- formatting ---------------------------------------------------------------------------- */

typedef struct {
  char *buf;
  size_t size, used;
} out_buf;

static void put(out_buf *o, const char *fmt, ...) RECAP__PRINTF(2, 3);
static void put(out_buf *o, const char *fmt, ...) {
  if (o->used >= o->size) return;
  va_list ap;
  va_start(ap, fmt);
  int w = vsnprintf(o->buf + o->used, o->size - o->used, fmt, ap);
  va_end(ap);
  if (w < 0) return;
  o->used += (size_t)w;
  if (o->used >= o->size) o->used = o->size;
}

/* The shortest decimal that reads back as the same f32 (0.001, not 0.00100000005). */
static void put_number(out_buf *o, double v) {
  char text[32];
  for (int digits = 6; digits <= 9; ++digits) {
    snprintf(text, sizeof text, "%.*g", digits, v);
    if (strtof(text, NULL) == (float)v) break;
  }
  put(o, "%s", text);
}

/* Recursion depth is bounded by the program's depth limit. */
static void format_node(const recap__expr_program *p, int i, const char *const *names, out_buf *o) {
  const recap__expr_node_data *n = &p->nodes[i];
  switch (n->op) {
    case RECAP_EXPR_INPUT:
      if (names)
        put(o, "%s", names[n->index]);
      else
        put(o, "in%d", n->index);
      return;
    case RECAP_EXPR_CONST:
      put_number(o, n->value);
      return;
    case RECAP_EXPR_SCALE:
      put(o, "scale(");
      format_node(p, n->a, names, o);
      put(o, ", ");
      put_number(o, n->value);
      put(o, ")");
      return;
    case RECAP_EXPR_CAST:
      put(o, "cast(");
      format_node(p, n->a, names, o);
      put(o, ", %s)", recap_dtype_name(n->dtype));
      return;
    case RECAP_EXPR_SELECT:
      put(o, "select(");
      format_node(p, n->a, names, o);
      put(o, ", ");
      format_node(p, n->b, names, o);
      put(o, ", ");
      format_node(p, n->c, names, o);
      put(o, ")");
      return;
    default:
      break;
  }
  if (recap__expr_is_unary_fn(n->op)) {
    put(o, "%s(", recap__expr_op_name(n->op));
    format_node(p, n->a, names, o);
    put(o, ")");
  } else {
    put(o, "(");
    format_node(p, n->a, names, o);
    put(o, " %s ", recap__expr_op_name(n->op));
    format_node(p, n->b, names, o);
    put(o, ")");
  }
}

void recap__expr_format(const recap__expr_program *p, const char *const *names, char *buf,
                        size_t size) {
  if (!buf || size == 0) return;
  buf[0] = '\0';
  if (!p || !p->finished) {
    snprintf(buf, size, "(unfinished expression)");
    return;
  }
  out_buf o = {buf, size, 0};
  format_node(p, p->root, names, &o);
}

/* ---- dtypes and broadcasting ---------------------------------------------------------------- */

float recap__expr_round_to(float v, recap_dtype dtype) {
  switch (dtype) {
    case RECAP_DTYPE_F16:
      return recap__f16_to_f32(recap__f32_to_f16(v));
    case RECAP_DTYPE_BF16:
      return recap__bf16_to_f32(recap__f32_to_bf16(v));
    default:
      return v;
  }
}

recap_dtype recap__expr_result_dtype(const recap_tensor *inputs, int num_inputs) {
  if (!inputs || num_inputs < 1) return RECAP_DTYPE_F32;
  for (int i = 1; i < num_inputs; ++i)
    if (inputs[i].dtype != inputs[0].dtype) return RECAP_DTYPE_F32;
  return inputs[0].dtype;
}

void recap__expr_signature_of(const recap_tensor *inputs, int num_inputs, const recap_tensor *out,
                              recap__expr_signature *sig) {
  memset(sig, 0, sizeof *sig);
  sig->num_inputs = num_inputs;
  for (int i = 0; i < num_inputs && i < RECAP_OP_MAX_INPUTS; ++i) sig->inputs[i] = inputs[i].dtype;
  sig->output = out->dtype;
}

recap_status recap__expr_params_of(const recap_tensor *inputs, int num_inputs,
                                   const recap_tensor *out, recap__expr_params *params) {
  RECAP_CHECK_ARG(inputs && out && params);
  if (num_inputs < 1 || num_inputs > RECAP_OP_MAX_INPUTS)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "an expression takes 1 to %d inputs, not %d",
                      RECAP_OP_MAX_INPUTS, num_inputs);
  if (out->ndim < 0 || out->ndim > RECAP_MAX_DIMS)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "the output has %d dims", out->ndim);
  memset(params, 0, sizeof *params);
  const int lead = 4 - out->ndim;
  params->n = 1;
  for (int d = 0; d < 4; ++d) {
    params->shape[d] = d < lead ? 1 : out->shape[d - lead];
    params->out_strides[d] = d < lead ? 0 : out->strides[d - lead];
    params->n *= params->shape[d];
  }
  params->out = out->data;
  for (int i = 0; i < num_inputs; ++i) {
    const recap_tensor *t = &inputs[i];
    if (t->ndim < 0 || t->ndim > out->ndim)
      return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                        "input %d has %d dims, more than the output's %d", i, t->ndim, out->ndim);
    params->in[i] = t->data;
    const int tl = 4 - t->ndim;
    for (int d = 0; d < 4; ++d) {
      if (d < tl) continue; /* missing leading dims broadcast: stride 0 */
      int64_t s = t->shape[d - tl];
      if (s == params->shape[d]) {
        params->in_strides[i][d] = s == 1 ? 0 : t->strides[d - tl];
      } else if (s != 1) {
        return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                          "input %d does not broadcast to the output (dim %d: %lld vs %lld)", i,
                          d - tl, (long long)s, (long long)params->shape[d]);
      }
    }
  }
  return RECAP_OK;
}
