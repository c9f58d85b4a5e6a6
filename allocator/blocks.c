/*
 * blocks.c: the block store every allocator backend shares (internal.h): block records, the
 * free sets and the segment index with their orderings, the list of other streams a block was
 * used on, and raw calls made under the relaxed capture mode. The caching policy (caching.c),
 * expandable segments (expandable.c) and backend:cudaMallocAsync (async.c) sit above it and
 * no longer call each other for these.
 */
#include <stdlib.h>
#include <string.h>

#include "allocator/internal.h"
#include "runtime/capture.h"
#include "runtime/error.h"

/* ------------------------------------------------------------------------------------------
 * Ordering of the two block indexes
 * ---------------------------------------------------------------------------------------- */

static int cmp_by_size(const recap__tnode *x, const recap__tnode *y) {
  const recap__block *a = RECAP__CONTAINER_OF(x, recap__block, by_size);
  const recap__block *b = RECAP__CONTAINER_OF(y, recap__block, by_size);
  if (a->segment->stream != b->segment->stream)
    return (uintptr_t)a->segment->stream < (uintptr_t)b->segment->stream ? -1 : 1;
  if (a->size != b->size) return a->size < b->size ? -1 : 1;
  if (a->addr != b->addr) return a->addr < b->addr ? -1 : 1;
  return 0;
}

static int cmp_by_base(const recap__tnode *x, const recap__tnode *y) {
  const recap__block *a = RECAP__CONTAINER_OF(x, recap__block, by_base);
  const recap__block *b = RECAP__CONTAINER_OF(y, recap__block, by_base);
  if (a->addr != b->addr) return a->addr < b->addr ? -1 : 1;
  return 0;
}

static recap__tnode **free_set(recap__block *b) {
  recap__pool *pool = b->segment->pool;
  return b->segment->small ? &pool->free_small : &pool->free_large;
}

bool recap__block_is_split(const recap__block *b) {
  return b->prev || b->next;
}

void recap__free_set_insert(recap__allocator *a, recap__block *b) {
  recap__treap_insert(free_set(b), &b->by_size, cmp_by_size);
  b->free_epoch = a->gc_epoch;
  if (recap__block_is_split(b)) {
    recap__stat_add(a->stats.inactive_split_bytes, b->segment->small, (int64_t)b->size);
    recap__stat_add(a->stats.inactive_split_count, b->segment->small, 1);
  }
}

/* A free block's split status cannot change while it is in the set: its neighbours are
 * allocated or pending (free neighbours are always merged), and those never split or vanish
 * without first merging with it. So removal undoes exactly what insertion counted. */
void recap__free_set_remove(recap__allocator *a, recap__block *b) {
  recap__treap_remove(free_set(b), &b->by_size, cmp_by_size);
  if (recap__block_is_split(b)) {
    recap__stat_add(a->stats.inactive_split_bytes, b->segment->small, -(int64_t)b->size);
    recap__stat_add(a->stats.inactive_split_count, b->segment->small, -1);
  }
}

recap__block *recap__free_set_lower_bound(recap__tnode *set, recap_stream *stream, size_t size) {
  recap__segment key_segment = {.stream = stream};
  recap__block key = {.segment = &key_segment, .size = size, .addr = 0};
  recap__tnode *n = recap__treap_lower_bound(set, &key.by_size, cmp_by_size);
  return n ? RECAP__CONTAINER_OF(n, recap__block, by_size) : NULL;
}

void recap__segment_index_insert(recap__allocator *a, recap__block *first) {
  recap__treap_insert(&a->segments, &first->by_base, cmp_by_base);
}

void recap__segment_index_remove(recap__allocator *a, recap__block *first) {
  recap__treap_remove(&a->segments, &first->by_base, cmp_by_base);
}

/* The block whose range contains ptr, or NULL: the last segment starting at or below ptr,
 * then its blocks in order. */
recap__block *recap__find_block(recap__allocator *a, uintptr_t ptr) {
  recap__block key;
  key.addr = ptr;
  recap__tnode *n = recap__treap_floor(a->segments, &key.by_base, cmp_by_base);
  if (!n) return NULL;
  recap__block *b = RECAP__CONTAINER_OF(n, recap__block, by_base);
  if (ptr >= b->segment->base + b->segment->size) return NULL;
  while (b && ptr >= b->addr + b->size) b = b->next;
  return b;
}

/* ------------------------------------------------------------------------------------------
 * Block records
 *
 * A cached malloc+free pair usually splits a block and merges it back: recycling the record
 * keeps calloc and free (and their locks) off that path.
 * ---------------------------------------------------------------------------------------- */

recap__block *recap__block_new(recap__allocator *a) {
  recap__block *b = a->spare_blocks;
  if (!b) return calloc(1, sizeof *b);
  a->spare_blocks = b->link;
  a->spare_count--;
  memset(b, 0, sizeof *b);
  return b;
}

void recap__block_delete(recap__allocator *a, recap__block *b) {
  free(b->uses);
  if (a->spare_count == RECAP__SPARE_BLOCKS) {
    free(b);
    return;
  }
  b->uses = NULL;
  b->link = a->spare_blocks;
  a->spare_blocks = b;
  a->spare_count++;
}

/* ------------------------------------------------------------------------------------------
 * Stream uses and raw calls
 * ---------------------------------------------------------------------------------------- */

recap_status recap__uses_add(recap_stream ***uses, int *count, int *capacity,
                             const recap_stream *owner, recap_stream *stream) {
  if (stream == owner) return RECAP_OK;
  for (int i = 0; i < *count; i++)
    if ((*uses)[i] == stream) return RECAP_OK;
  if (*count == *capacity) {
    int cap = *capacity ? 2 * *capacity : 2;
    recap_stream **grown = realloc(*uses, (size_t)cap * sizeof *grown);
    if (!grown) return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory to record a stream use");
    *uses = grown;
    *capacity = cap;
  }
  (*uses)[(*count)++] = stream;
  return RECAP_OK;
}

/* Reserves raw memory. During a capture the raw backend is called under the relaxed capture
 * mode, as PyTorch does: cudaMalloc is then legal, and the pool can grow inside a capture. */
recap_status recap__raw_call_relaxed(recap__allocator *a,
                                     recap_status (*fn)(recap__allocator *a, void *arg),
                                     void *arg) {
  if (recap__unsafe_enter()) {
    recap_status st = fn(a, arg);
    recap__unsafe_exit();
    return st;
  }
  if (!a->raw.exchange_capture_mode) return fn(a, arg);
  recap_capture_mode mode = RECAP_CAPTURE_MODE_RELAXED;
  RECAP_TRY(a->raw.exchange_capture_mode(a->raw.ctx, &mode));
  recap_status st = fn(a, arg);
  a->raw.exchange_capture_mode(a->raw.ctx, &mode);
  return st;
}
