/*
 * seq_meta.c: the shared checks of the paged ops' step metadata (see seq_meta.h).
 */
#include "kernels/host/seq_meta.h"

#include "kernels/infer.h"

recap_status recap__seqs_infer(const recap__op_call *call, int index) {
  const recap_tensor *seqs = &call->inputs[index];
  const recap__label name = recap__input_label(call->def, index);
  RECAP_TRY(recap__infer_dtype_is(call, index, RECAP_DTYPE_I32));
  if (seqs->ndim != 2)
    return RECAP_OP_FAIL(call, "input '%s' has shape %s, expected [Bs, W] (one row per sequence)",
                         name.s, recap__shape_label(seqs).s);
  if (seqs->shape[1] <= RECAP_SEQ_BLOCKS)
    return RECAP_OP_FAIL(call,
                         "input '%s' has shape %s: its rows need more than %d entries (the "
                         "fields, then at least one block-table column from RECAP_SEQ_BLOCKS)",
                         name.s, recap__shape_label(seqs).s, RECAP_SEQ_BLOCKS);
  /* The kernels index rows as row * W: a view of other strides would be read wrongly. */
  if (!recap__tensor_is_contiguous(seqs))
    return RECAP_OP_FAIL(call, "input '%s' must be contiguous", name.s);
  return RECAP_OK;
}

/* Positions [*lo, *hi) of a row whose block ids the rules ask for: none for a row without
 * tokens in the step, which the op neither reads nor writes. */
static void checked_positions(const int32_t *row, recap__seqs_blocks blocks, int64_t *lo,
                              int64_t *hi) {
  *hi = row[RECAP_SEQ_LEN];
  *lo = blocks == RECAP__SEQS_BLOCKS_READ ? 0 : *hi - row[RECAP_SEQ_Q_LEN];
  if (blocks == RECAP__SEQS_BLOCKS_NONE || row[RECAP_SEQ_Q_LEN] == 0) *lo = *hi;
}

/* Fails when two of the step's tokens write one cache row: for each pair of (row, block-table
 * column) the step writes, the same block id with overlapping rows of the block. A pair per
 * (sequence, block) written, so a few hundred at most in a step: quadratic is cheap. */
static recap_status check_distinct_writes(const recap__op_call *call, int index,
                                          const recap__seqs_rules *rules) {
  const recap_tensor *seqs = &call->inputs[index];
  const int64_t bs = rules->block_size;
  for (int64_t a = 0; a < seqs->shape[0]; ++a) {
    const int32_t *ra = recap__seqs_row(seqs, a);
    int64_t alo, ahi;
    checked_positions(ra, RECAP__SEQS_BLOCKS_WRITTEN, &alo, &ahi);
    for (int64_t ca = ahi > alo ? alo / bs : 0; ahi > alo && ca <= (ahi - 1) / bs; ++ca) {
      const int64_t a0 = alo > ca * bs ? alo : ca * bs;
      const int64_t a1 = ahi < (ca + 1) * bs ? ahi : (ca + 1) * bs;
      for (int64_t b = a; b < seqs->shape[0]; ++b) {
        const int32_t *rb = recap__seqs_row(seqs, b);
        int64_t blo, bhi;
        checked_positions(rb, RECAP__SEQS_BLOCKS_WRITTEN, &blo, &bhi);
        for (int64_t cb = bhi > blo ? blo / bs : 0; bhi > blo && cb <= (bhi - 1) / bs; ++cb) {
          if (b == a && cb <= ca) continue;
          if (rb[RECAP_SEQ_BLOCKS + cb] != ra[RECAP_SEQ_BLOCKS + ca]) continue;
          /* Rows of the block each writes: [a0, a1) - ca * bs and [b0, b1) - cb * bs. */
          const int64_t b0 = blo > cb * bs ? blo : cb * bs;
          const int64_t b1 = bhi < (cb + 1) * bs ? bhi : (cb + 1) * bs;
          const int64_t first = a0 - ca * bs > b0 - cb * bs ? a0 - ca * bs : b0 - cb * bs;
          const int64_t last = a1 - ca * bs < b1 - cb * bs ? a1 - ca * bs : b1 - cb * bs;
          if (first < last)
            return RECAP_OP_FAIL(call,
                                 "input '%s': rows %lld and %lld both write row %lld of block %d "
                                 "(block-table columns %lld and %lld): two tokens of one step "
                                 "must not share a cache row",
                                 recap__input_label(call->def, index).s, (long long)a, (long long)b,
                                 (long long)first, ra[RECAP_SEQ_BLOCKS + ca], (long long)ca,
                                 (long long)cb);
        }
      }
    }
  }
  return RECAP_OK;
}

