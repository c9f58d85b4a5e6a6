/*
 * blocks.c: the KV block allocator (see blocks.h).
 */
#include "serve/blocks.h"

#include <assert.h>
#include <stdlib.h>

#include "runtime/error.h"

recap_status recap__block_pool_init(recap__block_pool *pool, int64_t num_blocks,
                                    int64_t block_size) {
  assert(num_blocks > 0 && num_blocks <= INT32_MAX && block_size > 0);
  *pool = (recap__block_pool){.num_blocks = num_blocks, .block_size = block_size};
  pool->free_ids = malloc(sizeof *pool->free_ids * (size_t)num_blocks);
  if (!pool->free_ids)
    return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for the free list of %lld KV blocks",
                      (long long)num_blocks);
  /* Stacked in reverse, so a fresh pool hands out 0, 1, 2, ...: easy to read in a dump. */
  for (int64_t i = 0; i < num_blocks; i++) pool->free_ids[i] = (int32_t)(num_blocks - 1 - i);
  pool->num_free = num_blocks;
  return RECAP_OK;
}

void recap__block_pool_free(recap__block_pool *pool) {
  free(pool->free_ids);
  *pool = (recap__block_pool){0};
}

recap_status recap__block_table_init(recap__block_table *table, int64_t capacity) {
  *table = (recap__block_table){.capacity = capacity};
  table->ids = malloc(sizeof *table->ids * (size_t)(capacity > 0 ? capacity : 1));
  if (!table->ids)
    return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for a block table of %lld blocks",
                      (long long)capacity);
  return RECAP_OK;
}

void recap__block_table_free(recap__block_table *table) {
  free(table->ids);
  *table = (recap__block_table){0};
}

int64_t recap__blocks_for(const recap__block_pool *pool, int64_t positions) {
  return (positions + pool->block_size - 1) / pool->block_size;
}

bool recap__blocks_cover(recap__block_pool *pool, recap__block_table *table, int64_t positions) {
  int64_t need = recap__blocks_for(pool, positions);
  assert(need <= table->capacity);
  if (need <= table->count) return true;
  if (need - table->count > pool->num_free) return false;
  while (table->count < need) table->ids[table->count++] = pool->free_ids[--pool->num_free];
  if (pool->num_blocks - pool->num_free > pool->peak_used)
    pool->peak_used = pool->num_blocks - pool->num_free;
  return true;
}

void recap__blocks_release(recap__block_pool *pool, recap__block_table *table) {
  /* Last block first, so a sequence that is admitted again right away gets the same ids. */
  while (table->count > 0) pool->free_ids[pool->num_free++] = table->ids[--table->count];
  assert(pool->num_free <= pool->num_blocks);
}
