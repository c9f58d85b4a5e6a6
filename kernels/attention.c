/*
 * attention.c: definitions and shape inference of the inference-state ops: kv_append (a
 * scatter of new rows into a persistent KV cache at a position read from device memory) and
 * attention (softmax(q k^T * scale [+ causal mask]) v for a group of heads, over a cache whose
 * valid length is read from device memory).
 *
 * Both read their position/length in the kernel, not at launch, so a captured decode step
 * replays correctly as the position advances, with no graph update.
 */
#include <math.h>
#include <stddef.h>

#include "kernels/cuda_ops.h"
#include "kernels/host/host_ops.h"
#include "kernels/infer.h"

static const char *const kv_append_inputs[] = {"cache", "new", "pos", "rows?", NULL};
/* kv_append returns its cache: output 0 is input 0. */
static const int output_is_input0[] = {0};
static const char *const attention_inputs[] = {"q", "k", "v", "len?", NULL};

static const recap__attr_def no_attrs[] = {{.name = NULL}};
static const recap__attr_def attention_attrs[] = {
    {"scale", RECAP_ATTR_FLOAT, offsetof(recap__op_attrs, scale), false, 0,
     "multiplies q . k (0: 1 / sqrt(head_dim))"},
    {"causal", RECAP_ATTR_BOOL, offsetof(recap__op_attrs, causal), false, 0,
     "query i (at position len - Sq + i) sees keys at positions <= its own"},
    {.name = NULL},
};

/* A device-resident i32 scalar: shape [1], dtype i32. */
static recap_status check_scalar(const recap__op_call *call, int index) {
  const recap_tensor *t = &call->inputs[index];
  RECAP_TRY(recap__infer_dtype_is(call, index, RECAP_DTYPE_I32));
  if (t->ndim != 1 || t->shape[0] != 1)
    return RECAP_OP_FAIL(call, "input '%s' has shape %s, expected [1] (an i32 in device memory)",
                         recap__input_label(call->def, index).s, recap__shape_label(t).s);
  return RECAP_OK;
}

static recap_status kv_append_infer(recap__op_call *call) {
  const recap_tensor *cache = &call->inputs[0], *rows = &call->inputs[1];
  RECAP_TRY(recap__infer_ndim(call, 0, 4, 4));
  RECAP_TRY(recap__infer_ndim(call, 1, 4, 4));
  RECAP_TRY(recap__infer_same_dtype(call, 1));
  for (int d = 0; d < 4; ++d) {
    if (d == 1) continue;
    if (rows->shape[d] != cache->shape[d])
      return RECAP_OP_FAIL(call,
                           "input 'new' %s does not match input 'cache' %s in dimension %d "
                           "(both are [B, S, H, Dh])",
                           recap__shape_label(rows).s, recap__shape_label(cache).s, d);
  }
  if (rows->shape[1] > cache->shape[1])
    return RECAP_OP_FAIL(call, "input 'new' %s has more rows than input 'cache' %s holds",
                         recap__shape_label(rows).s, recap__shape_label(cache).s);
  RECAP_TRY(check_scalar(call, 2));
  /* rows: how many batch rows are real (the rest are a bucket's padding and must leave the
   * cache alone); read in the kernel, so one graph serves every row count. */
  if (call->num_inputs > 3) RECAP_TRY(check_scalar(call, 3));
  /* The output is the cache itself, strides and memory included. */
  call->outputs[0] = *cache;
  return RECAP_OK;
}

const recap__op_def recap__op_kv_append = {
    .name = "kv_append",
    .summary =
        "writes new [B, T, H, Dh] into cache [B, Smax, H, Dh] at rows pos..pos+T-1, pos "
        "read from device memory (only the first `rows` batch rows when given); the output is "
        "the cache",
    .input_names = kv_append_inputs,
    .min_inputs = 3,
    .max_inputs = 4,
    .num_outputs = 1,
    .attrs = no_attrs,
    .dtype_mask = RECAP__DTYPES_FLOAT,
    .in_place_input = 0,
    .output_is_input = output_is_input0,
    .takes_rows = true,
    .infer = kv_append_infer,
    .run_host = recap__host_kv_append,
    .launch_cuda = RECAP_CUDA_ENTRY(recap__cuda_kv_append),
};

