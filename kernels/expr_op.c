/*
 * expr_op.c: the `expr` op: a custom elementwise op over 1..8 broadcasting inputs, computed by
 * an expression program (kernels/expr.h) that the spec writes as text or the fusion pass
 * builds. Definition, shape inference, host implementation, and the prepare step that
 * compiles the CUDA kernel before anything is captured.
 */
#include <stdio.h>
#include <string.h>

#include "kernels/cuda_ops.h"
#include "kernels/expr_impl.h"
#include "kernels/infer.h"

static const char *const expr_inputs[] = {"in0",  "in1?", "in2?", "in3?", "in4?",
                                          "in5?", "in6?", "in7?", NULL};

static const recap__attr_def expr_attrs[] = {
    {"expr", RECAP_ATTR_EXPR, offsetof(recap__op_attrs, expr), true, 0,
     "the expression over the inputs' names, e.g. \"x * sigmoid(g) + 1.0\" (specs/README.md)"},
    {.name = NULL},
};

/* numpy broadcasting over every input: right-aligned, each dimension equal or 1. */
static recap_status expr_infer(recap__op_call *call) {
  const recap__expr_program *p = call->attrs.expr;
  if (!p || !p->finished) return RECAP_OP_FAIL(call, "attribute 'expr' is missing");
  if (call->num_inputs != p->num_inputs)
    return RECAP_OP_FAIL(call, "the expression reads %d inputs, the op has %d", p->num_inputs,
                         call->num_inputs);
  int ndim = 0;
  for (int i = 0; i < call->num_inputs; ++i) {
    const recap_tensor *t = &call->inputs[i];
    if (t->dtype != RECAP_DTYPE_F32 && t->dtype != RECAP_DTYPE_F16 && t->dtype != RECAP_DTYPE_BF16)
      return RECAP_OP_FAIL(call, "input %d has dtype %s; expressions read f32, f16 or bf16", i,
                           recap__dtype_label(t->dtype).s);
    if (t->ndim > ndim) ndim = t->ndim;
  }
  int64_t shape[RECAP_MAX_DIMS];
  for (int d = 0; d < ndim; ++d) {
    shape[d] = 1;
    for (int i = 0; i < call->num_inputs; ++i) {
      const recap_tensor *t = &call->inputs[i];
      int td = d - (ndim - t->ndim);
      int64_t s = td >= 0 ? t->shape[td] : 1;
      if (s == 1) continue;
      if (shape[d] != 1 && shape[d] != s)
        return RECAP_OP_FAIL(call,
                             "inputs are not broadcastable: input %d %s has %lld in dimension %d "
                             "of the result, an earlier input %lld",
                             i, recap__shape_label(t).s, (long long)s, d, (long long)shape[d]);
      shape[d] = s;
    }
  }
  recap__infer_output(call, 0, recap__expr_result_dtype(call->inputs, call->num_inputs), ndim,
                      shape);
  return RECAP_OK;
}

static recap_status expr_run_host(const recap__op_call *call) {
  return recap__expr_eval_host(call->attrs.expr, call->inputs, call->num_inputs, &call->outputs[0]);
}

/* The activation of an expression function, for the linear's glu prologue. */
static bool activation_of(recap__expr_op op, recap__activation *act) {
  switch (op) {
    case RECAP_EXPR_RELU:
      *act = RECAP_ACT_RELU;
      return true;
    case RECAP_EXPR_GELU:
      *act = RECAP_ACT_GELU;
      return true;
    case RECAP_EXPR_GELU_TANH:
      *act = RECAP_ACT_GELU_TANH;
      return true;
    case RECAP_EXPR_SILU:
      *act = RECAP_ACT_SILU;
      return true;
    case RECAP_EXPR_SIGMOID:
      *act = RECAP_ACT_SIGMOID;
      return true;
    case RECAP_EXPR_TANH:
      *act = RECAP_ACT_TANH;
      return true;
    default:
      return false;
  }
}

/* A program that is exactly act(in_g) * in_u or in_u * act(in_g) over two distinct inputs, one
 * rounding at the end (no cast, no constant): what a linear's glu prologue computes. */
static bool expr_as_glu(const recap__op_attrs *attrs, int num_inputs, recap__activation *act,
                        int *gate, int *up) {
  const recap__expr_program *p = attrs->expr;
  if (!p || !p->finished || num_inputs != 2 || p->num_inputs != 2) return false;
  int count = 0;
  const recap__expr_node_data *d = recap__expr_nodes(p, &count);
  const int root = recap__expr_root(p);
  if (!d || root < 0 || root >= count || d[root].op != RECAP_EXPR_MUL) return false;
  for (int s = 0; s < 2; ++s) {
    const int f = s ? d[root].b : d[root].a, u = s ? d[root].a : d[root].b;
    if (f < 0 || u < 0 || d[u].op != RECAP_EXPR_INPUT || !activation_of(d[f].op, act)) continue;
    const int g = d[f].a;
    if (g < 0 || d[g].op != RECAP_EXPR_INPUT || d[g].index == d[u].index) continue;
    *gate = d[g].index;
    *up = d[u].index;
    return true;
  }
  return false;
}

/* The output may overwrite input 0: each element is read before it is written, by the same
 * thread. The planner allows it only when the two have the same bytes, which with the dtype
 * rule above means the same dtype and shape. */
const recap__op_def recap__op_expr = {
    .name = "expr",
    .fuse_form = RECAP__FUSE_PROGRAM,
    .summary =
        "a custom elementwise function of 1 to 8 broadcasting inputs, from an expression "
        "(compiled for the GPU at load)",
    .input_names = expr_inputs,
    .min_inputs = 1,
    .max_inputs = RECAP_OP_MAX_INPUTS,
    .num_outputs = 1,
    .attrs = expr_attrs,
    .dtype_mask = RECAP__DTYPES_FLOAT,
    .in_place_input = 0,
    .as_glu = expr_as_glu,
    .infer = expr_infer,
    .run_host = expr_run_host,
    .launch_cuda = RECAP_CUDA_ENTRY(recap__cuda_expr),
};

recap_status recap__expr_prepare_call(const recap__op_call *call, recap_device device) {
  if (!call || !call->attrs.expr || device.backend != RECAP_BACKEND_CUDA) return RECAP_OK;
  recap__expr_signature sig;
  recap__expr_signature_of(call->inputs, call->num_inputs, &call->outputs[0], &sig);
  return recap__expr_prepare_cuda(call->attrs.expr, &sig, device.index,
                                  call->def ? call->def->name : "expr");
}
