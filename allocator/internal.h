/*
 * internal.h: the allocator's data structures, shared by its .c files only.
 *
 * An allocator holds segments (raw allocations) cut into blocks. The blocks of a segment form
 * an address-ordered doubly linked list (prev/next), so freeing a block merges it with free
 * neighbours in O(1). Each segment's first block is in the allocator's segment index, ordered
 * by address (interior pointers, the snapshot's walk); an allocated block is in the live map,
 * a hash by start address (recap_free's lookup, O(1)); and a free block is in its pool's free
 * set for its size class, ordered by (stream, size, address) so the best fit on a stream is
 * one lower_bound. Splitting and merging blocks touches only the free sets: the cached
 * malloc+free pair costs two hash operations and a few operations on a small free set, and
 * allocates no host memory (block records are recycled).
 *
 * A pool is the default pool (id 0) or a private pool. Every segment belongs to one pool and
 * one stream for its whole life.
 *
 * Everything here is guarded by recap__allocator.lock.
 */
#ifndef RECAP_ALLOCATOR_INTERNAL_H
#define RECAP_ALLOCATOR_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "allocator/allocator.h"
#include "allocator/block_map.h"
#include "allocator/treap.h"

#define RECAP__CONTAINER_OF(ptr, type, member) \
  ((type *)(void *)((char *)(ptr)-offsetof(type, member)))

typedef struct recap__pool recap__pool;

typedef enum {
  RECAP__BLOCK_FREE = 0,  /* in its pool's free set */
  RECAP__BLOCK_ALLOCATED, /* handed out by malloc */
  RECAP__BLOCK_PENDING,   /* freed, but waiting for other streams (events or a capture) */
} recap__block_state;

typedef struct recap__segment {
  uintptr_t base;
  size_t size; /* bytes its blocks tile; for an expandable segment, the mapped prefix */
  recap__pool *pool;
  recap_stream *stream;
  bool small;
  /* Its stream was destroyed (recap_stream_destroy): its blocks are never handed out again
   * (a new stream may be given the dead one's address), and it goes back to the backend as
   * soon as it is one free block. */
  bool retired;
  /* Expandable segments (expandable.c): `va_size` bytes of address space from `base`, of
   * which the first `size` are mapped, one vmm_map call per `chunk` bytes. */
  bool expandable;
  size_t va_size, chunk;
  struct recap__segment *next_expandable; /* the pool's list of expandable segments */
} recap__segment;

typedef struct recap__block {
  recap__tnode by_size; /* in the pool's free set while FREE */
  recap__tnode by_base; /* in the allocator's segment index while first in its segment */
  uintptr_t addr;
  size_t size;
  size_t requested; /* the unrounded size asked for; 0 unless ALLOCATED */
  recap__segment *segment;
  struct recap__block *prev, *next; /* neighbours within the segment */
  recap__block_state state;
  /* Streams other than the segment's that used the block (recap_record_stream). */
  recap_stream **uses;
  int use_count, use_capacity;
  int event_count;     /* events recorded at free time, not yet complete */
  uint64_t free_epoch; /* the allocator's gc_epoch when the block last became free */
  /* The deferred list while PENDING; scratch while FREE; the spare list once deleted. */
  struct recap__block *link;
} recap__block;

struct recap__pool {
  uint64_t id; /* 0: the default pool */
  recap__tnode *free_small, *free_large;
  int use_count; /* handles and routes; unused for the default pool */
  size_t reserved_bytes, allocated_bytes, active_bytes, segment_count;
  recap__segment *expandable; /* its expandable segments, any stream and size class */
  recap__pool *next;          /* the allocator's list of private pools */
};

typedef struct {
  recap_stream *stream; /* whose allocations are routed */
  recap_stream *origin; /* the stream route_begin was called on (== stream for it) */
  recap__pool *pool;
} recap__route;

typedef struct {
  recap_event *event;
  recap__block *block;
} recap__pending_event;

struct recap__allocator {
  pthread_mutex_t lock;
  recap_device device;
  recap__raw_backend raw;
  recap__alloc_config config;

  recap__tnode *segments; /* first blocks of segments, by address (by_base) */
  recap__block_map live;  /* allocated blocks by start address */
  /* Deleted block records kept for the next split (recap__block_new), at most
   * RECAP__SPARE_BLOCKS of them: a malloc+free pair splits and merges one block. */
  recap__block *spare_blocks;
  size_t spare_count;
  recap__pool default_pool;
  recap__pool *private_pools;

  recap__route *routes;
  size_t route_count, route_capacity;

  /* Freed blocks with stream uses whose events could not be recorded yet (a capture was
   * under way): their events are recorded once no capture is. */
  recap__block *deferred;
  recap__pending_event *pending;
  size_t pending_count, pending_capacity;
  recap_event **event_cache; /* completed events kept for reuse */
  size_t event_cache_count, event_cache_capacity;
  /* backend:cudaMalloc frees that could not go back to the device during a capture. */
  bool uncached_release_pending;

  bool fraction_set;
  double fraction;
  size_t allowed_bytes;
  uint64_t gc_epoch; /* counts cache misses; a free block's age is measured in them */

  recap_memory_stats stats;
  struct recap__allocator *registry_next; /* instances the capture-end hook visits */

  /* backend:cudaMallocAsync (async.c): live allocations by address (its stats count them as
   * allocated and active blocks, so destroy refuses while any is live). */
  recap__tnode *async_live;
};

