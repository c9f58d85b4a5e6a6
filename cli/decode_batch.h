/*
 * decode_batch.h: the synthetic decode batch that `recap bench-decode` and `recap bench-loop`
 * time on a paged serving spec (`recap import-hf --paged`): the spec's serving shape read from
 * its tensors, and `batch` greedy sequences at a given context written into ids and seqs.
 *
 *   cli_decode_shape s;
 *   if (!cli_decode_shape_read("bench-decode", p, &s)) return CLI_EXIT_FAILURE;
 *   int64_t need = (context + tokens + s.block_size - 1) / s.block_size;  // blocks a sequence
 *   cli_decode_batch_write(p, &s, batch, context, need);
 */
#ifndef RECAP_CLI_DECODE_BATCH_H
#define RECAP_CLI_DECODE_BATCH_H

#include <stdbool.h>
#include <stdint.h>

#include "include/recap.h"

/* What the decode benches read from a paged serving pipeline's tensors. */
typedef struct {
  int64_t max_batch, width, vocab;
  int64_t pool_blocks, block_size; /* of the KV pools (4-D state tensors) */
  uint64_t kv_bytes_per_token;     /* every pool's bytes for one position of one sequence */
} cli_decode_shape;

/* Reads *s from the pipeline; false, with a line on stderr naming `cmd`, for a spec that is not
 * a paged serving spec (inputs ids and seqs, output logits, a KV pool). */
bool cli_decode_shape_read(const char *cmd, recap_pipeline *p, cli_decode_shape *s);

/* Whether `batch` sequences of `positions` positions each fit the spec's pools and block
 * tables; false, with a line on stderr naming `cmd`, the limits, and the ways out. */
bool cli_decode_batch_fits(const char *cmd, const cli_decode_shape *s, int64_t batch,
                           int64_t positions);

/* The benches' default sizes fitted to the spec, each only where the user did not give it:
 * without --batch (batch_given false) the batches above the spec's largest are dropped,
 * without --tokens (tokens_given false) a spec too short for the default steps times half its
 * positions, and without --context (context_given false) the context shrinks so that every
 * batch left holds context + tokens + extra positions. A note on stderr says what changed and
 * which flag sets it.
 * Sizes the user gave are left alone, for cli_decode_batch_fits to refuse with its reasons. */
void cli_decode_fit_defaults(const char *cmd, const cli_decode_shape *s, bool batch_given,
                             long long *batches, size_t *num_batches, bool context_given,
                             long long *context, bool tokens_given, long long *tokens,
                             int64_t extra);

/* Copies in the metadata of `batch` greedy sequences at `context` keys, each about to take one
 * token (LEN = context + 1), sequence b owning blocks [b x need, (b + 1) x need) of the pools,
 * and their ids. Queued on the pipeline's stream like every copy_in. */
recap_status cli_decode_batch_write(recap_pipeline *p, const cli_decode_shape *s, int64_t batch,
                                    int64_t context, int64_t need);

#endif
