/*
 * shape.c: definitions and shape inference of the shape and data-movement ops (reshape,
 * permute, transpose, slice, split, copy, concat, fill, embedding, rope), and the source-view
 * helper that reshape..copy share with the CUDA launcher (view.h).
 *
 * reshape, permute, transpose, slice, split and copy are one strided copy from a view of the
 * input. Infer validates the attributes (normalizing negative axes and bounds in the call's
 * attrs, so the launchers read them as given) and describes contiguous outputs;
 * recap__view_for_copy (view.c) builds the view from the bound pointer at launch.
 */
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "kernels/cuda_ops.h"
#include "kernels/host/host_ops.h"
#include "kernels/infer.h"
#include "kernels/rope.h"
#include "kernels/view.h"

static const char *const no_inputs[] = {NULL};
static const char *const x_inputs[] = {"x", NULL};
static const char *const concat_inputs[] = {"x0",  "x1",  "x2?", "x3?", "x4?",
                                            "x5?", "x6?", "x7?", NULL};
static const char *const embedding_inputs[] = {"table", "ids", NULL};
static const char *const rope_inputs[] = {"x", "positions", NULL};

static const recap__attr_def no_attrs[] = {{.name = NULL}};
static const recap__attr_def reshape_attrs[] = {
    {"shape", RECAP_ATTR_INT_LIST, offsetof(recap__op_attrs, sizes), true, 0,
     "the new shape; one entry may be -1 (inferred from the element count)"},
    {.name = NULL},
};
static const recap__attr_def permute_attrs[] = {
    {"dims", RECAP_ATTR_INT_LIST, offsetof(recap__op_attrs, sizes), true, 0,
     "output dimension i is input dimension dims[i]"},
    {.name = NULL},
};
static const recap__attr_def transpose_attrs[] = {
    {"dim0", RECAP_ATTR_INT, offsetof(recap__op_attrs, sizes), false, -2, "first axis to swap"},
    {"dim1", RECAP_ATTR_INT, offsetof(recap__op_attrs, sizes) + sizeof(int64_t), false, -1,
     "second axis to swap"},
    {.name = NULL},
};
static const recap__attr_def slice_attrs[] = {
    {"dim", RECAP_ATTR_INT, offsetof(recap__op_attrs, dim), false, 0, "axis to slice"},
    {"start", RECAP_ATTR_INT, offsetof(recap__op_attrs, start), true, 0,
     "first index kept (negative counts from the end)"},
    {"end", RECAP_ATTR_INT, offsetof(recap__op_attrs, end), true, 0,
     "one past the last index kept (negative counts from the end)"},
    {.name = NULL},
};
static const recap__attr_def split_attrs[] = {
    {"dim", RECAP_ATTR_INT, offsetof(recap__op_attrs, dim), false, 0, "axis to split"},
    {"sizes", RECAP_ATTR_INT_LIST, offsetof(recap__op_attrs, sizes), true, 0,
     "the parts' sizes along dim (1 to 4 parts, summing to its length)"},
    {.name = NULL},
};
static const recap__attr_def concat_attrs[] = {
    {"dim", RECAP_ATTR_INT, offsetof(recap__op_attrs, dim), false, 0, "axis to join along"},
    {.name = NULL},
};
static const recap__attr_def fill_attrs[] = {
    {"shape", RECAP_ATTR_INT_LIST, offsetof(recap__op_attrs, sizes), true, 0, "output shape"},
    {"dtype", RECAP_ATTR_DTYPE, offsetof(recap__op_attrs, dtype), false, RECAP_DTYPE_F32,
     "output element type (default: the spec's dtype)"},
    {"value", RECAP_ATTR_FLOAT, offsetof(recap__op_attrs, value), false, 0, "the value"},
    {.name = NULL},
};

/* ---- reshape, permute, transpose, slice, split, copy ---- */

