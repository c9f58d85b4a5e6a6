/*
 * seq_meta.h: the checks of the per-sequence step metadata `seqs` (include/recap.h,
 * RECAP_SEQ_*) that every paged serving op shares (internal to kernels/): one at inference
 * (the tensor itself) and one at run time (its rows), which each paged op's host reference
 * runs before it writes anything. Keeping them in one place keeps the four ops' rules and
 * messages identical.
 *
 *   RECAP_TRY(recap__seqs_infer(call, 2));                          // in the op's infer
 *   recap__seqs_rules rules = {.tokens = T, .block_size = BS, .num_blocks = NB,
 *                              .blocks = RECAP__SEQS_BLOCKS_WRITTEN};
 *   int64_t owned;
 *   RECAP_TRY(recap__seqs_check(call, 2, &rules, &owned));          // in its host run
 *
 * Failures are RECAP_STATUS_INVALID_ARGUMENT naming the op, the input and the row, which the
 * host backend turns into a sticky device fault (as a trapped CUDA kernel is).
 */
#ifndef RECAP_KERNELS_HOST_SEQ_META_H
#define RECAP_KERNELS_HOST_SEQ_META_H

#include <stdint.h>

#include "kernels/op.h"

/* Row r of a `seqs` tensor that passed recap__seqs_infer (contiguous). */
static inline const int32_t *recap__seqs_row(const recap_tensor *seqs, int64_t r) {
  return (const int32_t *)seqs->data + r * seqs->shape[1];
}

/* Token t of a row's step: its index among the step's tokens, its position in its sequence
 * (the step's tokens are the last Q_LEN of LEN) and the pool block that position lives in. */
typedef struct {
  int64_t token, pos, block;
} recap__seq_token;

static inline recap__seq_token recap__seq_token_at(const int32_t *row, int64_t t,
                                                   int64_t block_size) {
  const int64_t pos = row[RECAP_SEQ_LEN] - row[RECAP_SEQ_Q_LEN] + t;
  return (recap__seq_token){.token = row[RECAP_SEQ_Q_START] + t,
                            .pos = pos,
                            .block = row[RECAP_SEQ_BLOCKS + pos / block_size]};
}

/* Input `index` is the metadata: i32, 2-D [Bs, W], contiguous, with W > RECAP_SEQ_BLOCKS (at
 * least one block-table column). */
recap_status recap__seqs_infer(const recap__op_call *call, int index);

/* Which block-table entries must hold a block id of the cache, [0, NB); only rows with tokens
 * in the step are asked (the op touches no other row's blocks). */
typedef enum {
  RECAP__SEQS_BLOCKS_NONE,    /* the op touches no cache */
  RECAP__SEQS_BLOCKS_WRITTEN, /* those of the step's positions [LEN - Q_LEN, LEN), and no two of
                               * the step's tokens may land on one cache row */
  RECAP__SEQS_BLOCKS_READ,    /* those of every key position [0, LEN) */
} recap__seqs_blocks;

typedef struct {
  int64_t tokens;     /* T, the step's token count; -1 when the op has none (seq_last_tokens: then
                       * the rows' tokens must end by INT32_MAX, the largest token index) */
  int64_t block_size; /* BS of the cache (then LEN <= MB * BS); 0 when the op has no cache */
  int64_t num_blocks; /* NB of the cache */
  recap__seqs_blocks blocks;
} recap__seqs_rules;

/* Checks every row of input `index`: 0 <= Q_LEN <= LEN; rows with tokens packed in row order
 * (the first starts at token 0, each next where the one before ended) and, with a token count,
 * ending by T; with a cache, LEN <= MB * BS and the block ids `rules->blocks` asks for. On
 * success *owned (optional) receives the tokens the rows own, which are then [0, *owned): the
 * step's tokens from *owned on are a bucket's padding. */
recap_status recap__seqs_check(const recap__op_call *call, int index,
                               const recap__seqs_rules *rules, int64_t *owned);

#endif
