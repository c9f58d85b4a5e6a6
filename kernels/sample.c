/*
 * sample.c: definitions and shape inference of the token-choosing ops: argmax (the top-ranked
 * token of each row) and sample (a token drawn per row with the temperature, top-k, top-p,
 * min-p and seed of the row's sequence, read from the serving metadata `seqs` when the op
 * runs, so one captured graph serves any mix of requests).
 *
 * What each op computes is spelled out in kernels/cuda_ops.h (recap__cuda_argmax,
 * recap__cuda_sample); the ranking and the random draw both backends share are in
 * kernels/sample.h.
 */
#include "kernels/sample.h"

#include <stddef.h>
#include <stdint.h>

#include "kernels/cuda_ops.h"
#include "kernels/host/host_ops.h"
#include "kernels/infer.h"

static const char *const argmax_inputs[] = {"x", NULL};
static const char *const sample_inputs[] = {"logits", "seqs", NULL};

static const recap__attr_def no_attrs[] = {{.name = NULL}};
static const recap__attr_def sample_attrs[] = {
    {"logprobs", RECAP_ATTR_BOOL, offsetof(recap__op_attrs, logprobs), false, 0,
     "also output f32 [R]: the log softmax of the raw logits (temperature 1, before any "
     "filtering) at each chosen token, vLLM's default 'raw' logprobs; 0 for an unused row, NaN "
     "for a row with a NaN logit"},
    {.name = NULL},
};

/* Input `index` holds rows of V logits: [R, V], unit-stride rows, V a valid i32 token id
 * range. */
static recap_status check_logits(const recap__op_call *call, int index) {
  const recap_tensor *x = &call->inputs[index];
  if (x->ndim != 2)
    return RECAP_OP_FAIL(call, "input '%s' has shape %s, expected [R, V] (rows of logits)",
                         recap__input_label(call->def, index).s, recap__shape_label(x).s);
  RECAP_TRY(recap__infer_last_dim_contiguous(call, index));
  if (x->shape[1] > INT32_MAX)
    return RECAP_OP_FAIL(call, "input '%s' has %lld columns; token ids are i32 (at most %d)",
                         recap__input_label(call->def, index).s, (long long)x->shape[1], INT32_MAX);
  return RECAP_OK;
}

static int vocab_reduced_axes(const recap__op_attrs *attrs, int input[4], int axis[4]) {
  (void)attrs;
  input[0] = 0, axis[0] = -1;
  return 1;
}

/* Rows of few logits' slices (recap__sample_slices): each slice's top rank, on CUDA. */
static size_t slices_workspace_bytes(const recap__op_call *call, recap_backend_kind backend) {
  const recap_tensor *x = &call->inputs[0];
  const int slices = recap__sample_slices(x->shape[0], x->shape[1]);
  if (backend != RECAP_BACKEND_CUDA || slices == 1) return 0;
  return (size_t)x->shape[0] * (size_t)slices * sizeof(uint64_t);
}

/* The CUDA kernel's arrival count per sliced row. The host reference takes the same bytes and
 * checks they are zero at every launch, as paged_attention's does. */
static size_t slices_call_state_bytes(const recap__op_call *call, recap_backend_kind backend) {
  (void)backend;
  const recap_tensor *x = &call->inputs[0];
  if (recap__sample_slices(x->shape[0], x->shape[1]) == 1) return 0;
  return (size_t)x->shape[0] * sizeof(uint32_t);
}

static recap_status argmax_infer(recap__op_call *call) {
  RECAP_TRY(check_logits(call, 0));
  recap__infer_output(call, 0, RECAP_DTYPE_I32, 1, call->inputs[0].shape);
  return RECAP_OK;
}

