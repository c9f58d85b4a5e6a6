/*
 * host/shape.c: host reference of the data-movement ops: the strided copy behind reshape,
 * permute, transpose, slice, split and copy; concat; fill; embedding; rope.
 */
#include <math.h>
#include <string.h>

#include "kernels/host/host_ops.h"
#include "kernels/host/strided.h"
#include "kernels/infer.h"
#include "kernels/rope.h"
#include "kernels/view.h"
#include "runtime/half.h"

/* Copies src's elements (row-major over src's shape) to dst's (row-major over dst's shape);
 * both have the same element count and dtype, any strides. */
static void copy_elements(const recap_tensor *src, const recap_tensor *dst) {
  size_t esize = recap_dtype_size(src->dtype);
  int64_t n = recap__tensor_numel(src);
  recap__strided_iter is, id;
  recap__strided_iter_init(&is, src);
  recap__strided_iter_init(&id, dst);
  const char *s = src->data;
  char *d = dst->data;
  for (int64_t k = 0; k < n; ++k, recap__strided_iter_next(&is), recap__strided_iter_next(&id))
    memcpy(d + id.offset * (int64_t)esize, s + is.offset * (int64_t)esize, esize);
}

recap_status recap__host_copy_strided(const recap__op_call *call) {
  for (int o = 0; o < call->num_outputs; ++o) {
    recap_tensor view;
    RECAP_TRY(recap__view_for_copy(call, o, &view));
    copy_elements(&view, &call->outputs[o]);
  }
  return RECAP_OK;
}

recap_status recap__host_concat(const recap__op_call *call) {
  const recap_tensor *out = &call->outputs[0];
  int64_t dim = call->attrs.dim, start = 0;
  size_t esize = recap_dtype_size(out->dtype);
  for (int i = 0; i < call->num_inputs; ++i) {
    /* The part of the output this input fills: its shape, the output's strides. */
    recap_tensor part = *out;
    part.shape[dim] = call->inputs[i].shape[dim];
    part.data = (char *)out->data + start * out->strides[dim] * (int64_t)esize;
    copy_elements(&call->inputs[i], &part);
    start += call->inputs[i].shape[dim];
  }
  return RECAP_OK;
}

recap_status recap__host_fill(const recap__op_call *call) {
  const recap_tensor *out = &call->outputs[0];
  int64_t n = recap__tensor_numel(out);
  double v = call->attrs.value;
  switch (out->dtype) {
    case RECAP_DTYPE_I32:
      for (int64_t k = 0; k < n; ++k) ((int32_t *)out->data)[k] = (int32_t)v;
      break;
    case RECAP_DTYPE_I64:
      for (int64_t k = 0; k < n; ++k) ((int64_t *)out->data)[k] = (int64_t)v;
      break;
    default:
      for (int64_t k = 0; k < n; ++k) recap__store_f32(out->data, out->dtype, k, (float)v);
      break;
  }
  return RECAP_OK;
}

static int64_t load_index(const recap_tensor *t, int64_t offset) {
  return t->dtype == RECAP_DTYPE_I64 ? ((const int64_t *)t->data)[offset]
                                     : ((const int32_t *)t->data)[offset];
}

recap_status recap__host_embedding(const recap__op_call *call) {
  const recap_tensor *table = &call->inputs[0], *ids = &call->inputs[1];
  const recap_tensor *out = &call->outputs[0];
  int64_t vocab = table->shape[0], dim = table->shape[1], n = recap__tensor_numel(ids);
  recap__strided_iter it;
  /* Every id is checked before anything is written: a fault leaves the output untouched. */
  recap__strided_iter_init(&it, ids);
  for (int64_t k = 0; k < n; ++k, recap__strided_iter_next(&it)) {
    int64_t id = load_index(ids, it.offset);
    if (id < 0 || id >= vocab)
      return RECAP_OP_FAIL(call,
                           "input 'ids' element %lld is %lld, outside the table's %lld "
                           "rows",
                           (long long)k, (long long)id, (long long)vocab);
  }
  size_t esize = recap_dtype_size(table->dtype);
  recap__strided_iter_init(&it, ids);
  for (int64_t k = 0; k < n; ++k, recap__strided_iter_next(&it)) {
    int64_t id = load_index(ids, it.offset);
    const char *row = (const char *)table->data + id * table->strides[0] * (int64_t)esize;
    char *dst = (char *)out->data + k * dim * (int64_t)esize;
    for (int64_t j = 0; j < dim; ++j)
      memcpy(dst + j * (int64_t)esize, row + j * table->strides[1] * (int64_t)esize, esize);
  }
  return RECAP_OK;
}

void recap__host_rope_row(const recap__rope_freqs *freqs, int64_t head_dim, int64_t position,
                          const recap_tensor *x, int64_t x_at, int64_t x_step, void *out,
                          recap_dtype out_dtype, int64_t out_at) {
  const int64_t half = head_dim / 2;
  for (int64_t i = 0; i < half; ++i) {
    float c, sn, o1, o2;
    recap__rope_cos_sin(freqs, i, head_dim, position, &c, &sn);
    recap__rope_rotate(recap__load_f32(x->data, x->dtype, x_at + i * x_step),
                       recap__load_f32(x->data, x->dtype, x_at + (i + half) * x_step), c, sn, &o1,
                       &o2);
    recap__store_f32(out, out_dtype, out_at + i, o1);
    recap__store_f32(out, out_dtype, out_at + i + half, o2);
  }
}

recap_status recap__host_rope(const recap__op_call *call) {
  const recap_tensor *x = &call->inputs[0], *pos = &call->inputs[1];
  const recap_tensor *out = &call->outputs[0];
  /* A 3-D x [S, H, Dh] is a batch of one: index it as 4-D with a leading size-1 dim. */
  int lead = x->ndim == 4 ? 1 : 0;
  int64_t batch = lead ? x->shape[0] : 1;
  int64_t seq = x->shape[lead], heads = x->shape[lead + 1], head_dim = x->shape[lead + 2];
  int64_t sb = lead ? x->strides[0] : 0, ss = x->strides[lead], sh = x->strides[lead + 1];
  int64_t sd = x->strides[lead + 2];
  const int32_t *p = pos->data;
  bool start_form = pos->shape[0] != seq; /* [1] with seq > 1: row s is at p[0] + s */
  for (int64_t s = 0; s < seq; ++s) {
    int64_t position = start_form ? (int64_t)p[0] + s : p[s];
    if (position < 0)
      return RECAP_OP_FAIL(call, "input 'positions' gives row %lld the negative position %lld",
                           (long long)s, (long long)position);
  }
  const recap__rope_freqs freqs = recap__rope_freqs_of(&call->attrs);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t s = 0; s < seq; ++s) {
      int64_t position = start_form ? (int64_t)p[0] + s : p[s];
      for (int64_t h = 0; h < heads; ++h)
        recap__host_rope_row(&freqs, head_dim, position, x, b * sb + s * ss + h * sh, sd, out->data,
                             out->dtype, ((b * seq + s) * heads + h) * head_dim);
    }
  return RECAP_OK;
}
