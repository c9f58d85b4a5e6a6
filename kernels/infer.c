/*
 * infer.c: helpers shared by the ops' shape and dtype inference (see infer.h).
 */
#include "kernels/infer.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "runtime/half.h"

recap__label recap__shape_label(const recap_tensor *t) {
  recap__label label;
  size_t n = 0;
  label.s[n++] = '[';
  label.s[n] = '\0';
  for (int d = 0; d < t->ndim && d < RECAP_MAX_DIMS; ++d) {
    int w =
        snprintf(label.s + n, sizeof label.s - n, d ? ", %lld" : "%lld", (long long)t->shape[d]);
    if (w < 0 || (size_t)w >= sizeof label.s - n) return label; /* cannot happen: 4 int64s */
    n += (size_t)w;
  }
  snprintf(label.s + n, sizeof label.s - n, "]");
  return label;
}

recap__label recap__input_label(const recap__op_def *def, int index) {
  recap__label label;
  const char *name = NULL;
  for (int i = 0; def->input_names && def->input_names[i]; ++i)
    if (i == index) name = def->input_names[i];
  if (!name) {
    snprintf(label.s, sizeof label.s, "#%d", index);
    return label;
  }
  size_t len = strlen(name);
  if (len > 0 && name[len - 1] == '?') --len;
  snprintf(label.s, sizeof label.s, "%.*s", (int)len, name);
  return label;
}

recap__label recap__dtype_label(recap_dtype dtype) {
  recap__label label;
  const char *name = recap_dtype_name(dtype);
  if (name)
    snprintf(label.s, sizeof label.s, "%s", name);
  else
    snprintf(label.s, sizeof label.s, "dtype(%d)", (int)dtype);
  return label;
}

recap_status recap__infer_axis(const recap__op_call *call, const char *attr, int64_t axis, int ndim,
                               int64_t *out) {
  if (axis < -ndim || axis >= ndim)
    return RECAP_OP_FAIL(call,
                         "attribute '%s' = %lld is out of range for %d dims (expected %d..%d)",
                         attr, (long long)axis, ndim, -ndim, ndim - 1);
  *out = axis < 0 ? axis + ndim : axis;
  return RECAP_OK;
}

recap_status recap__infer_dtype_is(const recap__op_call *call, int index, recap_dtype dtype) {
  if (call->inputs[index].dtype != dtype)
    return RECAP_OP_FAIL(
        call, "input '%s' has dtype %s, expected %s", recap__input_label(call->def, index).s,
        recap__dtype_label(call->inputs[index].dtype).s, recap__dtype_label(dtype).s);
  return RECAP_OK;
}

recap_status recap__infer_same_dtype(const recap__op_call *call, int index) {
  if (call->inputs[index].dtype != call->inputs[0].dtype)
    return RECAP_OP_FAIL(
        call, "input '%s' has dtype %s, but input '%s' has %s (they must match)",
        recap__input_label(call->def, index).s, recap__dtype_label(call->inputs[index].dtype).s,
        recap__input_label(call->def, 0).s, recap__dtype_label(call->inputs[0].dtype).s);
  return RECAP_OK;
}

recap_status recap__infer_ndim(const recap__op_call *call, int index, int min_dims, int max_dims) {
  int nd = call->inputs[index].ndim;
  if (nd < min_dims || nd > max_dims) {
    if (min_dims == max_dims)
      return RECAP_OP_FAIL(call, "input '%s' has %d dims %s, expected %d",
                           recap__input_label(call->def, index).s, nd,
                           recap__shape_label(&call->inputs[index]).s, min_dims);
    return RECAP_OP_FAIL(call, "input '%s' has %d dims %s, expected %d to %d",
                         recap__input_label(call->def, index).s, nd,
                         recap__shape_label(&call->inputs[index]).s, min_dims, max_dims);
  }
  return RECAP_OK;
}

recap_status recap__infer_last_dim_contiguous(const recap__op_call *call, int index) {
  const recap_tensor *t = &call->inputs[index];
  int last = t->ndim - 1;
  if (t->shape[last] != 1 && t->strides[last] != 1)
    return RECAP_OP_FAIL(call,
                         "input '%s' has stride %lld in its last dimension; this op needs it "
                         "unit-stride (copy the input first)",
                         recap__input_label(call->def, index).s, (long long)t->strides[last]);
  return RECAP_OK;
}