static recap_status reshape_infer(recap__op_call *call) {
  const recap_tensor *x = &call->inputs[0];
  const recap__op_attrs *a = &call->attrs;
  if (a->num_sizes < 1 || a->num_sizes > RECAP_MAX_DIMS)
    return RECAP_OP_FAIL(call, "attribute 'shape' has %d entries, expected 1 to %d", a->num_sizes,
                         RECAP_MAX_DIMS);
  int64_t numel = recap__tensor_numel(x), known = 1;
  int inferred = -1;
  int64_t shape[RECAP_MAX_DIMS];
  for (int d = 0; d < a->num_sizes; ++d) {
    shape[d] = a->sizes[d];
    if (a->sizes[d] == -1 && inferred < 0) {
      inferred = d;
    } else if (a->sizes[d] < 1) {
      return RECAP_OP_FAIL(call, "attribute 'shape' entry %d is %lld (expected >= 1, or one -1)", d,
                           (long long)a->sizes[d]);
    } else if (a->sizes[d] > numel / known) {
      /* Checked before multiplying, so a huge entry cannot overflow. */
      return RECAP_OP_FAIL(call,
                           "attribute 'shape' asks for more elements than input 'x' %s "
                           "has (%lld)",
                           recap__shape_label(x).s, (long long)numel);
    } else {
      known *= a->sizes[d];
    }
  }
  if (inferred >= 0) {
    if (numel % known != 0)
      return RECAP_OP_FAIL(call,
                           "cannot infer the -1 in attribute 'shape': %lld elements of "
                           "input 'x' %s are not a multiple of %lld",
                           (long long)numel, recap__shape_label(x).s, (long long)known);
    shape[inferred] = numel / known;
  } else if (known != numel) {
    return RECAP_OP_FAIL(call, "attribute 'shape' has %lld elements, input 'x' %s has %lld",
                         (long long)known, recap__shape_label(x).s, (long long)numel);
  }
  recap__infer_output(call, 0, x->dtype, a->num_sizes, shape);
  return RECAP_OK;
}

static recap_status copy_infer(recap__op_call *call) {
  const recap_tensor *x = &call->inputs[0];
  recap__infer_output(call, 0, x->dtype, x->ndim, x->shape);
  return RECAP_OK;
}

static recap_status permute_infer(recap__op_call *call) {
  const recap_tensor *x = &call->inputs[0];
  recap__op_attrs *a = &call->attrs;
  if (a->num_sizes != x->ndim)
    return RECAP_OP_FAIL(call, "attribute 'dims' has %d entries, input 'x' %s has %d dims",
                         a->num_sizes, recap__shape_label(x).s, x->ndim);
  bool seen[RECAP_MAX_DIMS] = {false};
  int64_t shape[RECAP_MAX_DIMS];
  for (int d = 0; d < x->ndim; ++d) {
    RECAP_TRY(recap__infer_axis(call, "dims", a->sizes[d], x->ndim, &a->sizes[d]));
    if (seen[a->sizes[d]])
      return RECAP_OP_FAIL(call, "attribute 'dims' names axis %lld twice (not a permutation)",
                           (long long)a->sizes[d]);
    seen[a->sizes[d]] = true;
    shape[d] = x->shape[a->sizes[d]];
  }
  recap__infer_output(call, 0, x->dtype, x->ndim, shape);
  return RECAP_OK;
}

static recap_status transpose_infer(recap__op_call *call) {
  const recap_tensor *x = &call->inputs[0];
  recap__op_attrs *a = &call->attrs;
  RECAP_TRY(recap__infer_axis(call, "dim0", a->sizes[0], x->ndim, &a->sizes[0]));
  RECAP_TRY(recap__infer_axis(call, "dim1", a->sizes[1], x->ndim, &a->sizes[1]));
  int64_t shape[RECAP_MAX_DIMS];
  memcpy(shape, x->shape, sizeof shape);
  shape[a->sizes[0]] = x->shape[a->sizes[1]];
  shape[a->sizes[1]] = x->shape[a->sizes[0]];
  recap__infer_output(call, 0, x->dtype, x->ndim, shape);
  return RECAP_OK;
}

