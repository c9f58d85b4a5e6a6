/* view.c: the source view of a copy-family op (view.h), read from the op contract's copy_view:
 * below the op definitions and both launchers, which all use it. */
#include "kernels/view.h"

#include "runtime/error.h"

recap_status recap__view_for_copy(const recap__op_call *call, int output_index,
                                  recap_tensor *view) {
  RECAP_CHECK_ARG(call && call->def && view);
  const recap__op_def *def = call->def;
  if (def->copy_view == RECAP__COPY_NONE)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "op '%s' is not a strided copy", def->name);
  if (output_index < 0 || output_index >= call->num_outputs || call->num_inputs < 1)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "op '%s': no output %d", def->name,
                      output_index);
  const recap_tensor *x = &call->inputs[0];
  if (!x->data)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "op '%s': input 'x' is not bound", def->name);
  const recap__op_attrs *a = &call->attrs;
  recap_tensor v = *x;
  int64_t offset = 0;
  switch (def->copy_view) {
    case RECAP__COPY_PERMUTE:
      for (int d = 0; d < x->ndim; ++d) {
        v.shape[d] = x->shape[a->sizes[d]];
        v.strides[d] = x->strides[a->sizes[d]];
      }
      break;
    case RECAP__COPY_TRANSPOSE:
      v.shape[a->sizes[0]] = x->shape[a->sizes[1]];
      v.strides[a->sizes[0]] = x->strides[a->sizes[1]];
      v.shape[a->sizes[1]] = x->shape[a->sizes[0]];
      v.strides[a->sizes[1]] = x->strides[a->sizes[0]];
      break;
    case RECAP__COPY_SLICE:
      v.shape[a->dim] = a->end - a->start;
      offset = a->start * x->strides[a->dim];
      break;
    case RECAP__COPY_SPLIT: {
      int64_t start = 0;
      for (int i = 0; i < output_index; ++i) start += a->sizes[i];
      v.shape[a->dim] = a->sizes[output_index];
      offset = start * x->strides[a->dim];
      break;
    }
    default: /* reshape and copy read the input as it is */
      break;
  }
  v.data = (char *)x->data + offset * (int64_t)recap_dtype_size(x->dtype);
  *view = v;
  return RECAP_OK;
}
