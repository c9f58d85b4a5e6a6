/*
 * block_map.h: the allocator's map from a block's start address to its block, for the blocks
 * that are allocated (internal).
 *
 * recap_free gets a bare pointer; finding its block is on every free's path, so it must cost
 * O(1) whatever the number of blocks, and nothing on the malloc+free pair may allocate host
 * memory or walk a tree. An open-addressing hash table (linear probing, backward-shift
 * deletion, load factor at most 1/2) of (address, block) pairs does that with one or two
 * cache lines per operation. Only allocated blocks are in it: splitting and merging free
 * blocks never touch it, and a pointer that is not the start of an allocated block (interior,
 * freed, never allocated) is simply absent.
 *
 *   recap__block_map map = {0};
 *   if (recap__block_map_reserve(&map, 1) != RECAP_OK) ...;   // the only call that can fail
 *   recap__block_map_insert(&map, b->addr, b);
 *   recap__block *found = recap__block_map_remove(&map, b->addr);  // b, or NULL if absent
 *   recap__block_map_destroy(&map);
 *
 * Not thread-safe: the allocator's lock guards it.
 */
#ifndef RECAP_ALLOCATOR_BLOCK_MAP_H
#define RECAP_ALLOCATOR_BLOCK_MAP_H

#include <stddef.h>
#include <stdint.h>

#include "include/recap.h"

struct recap__block;

typedef struct {
  uintptr_t key; /* 0: an empty slot (no block starts at address 0) */
  struct recap__block *block;
} recap__block_map_slot;

typedef struct {
  recap__block_map_slot *slots; /* capacity entries, a power of two (or NULL when 0) */
  size_t capacity, count;
  unsigned shift; /* 64 - log2(capacity): a hash's top bits pick the slot */
} recap__block_map;

/* Makes room for `extra` more entries, so the next `extra` inserts cannot fail.
 * RECAP_STATUS_OUT_OF_MEMORY (the map unchanged) when the host has no memory to grow it. */
recap_status recap__block_map_reserve(recap__block_map *map, size_t extra);
/* Adds key -> block; key is not in the map, key != 0, and room was reserved. */
void recap__block_map_insert(recap__block_map *map, uintptr_t key, struct recap__block *block);
/* The block at key, or NULL. */
struct recap__block *recap__block_map_find(const recap__block_map *map, uintptr_t key);
/* Removes key and returns its block, or NULL (nothing changes) when absent. */
struct recap__block *recap__block_map_remove(recap__block_map *map, uintptr_t key);
/* Frees the table (the blocks are not the map's); the map is empty and reusable after. */
void recap__block_map_destroy(recap__block_map *map);

#endif
