/*
 * random.c: definitions and shape inference of random_uniform and random_normal, which fill
 * a new tensor from the device's Philox generator (runtime/rng.h). recap__op_launch fills
 * the call's Philox parameters, so a captured draw reads its seed and offset from the
 * capture's slot and every replay draws new numbers.
 */
#include <math.h>
#include <stddef.h>

#include "kernels/cuda_ops.h"
#include "kernels/host/host_ops.h"
#include "kernels/infer.h"

static const char *const no_inputs[] = {NULL};

static const recap__attr_def uniform_attrs[] = {
    {"shape", RECAP_ATTR_INT_LIST, offsetof(recap__op_attrs, sizes), true, 0, "output shape"},
    {"dtype", RECAP_ATTR_DTYPE, offsetof(recap__op_attrs, dtype), false, RECAP_DTYPE_F32,
     "output element type, f32, f16 or bf16 (default: the spec's dtype)"},
    {"low", RECAP_ATTR_FLOAT, offsetof(recap__op_attrs, low), false, 0, "lower bound (included)"},
    {"high", RECAP_ATTR_FLOAT, offsetof(recap__op_attrs, high), false, 1,
     "upper bound (excluded before rounding to the output type)"},
    {.name = NULL},
};
static const recap__attr_def normal_attrs[] = {
    {"shape", RECAP_ATTR_INT_LIST, offsetof(recap__op_attrs, sizes), true, 0, "output shape"},
    {"dtype", RECAP_ATTR_DTYPE, offsetof(recap__op_attrs, dtype), false, RECAP_DTYPE_F32,
     "output element type, f32, f16 or bf16 (default: the spec's dtype)"},
    {"mean", RECAP_ATTR_FLOAT, offsetof(recap__op_attrs, mean), false, 0, "mean"},
    {"std", RECAP_ATTR_FLOAT, offsetof(recap__op_attrs, std), false, 1, "standard deviation"},
    {.name = NULL},
};

/* The bounds are used as floats (as the kernels see them), so they are checked as floats. */
static recap_status random_infer(recap__op_call *call) {
  const recap__op_attrs *a = &call->attrs;
  int ndim;
  int64_t shape[RECAP_MAX_DIMS];
  RECAP_TRY(recap__infer_shape_attr(call, "shape", &ndim, shape));
  if (call->def->code == 0) {
    float lo = (float)a->low, hi = (float)a->high;
    if (!isfinite(lo) || !isfinite(hi) || !(lo < hi) || !isfinite(hi - lo))
      return RECAP_OP_FAIL(call,
                           "attributes 'low' = %g and 'high' = %g must be finite floats "
                           "with low < high",
                           a->low, a->high);
  } else {
    float mean = (float)a->mean, std = (float)a->std;
    if (!isfinite(mean) || !isfinite(std) || std < 0)
      return RECAP_OP_FAIL(call,
                           "attributes 'mean' = %g and 'std' = %g must be finite floats "
                           "with std >= 0",
                           a->mean, a->std);
  }
  recap__infer_output(call, 0, a->dtype, ndim, shape);
  return RECAP_OK;
}

const recap__op_def recap__op_random_uniform = {
    .name = "random_uniform",
    .summary = "uniform values in [low, high) from the device's Philox generator",
    .code = 0,
    .input_names = no_inputs,
    .min_inputs = 0,
    .max_inputs = 0,
    .num_outputs = 1,
    .attrs = uniform_attrs,
    .dtype_mask = RECAP__DTYPES_FLOAT,
    .in_place_input = -1,
    .is_random = true,
    .infer = random_infer,
    .run_host = recap__host_random,
    .launch_cuda = RECAP_CUDA_ENTRY(recap__cuda_random),
};

const recap__op_def recap__op_random_normal = {
    .name = "random_normal",
    .summary = "normal values (mean, std) from the device's Philox generator (Box-Muller)",
    .code = 1,
    .input_names = no_inputs,
    .min_inputs = 0,
    .max_inputs = 0,
    .num_outputs = 1,
    .attrs = normal_attrs,
    .dtype_mask = RECAP__DTYPES_FLOAT,
    .in_place_input = -1,
    .is_random = true,
    .infer = random_infer,
    .run_host = recap__host_random,
    .launch_cuda = RECAP_CUDA_ENTRY(recap__cuda_random),
};
