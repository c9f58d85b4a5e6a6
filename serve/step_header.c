/*
 * step_header.c: the step header's words (see step_header.h).
 */
#include "serve/step_header.h"

#include <inttypes.h>
#include <stdbool.h>

#include "runtime/error.h"

#define STEP_MAGIC ((int64_t)0x5243505f53544550LL) /* "RCP_STEP" */

void recap__step_header_encode(const recap__step_header *h, int64_t *words) {
  words[0] = STEP_MAGIC;
  words[1] = (int64_t)h->kind;
  words[2] = h->index;
  words[3] = h->tokens;
  words[4] = h->rows;
  words[5] = h->steps;
}

recap_status recap__step_header_decode(const int64_t *words, int64_t expected_index,
                                       recap__step_header *out) {
  if (words[0] != STEP_MAGIC)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "rank 0's step header has magic 0x%" PRIx64
                      ", not a generator's: does rank 0 run a generator on the same model?",
                      (uint64_t)words[0]);
  int64_t kind = words[1];
  if (kind < RECAP__STEP_PREFILL || kind > RECAP__STEP_LOOP)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "rank 0's step header has unknown kind %" PRId64, kind);
  if (words[2] != expected_index)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "rank 0's step header is number %" PRId64 ", this rank expected %" PRId64
                      ": a step was lost or repeated",
                      words[2], expected_index);
  bool loop = kind == RECAP__STEP_LOOP;
  bool runs = kind == RECAP__STEP_PREFILL || kind == RECAP__STEP_DECODE || loop;
  if (words[3] < 0 || words[4] < 0 || (runs && (words[4] < 1 || words[4] > words[3])) ||
      (!runs && (words[3] != 0 || words[4] != 0)))
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "rank 0's step header %" PRId64 " (kind %" PRId64 ") has %" PRId64
                      " tokens and %" PRId64
                      " rows: a run has 1 <= rows <= tokens, "
                      "a wait or stop none",
                      words[2], kind, words[3], words[4]);
  if ((loop && (words[5] < 1 || words[4] != words[3])) || (!loop && words[5] != 0))
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "rank 0's step header %" PRId64 " (kind %" PRId64 ") has %" PRId64
                      " steps for %" PRId64 " tokens and %" PRId64
                      " rows: a loop has steps and one token per row, other kinds no steps",
                      words[2], kind, words[5], words[3], words[4]);
  *out = (recap__step_header){.kind = (recap__step_kind)kind,
                              .index = words[2],
                              .tokens = words[3],
                              .rows = words[4],
                              .steps = words[5]};
  return RECAP_OK;
}