static recap_status slice_infer(recap__op_call *call) {
  const recap_tensor *x = &call->inputs[0];
  recap__op_attrs *a = &call->attrs;
  RECAP_TRY(recap__infer_axis(call, "dim", a->dim, x->ndim, &a->dim));
  int64_t n = x->shape[a->dim];
  int64_t start = a->start < 0 ? a->start + n : a->start;
  int64_t end = a->end < 0 ? a->end + n : a->end;
  if (start < 0 || end > n || start >= end)
    return RECAP_OP_FAIL(call,
                         "slice [%lld, %lld) is out of range for dimension %lld of input "
                         "'x' %s (needs 0 <= start < end <= %lld after negative indices)",
                         (long long)a->start, (long long)a->end, (long long)a->dim,
                         recap__shape_label(x).s, (long long)n);
  a->start = start;
  a->end = end;
  int64_t shape[RECAP_MAX_DIMS];
  memcpy(shape, x->shape, sizeof shape);
  shape[a->dim] = end - start;
  recap__infer_output(call, 0, x->dtype, x->ndim, shape);
  return RECAP_OK;
}

static recap_status split_infer(recap__op_call *call) {
  const recap_tensor *x = &call->inputs[0];
  recap__op_attrs *a = &call->attrs;
  RECAP_TRY(recap__infer_axis(call, "dim", a->dim, x->ndim, &a->dim));
  if (a->num_sizes < 1 || a->num_sizes > RECAP_OP_MAX_OUTPUTS)
    return RECAP_OP_FAIL(call, "attribute 'sizes' has %d entries, expected 1 to %d", a->num_sizes,
                         RECAP_OP_MAX_OUTPUTS);
  int64_t total = 0, n = x->shape[a->dim];
  for (int i = 0; i < a->num_sizes; ++i) {
    if (a->sizes[i] < 1 || a->sizes[i] > n - total)
      return RECAP_OP_FAIL(call,
                           "attribute 'sizes' entry %d is %lld: the parts must be >= 1 and "
                           "sum to %lld (dimension %lld of input 'x' %s)",
                           i, (long long)a->sizes[i], (long long)n, (long long)a->dim,
                           recap__shape_label(x).s);
    total += a->sizes[i];
  }
  if (total != n)
    return RECAP_OP_FAIL(call,
                         "attribute 'sizes' sums to %lld, but dimension %lld of input 'x' "
                         "%s is %lld",
                         (long long)total, (long long)a->dim, recap__shape_label(x).s,
                         (long long)n);
  call->num_outputs = a->num_sizes;
  for (int i = 0; i < a->num_sizes; ++i) {
    int64_t shape[RECAP_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[a->dim] = a->sizes[i];
    recap__infer_output(call, i, x->dtype, x->ndim, shape);
  }
  return RECAP_OK;
}

#define COPY_DEF(ident, view_kind, op_summary, op_attrs, op_infer) \
  const recap__op_def recap__op_##ident = {                        \
      .name = #ident,                                              \
      .summary = op_summary,                                       \
      .copy_view = view_kind,                                      \
      .input_names = x_inputs,                                     \
      .min_inputs = 1,                                             \
      .max_inputs = 1,                                             \
      .num_outputs = 1,                                            \
      .attrs = op_attrs,                                           \
      .dtype_mask = RECAP__DTYPES_ALL,                             \
      .in_place_input = -1,                                        \
      .infer = op_infer,                                           \
      .run_host = recap__host_copy_strided,                        \
      .launch_cuda = RECAP_CUDA_ENTRY(recap__cuda_copy_strided),   \
  }

COPY_DEF(reshape, RECAP__COPY_RESHAPE, "the elements in row-major order under a new shape",
         reshape_attrs, reshape_infer);
COPY_DEF(permute, RECAP__COPY_PERMUTE, "reorders the dimensions", permute_attrs, permute_infer);
COPY_DEF(transpose, RECAP__COPY_TRANSPOSE, "swaps two dimensions", transpose_attrs,
         transpose_infer);
COPY_DEF(slice, RECAP__COPY_SLICE, "the range [start, end) of one dimension", slice_attrs,
         slice_infer);
COPY_DEF(copy, RECAP__COPY_CONTIGUOUS, "a contiguous copy", no_attrs, copy_infer);

