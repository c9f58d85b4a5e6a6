/*
 * diag.c: the list of positioned errors a spec check collects (recap__diag_* in ir.h).
 *
 * The loader reports every problem it finds in one pass, so one mistake can be seen from
 * several places (each bucket's IR, say); an error identical to one already recorded is
 * dropped, which keeps the report to one line per problem. So is an error inside a block's
 * instance at a place where another instance already has one: the text of a block is
 * instantiated many times, and one mistake in it would otherwise be reported once per layer.
 */
#include "engine/diag.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/error.h"

enum {
  DEFAULT_MAX_MESSAGES = 100,
  /* How much of the joined messages recap_last_error() gets (its buffer holds 2 KiB). */
  LAST_ERROR_BUDGET = 1800,
};

void recap__src_pos_head(recap__src_pos pos, char *buf, size_t size) {
  int used;
  if (pos.file && pos.line > 0)
    used = snprintf(buf, size, "%s:%d:%d: error: ", pos.file, pos.line, pos.col);
  else if (pos.file)
    used = snprintf(buf, size, "%s: error: ", pos.file);
  else
    used = snprintf(buf, size, "error: ");
  if (pos.instance && used >= 0 && (size_t)used < size)
    snprintf(buf + used, size - (size_t)used, "in %s: ", pos.instance);
}

static char *format_message(recap__src_pos pos, const char *fmt, va_list ap) {
  char prefix[1024];
  recap__src_pos_head(pos, prefix, sizeof prefix);
  va_list copy;
  va_copy(copy, ap);
  int body = vsnprintf(NULL, 0, fmt, copy);
  va_end(copy);
  if (body < 0) return NULL;
  size_t plen = strlen(prefix);
  char *text = malloc(plen + (size_t)body + 1);
  if (!text) return NULL;
  memcpy(text, prefix, plen);
  vsnprintf(text + plen, (size_t)body + 1, fmt, ap);
  return text;
}

/* Takes ownership of text: stores it, or frees it if it is a repeat or over the limit. */
static void add_text(recap__diag *diag, char *text) {
  size_t max = diag->max_messages ? diag->max_messages : DEFAULT_MAX_MESSAGES;
  if (!text) {
    diag->dropped++;
    return;
  }
  for (size_t i = 0; i < diag->count; ++i) {
    if (strcmp(diag->messages[i], text) == 0) {
      free(text);
      return;
    }
  }
  if (diag->count >= max) {
    free(text);
    diag->dropped++;
    return;
  }
  if (diag->count == diag->capacity) {
    size_t capacity = diag->capacity ? diag->capacity * 2 : 8;
    char **messages = realloc(diag->messages, capacity * sizeof *messages);
    if (!messages) {
      free(text);
      diag->dropped++;
      return;
    }
    diag->messages = messages;
    diag->capacity = capacity;
  }
  diag->messages[diag->count++] = text;
}

/* Whether diag holds an error at pos (inside a block) about another instance of the block. */
static bool other_instance_reported(const recap__diag *diag, recap__src_pos pos) {
  if (!pos.instance || !pos.file || pos.line <= 0) return false;
  char place[1024];
  recap__src_pos_head((recap__src_pos){.file = pos.file, .line = pos.line, .col = pos.col}, place,
                      sizeof place);
  size_t n = strlen(place), own = strlen(pos.instance);
  for (size_t i = 0; i < diag->count; ++i) {
    const char *m = diag->messages[i];
    if (strncmp(m, place, n) != 0 || strncmp(m + n, "in ", 3) != 0) continue;
    if (strncmp(m + n + 3, pos.instance, own) != 0 || strncmp(m + n + 3 + own, ": ", 2) != 0)
      return true;
  }
  return false;
}

void recap__diag_error(recap__diag *diag, recap__src_pos pos, const char *fmt, ...) {
  if (!diag || other_instance_reported(diag, pos)) return;
  va_list ap;
  va_start(ap, fmt);
  char *text = format_message(pos, fmt, ap);
  va_end(ap);
  add_text(diag, text);
}

size_t recap__diag_errors(const recap__diag *diag) {
  return diag ? diag->count + diag->dropped : 0;
}

char *recap__diag_join(const recap__diag *diag) {
  if (!diag || diag->count + diag->dropped == 0) return NULL;
  size_t total = 1;
  for (size_t i = 0; i < diag->count; ++i) total += strlen(diag->messages[i]) + 1;
  char tail[96] = "";
  if (diag->dropped) snprintf(tail, sizeof tail, "(and %zu more errors)", diag->dropped);
  total += strlen(tail);
  char *text = malloc(total);
  if (!text) return NULL;
  size_t used = 0;
  for (size_t i = 0; i < diag->count; ++i) {
    size_t n = strlen(diag->messages[i]);
    memcpy(text + used, diag->messages[i], n);
    used += n;
    text[used++] = '\n';
  }
  memcpy(text + used, tail, strlen(tail));
  used += strlen(tail);
  if (used && text[used - 1] == '\n') --used;
  text[used] = '\0';
  return text;
}

void recap__diag_free(recap__diag *diag) {
  if (!diag) return;
  for (size_t i = 0; i < diag->count; ++i) free(diag->messages[i]);
  free(diag->messages);
  diag->messages = NULL;
  diag->count = diag->capacity = diag->dropped = 0;
}

/* The "FILE:LINE:COL:" prefix's length (up to and including the third ':'), or 0. */
static size_t position_length(const char *message) {
  const char *p = strstr(message, ": error: ");
  return p ? (size_t)(p - message) : 0;
}

void recap__diag_merge_new_positions(recap__diag *dst, const recap__diag *src) {
  if (!dst || !src) return;
  size_t existing = dst->count;
  for (size_t i = 0; i < src->count; ++i) {
    const char *m = src->messages[i];
    size_t n = position_length(m);
    bool seen = false;
    for (size_t j = 0; j < existing && n && !seen; ++j)
      seen = position_length(dst->messages[j]) == n && memcmp(dst->messages[j], m, n) == 0;
    if (seen) continue;
    add_text(dst, strdup(m));
  }
  dst->dropped += src->dropped;
}

recap_status recap__diag_report(const recap__diag *diag) {
  /* recap_last_error(): whole lines, as many as fit. */
  char text[LAST_ERROR_BUDGET + 64];
  size_t used = 0, shown = 0;
  text[0] = '\0';
  for (; shown < diag->count; ++shown) {
    size_t n = strlen(diag->messages[shown]);
    if (used + n + 1 > LAST_ERROR_BUDGET && shown > 0) break;
    int w = snprintf(text + used, sizeof text - used, "%s%.*s", shown ? "\n" : "",
                     (int)(LAST_ERROR_BUDGET - used - 1), diag->messages[shown]);
    if (w < 0) break;
    used += (size_t)w < sizeof text - used ? (size_t)w : sizeof text - used - 1;
  }
  size_t rest = diag->count - shown + diag->dropped;
  if (rest) snprintf(text + used, sizeof text - used, "\n(and %zu more errors)", rest);
  recap_status st = recap__fail_plain(RECAP_STATUS_SPEC_ERROR, "%s", text);
  /* recap_last_error_full(): all of them, when they did not fit. */
  if (rest) recap__set_full_error(recap__diag_join(diag));
  return st;
}
