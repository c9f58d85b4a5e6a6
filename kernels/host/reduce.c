/*
 * host/reduce.c: host reference of softmax, layernorm, rmsnorm, sum and mean. Every row of
 * the last dimension is reduced in double.
 */
#include <math.h>

#include "kernels/host/host_ops.h"
#include "kernels/host/strided.h"
#include "runtime/half.h"

/* Iterates the rows of x: the leading dimensions (all but the last) with x's strides. The
 * row's elements are then x.data[offset + j] (the last dimension is unit-stride). */
static void rows_init(recap__strided_iter *it, const recap_tensor *x) {
  recap__strided_iter_init_raw(it, x->ndim - 1, x->shape, x->strides);
}

static int64_t row_count(const recap_tensor *x) {
  return recap__tensor_numel(x) / x->shape[x->ndim - 1];
}

recap_status recap__host_softmax(const recap__op_call *call) {
  const recap_tensor *x = &call->inputs[0], *out = &call->outputs[0];
  int64_t cols = x->shape[x->ndim - 1];
  int64_t rows_per_matrix = x->ndim >= 2 ? x->shape[x->ndim - 2] : 1;
  double scale = call->attrs.scale != 0 ? call->attrs.scale : 1.0;
  int64_t rows = row_count(x);
  recap__strided_iter it;
  rows_init(&it, x);
  for (int64_t r = 0; r < rows; ++r, recap__strided_iter_next(&it)) {
    /* Columns [0, visible) take part; the causal mask hides j > i + (cols - rows). */
    int64_t visible = cols;
    if (call->attrs.causal) {
      int64_t i = r % rows_per_matrix;
      int64_t last = i + (cols - rows_per_matrix);
      visible = last < 0 ? 0 : last + 1 < cols ? last + 1 : cols;
    }
    double max = -INFINITY, sum = 0;
    for (int64_t j = 0; j < visible; ++j) {
      double v = scale * recap__load_f32(x->data, x->dtype, it.offset + j);
      if (v > max) max = v;
    }
    for (int64_t j = 0; j < visible; ++j)
      sum += exp(scale * recap__load_f32(x->data, x->dtype, it.offset + j) - max);
    for (int64_t j = 0; j < cols; ++j) {
      double p = 0;
      if (j < visible)
        p = exp(scale * recap__load_f32(x->data, x->dtype, it.offset + j) - max) / sum;
      recap__store_f32(out->data, out->dtype, r * cols + j, (float)p);
    }
  }
  return RECAP_OK;
}

/* layernorm (with mean subtraction and optional bias) and rmsnorm share the row loop. */
static recap_status normalize(const recap__op_call *call, bool center) {
  const recap_tensor *x = &call->inputs[0], *w = &call->inputs[1], *out = &call->outputs[0];
  const recap_tensor *b = center && call->num_inputs > 2 ? &call->inputs[2] : NULL;
  int64_t d = x->shape[x->ndim - 1];
  int64_t rows = row_count(x);
  recap__strided_iter it;
  rows_init(&it, x);
  for (int64_t r = 0; r < rows; ++r, recap__strided_iter_next(&it)) {
    double mean = 0;
    if (center) {
      for (int64_t j = 0; j < d; ++j) mean += recap__load_f32(x->data, x->dtype, it.offset + j);
      mean /= (double)d;
    }
    double sq = 0;
    for (int64_t j = 0; j < d; ++j) {
      double v = recap__load_f32(x->data, x->dtype, it.offset + j) - mean;
      sq += v * v;
    }
    double inv = 1.0 / sqrt(sq / (double)d + call->attrs.eps);
    for (int64_t j = 0; j < d; ++j) {
      double v = (recap__load_f32(x->data, x->dtype, it.offset + j) - mean) * inv;
      v *= recap__load_f32(w->data, w->dtype, j);
      if (b) v += recap__load_f32(b->data, b->dtype, j);
      recap__store_f32(out->data, out->dtype, r * d + j, (float)v);
    }
  }
  return RECAP_OK;
}

recap_status recap__host_layernorm(const recap__op_call *call) {
  return normalize(call, true);
}

recap_status recap__host_rmsnorm(const recap__op_call *call) {
  return normalize(call, false);
}

recap_status recap__host_reduce_last(const recap__op_call *call) {
  const recap_tensor *x = &call->inputs[0], *out = &call->outputs[0];
  int64_t d = x->shape[x->ndim - 1];
  int64_t rows = row_count(x);
  recap__strided_iter it;
  rows_init(&it, x);
  for (int64_t r = 0; r < rows; ++r, recap__strided_iter_next(&it)) {
    double sum = 0;
    for (int64_t j = 0; j < d; ++j) sum += recap__load_f32(x->data, x->dtype, it.offset + j);
    if (call->def->code == 1) sum /= (double)d;
    recap__store_f32(out->data, out->dtype, r, (float)sum);
  }
  return RECAP_OK;
}
