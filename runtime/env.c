/* env.c: the boolean environment switches (env.h). */
#include "runtime/env.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Names already warned about. recap has about a dozen switches; should a name not fit, its
 * warning repeats instead of being lost. */
enum { MAX_WARNED = 32, MAX_WARNED_NAME = 64 };
static char warned[MAX_WARNED][MAX_WARNED_NAME];
static int num_warned;
static pthread_mutex_t warned_lock = PTHREAD_MUTEX_INITIALIZER;

static bool is_one_of(const char *value, const char *const *words) {
  for (; *words; ++words)
    if (strcasecmp(value, *words) == 0) return true;
  return false;
}

/* Whether this is the first bad value seen for `name` (and remembers it). */
static bool first_warning(const char *name) {
  bool first = true;
  pthread_mutex_lock(&warned_lock);
  for (int i = 0; i < num_warned && first; ++i)
    if (strcmp(warned[i], name) == 0) first = false;
  if (first && num_warned < MAX_WARNED && strlen(name) < MAX_WARNED_NAME)
    strcpy(warned[num_warned++], name);
  pthread_mutex_unlock(&warned_lock);
  return first;
}

int recap__env_bool_value(const char *value) {
  static const char *const on[] = {"1", "true", "yes", "on", NULL};
  static const char *const off[] = {"0", "false", "no", "off", NULL};
  if (is_one_of(value, on)) return 1;
  if (is_one_of(value, off)) return 0;
  return -1;
}

int recap__env_bool(const char *name, int fallback) {
  const char *value = getenv(name);
  if (!value || !*value) return fallback;
  int parsed = recap__env_bool_value(value);
  if (parsed >= 0) return parsed;
  if (first_warning(name))
    fprintf(stderr,
            "recap: warning: ignoring %s='%.64s' (expected 1/0, true/false, yes/no or on/off)\n",
            name, value);
  return fallback;
}
