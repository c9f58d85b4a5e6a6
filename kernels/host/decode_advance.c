/*
 * host/decode_advance.c: host reference of decode_advance (kernels/decode_advance.c), row by
 * row in order, which is the rank the CUDA kernel computes with a scan.
 */
#include "kernels/host/host_ops.h"
#include "kernels/infer.h"

recap_status recap__host_decode_advance(const recap__op_call *call) {
  int32_t *ids = call->inputs[0].data;
  int32_t *seqs = call->inputs[1].data;
  const int32_t *tokens = call->inputs[2].data;
  const int64_t rows = call->inputs[1].shape[0], width = call->inputs[1].shape[1];
  const int64_t row_stride = call->inputs[1].strides[0];
  const int64_t blocks = width - RECAP_SEQ_BLOCKS, block_size = call->attrs.start;
  /* Checked first, so a bad row leaves every row as it was (a trapped kernel writes nothing
   * either, as far as a caller can rely on). */
  for (int64_t b = 0; b < rows; ++b) {
    const int32_t *row = seqs + b * row_stride;
    if (row[RECAP_SEQ_Q_LEN] < 0 || row[RECAP_SEQ_LEN] < 0)
      return RECAP_OP_FAIL(call, "row %lld of 'seqs' has a negative length", (long long)b);
    if (row[RECAP_SEQ_Q_LEN] > 0 && tokens[b] < 0)
      return RECAP_OP_FAIL(call, "row %lld has tokens but its sampled token is %d", (long long)b,
                           tokens[b]);
  }
  int64_t rank = 0;
  for (int64_t b = 0; b < rows; ++b) {
    int32_t *row = seqs + b * row_stride;
    if (row[RECAP_SEQ_Q_LEN] == 0) continue;
    const int64_t next = row[RECAP_SEQ_LEN], column = next / block_size;
    if (column >= blocks || row[RECAP_SEQ_BLOCKS + column] < 0) {
      row[RECAP_SEQ_Q_LEN] = 0;
      row[RECAP_SEQ_Q_START] = 0;
      continue;
    }
    row[RECAP_SEQ_Q_START] = (int32_t)rank;
    row[RECAP_SEQ_Q_LEN] = 1;
    row[RECAP_SEQ_LEN] += 1;
    row[RECAP_SEQ_OUT_INDEX] += 1;
    ids[rank++] = tokens[b];
  }
  return RECAP_OK;
}