recap_status recap__seqs_check(const recap__op_call *call, int index,
                               const recap__seqs_rules *rules, int64_t *owned) {
  const recap_tensor *seqs = &call->inputs[index];
  const recap__label name = recap__input_label(call->def, index);
  const int64_t max_blocks = seqs->shape[1] - RECAP_SEQ_BLOCKS;
  int64_t next = 0; /* where the next row with tokens must start */
  for (int64_t r = 0; r < seqs->shape[0]; ++r) {
    const int32_t *row = recap__seqs_row(seqs, r);
    const int64_t len = row[RECAP_SEQ_LEN], start = row[RECAP_SEQ_Q_START],
                  count = row[RECAP_SEQ_Q_LEN];
    if (count < 0 || count > len)
      return RECAP_OP_FAIL(call,
                           "input '%s' row %lld: Q_LEN %lld is outside [0, LEN %lld] (a "
                           "sequence's tokens of the step are among its keys)",
                           name.s, (long long)r, (long long)count, (long long)len);
    if (rules->block_size > 0 && len > max_blocks * rules->block_size)
      return RECAP_OP_FAIL(call,
                           "input '%s' row %lld: LEN %lld exceeds the %lld keys that its %lld "
                           "block-table columns of %lld-row blocks hold",
                           name.s, (long long)r, (long long)len,
                           (long long)(max_blocks * rules->block_size), (long long)max_blocks,
                           (long long)rules->block_size);
    if (count > 0) {
      if (start != next)
        return RECAP_OP_FAIL(call,
                             "input '%s' row %lld: Q_START %lld, expected %lld (rows with tokens "
                             "are packed in row order, the first at token 0)",
                             name.s, (long long)r, (long long)start, (long long)next);
      next = start + count;
      /* Without a token count, token indices must still be i32s, as the outputs are. */
      const int64_t limit = rules->tokens >= 0 ? rules->tokens : INT32_MAX;
      if (next > limit)
        return RECAP_OP_FAIL(call,
                             "input '%s' row %lld: its tokens [%lld, %lld) run past the step's "
                             "%lld tokens",
                             name.s, (long long)r, (long long)start, (long long)next,
                             (long long)limit);
    }
    int64_t lo, hi;
    checked_positions(row, rules->blocks, &lo, &hi);
    for (int64_t c = hi > lo ? lo / rules->block_size : 0;
         hi > lo && c <= (hi - 1) / rules->block_size; ++c) {
      const int32_t id = row[RECAP_SEQ_BLOCKS + c];
      if (id < 0 || id >= rules->num_blocks)
        return RECAP_OP_FAIL(call,
                             "input '%s' row %lld: block-table column %lld (positions %lld to "
                             "%lld) holds block %d, outside the cache's %lld blocks",
                             name.s, (long long)r, (long long)c, (long long)(c * rules->block_size),
                             (long long)((c + 1) * rules->block_size - 1), id,
                             (long long)rules->num_blocks);
    }
  }
  if (rules->blocks == RECAP__SEQS_BLOCKS_WRITTEN)
    RECAP_TRY(check_distinct_writes(call, index, rules));
  if (owned) *owned = next;
  return RECAP_OK;
}
