/*
 * diag.h: positioned errors, as a spec check collects them (internal to the engine).
 *
 * Every stage that reads a spec (the YAML parser, the spec check, each bucket's IR, the
 * planner) reports what it finds as "FILE:LINE:COL: error: message" into one recap__diag, so a
 * user sees every problem of a spec in one pass:
 *
 *   recap__diag diag = {0};
 *   recap__diag_error(&diag, pos, "op %s: unknown input '%s'", op, name);
 *   if (recap__diag_errors(&diag)) return recap__diag_report(&diag);  // RECAP_STATUS_SPEC_ERROR
 *   recap__diag_free(&diag);
 *
 * It sits below the spec and the IR so that both report through it without calling each other.
 */
#ifndef RECAP_ENGINE_DIAG_H
#define RECAP_ENGINE_DIAG_H

#include <stddef.h>

#include "include/recap.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A position in a spec file (1-based line and column; 0 when not from a file). */
typedef struct {
  const char *file; /* owned by the spec */
  int line, col;
  /* For text inside a block that the spec instantiates several times (spec_blocks.c): which
   * instance this is, e.g. "layers.3 (block 'layer', i = 3)", since one place in the file
   * then stands for many tensors and ops. NULL elsewhere. Owned like file. */
  const char *instance;
} recap__src_pos;

/* The head of every positioned error: "FILE:LINE:COL: error: " ("FILE: error: " without a
 * line, "error: " without a file), then "in INSTANCE: " for a position inside a block's
 * instance. Truncated to size. */
void recap__src_pos_head(recap__src_pos pos, char *buf, size_t size);

/* Collected errors, each "FILE:LINE:COL: error: message" (an error identical to a recorded one
 * is not recorded twice, nor one inside a block's instance at a place where another instance
 * already has an error: a mistake in a block's text is reported once, for the first instance
 * that shows it). Zero-initialize; release with recap__diag_free. */
typedef struct {
  char **messages;
  size_t count, capacity;
  size_t max_messages; /* further errors are counted, not stored (0: 100) */
  size_t dropped;
} recap__diag;

/* Records one error at pos (printf-style). Never fails: on allocation failure the error is
 * counted in `dropped`. */
void recap__diag_error(recap__diag *diag, recap__src_pos pos, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* All messages joined by newlines (malloc'd, caller frees); NULL when none. */
char *recap__diag_join(const recap__diag *diag);
/* Records the failure of a spec check: recap_last_error() gets the first messages (whole
 * lines within its 2 KiB, then "(and N more errors)"), recap_last_error_full() all of them.
 * Returns RECAP_STATUS_SPEC_ERROR. */
recap_status recap__diag_report(const recap__diag *diag);
void recap__diag_free(recap__diag *diag);
/* Number of errors recorded (stored and dropped). */
size_t recap__diag_errors(const recap__diag *diag);
/* Appends each message of src whose "FILE:LINE:COL:" position has no message in dst yet: one
 * report per place, when the same mistake shows up in several buckets' IRs. */
void recap__diag_merge_new_positions(recap__diag *dst, const recap__diag *src);

#ifdef __cplusplus
}
#endif

#endif