enum { RECAP__SPARE_BLOCKS = 64 };

/* ---- caching.c ---- */
/* Releases every free, unsplit segment of the default pool and of unreferenced private pools.
 * The caller holds the lock and is inside recap__unsafe_enter. */
void recap__release_cached_locked(recap__allocator *a);

/* The block whose range contains ptr, or NULL: the segment index finds the segment, then its
 * block list is walked (O(blocks in the segment); recap_free's exact lookup uses the live
 * map instead). */
recap__block *recap__find_block(recap__allocator *a, uintptr_t ptr);
/* Free-set membership, with the inactive-split stats the free set keeps. */
void recap__free_set_insert(recap__allocator *a, recap__block *b);
void recap__free_set_remove(recap__allocator *a, recap__block *b);
/* Segment-index membership of a segment's first block (when the segment is made and
 * released: the first block of a segment never changes, merges absorb the blocks after it). */
void recap__segment_index_insert(recap__allocator *a, recap__block *first);
void recap__segment_index_remove(recap__allocator *a, recap__block *first);
/* Whether b is one part of a split segment (it has a neighbour block). */
bool recap__block_is_split(const recap__block *b);
/* The first block of the free set `set` on `stream` whose size is at least `size` (ordered by
 * stream, size, address), or NULL; the caller checks the block's stream. */
recap__block *recap__free_set_lower_bound(recap__tnode *set, recap_stream *stream, size_t size);
/* A zeroed block record (a recycled one when there is any), or NULL without host memory. */
recap__block *recap__block_new(recap__allocator *a);
/* Adds `stream` to a block's other-stream uses (recap_record_stream) unless it is `owner` or
 * already there, growing the array; OUT_OF_MEMORY leaves it as it was. Both the caching and
 * the cudaMallocAsync allocator keep their uses this way. */
recap_status recap__uses_add(recap_stream ***uses, int *count, int *capacity,
                             const recap_stream *owner, recap_stream *stream);
/* Deletes a block record that is in no set or map (keeps it for reuse, or frees it). */
void recap__block_delete(recap__allocator *a, recap__block *b);
/* Calls a raw backend function that a capture forbids: directly when no capture is under way,
 * else under the relaxed capture mode (how pools grow inside a capture). */
recap_status recap__raw_call_relaxed(recap__allocator *a,
                                     recap_status (*fn)(recap__allocator *a, void *arg), void *arg);

/* ---- expandable.c ---- */
/* Whether the raw backend offers the virtual memory expandable segments need. */
bool recap__expandable_supported(const recap__raw_backend *raw);
/* A free block of at least `rounded` bytes at the end of an expandable segment of
 * (pool, stream, size class), mapping chunks as needed (or a new segment); the block is in no
 * free set. RECAP_STATUS_OUT_OF_MEMORY when mapping fails (nothing stays mapped then). */
recap_status recap__expandable_grow(recap__allocator *a, recap__pool *pool, recap_stream *stream,
                                    bool small, size_t rounded, recap__block **out);
/* Unmaps the whole chunks of free segment tails in `pool` (a releasable pool). Waits for the
 * device first: unlike cudaFree, unmapping does not wait for queued work. Inside
 * recap__unsafe_enter. */
void recap__expandable_trim(recap__allocator *a, recap__pool *pool);
/* Returns an expandable segment that is one free block (in its free set) to the device: unmap
 * every chunk, release the address space. false (and the segment keeps what could not be
 * unmapped) when the backend refuses. Inside recap__unsafe_enter. */
bool recap__expandable_release(recap__allocator *a, recap__block *b);

/* ---- async.c ---- */
recap_status recap__async_malloc(recap__allocator *a, size_t size, recap_stream *stream,
                                 void **out);
recap_status recap__async_free(recap__allocator *a, void *ptr);
bool recap__async_owns(recap__allocator *a, void *ptr);
recap_status recap__async_record_stream(recap__allocator *a, void *ptr, recap_stream *stream);
recap_status recap__async_empty_cache(recap__allocator *a);

/* ---- pool.c ---- */
/* The pool that allocations on `stream` come from (the default pool when not routed). */
recap__pool *recap__route_lookup(recap__allocator *a, const recap_stream *stream);
/* Frees a private pool that has neither references nor segments. */
void recap__pool_maybe_destroy(recap__allocator *a, recap__pool *pool);
/* Frees every private pool (allocator destruction; segments already released). */
void recap__pools_destroy_all(recap__allocator *a);

/* ---- stats ---- */
static inline void recap__stat_update(recap_memory_stat *s, int64_t delta) {
  s->current += delta;
  if (delta > 0) {
    s->allocated += delta;
    if (s->current > s->peak) s->peak = s->current;
  } else {
    s->freed -= delta;
  }
}

/* Adds delta to the ALL entry and to the SMALL or LARGE entry of one stat array. Inline:
 * malloc and free each update six of these under the lock they already hold. */
static inline void recap__stat_add(recap_memory_stat stat[RECAP_STAT_TYPE_COUNT], bool small,
                                   int64_t delta) {
  recap__stat_update(&stat[RECAP_STAT_ALL], delta);
  recap__stat_update(&stat[small ? RECAP_STAT_SMALL : RECAP_STAT_LARGE], delta);
}

/* ---- stats.c ---- */
void recap__stats_reset_peak(recap_memory_stats *stats);
/* "1.50 MiB" into buf. */
void recap__format_bytes(char *buf, size_t capacity, size_t bytes);

#endif
