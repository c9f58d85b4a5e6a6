/*
 * decode_advance.c: the definition and shape inference of decode_advance, the op that ends a
 * decode step on the device: each running sequence's row of the step metadata (`seqs`,
 * include/recap.h's RECAP_SEQ_* layout) moves one position on, and the token it just sampled
 * becomes its input id for the next step. The host then copies metadata only when sequences
 * are admitted or evicted, and a decode loop can run many steps with no host in between.
 */
#include <stddef.h>

#include "kernels/cuda_ops.h"
#include "kernels/host/host_ops.h"
#include "kernels/infer.h"

static const char *const decode_advance_inputs[] = {"ids", "seqs", "tokens", NULL};
/* The output is ids, written in place. */
static const int output_is_input0[] = {0};

static const recap__attr_def decode_advance_attrs[] = {
    {"block_size", RECAP_ATTR_INT, offsetof(recap__op_attrs, start), true, 0,
     "rows per KV block (the paged caches' second dim): where a sequence's next position "
     "needs a block its row does not hold, the sequence stops"},
    {.name = NULL},
};

static recap_status decode_advance_infer(recap__op_call *call) {
  const recap_tensor *ids = &call->inputs[0], *seqs = &call->inputs[1],
                     *tokens = &call->inputs[2];
  for (int i = 0; i < 3; ++i) RECAP_TRY(recap__infer_dtype_is(call, i, RECAP_DTYPE_I32));
  RECAP_TRY(recap__infer_ndim(call, 0, 1, 1));
  RECAP_TRY(recap__infer_ndim(call, 1, 2, 2));
  RECAP_TRY(recap__infer_ndim(call, 2, 1, 1));
  if (seqs->shape[1] <= RECAP_SEQ_BLOCKS)
    return RECAP_OP_FAIL(call,
                         "input 'seqs' %s has no block-table columns (rows are %d fields and "
                         "then one KV block id per column: recap.h, RECAP_SEQ_BLOCKS)",
                         recap__shape_label(seqs).s, RECAP_SEQ_BLOCKS);
  if (seqs->strides[1] != 1 || ids->strides[0] != 1 || tokens->strides[0] != 1)
    return RECAP_OP_FAIL(call, "inputs 'ids', 'seqs' and 'tokens' must be contiguous rows");
  if (tokens->shape[0] != seqs->shape[0])
    return RECAP_OP_FAIL(call, "input 'tokens' %s must have one token per row of 'seqs' %s",
                         recap__shape_label(tokens).s, recap__shape_label(seqs).s);
  /* Running sequences are repacked to one token each, so every row may need a slot of ids. */
  if (ids->shape[0] < seqs->shape[0])
    return RECAP_OP_FAIL(call,
                         "input 'ids' %s has fewer tokens than 'seqs' %s has rows: a decode "
                         "step gives each sequence one token",
                         recap__shape_label(ids).s, recap__shape_label(seqs).s);
  if (call->attrs.start < 1)
    return RECAP_OP_FAIL(call, "attribute 'block_size' must be at least 1, got %lld",
                         (long long)call->attrs.start);
  call->outputs[0] = *ids;
  return RECAP_OK;
}

const recap__op_def recap__op_decode_advance = {
    .name = "decode_advance",
    .summary =
        "ends a decode step on the device: every row of seqs [Bs, W] with tokens becomes a "
        "decode row (Q_LEN 1, Q_START its rank among the running rows, LEN + 1, OUT_INDEX + "
        "1) and its sampled token (tokens [Bs], i32) the ids entry at that rank; a row whose "
        "next position has no KV block (a column below 0, or past the table) stops instead "
        "(Q_LEN 0). Writes seqs in place too; the output is ids",
    .input_names = decode_advance_inputs,
    .min_inputs = 3,
    .max_inputs = 3,
    .num_outputs = 1,
    .attrs = decode_advance_attrs,
    .dtype_mask = 1u << RECAP_DTYPE_I32,
    .in_place_input = 0,
    .output_is_input = output_is_input0,
    /* All-zero seqs: no row has tokens, nothing moves. */
    .zero_meta_writes_nothing = true,
    .infer = decode_advance_infer,
    .run_host = recap__host_decode_advance,
    .launch_cuda = RECAP_CUDA_ENTRY(recap__cuda_decode_advance),
};