static recap_status attention_infer(recap__op_call *call) {
  const recap_tensor *q = &call->inputs[0], *k = &call->inputs[1], *v = &call->inputs[2];
  for (int i = 0; i < 3; ++i) {
    RECAP_TRY(recap__infer_ndim(call, i, 4, 4));
    RECAP_TRY(recap__infer_same_dtype(call, i));
    RECAP_TRY(recap__infer_last_dim_contiguous(call, i));
  }
  for (int d = 0; d < 4; ++d)
    if (k->shape[d] != v->shape[d])
      return RECAP_OP_FAIL(call, "inputs 'k' %s and 'v' %s must have one shape [B, Hkv, Sk, Dh]",
                           recap__shape_label(k).s, recap__shape_label(v).s);
  if (k->shape[0] != q->shape[0] || k->shape[3] != q->shape[3])
    return RECAP_OP_FAIL(call,
                         "input 'k' %s does not match input 'q' %s in batch or head_dim "
                         "(q is [B, H, Sq, Dh], k and v [B, Hkv, Sk, Dh])",
                         recap__shape_label(k).s, recap__shape_label(q).s);
  if (q->shape[1] % k->shape[1] != 0)
    return RECAP_OP_FAIL(call,
                         "input 'q' has %lld heads, not a multiple of the %lld heads of "
                         "'k' and 'v'",
                         (long long)q->shape[1], (long long)k->shape[1]);
  if (call->num_inputs > 3) RECAP_TRY(check_scalar(call, 3));
  if (!isfinite(call->attrs.scale))
    return RECAP_OP_FAIL(call, "attribute 'scale' must be finite, got %g", call->attrs.scale);
  recap__infer_output(call, 0, q->dtype, 4, q->shape);
  return RECAP_OK;
}

/* Composed or fused is the CUDA half's choice (see attention.cu); the host reference is a
 * direct loop in double. */
/* q . k over head_dim; the softmax over the keys and the weighted sum of the values. */
static int attention_reduced_axes(const recap__op_attrs *attrs, int input[4], int axis[4]) {
  (void)attrs;
  input[0] = 0, axis[0] = -1;
  input[1] = 1, axis[1] = -1;
  input[2] = 1, axis[2] = -2;
  input[3] = 2, axis[3] = -2;
  return 4;
}

/* q k^T and the weighted sum of v: 2 Sk Dh multiply-adds each per query row and head. */
static double attention_flops(const recap__op_call *call) {
  const recap_tensor *out = &call->outputs[0], *k = &call->inputs[1];
  return 4.0 * (double)recap__tensor_numel(out) * (double)k->shape[k->ndim - 2];
}

const recap__op_def recap__op_attention = {
    .name = "attention",
    .summary =
        "softmax(q k^T * scale [+ causal mask]) v over heads of q [B, H, Sq, Dh] and "
        "k, v [B, Hkv, Sk, Dh], with an optional valid length len (i32 [1] in device memory, "
        "read when the op runs): only keys [0, len) take part, len from 0 to Sk (outside it "
        "the host backend fails and a GPU kernel traps); a query row that sees no key (len 0, "
        "or, causal, a row before the first key) is zeros",
    .input_names = attention_inputs,
    .min_inputs = 3,
    .max_inputs = 4,
    .num_outputs = 1,
    .attrs = attention_attrs,
    .dtype_mask = RECAP__DTYPES_FLOAT,
    .in_place_input = -1,
    .strided_output = true,
    .reduced_axes = attention_reduced_axes,
    .flops = attention_flops,
    .infer = attention_infer,
    .run_host = recap__host_attention,
    .launch_cuda = RECAP_CUDA_ENTRY(recap__cuda_attention),
};
