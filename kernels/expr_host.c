/*
 * expr_host.c: evaluating an expression program on the host (the expr op's host backend and
 * the reference the CUDA kernels are tested against).
 *
 * Element by element in row-major order over the output: inputs are read through broadcast
 * strides (walked incrementally, as host/elementwise.c does), then the live nodes are
 * evaluated in order into a small array of f32 values. Each node computes in double from its
 * f32 operands and rounds to f32 once, which for + - * / is exactly the IEEE f32 operation
 * (what the generated kernel does) and for the transcendental functions is the correctly
 * rounded value within a few ulps of CUDA's.
 */
#include <math.h>

#include "kernels/expr_impl.h"
#include "kernels/host/strided.h"
#include "runtime/error.h"
#include "runtime/half.h"

static float node_value(const recap__expr_node_data *n, const float *v, const float *in) {
  const double a = n->a >= 0 ? v[n->a] : 0, b = n->b >= 0 ? v[n->b] : 0;
  switch (n->op) {
    case RECAP_EXPR_INPUT:
      return in[n->index];
    case RECAP_EXPR_CONST:
      return (float)n->value;
    case RECAP_EXPR_RELU:
      return a > 0 ? (float)a : 0.0f;
    case RECAP_EXPR_GELU:
      return (float)(0.5 * a * (1.0 + erf(a * 0.70710678118654752440)));
    case RECAP_EXPR_GELU_TANH:
      return (float)(0.5 * a * (1.0 + tanh(0.79788456080286535588 * (a + 0.044715 * a * a * a))));
    case RECAP_EXPR_SILU:
      return (float)(a / (1.0 + exp(-a)));
    case RECAP_EXPR_SIGMOID:
      return (float)(1.0 / (1.0 + exp(-a)));
    case RECAP_EXPR_TANH:
      return (float)tanh(a);
    case RECAP_EXPR_EXP:
      return (float)exp(a);
    case RECAP_EXPR_NEG:
      return (float)-a;
    case RECAP_EXPR_SCALE:
      return (float)(n->value * a);
    case RECAP_EXPR_CAST:
      return recap__expr_round_to((float)a, n->dtype);
    case RECAP_EXPR_ADD:
      return (float)(a + b);
    case RECAP_EXPR_SUB:
      return (float)(a - b);
    case RECAP_EXPR_MUL:
      return (float)(a * b);
    case RECAP_EXPR_DIV:
      return (float)(a / b);
    case RECAP_EXPR_LT:
      return a < b ? 1.0f : 0.0f;
    case RECAP_EXPR_LE:
      return a <= b ? 1.0f : 0.0f;
    case RECAP_EXPR_GT:
      return a > b ? 1.0f : 0.0f;
    case RECAP_EXPR_GE:
      return a >= b ? 1.0f : 0.0f;
    case RECAP_EXPR_EQ:
      return a == b ? 1.0f : 0.0f;
    case RECAP_EXPR_NE:
      return a != b ? 1.0f : 0.0f;
    case RECAP_EXPR_SELECT:
      return a != 0 ? v[n->b] : v[n->c];
    case RECAP_EXPR_OP_COUNT:
      break;
  }
  return NAN;
}

static bool is_float(recap_dtype d) {
  return d == RECAP_DTYPE_F32 || d == RECAP_DTYPE_F16 || d == RECAP_DTYPE_BF16;
}

recap_status recap__expr_eval_host(const recap__expr_program *p, const recap_tensor *inputs,
                                   int num_inputs, const recap_tensor *out) {
  RECAP_CHECK_ARG(p && out && (inputs || num_inputs == 0));
  if (!p->finished)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "the expression is not finished");
  if (num_inputs != p->num_inputs)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "the expression takes %d inputs, got %d",
                      p->num_inputs, num_inputs);
  if (!is_float(out->dtype))
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "output dtype %s is not f32, f16 or bf16",
                      recap_dtype_name(out->dtype) ? recap_dtype_name(out->dtype) : "(invalid)");
  for (int i = 0; i < num_inputs; ++i)
    if (!is_float(inputs[i].dtype))
      return RECAP_FAIL(
          RECAP_STATUS_INVALID_ARGUMENT, "input %d dtype %s is not f32, f16 or bf16", i,
          recap_dtype_name(inputs[i].dtype) ? recap_dtype_name(inputs[i].dtype) : "(invalid)");
  recap__expr_params params;
  RECAP_TRY(recap__expr_params_of(inputs, num_inputs, out, &params));
  if (params.n == 0) return RECAP_OK;

  recap__strided_iter it_in[RECAP_OP_MAX_INPUTS], it_out;
  for (int i = 0; i < num_inputs; ++i)
    recap__strided_iter_init_raw(&it_in[i], 4, params.shape, params.in_strides[i]);
  recap__strided_iter_init_raw(&it_out, 4, params.shape, params.out_strides);

  float values[RECAP_EXPR_MAX_NODES];
  float in[RECAP_OP_MAX_INPUTS];
  const recap__expr_node_data *nodes = p->nodes;
  for (int64_t k = 0; k < params.n; ++k) {
    for (int i = 0; i < num_inputs; ++i) {
      in[i] = recap__load_f32(inputs[i].data, inputs[i].dtype, it_in[i].offset);
      recap__strided_iter_next(&it_in[i]);
    }
    for (int l = 0; l < p->num_live; ++l) {
      const int32_t id = p->live[l];
      values[id] = node_value(&nodes[id], values, in);
    }
    recap__store_f32(out->data, out->dtype, it_out.offset, values[p->root]);
    recap__strided_iter_next(&it_out);
  }
  return RECAP_OK;
}
