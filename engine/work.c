/* work.c: how much one run of a loaded model's bucket computes, estimated from its IR with
 * the op contracts' flops (load.h). */
#include "engine/load.h"
#include "kernels/op.h"
#include "runtime/error.h"

static void shape_of(const recap__ir_tensor *t, recap_tensor *out) {
  *out = (recap_tensor){.dtype = t->dtype, .ndim = t->ndim};
  for (int d = 0; d < t->ndim; d++) out->shape[d] = t->shape[d];
}

static double numel(const recap__ir_tensor *t) {
  double n = 1;
  for (int d = 0; d < t->ndim; d++) n *= (double)t->shape[d];
  return n;
}

recap_status recap__model_work(const recap__model *model, size_t bucket, double *flops,
                               double *bytes) {
  if (!model || !flops || !bytes || bucket >= model->num_buckets)
    return recap__fail_plain(RECAP_STATUS_INVALID_ARGUMENT,
                             "recap__model_work: no model, no outputs or bucket %zu out of range",
                             bucket);
  const recap__ir *ir = model->irs[bucket];
  *flops = 0;
  *bytes = 0;
  for (size_t o = 0; o < ir->num_ops; o++) {
    const recap__ir_op *op = &ir->ops[o];
    /* The op's shapes as a call (no data): what its contract's flops reads. */
    recap__op_call call = {.def = op->def,
                           .num_inputs = op->num_inputs,
                           .num_outputs = op->num_outputs,
                           .attrs = op->attrs};
    for (int i = 0; i < op->num_inputs; i++) shape_of(&ir->tensors[op->inputs[i]], &call.inputs[i]);
    for (int i = 0; i < op->num_outputs; i++)
      shape_of(&ir->tensors[op->outputs[i]], &call.outputs[i]);
    if (op->def->flops) {
      *flops += op->def->flops(&call);
    } else {
      /* One per element; reductions read more than they write. */
      double n = numel(&ir->tensors[op->outputs[0]]);
      if (op->num_inputs > 0 && numel(&ir->tensors[op->inputs[0]]) > n)
        n = numel(&ir->tensors[op->inputs[0]]);
      *flops += n;
    }
    for (int i = 0; i < op->num_inputs; i++) *bytes += (double)ir->tensors[op->inputs[i]].bytes;
    for (int i = 0; i < op->num_outputs; i++) *bytes += (double)ir->tensors[op->outputs[i]].bytes;
  }
  return RECAP_STATUS_OK;
}
