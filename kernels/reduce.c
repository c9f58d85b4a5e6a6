/*
 * reduce.c: definitions and shape inference of the ops that reduce over the last dimension:
 * softmax (with scale and causal mask), layernorm, rmsnorm, sum and mean.
 *
 * All of them walk rows of the last dimension, which must be unit-stride (the CUDA kernels
 * load rows with vector loads); the leading dimensions may have any strides.
 */
#include <math.h>
#include <stddef.h>

#include "kernels/cuda_ops.h"
#include "kernels/host/host_ops.h"
#include "kernels/infer.h"

static const char *const x_inputs[] = {"x", NULL};
static const char *const layernorm_inputs[] = {"x", "weight", "bias?", NULL};
static const char *const rmsnorm_inputs[] = {"x", "weight", NULL};

static const recap__attr_def no_attrs[] = {{.name = NULL}};
static const recap__attr_def softmax_attrs[] = {
    {"scale", RECAP_ATTR_FLOAT, offsetof(recap__op_attrs, scale), false, 0,
     "multiplies x before the softmax (0: no scaling)"},
    {"causal", RECAP_ATTR_BOOL, offsetof(recap__op_attrs, causal), false, 0,
     "masks column j of row i when j > i + (cols - rows)"},
    {.name = NULL},
};
static const recap__attr_def layernorm_attrs[] = {
    {"eps", RECAP_ATTR_FLOAT, offsetof(recap__op_attrs, eps), false, 1e-5, "added to the variance"},
    {.name = NULL},
};
static const recap__attr_def rmsnorm_attrs[] = {
    {"eps", RECAP_ATTR_FLOAT, offsetof(recap__op_attrs, eps), false, 1e-6,
     "added to the mean square"},
    {.name = NULL},
};

static recap_status softmax_infer(recap__op_call *call) {
  const recap_tensor *x = &call->inputs[0];
  RECAP_TRY(recap__infer_last_dim_contiguous(call, 0));
  if (!isfinite(call->attrs.scale))
    return RECAP_OP_FAIL(call, "attribute 'scale' must be finite, got %g", call->attrs.scale);
  recap__infer_output(call, 0, x->dtype, x->ndim, x->shape);
  return RECAP_OK;
}

static recap_status norm_infer(recap__op_call *call) {
  const recap_tensor *x = &call->inputs[0];
  RECAP_TRY(recap__infer_last_dim_contiguous(call, 0));
  for (int i = 1; i < call->num_inputs; ++i) RECAP_TRY(recap__infer_norm_param(call, i));
  RECAP_TRY(recap__infer_eps(call));
  recap__infer_output(call, 0, x->dtype, x->ndim, x->shape);
  return RECAP_OK;
}

/* The output drops the last dimension; a 1-D input reduces to shape [1]. */
static recap_status reduce_last_infer(recap__op_call *call) {
  const recap_tensor *x = &call->inputs[0];
  RECAP_TRY(recap__infer_last_dim_contiguous(call, 0));
  static const int64_t one[1] = {1};
  if (x->ndim == 1)
    recap__infer_output(call, 0, x->dtype, 1, one);
  else
    recap__infer_output(call, 0, x->dtype, x->ndim - 1, x->shape);
  return RECAP_OK;
}

/* Every op here reduces over the last dimension of its input x. */
static int reduces_last_axis(const recap__op_attrs *attrs, int input[4], int axis[4]) {
  (void)attrs;
  input[0] = 0, axis[0] = -1;
  return 1;
}

const recap__op_def recap__op_softmax = {
    .name = "softmax",
    .summary = "softmax over the last dimension, with optional scale and causal mask",
    .input_names = x_inputs,
    .min_inputs = 1,
    .max_inputs = 1,
    .num_outputs = 1,
    .attrs = softmax_attrs,
    .dtype_mask = RECAP__DTYPES_FLOAT,
    .in_place_input = 0,
    .reduced_axes = reduces_last_axis,
    .infer = softmax_infer,
    .run_host = recap__host_softmax,
    .launch_cuda = RECAP_CUDA_ENTRY(recap__cuda_softmax),
};

const recap__op_def recap__op_layernorm = {
    .name = "layernorm",
    .summary = "(x - mean) / sqrt(var + eps) * weight + bias over the last dimension",
    .input_names = layernorm_inputs,
    .min_inputs = 2,
    .max_inputs = 3,
    .num_outputs = 1,
    .attrs = layernorm_attrs,
    .dtype_mask = RECAP__DTYPES_FLOAT,
    .in_place_input = 0,
    .reduced_axes = reduces_last_axis,
    .infer = norm_infer,
    .run_host = recap__host_layernorm,
    .launch_cuda = RECAP_CUDA_ENTRY(recap__cuda_layernorm),
};

const recap__op_def recap__op_rmsnorm = {
    .name = "rmsnorm",
    .summary = "x / sqrt(mean(x^2) + eps) * weight over the last dimension",
    .input_names = rmsnorm_inputs,
    .min_inputs = 2,
    .max_inputs = 2,
    .num_outputs = 1,
    .attrs = rmsnorm_attrs,
    .dtype_mask = RECAP__DTYPES_FLOAT,
    .in_place_input = 0,
    /* A linear reading the norm's output may normalize its x itself (engine/fuse.h). */
    .prologue_form = RECAP__PROLOGUE_RMS_NORM,
    .reduced_axes = reduces_last_axis,
    .infer = norm_infer,
    .run_host = recap__host_rmsnorm,
    .launch_cuda = RECAP_CUDA_ENTRY(recap__cuda_rmsnorm),
};

const recap__op_def recap__op_sum = {
    .name = "sum",
    .summary = "sum over the last dimension (which the output drops)",
    .code = 0,
    .input_names = x_inputs,
    .min_inputs = 1,
    .max_inputs = 1,
    .num_outputs = 1,
    .attrs = no_attrs,
    .dtype_mask = RECAP__DTYPES_FLOAT,
    .in_place_input = -1,
    .reduced_axes = reduces_last_axis,
    .infer = reduce_last_infer,
    .run_host = recap__host_reduce_last,
    .launch_cuda = RECAP_CUDA_ENTRY(recap__cuda_reduce_last),
};

const recap__op_def recap__op_mean = {
    .name = "mean",
    .summary = "mean over the last dimension (which the output drops)",
    .code = 1,
    .input_names = x_inputs,
    .min_inputs = 1,
    .max_inputs = 1,
    .num_outputs = 1,
    .attrs = no_attrs,
    .dtype_mask = RECAP__DTYPES_FLOAT,
    .in_place_input = -1,
    .reduced_axes = reduces_last_axis,
    .infer = reduce_last_infer,
    .run_host = recap__host_reduce_last,
    .launch_cuda = RECAP_CUDA_ENTRY(recap__cuda_reduce_last),
};
