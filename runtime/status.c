/* status.c: status names and texts, the thread-local detail message (and the complete text of
 * a failure that has more than fits it), the version. */
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
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

/* The complete text of the last failure, when recap__set_full_error gave one: malloc'd, one
 * per thread, in thread-specific data so that it is freed when its thread exits. */
static pthread_key_t full_key;
static pthread_once_t full_once = PTHREAD_ONCE_INIT;
static bool full_key_made;

static void make_full_key(void) {
  full_key_made = pthread_key_create(&full_key, free) == 0;
}

static char *full_error(void) {
  pthread_once(&full_once, make_full_key);
  return full_key_made ? pthread_getspecific(full_key) : NULL;
}

/* Frees the current text and keeps `text` (NULL: none) instead. */
static void replace_full_error(char *text) {
  char *old = full_error();
  if (!old && !text) return;
  if (!full_key_made || pthread_setspecific(full_key, text) != 0) {
    free(text);
    text = NULL;
    if (full_key_made) pthread_setspecific(full_key, NULL);
  }
  free(old);
}

const char *recap_last_error(void) { return last_error; }

const char *recap_last_error_full(void) {
  const char *full = full_error();
  return full ? full : last_error;
}

void recap_clear_error(void) {
  last_error[0] = '\0';
  replace_full_error(NULL);
}

void recap__set_full_error(char *text) {
  replace_full_error(text);
}

const char *recap_version(void) { return RECAP_VERSION_STRING; }

/* Read at every failure rather than once, so that a test or an embedding program can turn it
 * on and off while running; failures are not a hot path. */
static bool locations_wanted(void) {
  return recap__env_bool("RECAP_ERROR_LOCATIONS", 0) == 1;
}

recap_status recap__fail_at(recap_status status, const char *file, int line, const char *func,
                            const char *fmt, ...) {
  replace_full_error(NULL);
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
  replace_full_error(NULL);
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
  if (n < 0 || (size_t)n >= sizeof last_error) {
    replace_full_error(NULL); /* the context alone fills the message; it is all there is */
    return status;
  }
  snprintf(last_error + n, sizeof last_error - (size_t)n, "%s", previous);
  /* The complete text, when there is one, gets the same context in front. */
  const char *full = full_error();
  if (full) {
    size_t size = (size_t)n + strlen(full) + 1;
    char *text = malloc(size);
    if (text) {
      memcpy(text, last_error, (size_t)n);
      memcpy(text + n, full, size - (size_t)n);
    }
    replace_full_error(text); /* without memory: the short message stands for it */
  }
  return status;
}
