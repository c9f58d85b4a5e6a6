/*
 * view.h: the source view of a copy-family op, shared by the host and CUDA launchers.
 *
 * reshape, permute, transpose, slice, split and copy all lower to one strided copy: element
 * k (row-major over the view's shape) of a source VIEW of inputs[0] goes to element k
 * (row-major over the output's shape) of a contiguous output. The view is built at launch
 * from the bound data pointer and the call's attributes (a slice's offset is pointer
 * arithmetic on memory that infer never sees), by this one function for both backends:
 *
 *   recap_tensor view;
 *   RECAP_TRY(recap__view_for_copy(call, o, &view));   // then copy view -> call->outputs[o]
 *
 * Host-only C (kernels/view.c), safe to call from a .cu launcher on the host side.
 */
#ifndef RECAP_KERNELS_VIEW_H
#define RECAP_KERNELS_VIEW_H

#include "kernels/op.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Fills *view with the source of output `output_index` of a copy-family call (its def's
 * copy_view, op.h) that passed recap__op_infer:
 *   reshape, copy:      inputs[0] itself;
 *   permute, transpose: inputs[0] with shape and strides reordered;
 *   slice:              inputs[0] narrowed along attrs.dim to [attrs.start, attrs.end);
 *   split:              inputs[0] narrowed along attrs.dim to the output's part.
 * view->data is inputs[0].data advanced by the view's element offset. Returns
 * RECAP_STATUS_INVALID_ARGUMENT (naming the op) for an op that is not a copy, an output index out
 * of range or an unbound (NULL) input; *view is then untouched. */
recap_status recap__view_for_copy(const recap__op_call *call, int output_index, recap_tensor *view);

#ifdef __cplusplus
}
#endif

#endif
