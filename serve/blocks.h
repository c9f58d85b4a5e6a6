/*
 * blocks.h: the KV pool's blocks as the scheduler hands them to sequences (internal).
 *
 * Every layer's K and V pools are [NB, BS, Hkv, Dh]; one block id names the same block in all
 * of them, so one allocator of ids [0, NB) serves the whole model. A sequence's block table
 * lists its blocks in position order: column j holds positions [j x BS, (j + 1) x BS), which
 * is what its row of `seqs` carries from RECAP_SEQ_BLOCKS on.
 *
 *   recap__block_pool pool;
 *   recap__block_table t;
 *   recap__block_pool_init(&pool, 64, 16);      // ids [0, 64), 16 positions each
 *   recap__block_table_init(&t, 8);              // a sequence of at most 8 x 16 positions
 *   if (recap__blocks_cover(&pool, &t, 40))      // positions [0, 40): 3 blocks
 *     ... t.ids[0], t.ids[1], t.ids[2] ...
 *   recap__blocks_release(&pool, &t);            // all back, t.count = 0
 *
 * Nothing here locks: the engine thread alone allocates and frees.
 */
#ifndef RECAP_SERVE_BLOCKS_H
#define RECAP_SERVE_BLOCKS_H

#include <stdbool.h>
#include <stdint.h>

#include "include/recap.h"

typedef struct {
  int32_t *free_ids; /* a stack: the most recently freed block is reused first */
  int64_t num_free, num_blocks, block_size;
  int64_t peak_used; /* the most blocks held at once since init */
} recap__block_pool;

typedef struct {
  int32_t *ids;
  int64_t count, capacity;
} recap__block_table;

/* OUT_OF_MEMORY when the free list cannot be allocated. */
recap_status recap__block_pool_init(recap__block_pool *pool, int64_t num_blocks,
                                    int64_t block_size);
void recap__block_pool_free(recap__block_pool *pool);
recap_status recap__block_table_init(recap__block_table *table, int64_t capacity);
void recap__block_table_free(recap__block_table *table);

/* Blocks that `positions` positions fill. */
int64_t recap__blocks_for(const recap__block_pool *pool, int64_t positions);
/* Grows the table until it covers positions [0, positions). False, taking no block, when the
 * pool has too few free; positions past the table's capacity are a programmer error. */
bool recap__blocks_cover(recap__block_pool *pool, recap__block_table *table, int64_t positions);
/* Gives every block of the table back. */
void recap__blocks_release(recap__block_pool *pool, recap__block_table *table);

#endif
