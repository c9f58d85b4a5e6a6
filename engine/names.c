/*
 * names.c: open addressing with linear probing, kept at most half full (names.h).
 */
#include "engine/names.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint64_t hash(const char *s) {
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  for (; *s; ++s) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

static size_t find_slot(const recap__names *names, const char *key) {
  size_t mask = names->capacity - 1, i = (size_t)hash(key) & mask;
  while (names->keys[i] && strcmp(names->keys[i], key) != 0) i = (i + 1) & mask;
  return i;
}

static bool grow(recap__names *names) {
  size_t capacity = names->capacity ? names->capacity * 2 : 16;
  recap__names bigger = {.capacity = capacity};
  bigger.keys = calloc(capacity, sizeof *bigger.keys);
  bigger.values = calloc(capacity, sizeof *bigger.values);
  if (!bigger.keys || !bigger.values) {
    free(bigger.keys);
    free(bigger.values);
    return false;
  }
  for (size_t i = 0; i < names->capacity; ++i) {
    if (!names->keys[i]) continue;
    size_t slot = find_slot(&bigger, names->keys[i]);
    bigger.keys[slot] = names->keys[i];
    bigger.values[slot] = names->values[i];
  }
  bigger.count = names->count;
  recap__names_free(names);
  *names = bigger;
  return true;
}

bool recap__names_put(recap__names *names, const char *key, int value, int *previous) {
  *previous = -1;
  if ((names->count + 1) * 2 > names->capacity && !grow(names)) return false;
  size_t slot = find_slot(names, key);
  if (names->keys[slot]) {
    *previous = names->values[slot];
    return true;
  }
  names->keys[slot] = key;
  names->values[slot] = value;
  names->count++;
  return true;
}

int recap__names_get(const recap__names *names, const char *key) {
  if (!names->capacity) return -1;
  size_t slot = find_slot(names, key);
  return names->keys[slot] ? names->values[slot] : -1;
}

void recap__names_free(recap__names *names) {
  free(names->keys);
  free(names->values);
  names->keys = NULL;
  names->values = NULL;
  names->count = names->capacity = 0;
}