recap_status recap__infer_norm_param(const recap__op_call *call, int index) {
  const recap_tensor *x = &call->inputs[0], *p = &call->inputs[index];
  int64_t d = x->shape[x->ndim - 1];
  RECAP_TRY(recap__infer_same_dtype(call, index));
  if (p->ndim != 1 || p->shape[0] != d)
    return RECAP_OP_FAIL(call,
                         "input '%s' has shape %s, expected [%lld] (the last dimension of "
                         "'x' %s)",
                         recap__input_label(call->def, index).s, recap__shape_label(p).s,
                         (long long)d, recap__shape_label(x).s);
  return recap__infer_last_dim_contiguous(call, index);
}

recap_status recap__infer_eps(const recap__op_call *call) {
  if (!isfinite(call->attrs.eps) || call->attrs.eps < 0)
    return RECAP_OP_FAIL(call, "attribute 'eps' must be finite and >= 0, got %g", call->attrs.eps);
  return RECAP_OK;
}

recap_status recap__infer_float_attr(const recap__op_call *call, const char *attr,
                                     recap_dtype dtype) {
  if (!recap_dtype_is_float(dtype))
    return RECAP_OP_FAIL(call, "attribute '%s' = %s is not a float type (f32, f16 or bf16)", attr,
                         recap__dtype_label(dtype).s);
  return RECAP_OK;
}

recap_status recap__infer_shape_attr(const recap__op_call *call, const char *attr, int *ndim,
                                     int64_t shape[RECAP_MAX_DIMS]) {
  const recap__op_attrs *a = &call->attrs;
  if (a->num_sizes < 1 || a->num_sizes > RECAP_MAX_DIMS)
    return RECAP_OP_FAIL(call, "attribute '%s' has %d entries, expected 1 to %d", attr,
                         a->num_sizes, RECAP_MAX_DIMS);
  for (int d = 0; d < a->num_sizes; ++d) {
    if (a->sizes[d] < 1)
      return RECAP_OP_FAIL(call, "attribute '%s' entry %d is %lld (sizes must be >= 1)", attr, d,
                           (long long)a->sizes[d]);
    shape[d] = a->sizes[d];
  }
  *ndim = a->num_sizes;
  return RECAP_OK;
}

void recap__infer_output(recap__op_call *call, int index, recap_dtype dtype, int ndim,
                         const int64_t *shape) {
  /* `shape` may point into the output itself (or an input being replaced): copy it first. */
  int64_t dims[RECAP_MAX_DIMS] = {0};
  for (int d = 0; d < ndim; ++d) dims[d] = shape[d];
  recap_tensor *out = &call->outputs[index];
  out->dtype = dtype;
  out->ndim = ndim;
  for (int d = 0; d < RECAP_MAX_DIMS; ++d) out->shape[d] = dims[d];
  for (int d = 0; d < RECAP_MAX_DIMS; ++d) out->strides[d] = 0;
  recap__tensor_set_contiguous(out);
}

bool recap__value_fits_dtype(double value, recap_dtype dtype, char *why, size_t size) {
  switch (dtype) {
    case RECAP_DTYPE_I32:
      if (value == floor(value) && value >= -2147483648.0 && value <= 2147483647.0) return true;
      break;
    case RECAP_DTYPE_I64:
      /* 2^63 is exactly representable; every integral double below it fits in an int64_t. */
      if (value == floor(value) && value >= -0x1p63 && value < 0x1p63) return true;
      break;
    default: {
      if (!isfinite(value)) return true;
      /* The largest finite value of each float type, to say why. */
      float f = (float)value, largest = 3.40282347e38f;
      if (dtype == RECAP_DTYPE_F16) {
        f = recap__f16_to_f32(recap__f32_to_f16(f));
        largest = 65504.0f;
      } else if (dtype == RECAP_DTYPE_BF16) {
        f = recap__bf16_to_f32(recap__f32_to_bf16(f));
        largest = 3.38953139e38f;
      }
      if (isfinite(f)) return true;
      snprintf(why, size, "becomes %sinf in %s (its largest finite value is %.8g)",
               value < 0 ? "-" : "", recap_dtype_name(dtype), (double)largest);
      return false;
    }
  }
  snprintf(why, size, "is not an %s value", recap_dtype_name(dtype));
  return false;
}
