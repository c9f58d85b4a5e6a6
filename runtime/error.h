/*
 * error.h: how every layer reports a failure (internal).
 *
 * A failing function records a detail message in the thread-local slot that
 * recap_last_error() reads and returns its status, in one expression:
 *
 *   if (bytes == 0) return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "size is zero");
 *   RECAP_TRY(recap_stream_synchronize(s));        // propagate, keeping the callee's message
 *
 * The message is what a user reads: it says what failed and why, in the user's terms (the op,
 * the tensor, the spec's FILE:LINE:COL), never which recap function noticed. For developers,
 * RECAP_ERROR_LOCATIONS=1 in the environment makes RECAP_FAIL prefix it with the function
 * name and recap's file:line ("recap__spec_load_file (spec_root.c:1422): ..."); the variable is
 * read at each failure. recap__error_context() prepends caller context ("op 'ffn1': ") to the
 * message of a failure that is being propagated.
 */
#ifndef RECAP_RUNTIME_ERROR_H
#define RECAP_RUNTIME_ERROR_H

#include "include/recap.h"

#if defined(__GNUC__)
#define RECAP__PRINTF(fmt_index, args_index) __attribute__((format(printf, fmt_index, args_index)))
#else
#define RECAP__PRINTF(fmt_index, args_index)
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Records the message, prefixed "func (file:line): " under RECAP_ERROR_LOCATIONS=1, and
 * returns status. */
recap_status recap__fail_at(recap_status status, const char *file, int line, const char *func,
                            const char *fmt, ...) RECAP__PRINTF(5, 6);
/* Records the message as given (no location) and returns status. */
recap_status recap__fail_plain(recap_status status, const char *fmt, ...) RECAP__PRINTF(2, 3);
/* Gives the failure just recorded its complete text (malloc'd; ownership passes, NULL: none),
 * for when the message holds only the start of it: the loader records the first spec errors
 * that fit and attaches all of them here. recap_last_error_full() returns it until the next
 * failure on this thread (or recap_clear_error). */
void recap__set_full_error(char *text);
/* Prepends formatted context to this thread's current message (and to its complete text, if
 * it has one) and returns status. */
recap_status recap__error_context(recap_status status, const char *fmt, ...) RECAP__PRINTF(2, 3);

#define RECAP_FAIL(status, ...) recap__fail_at((status), __FILE__, __LINE__, __func__, __VA_ARGS__)

#define RECAP_TRY(expr)                                          \
  do {                                                           \
    recap_status recap_try_status_ = (expr);                     \
    if (recap_try_status_ != RECAP_OK) return recap_try_status_; \
  } while (0)

/* Sets `st` and jumps to `label` on failure: the one cleanup path per function. */
#define RECAP_TRY_GOTO(st, expr, label) \
  do {                                  \
    (st) = (expr);                      \
    if ((st) != RECAP_OK) goto label;   \
  } while (0)

/* The message names the function the caller called wrongly and the condition it broke
 * ("invalid argument to recap_pipeline_copy_in: `host || bytes == 0` does not hold"). */
#define RECAP_CHECK_ARG(cond)                                                           \
  do {                                                                                  \
    if (!(cond))                                                                        \
      return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,                                  \
                        "invalid argument to %s: `%s` does not hold", __func__, #cond); \
  } while (0)

#ifdef __cplusplus
}
#endif

#endif
