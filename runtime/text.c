/*
 * text.c: recap__text (runtime/text.h).
 */
#include "runtime/text.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

bool recap__text_put(recap__text *t, const char *fmt, ...) {
  if (t->failed) return false;
  /* Formats into the room left; when it does not fit, grows and formats again. */
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(t->data ? t->data + t->len : NULL, t->data ? t->cap - t->len : 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
      t->failed = true;
      return false;
    }
    if (t->data && t->len + (size_t)n < t->cap) {
      t->len += (size_t)n;
      return true;
    }
    size_t cap = t->cap ? t->cap : 256;
    while (cap <= t->len + (size_t)n) cap *= 2;
    char *grown = realloc(t->data, cap);
    if (!grown) {
      t->failed = true;
      return false;
    }
    t->data = grown;
    t->cap = cap;
  }
}