const recap__op_def recap__op_argmax = {
    .name = "argmax",
    .summary =
        "the index (i32 [R]) of the largest value of each row of x [R, V]: ties go to the "
        "lowest index, and NaN counts as larger than any number (the first NaN wins, as in "
        "torch.argmax)",
    .input_names = argmax_inputs,
    .min_inputs = 1,
    .max_inputs = 1,
    .num_outputs = 1,
    .attrs = no_attrs,
    .dtype_mask = RECAP__DTYPES_FLOAT,
    .in_place_input = -1,
    .reduced_axes = vocab_reduced_axes,
    .infer = argmax_infer,
    .workspace_bytes = slices_workspace_bytes,
    .call_state_bytes = slices_call_state_bytes,
    .run_host = recap__host_argmax,
    .launch_cuda = RECAP_CUDA_ENTRY(recap__cuda_argmax),
};

static recap_status sample_infer(recap__op_call *call) {
  RECAP_TRY(check_logits(call, 0));
  const recap_tensor *logits = &call->inputs[0], *seqs = &call->inputs[1];
  RECAP_TRY(recap__infer_dtype_is(call, 1, RECAP_DTYPE_I32));
  if (seqs->ndim != 2 || seqs->shape[1] < RECAP_SEQ_MIN_P + 1)
    return RECAP_OP_FAIL(call,
                         "input 'seqs' has shape %s, expected [R, W] with W >= %d (the "
                         "RECAP_SEQ_* columns up to MIN_P, include/recap.h)",
                         recap__shape_label(seqs).s, RECAP_SEQ_MIN_P + 1);
  RECAP_TRY(recap__infer_last_dim_contiguous(call, 1));
  if (seqs->shape[0] != logits->shape[0])
    return RECAP_OP_FAIL(call,
                         "input 'seqs' %s has %lld rows but input 'logits' %s has %lld (one "
                         "row of parameters per row of logits)",
                         recap__shape_label(seqs).s, (long long)seqs->shape[0],
                         recap__shape_label(logits).s, (long long)logits->shape[0]);
  recap__infer_output(call, 0, RECAP_DTYPE_I32, 1, logits->shape);
  call->num_outputs = 1;
  if (call->attrs.logprobs) {
    recap__infer_output(call, 1, RECAP_DTYPE_F32, 1, logits->shape);
    call->num_outputs = 2;
  }
  return RECAP_OK;
}

const recap__op_def recap__op_sample = {
    .name = "sample",
    .summary =
        "one token id per row of logits [R, V] (i32 [R]) under the parameters of the same row "
        "of seqs [R, W] (RECAP_SEQ_*, include/recap.h; W >= 10; read when the op runs). A row "
        "with Q_LEN 0 is unused and gives -1. TEMPERATURE 0 or TOP_K 1: greedy, as argmax. "
        "Otherwise p = softmax(logits / TEMPERATURE); keep the TOP_K most likely (0: all); of "
        "those, the shortest run in rank order (probability descending, ties to the lower id) "
        "whose mass reaches TOP_P of theirs (0 or 1: all); of those, the ones with p >= MIN_P "
        "x the largest p (0: all); and draw from what is left by inverse CDF in id order with "
        "one 53-bit uniform from Philox keyed by the request's SEED at OUT_INDEX, so the same "
        "(seed, OUT_INDEX) gives the same token in any batch. A row with a NaN logit gives its "
        "first NaN's id. A used row with TEMPERATURE < 0 or not finite, TOP_P or MIN_P outside "
        "[0, 1], a negative TOP_K, OUT_INDEX or Q_LEN is a device fault",
    .input_names = sample_inputs,
    .min_inputs = 2,
    .max_inputs = 2,
    .num_outputs = 2,
    .attrs = sample_attrs,
    .dtype_mask = RECAP__DTYPES_FLOAT,
    .in_place_input = -1,
    .reduced_axes = vocab_reduced_axes,
    .infer = sample_infer,
    .workspace_bytes = slices_workspace_bytes,
    .call_state_bytes = slices_call_state_bytes,
    .run_host = recap__host_sample,
    .launch_cuda = RECAP_CUDA_ENTRY(recap__cuda_sample),
};
