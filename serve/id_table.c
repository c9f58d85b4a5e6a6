/*
 * id_table.c: the id -> record table (see id_table.h).
 */
#include "serve/id_table.h"

#include <assert.h>
#include <stdbool.h>
#include <stdlib.h>

#include "runtime/error.h"

/* Fibonacci hashing: consecutive ids spread over the table. */
static size_t home(const recap__id_table *t, uint64_t id) {
  return (size_t)(id * 0x9E3779B97F4A7C15ull) & (t->capacity - 1);
}

static void place(recap__id_table *t, uint64_t id, void *value) {
  size_t i = home(t, id);
  while (t->ids[i] != 0) i = (i + 1) & (t->capacity - 1);
  t->ids[i] = id;
  t->values[i] = value;
  t->count++;
}

static recap_status grow(recap__id_table *t) {
  size_t capacity = t->capacity ? t->capacity * 2 : 64;
  recap__id_table bigger = {.ids = calloc(capacity, sizeof *bigger.ids),
                            .values = calloc(capacity, sizeof *bigger.values),
                            .capacity = capacity};
  if (!bigger.ids || !bigger.values) {
    recap__id_table_free(&bigger);
    return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for %zu request ids", capacity);
  }
  for (size_t i = 0; i < t->capacity; i++)
    if (t->ids[i] != 0) place(&bigger, t->ids[i], t->values[i]);
  recap__id_table_free(t);
  *t = bigger;
  return RECAP_OK;
}

recap_status recap__id_table_put(recap__id_table *t, uint64_t id, void *value) {
  assert(id != 0 && !recap__id_table_get(t, id));
  /* At most half full, so probes stay short. */
  if (2 * (t->count + 1) > t->capacity) RECAP_TRY(grow(t));
  place(t, id, value);
  return RECAP_OK;
}

void *recap__id_table_get(const recap__id_table *t, uint64_t id) {
  if (t->capacity == 0 || id == 0) return NULL;
  for (size_t i = home(t, id); t->ids[i] != 0; i = (i + 1) & (t->capacity - 1))
    if (t->ids[i] == id) return t->values[i];
  return NULL;
}

void recap__id_table_delete(recap__id_table *t, uint64_t id) {
  if (t->capacity == 0 || id == 0) return;
  const size_t mask = t->capacity - 1;
  size_t i = home(t, id);
  while (t->ids[i] != id) {
    if (t->ids[i] == 0) return;
    i = (i + 1) & mask;
  }
  /* Backward-shift deletion: entries after the hole move into it when their home does not lie
   * between the hole and them, so lookups never need tombstones. */
  for (size_t j = (i + 1) & mask; t->ids[j] != 0; j = (j + 1) & mask) {
    size_t h = home(t, t->ids[j]);
    bool stays = i <= j ? (i < h && h <= j) : (i < h || h <= j);
    if (stays) continue;
    t->ids[i] = t->ids[j];
    t->values[i] = t->values[j];
    i = j;
  }
  t->ids[i] = 0;
  t->values[i] = NULL;
  t->count--;
}

void recap__id_table_free(recap__id_table *t) {
  free(t->ids);
  free(t->values);
  *t = (recap__id_table){0};
}