/* split has up to RECAP_OP_MAX_OUTPUTS outputs; its infer sets how many. */
const recap__op_def recap__op_split = {
    .name = "split",
    .summary = "splits one dimension into parts of the given sizes",
    .copy_view = RECAP__COPY_SPLIT,
    .input_names = x_inputs,
    .min_inputs = 1,
    .max_inputs = 1,
    .num_outputs = RECAP_OP_MAX_OUTPUTS,
    .attrs = split_attrs,
    .dtype_mask = RECAP__DTYPES_ALL,
    .in_place_input = -1,
    .infer = split_infer,
    .run_host = recap__host_copy_strided,
    .launch_cuda = RECAP_CUDA_ENTRY(recap__cuda_copy_strided),
};

/* ---- concat ---- */

static recap_status concat_infer(recap__op_call *call) {
  const recap_tensor *x0 = &call->inputs[0];
  recap__op_attrs *a = &call->attrs;
  RECAP_TRY(recap__infer_axis(call, "dim", a->dim, x0->ndim, &a->dim));
  int64_t shape[RECAP_MAX_DIMS];
  memcpy(shape, x0->shape, sizeof shape);
  for (int i = 1; i < call->num_inputs; ++i) {
    const recap_tensor *xi = &call->inputs[i];
    RECAP_TRY(recap__infer_same_dtype(call, i));
    if (xi->ndim != x0->ndim)
      return RECAP_OP_FAIL(call, "input '%s' %s has %d dims, input 'x0' %s has %d",
                           recap__input_label(call->def, i).s, recap__shape_label(xi).s, xi->ndim,
                           recap__shape_label(x0).s, x0->ndim);
    for (int d = 0; d < x0->ndim; ++d)
      if (d != a->dim && xi->shape[d] != x0->shape[d])
        return RECAP_OP_FAIL(call,
                             "input '%s' %s does not match input 'x0' %s in dimension %d "
                             "(only dimension %lld, the concat axis, may differ)",
                             recap__input_label(call->def, i).s, recap__shape_label(xi).s,
                             recap__shape_label(x0).s, d, (long long)a->dim);
    /* Each input is < 2^62 elements, so the sum of at most 8 extents cannot overflow. */
    shape[a->dim] += xi->shape[a->dim];
  }
  recap__infer_output(call, 0, x0->dtype, x0->ndim, shape);
  return RECAP_OK;
}

const recap__op_def recap__op_concat = {
    .name = "concat",
    .summary = "joins 2 to 8 tensors along one dimension",
    .input_names = concat_inputs,
    .min_inputs = 2,
    .max_inputs = RECAP_OP_MAX_INPUTS,
    .num_outputs = 1,
    .attrs = concat_attrs,
    .dtype_mask = RECAP__DTYPES_ALL,
    .in_place_input = -1,
    .infer = concat_infer,
    .run_host = recap__host_concat,
    .launch_cuda = RECAP_CUDA_ENTRY(recap__cuda_concat),
};

/* ---- fill ---- */

static recap_status fill_infer(recap__op_call *call) {
  const recap__op_attrs *a = &call->attrs;
  int ndim;
  int64_t shape[RECAP_MAX_DIMS];
  RECAP_TRY(recap__infer_shape_attr(call, "shape", &ndim, shape));
  double v = a->value;
  char why[128];
  if (!recap__value_fits_dtype(v, a->dtype, why, sizeof why))
    return RECAP_OP_FAIL(call, "attribute 'value' = %g %s", v, why);
  if (recap_dtype_is_float(a->dtype) && isnan(v))
    return RECAP_OP_FAIL(call, "attribute 'value' is NaN");
  recap__infer_output(call, 0, a->dtype, ndim, shape);
  return RECAP_OK;
}

const recap__op_def recap__op_fill = {
    .name = "fill",
    .summary = "a new tensor of the given shape and dtype holding one value",
    .input_names = no_inputs,
    .min_inputs = 0,
    .max_inputs = 0,
    .num_outputs = 1,
    .attrs = fill_attrs,
    .dtype_mask = RECAP__DTYPES_ALL,
    .in_place_input = -1,
    .infer = fill_infer,
    .run_host = recap__host_fill,
    .launch_cuda = RECAP_CUDA_ENTRY(recap__cuda_fill),
};

/* ---- embedding ---- */

