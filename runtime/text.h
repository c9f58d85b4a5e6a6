/*
 * text.h: a growable string appended to printf-style (internal). The plan and fusion
 * summaries, the generated CUDA source of fused kernels and the specs bench-capture generates
 * are all built this way.
 *
 *   recap__text t = {0};
 *   recap__text_put(&t, "%d ops\n", n);
 *   ...
 *   if (t.failed) { free(t.data); return OUT_OF_MEMORY; }   // else t.data is the string
 *
 * Ownership: t.data is malloc'd (NULL until something was appended); the caller frees it.
 */
#ifndef RECAP_RUNTIME_TEXT_H
#define RECAP_RUNTIME_TEXT_H

#include <stdbool.h>
#include <stddef.h>

#include "runtime/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  char *data;
  size_t len, cap; /* data[len] is the terminating NUL */
  bool failed;     /* an append ran out of memory (or fmt failed); later ones do nothing */
} recap__text;

/* Appends; returns !t->failed. */
bool recap__text_put(recap__text *t, const char *fmt, ...) RECAP__PRINTF(2, 3);

#ifdef __cplusplus
}
#endif

#endif
