/* block_map.c: the address -> allocated block hash table (see block_map.h). */
#include "allocator/block_map.h"

#include <stdbool.h>
#include <stdlib.h>

#include "runtime/error.h"

enum { MIN_CAPACITY = 64 };

/* Fibonacci hashing: block addresses are multiples of 512 from a few segment bases, so their
 * low bits carry nothing; the multiply moves every bit of the address into the top bits,
 * which pick the slot. */
static size_t home_of(const recap__block_map *map, uintptr_t key) {
  return (size_t)(((uint64_t)key * 0x9e3779b97f4a7c15ull) >> map->shift);
}

/* The slot holding key, or the empty slot where it would go. */
static size_t probe(const recap__block_map *map, uintptr_t key) {
  size_t mask = map->capacity - 1;
  size_t i = home_of(map, key);
  while (map->slots[i].key != 0 && map->slots[i].key != key) i = (i + 1) & mask;
  return i;
}

recap_status recap__block_map_reserve(recap__block_map *map, size_t extra) {
  size_t need = map->count + extra;
  if (need <= map->capacity / 2) return RECAP_OK;
  size_t capacity = MIN_CAPACITY;
  unsigned shift = 64 - 6; /* log2(MIN_CAPACITY) == 6 */
  while (need > capacity / 2) {
    if (capacity > SIZE_MAX / 2 / sizeof(recap__block_map_slot))
      return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "the block map cannot hold %zu blocks", need);
    capacity *= 2;
    shift--;
  }
  recap__block_map_slot *slots = calloc(capacity, sizeof *slots);
  if (!slots)
    return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no host memory for a block map of %zu slots",
                      capacity);
  recap__block_map old = *map;
  map->slots = slots;
  map->capacity = capacity;
  map->shift = shift;
  for (size_t i = 0; i < old.capacity; i++)
    if (old.slots[i].key != 0) map->slots[probe(map, old.slots[i].key)] = old.slots[i];
  free(old.slots);
  return RECAP_OK;
}

void recap__block_map_insert(recap__block_map *map, uintptr_t key, struct recap__block *block) {
  size_t i = probe(map, key);
  map->slots[i] = (recap__block_map_slot){key, block};
  map->count++;
}

struct recap__block *recap__block_map_find(const recap__block_map *map, uintptr_t key) {
  if (map->count == 0 || key == 0) return NULL;
  return map->slots[probe(map, key)].block;
}

struct recap__block *recap__block_map_remove(recap__block_map *map, uintptr_t key) {
  if (map->count == 0 || key == 0) return NULL;
  size_t mask = map->capacity - 1;
  size_t hole = probe(map, key);
  struct recap__block *found = map->slots[hole].block;
  if (!found) return NULL;
  /* Backward shift: pull later entries of the probe run into the hole when the hole lies on
   * their way from their home slot, so every entry stays reachable without tombstones. */
  for (size_t j = (hole + 1) & mask; map->slots[j].key != 0; j = (j + 1) & mask) {
    size_t home = home_of(map, map->slots[j].key);
    bool on_the_way = hole <= j ? (home <= hole || home > j) : (home <= hole && home > j);
    if (on_the_way) {
      map->slots[hole] = map->slots[j];
      hole = j;
    }
  }
  map->slots[hole] = (recap__block_map_slot){0, NULL};
  map->count--;
  return found;
}

void recap__block_map_destroy(recap__block_map *map) {
  free(map->slots);
  *map = (recap__block_map){0};
}
