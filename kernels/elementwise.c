/*
 * elementwise.c: definitions and shape inference of the unary ops (relu gelu gelu_tanh silu
 * sigmoid tanh exp neg scale cast) and the broadcasting binary ops (add sub mul div).
 *
 * Each family shares one infer, one host loop (host/elementwise.c) and one CUDA entry point;
 * the def's `code` (op_codes.h) says which function runs.
 */
#include <math.h>
#include <stddef.h>

#include "kernels/cuda_ops.h"
#include "kernels/host/host_ops.h"
#include "kernels/infer.h"

static const char *const unary_inputs[] = {"x", NULL};
static const char *const binary_inputs[] = {"a", "b", NULL};

static const recap__attr_def no_attrs[] = {{.name = NULL}};
static const recap__attr_def scale_attrs[] = {
    {"scale", RECAP_ATTR_FLOAT, offsetof(recap__op_attrs, scale), true, 0,
     "the factor: out = scale * x"},
    {.name = NULL},
};
static const recap__attr_def cast_attrs[] = {
    {"dtype", RECAP_ATTR_DTYPE, offsetof(recap__op_attrs, dtype), true, 0,
     "the output element type (f32, f16 or bf16)"},
    {.name = NULL},
};

static recap_status unary_infer(recap__op_call *call) {
  const recap_tensor *x = &call->inputs[0];
  recap_dtype dtype = x->dtype;
  if (call->def->code == RECAP_UNARY_CAST) {
    RECAP_TRY(recap__infer_float_attr(call, "dtype", call->attrs.dtype));
    dtype = call->attrs.dtype;
  }
  if (call->def->code == RECAP_UNARY_SCALE && !isfinite(call->attrs.scale))
    return RECAP_OP_FAIL(call, "attribute 'scale' must be finite, got %g", call->attrs.scale);
  recap__infer_output(call, 0, dtype, x->ndim, x->shape);
  return RECAP_OK;
}

/* numpy broadcasting: shapes right-aligned; each dimension pair equal or one of them 1. */
static recap_status binary_infer(recap__op_call *call) {
  const recap_tensor *a = &call->inputs[0], *b = &call->inputs[1];
  RECAP_TRY(recap__infer_same_dtype(call, 1));
  int ndim = a->ndim > b->ndim ? a->ndim : b->ndim;
  int64_t shape[RECAP_MAX_DIMS];
  for (int d = 0; d < ndim; ++d) {
    int da = d - (ndim - a->ndim), db = d - (ndim - b->ndim);
    int64_t sa = da >= 0 ? a->shape[da] : 1, sb = db >= 0 ? b->shape[db] : 1;
    if (sa != sb && sa != 1 && sb != 1)
      return RECAP_OP_FAIL(call,
                           "inputs 'a' %s and 'b' %s are not broadcastable (dimension %d of the "
                           "result: %lld vs %lld)",
                           recap__shape_label(a).s, recap__shape_label(b).s, d, (long long)sa,
                           (long long)sb);
    shape[d] = sa == 1 ? sb : sa;
  }
  recap__infer_output(call, 0, a->dtype, ndim, shape);
  return RECAP_OK;
}

#define UNARY_DEF(ident, op_code, op_summary, op_attrs, in_place) \
  const recap__op_def recap__op_##ident = {                       \
      .name = #ident,                                             \
      .summary = op_summary,                                      \
      .code = op_code,                                            \
      .fuse_form = RECAP__FUSE_UNARY,                             \
      .input_names = unary_inputs,                                \
      .min_inputs = 1,                                            \
      .max_inputs = 1,                                            \
      .num_outputs = 1,                                           \
      .attrs = op_attrs,                                          \
      .dtype_mask = RECAP__DTYPES_FLOAT,                          \
      .in_place_input = in_place,                                 \
      .infer = unary_infer,                                       \
      .run_host = recap__host_unary,                              \
      .launch_cuda = RECAP_CUDA_ENTRY(recap__cuda_unary),         \
  }

UNARY_DEF(relu, RECAP_UNARY_RELU, "max(x, 0)", no_attrs, 0);
UNARY_DEF(gelu, RECAP_UNARY_GELU, "x * (1 + erf(x / sqrt(2))) / 2 (PyTorch's default gelu)",
          no_attrs, 0);
UNARY_DEF(gelu_tanh, RECAP_UNARY_GELU_TANH,
          "tanh-approximated gelu: x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3))) / 2", no_attrs,
          0);
UNARY_DEF(silu, RECAP_UNARY_SILU, "x * sigmoid(x)", no_attrs, 0);
UNARY_DEF(sigmoid, RECAP_UNARY_SIGMOID, "1 / (1 + exp(-x))", no_attrs, 0);
UNARY_DEF(tanh, RECAP_UNARY_TANH, "tanh(x)", no_attrs, 0);
UNARY_DEF(exp, RECAP_UNARY_EXP, "exp(x)", no_attrs, 0);
UNARY_DEF(neg, RECAP_UNARY_NEG, "-x", no_attrs, 0);
UNARY_DEF(scale, RECAP_UNARY_SCALE, "scale * x", scale_attrs, 0);
/* A cast may change the element size, so its output never aliases its input. */
UNARY_DEF(cast, RECAP_UNARY_CAST, "x converted to another float type (round to nearest even)",
          cast_attrs, -1);

#define BINARY_DEF(ident, op_code, op_summary)             \
  const recap__op_def recap__op_##ident = {                \
      .name = #ident,                                      \
      .summary = op_summary,                               \
      .code = op_code,                                     \
      .fuse_form = RECAP__FUSE_BINARY,                     \
      .input_names = binary_inputs,                        \
      .min_inputs = 2,                                     \
      .max_inputs = 2,                                     \
      .num_outputs = 1,                                    \
      .attrs = no_attrs,                                   \
      .dtype_mask = RECAP__DTYPES_FLOAT,                   \
      .in_place_input = 0,                                 \
      .infer = binary_infer,                               \
      .run_host = recap__host_binary,                      \
      .launch_cuda = RECAP_CUDA_ENTRY(recap__cuda_binary), \
  }

/* In place on `a` only where a's shape is the broadcast shape (the planner checks). */
BINARY_DEF(add, RECAP_BINARY_ADD, "a + b with numpy broadcasting");
BINARY_DEF(sub, RECAP_BINARY_SUB, "a - b with numpy broadcasting");
BINARY_DEF(mul, RECAP_BINARY_MUL, "a * b with numpy broadcasting");
BINARY_DEF(div, RECAP_BINARY_DIV, "a / b with numpy broadcasting");
