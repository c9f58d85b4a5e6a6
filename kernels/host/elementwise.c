/*
 * host/elementwise.c: host reference of the unary and broadcasting binary ops.
 *
 * Values are computed in double from float inputs and rounded once to the output type, so
 * the reference is as exact as the storage type allows.
 */
#include <math.h>

#include "kernels/host/host_ops.h"
#include "kernels/host/strided.h"
#include "kernels/op_codes.h"
#include "runtime/half.h"

static double unary_value(int code, double x, double scale) {
  switch (code) {
    case RECAP_UNARY_RELU:
      return x > 0 ? x : 0;
    case RECAP_UNARY_GELU:
      return 0.5 * x * (1.0 + erf(x * 0.70710678118654752440));
    case RECAP_UNARY_GELU_TANH: {
      double inner = 0.79788456080286535588 * (x + 0.044715 * x * x * x); /* sqrt(2/pi) */
      return 0.5 * x * (1.0 + tanh(inner));
    }
    case RECAP_UNARY_SILU:
      return x / (1.0 + exp(-x));
    case RECAP_UNARY_SIGMOID:
      return 1.0 / (1.0 + exp(-x));
    case RECAP_UNARY_TANH:
      return tanh(x);
    case RECAP_UNARY_EXP:
      return exp(x);
    case RECAP_UNARY_NEG:
      return -x;
    case RECAP_UNARY_SCALE:
      return scale * x;
    default:
      return x; /* RECAP_UNARY_CAST: the store rounds to the output type */
  }
}

recap_status recap__host_unary(const recap__op_call *call) {
  const recap_tensor *x = &call->inputs[0], *out = &call->outputs[0];
  int64_t n = recap__tensor_numel(out);
  recap__strided_iter it;
  recap__strided_iter_init(&it, x);
  for (int64_t k = 0; k < n; ++k, recap__strided_iter_next(&it)) {
    double v = recap__load_f32(x->data, x->dtype, it.offset);
    recap__store_f32(out->data, out->dtype, k,
                     (float)unary_value(call->def->code, v, call->attrs.scale));
  }
  return RECAP_OK;
}

/* The strides that read `t` as if it had the output's shape: right-aligned, and 0 along
 * dimensions where t has size 1 (or does not exist), so one element repeats. */
static void broadcast_strides(const recap_tensor *t, const recap_tensor *out,
                              int64_t strides[RECAP_MAX_DIMS]) {
  for (int d = 0; d < out->ndim; ++d) {
    int td = d - (out->ndim - t->ndim);
    strides[d] = td >= 0 && t->shape[td] != 1 ? t->strides[td] : 0;
  }
}

recap_status recap__host_binary(const recap__op_call *call) {
  const recap_tensor *a = &call->inputs[0], *b = &call->inputs[1], *out = &call->outputs[0];
  int64_t sa[RECAP_MAX_DIMS], sb[RECAP_MAX_DIMS];
  broadcast_strides(a, out, sa);
  broadcast_strides(b, out, sb);
  recap__strided_iter ia, ib;
  recap__strided_iter_init_raw(&ia, out->ndim, out->shape, sa);
  recap__strided_iter_init_raw(&ib, out->ndim, out->shape, sb);
  int64_t n = recap__tensor_numel(out);
  int code = call->def->code;
  for (int64_t k = 0; k < n; ++k, recap__strided_iter_next(&ia), recap__strided_iter_next(&ib)) {
    double x = recap__load_f32(a->data, a->dtype, ia.offset);
    double y = recap__load_f32(b->data, b->dtype, ib.offset);
    double r = code == RECAP_BINARY_ADD   ? x + y
               : code == RECAP_BINARY_SUB ? x - y
               : code == RECAP_BINARY_MUL ? x * y
                                          : x / y;
    recap__store_f32(out->data, out->dtype, k, (float)r);
  }
  return RECAP_OK;
}
