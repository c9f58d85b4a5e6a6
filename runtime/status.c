/* status.c: status names and texts, the thread-local detail message, the version. */
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "runtime/env.h"
#include "runtime/error.h"

enum { ERROR_MESSAGE_CAPACITY = 2048 };

static _Thread_local char last_error[ERROR_MESSAGE_CAPACITY];

const char *recap_status_name(recap_status status) {
  switch (status) {
#define NAME_CASE_(name, value, text) \
  case RECAP_STATUS_##name:           \
    return "RECAP_STATUS_" #name;
    RECAP_STATUS_MAP(NAME_CASE_)
#undef NAME_CASE_
  }
  return "RECAP_STATUS_UNKNOWN";
}

const char *recap_status_string(recap_status status) {
  switch (status) {
#define TEXT_CASE_(name, value, text) \
  case RECAP_STATUS_##name:           \
    return text;
    RECAP_STATUS_MAP(TEXT_CASE_)
#undef TEXT_CASE_
  }
  return "unknown status";
}

const char *recap_last_error(void) { return last_error; }

void recap_clear_error(void) { last_error[0] = '\0'; }

const char *recap_version(void) { return "0.1.0"; }

/* Read at every failure rather than once, so that a test or an embedding program can turn it
 * on and off while running; failures are not a hot path. */
static bool locations_wanted(void) {
  return recap__env_bool("RECAP_ERROR_LOCATIONS", 0) == 1;
}

recap_status recap__fail_at(recap_status status, const char *file, int line, const char *func,
                            const char *fmt, ...) {
  int n = 0;
  if (locations_wanted()) {
    const char *base = strrchr(file, '/');
    n = snprintf(last_error, sizeof last_error, "%s (%s:%d): ", func, base ? base + 1 : file,
                 line);
    if (n < 0 || (size_t)n >= sizeof last_error) n = 0;
  }
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_error + n, sizeof last_error - (size_t)n, fmt, ap);
  va_end(ap);
  return status;
}

recap_status recap__fail_plain(recap_status status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_error, sizeof last_error, fmt, ap);
  va_end(ap);
  return status;
}

recap_status recap__error_context(recap_status status, const char *fmt, ...) {
  char previous[ERROR_MESSAGE_CAPACITY];
  memcpy(previous, last_error, sizeof previous);
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(last_error, sizeof last_error, fmt, ap);
  va_end(ap);
  if (n < 0 || (size_t)n >= sizeof last_error) return status;
  snprintf(last_error + n, sizeof last_error - (size_t)n, "%s", previous);
  return status;
}
