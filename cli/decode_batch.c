/* decode_batch.c: the decode benches' synthetic batch (decode_batch.h). */
#include "cli/decode_batch.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli/cli.h"

bool cli_decode_shape_read(const char *cmd, recap_pipeline *p, cli_decode_shape *s) {
  *s = (cli_decode_shape){0};
  recap_tensor seqs, logits;
  if (recap_pipeline_tensor(p, "seqs", &seqs) != RECAP_OK || seqs.ndim != 2 ||
      seqs.shape[1] <= RECAP_SEQ_BLOCKS ||
      recap_pipeline_tensor(p, "logits", &logits) != RECAP_OK || logits.ndim != 2) {
    fprintf(stderr,
            "recap %s: the spec is not a paged serving spec (inputs ids [T] and seqs [Bs, W], "
            "output logits [Bs, V]: `recap import-hf --paged`)\n",
            cmd);
    return false;
  }
  s->max_batch = seqs.shape[0];
  s->width = seqs.shape[1];
  s->vocab = logits.shape[1];
  recap_pipeline_info info;
  if (recap_pipeline_info_get(p, &info) != RECAP_OK) return false;
  for (size_t i = 0; i < info.num_tensors; i++) {
    recap_tensor_info t;
    if (recap_pipeline_tensor_info_get(p, i, &t) != RECAP_OK) return false;
    if (t.role != RECAP_ROLE_STATE || t.ndim != 4) continue;
    s->pool_blocks = t.shape[0];
    s->block_size = t.shape[1];
    s->kv_bytes_per_token += (uint64_t)(t.shape[2] * t.shape[3]) * recap_dtype_size(t.dtype);
  }
  if (!s->pool_blocks) {
    fprintf(stderr, "recap %s: the spec has no paged KV pool (a state [NB, BS, Hkv, Dh])\n", cmd);
    return false;
  }
  return true;
}

/* The most positions a sequence holds when `batch` sequences share the pool: its block table's
 * columns, and its share of the pool's blocks. */
static int64_t positions_at(const cli_decode_shape *s, int64_t batch) {
  const int64_t by_table = (s->width - RECAP_SEQ_BLOCKS) * s->block_size;
  const int64_t by_pool = s->pool_blocks / batch * s->block_size;
  return by_table < by_pool ? by_table : by_pool;
}

bool cli_decode_batch_fits(const char *cmd, const cli_decode_shape *s, int64_t batch,
                           int64_t positions) {
  if (batch <= s->max_batch && positions <= positions_at(s, batch)) return true;
  fprintf(stderr,
          "recap %s: batch %" PRId64 " at %" PRId64
          " positions does not fit the spec: at most "
          "%" PRId64 " %s, %" PRId64 " positions each, %" PRId64 " %s of %" PRId64
          " in the pool (a smaller --context or --tokens, or import with a larger --batch, "
          "--max-seq or --kv-blocks)\n",
          cmd, batch, positions, s->max_batch, cli_plural(s->max_batch, "sequence", "sequences"),
          (s->width - RECAP_SEQ_BLOCKS) * s->block_size, s->pool_blocks,
          cli_plural(s->pool_blocks, "block", "blocks"), s->block_size);
  return false;
}

void cli_decode_fit_defaults(const char *cmd, const cli_decode_shape *s, bool batch_given,
                             long long *batches, size_t *num_batches, bool context_given,
                             long long *context, bool tokens_given, long long *tokens,
                             int64_t extra) {
  if (!batch_given) {
    size_t kept = 0;
    for (size_t i = 0; i < *num_batches; i++)
      if (batches[i] <= s->max_batch) batches[kept++] = batches[i];
    if (kept < *num_batches)
      fprintf(stderr, "recap %s: note: batches up to the spec's %" PRId64 " (--batch sets them)\n",
              cmd, s->max_batch);
    *num_batches = kept;
  }
  if (context_given || *num_batches == 0) return;
  int64_t most = INT64_MAX;
  for (size_t i = 0; i < *num_batches; i++) {
    const int64_t p = positions_at(s, batches[i]);
    if (p < most) most = p;
  }
  /* A spec too short for the default steps after any context: half its positions are
   * timed, the rest is context. */
  if (!tokens_given && most - *tokens - extra < 1 && most - extra >= 2) {
    const long long steps = (most - extra) / 2;
    fprintf(stderr,
            "recap %s: note: %lld steps do not fit this spec (at most %" PRId64
            " positions a sequence): %lld steps (--tokens sets them)\n",
            cmd, *tokens, most, steps);
    *tokens = steps;
  }
  const int64_t fits = most - *tokens - extra;
  if (*context + *tokens + extra <= most || fits < 1) return;
  fprintf(stderr,
          "recap %s: note: a context of %lld keys does not fit this spec with %lld steps after "
          "it (at most %" PRId64 " positions a sequence): %" PRId64 " keys (--context sets it)\n",
          cmd, *context, *tokens, most, fits);
  *context = fits;
}

recap_status cli_decode_batch_write(recap_pipeline *p, const cli_decode_shape *s, int64_t batch,
                                    int64_t context, int64_t need) {
  int32_t *rows = calloc((size_t)(batch * s->width), sizeof *rows);
  int32_t *ids = malloc(sizeof *ids * (size_t)batch);
  recap_status st = rows && ids ? RECAP_OK : RECAP_STATUS_OUT_OF_MEMORY;
  for (int64_t b = 0; st == RECAP_OK && b < batch; b++) {
    int32_t *row = &rows[b * s->width];
    row[RECAP_SEQ_LEN] = (int32_t)(context + 1);
    row[RECAP_SEQ_Q_START] = (int32_t)b;
    row[RECAP_SEQ_Q_LEN] = 1;
    for (int64_t j = 0; j < s->width - RECAP_SEQ_BLOCKS; j++)
      row[RECAP_SEQ_BLOCKS + j] = j < need ? (int32_t)(b * need + j) : -1;
    /* Spread ids (a prime stride) so the embedding rows read are not all one row. */
    ids[b] = (int32_t)((b * 7919 + 13) % s->vocab);
  }
  if (st == RECAP_OK)
    st = recap_pipeline_copy_in(p, "ids", ids, sizeof *ids * (size_t)batch, batch);
  if (st == RECAP_OK)
    st = recap_pipeline_copy_in(p, "seqs", rows, sizeof *rows * (size_t)(batch * s->width), batch);
  free(rows);
  free(ids);
  return st;
}