static recap_status embedding_infer(recap__op_call *call) {
  const recap_tensor *table = &call->inputs[0], *ids = &call->inputs[1];
  RECAP_TRY(recap__infer_ndim(call, 0, 2, 2));
  RECAP_TRY(recap__infer_ndim(call, 1, 1, RECAP_MAX_DIMS - 1));
  if (ids->dtype != RECAP_DTYPE_I32 && ids->dtype != RECAP_DTYPE_I64)
    return RECAP_OP_FAIL(call, "input 'ids' has dtype %s, expected i32 or i64",
                         recap__dtype_label(ids->dtype).s);
  int64_t shape[RECAP_MAX_DIMS];
  for (int d = 0; d < ids->ndim; ++d) shape[d] = ids->shape[d];
  shape[ids->ndim] = table->shape[1];
  recap__infer_output(call, 0, table->dtype, ids->ndim + 1, shape);
  return RECAP_OK;
}

const recap__op_def recap__op_embedding = {
    .name = "embedding",
    .summary = "gathers rows of table [V, D] by ids (i32/i64); an id outside [0, V) faults",
    .input_names = embedding_inputs,
    .min_inputs = 2,
    .max_inputs = 2,
    .num_outputs = 1,
    .attrs = no_attrs,
    .dtype_mask = RECAP__DTYPES_FLOAT,
    .in_place_input = -1,
    .infer = embedding_infer,
    .run_host = recap__host_embedding,
    .launch_cuda = RECAP_CUDA_ENTRY(recap__cuda_embedding),
};

/* ---- rope ---- */

static recap_status rope_infer(recap__op_call *call) {
  const recap_tensor *x = &call->inputs[0], *pos = &call->inputs[1];
  RECAP_TRY(recap__infer_ndim(call, 0, 3, 4));
  RECAP_TRY(recap__infer_ndim(call, 1, 1, 1));
  RECAP_TRY(recap__infer_dtype_is(call, 1, RECAP_DTYPE_I32));
  int64_t head_dim = x->shape[x->ndim - 1], seq = x->shape[x->ndim - 3];
  if (head_dim % 2 != 0)
    return RECAP_OP_FAIL(call,
                         "input 'x' %s has an odd head dimension %lld (rotate-half needs "
                         "it even)",
                         recap__shape_label(x).s, (long long)head_dim);
  if (pos->shape[0] != seq && pos->shape[0] != 1)
    return RECAP_OP_FAIL(call,
                         "input 'positions' %s must be [%lld] (one per sequence row of "
                         "'x' %s) or [1] (a start position)",
                         recap__shape_label(pos).s, (long long)seq, recap__shape_label(x).s);
  RECAP_TRY(recap__infer_last_dim_contiguous(call, 1));
  RECAP_TRY(recap__rope_check_attrs(call));
  recap__infer_output(call, 0, x->dtype, x->ndim, x->shape);
  return RECAP_OK;
}

const recap__op_def recap__op_rope = {
    .name = "rope",
    .summary =
        "rotary position embedding (rotate-half) of x [B, S, H, Dh] or [S, H, Dh] (Dh "
        "even) at positions, i32 in device memory read when the op runs: [S], row s's "
        "position (the same for every batch row), or [1], a start (row s at "
        "positions[0] + s); a negative position fails the host backend and traps a GPU "
        "kernel. Precision: the angles are computed in f32 step by step as transformers "
        "computes them (theta, inv_freq, the llama3 scaling and position x inv_freq each "
        "rounded to f32, so a checkpoint matches transformers' cos/sin), cos and sin rounded "
        "to f32; the rotation x*cos + rotate_half(x)*sin is computed from those in double "
        "and rounded once to x's dtype (transformers rounds cos/sin to a bf16/f16 "
        "model's dtype and multiplies in it)",
    .input_names = rope_inputs,
    .min_inputs = 2,
    .max_inputs = 2,
    .num_outputs = 1,
    .attrs = recap__rope_attrs,
    .dtype_mask = RECAP__DTYPES_FLOAT,
    .in_place_input = 0,
    .infer = rope_infer,
    .run_host = recap__host_rope,
    .launch_cuda = RECAP_CUDA_ENTRY(recap__cuda_rope),
};
