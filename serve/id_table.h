/*
 * id_table.h: request ids to the generator's records, an open-addressing hash table with
 * linear probing (internal). Ids are nonzero; the table never holds two entries of one id.
 *
 *   recap__id_table t = {0};
 *   recap__id_table_put(&t, 7, request);          // OUT_OF_MEMORY when it cannot grow
 *   recap__request *r = recap__id_table_get(&t, 7);
 *   recap__id_table_delete(&t, 7);
 *   recap__id_table_free(&t);
 *
 * A long-running generator sees ids grow without bound while few are alive, so a table keyed
 * by hash (not an array indexed by id) keeps memory in proportion to the live requests.
 */
#ifndef RECAP_SERVE_ID_TABLE_H
#define RECAP_SERVE_ID_TABLE_H

#include <stddef.h>
#include <stdint.h>

#include "include/recap.h"

typedef struct {
  uint64_t *ids; /* 0: empty slot */
  void **values;
  size_t count, capacity; /* capacity: zero or a power of two */
} recap__id_table;

recap_status recap__id_table_put(recap__id_table *t, uint64_t id, void *value);
/* NULL for an id not in the table. */
void *recap__id_table_get(const recap__id_table *t, uint64_t id);
/* Removes the id if present. */
void recap__id_table_delete(recap__id_table *t, uint64_t id);
void recap__id_table_free(recap__id_table *t);

#endif
