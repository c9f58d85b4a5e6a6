/*
 * names.h: a string -> index hash table (internal to the engine).
 *
 * Specs may declare up to 100,000 tensors; resolving names by linear search would make
 * loading quadratic. Keys are borrowed (the caller keeps them alive); the table owns only
 * its slots.
 *
 *   recap__names names = {0};
 *   if (!recap__names_put(&names, "x", 3, &previous)) ... out of memory ...
 *   int i = recap__names_get(&names, "x");           // 3, or -1
 *   recap__names_free(&names);
 */
#ifndef RECAP_ENGINE_NAMES_H
#define RECAP_ENGINE_NAMES_H

#include <stdbool.h>
#include <stddef.h>

typedef struct {
  const char **keys;
  int *values;
  size_t count, capacity; /* capacity: a power of two, or 0 */
} recap__names;

/* Maps key to value. If the key is present, its value is kept and *previous receives it
 * (else *previous = -1). False on allocation failure. */
bool recap__names_put(recap__names *names, const char *key, int value, int *previous);
/* The key's value, or -1. */
int recap__names_get(const recap__names *names, const char *key);
void recap__names_free(recap__names *names);

#endif
