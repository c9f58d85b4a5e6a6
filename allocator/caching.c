/*
 * caching.c: the caching allocator's policy over the block store (blocks.c): size classes,
 * streams, split and merge, deferred frees, out-of-memory handling.
 *
 * The design follows PyTorch's CUDA caching allocator (see include/recap.h for the contract).
 * Three rules shape the code:
 * - Anything a capture forbids (raw alloc/free, synchronize, event record and query) runs
 *   between recap__unsafe_enter and recap__unsafe_exit, so no capture can begin in between.
 *   When a capture is under way, such work is skipped and done later: by the capture-end hook,
 *   or by the next call that finds no capture under way.
 * - A blocking synchronize never holds the allocator's lock (the out-of-memory retry drops it).
 * - Stats change only in the few places where a block changes state, so they always equal the
 *   sums over the blocks (the snapshot test checks this after every step).
 */
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "allocator/internal.h"
#include "runtime/capture.h"
#include "runtime/error.h"
#include "runtime/stream_hooks.h"

static bool same_device(recap_device x, recap_device y) {
  return x.backend == y.backend && x.index == y.index;
}

/* ------------------------------------------------------------------------------------------
 * Instances and the capture-end hook
 * ---------------------------------------------------------------------------------------- */

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static recap__allocator *registry_head;

static void process_pending_locked(recap__allocator *a);

/* Runs after the last capture ends: complete the frees that captures held back. */
static void capture_end_hook(void) {
  pthread_mutex_lock(&registry_lock);
  for (recap__allocator *a = registry_head; a; a = a->registry_next) {
    pthread_mutex_lock(&a->lock);
    process_pending_locked(a);
    pthread_mutex_unlock(&a->lock);
  }
  pthread_mutex_unlock(&registry_lock);
}

static recap_status retire_stream(recap_stream *stream);

recap_status recap__allocator_create(const recap__allocator_options *options,
                                     recap__allocator **out) {
  RECAP_CHECK_ARG(options && out && options->raw);
  RECAP_CHECK_ARG(options->raw->alloc && options->raw->free);
  RECAP_TRY(recap__stream_add_release_hook(retire_stream));
  recap__alloc_config config;
  recap__alloc_config_default(&config);
  RECAP_TRY(recap__alloc_config_parse(options->conf, &config));
  /* A setting the raw backend cannot honour is an error, not a silent fallback: a user who
   * asked for expandable segments would otherwise debug fragmentation they turned off. */
  if (config.expandable && !recap__expandable_supported(options->raw))
    return RECAP_FAIL(RECAP_STATUS_NOT_SUPPORTED,
                      "RECAP_ALLOC_CONF: expandable_segments:True, but the %s raw backend has "
                      "no virtual memory API (the CUDA driver's cuMemCreate/cuMemMap are "
                      "missing)",
                      options->raw->name);
  if (config.async && !(options->raw->async_alloc && options->raw->async_free &&
                        options->raw->async_reserved && options->raw->async_trim))
    return RECAP_FAIL(RECAP_STATUS_NOT_SUPPORTED,
                      "RECAP_ALLOC_CONF: backend:cudaMallocAsync, but the %s raw backend has no "
                      "stream-ordered pool",
                      options->raw->name);
  recap__allocator *a = calloc(1, sizeof *a);
  if (!a) return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for an allocator");
  if (pthread_mutex_init(&a->lock, NULL) != 0) {
    free(a);
    return RECAP_FAIL(RECAP_STATUS_INTERNAL, "cannot initialize the allocator's lock");
  }
  a->device = options->device;
  a->raw = *options->raw;
  a->config = config;
  pthread_mutex_lock(&registry_lock);
  a->registry_next = registry_head;
  registry_head = a;
  pthread_mutex_unlock(&registry_lock);
  /* Installed here rather than at load time: the runtime has one hook slot and nothing to
   * run until an allocator exists. */
  recap__capture_set_end_hook(capture_end_hook);
  *out = a;
  return RECAP_OK;
}

static bool release_segment_block(recap__allocator *a, recap__block *b);

recap_status recap__allocator_destroy(recap__allocator *a) {
  if (!a) return RECAP_OK;
  pthread_mutex_lock(&a->lock);
  process_pending_locked(a);
  recap_status st = RECAP_OK;
  int referenced = 0;
  for (recap__pool *p = a->private_pools; p; p = p->next) referenced += p->use_count > 0;
  if (a->stats.active_count[RECAP_STAT_ALL].current > 0) {
    st = RECAP_FAIL(RECAP_STATUS_BUSY,
                    "%" PRId64 " blocks are still allocated or waiting on other streams",
                    a->stats.active_count[RECAP_STAT_ALL].current);
  } else if (a->route_count > 0) {
    st = RECAP_FAIL(RECAP_STATUS_BUSY, "%zu streams are still routed to private pools",
                    a->route_count);
  } else if (referenced > 0) {
    st = RECAP_FAIL(RECAP_STATUS_BUSY, "%d private pools are still referenced", referenced);
  } else if (!recap__unsafe_enter()) {
    st = RECAP_FAIL(RECAP_STATUS_BUSY, "a capture is under way; destroy after it ends");
  }
  if (st != RECAP_OK) {
    pthread_mutex_unlock(&a->lock);
    return st;
  }
  /* Every block is free now, so every segment is one free block. A segment the raw backend
   * refuses to free is reported and forgotten: the allocator is going away either way. */
  while (a->segments) {
    recap__block *b = RECAP__CONTAINER_OF(a->segments, recap__block, by_base);
    if (!release_segment_block(a, b)) {
      st = recap__error_context(RECAP_STATUS_DEVICE_ERROR, "releasing a segment: ");
      recap__free_set_remove(a, b);
      recap__segment_index_remove(a, b);
      free(b->segment);
      recap__block_delete(a, b);
    }
  }
  while (a->spare_blocks) {
    recap__block *b = a->spare_blocks;
    a->spare_blocks = b->link;
    free(b);
  }
  recap__block_map_destroy(&a->live);
  recap__unsafe_exit();
  pthread_mutex_unlock(&a->lock);

  pthread_mutex_lock(&registry_lock);
  for (recap__allocator **link = &registry_head; *link; link = &(*link)->registry_next) {
    if (*link == a) {
      *link = a->registry_next;
      break;
    }
  }
  pthread_mutex_unlock(&registry_lock);
  recap__pools_destroy_all(a);
  for (size_t i = 0; i < a->event_cache_count; i++) recap_event_destroy(a->event_cache[i]);
  free(a->event_cache);
  free(a->pending);
  free(a->routes);
  pthread_mutex_destroy(&a->lock);
  free(a);
  return st;
}

/* ------------------------------------------------------------------------------------------
 * Segments: raw memory
 * ---------------------------------------------------------------------------------------- */

static recap_status raw_alloc(recap__allocator *a, size_t bytes, void **out) {
  if (recap__unsafe_enter()) {
    recap_status st = a->raw.alloc(a->raw.ctx, bytes, out);
    recap__unsafe_exit();
    return st;
  }
  if (!a->raw.exchange_capture_mode) return a->raw.alloc(a->raw.ctx, bytes, out);
  recap_capture_mode mode = RECAP_CAPTURE_MODE_RELAXED;
  RECAP_TRY(a->raw.exchange_capture_mode(a->raw.ctx, &mode));
  recap_status st = a->raw.alloc(a->raw.ctx, bytes, out);
  a->raw.exchange_capture_mode(a->raw.ctx, &mode);
  return st;
}

/* A new segment of `bytes` as one free block that is in no free set yet. */
static recap_status alloc_segment(recap__allocator *a, recap__pool *pool, recap_stream *stream,
                                  bool small, size_t bytes, recap__block **out) {
  int64_t reserved = a->stats.reserved_bytes[RECAP_STAT_ALL].current;
  if (a->fraction_set && (size_t)reserved + bytes > a->allowed_bytes)
    return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY,
                      "the memory fraction %.3f allows %zu bytes and %" PRId64 " are reserved",
                      a->fraction, a->allowed_bytes, reserved);
  recap__segment *seg = calloc(1, sizeof *seg);
  recap__block *b = recap__block_new(a);
  if (!seg || !b) {
    free(seg);
    if (b) recap__block_delete(a, b);
    return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no host memory for a segment record");
  }
  void *ptr = NULL;
  recap_status st = raw_alloc(a, bytes, &ptr);
  if (st != RECAP_OK) {
    free(seg);
    recap__block_delete(a, b);
    return st;
  }
  seg->base = (uintptr_t)ptr;
  seg->size = bytes;
  seg->pool = pool;
  seg->stream = stream;
  seg->small = small;
  b->addr = seg->base;
  b->size = bytes;
  b->segment = seg;
  b->state = RECAP__BLOCK_FREE;
  recap__segment_index_insert(a, b);
  pool->reserved_bytes += bytes;
  pool->segment_count++;
  recap__stat_add(a->stats.reserved_bytes, small, (int64_t)bytes);
  recap__stat_add(a->stats.reserved_count, small, 1);
  a->stats.num_device_alloc++;
  *out = b;
  return RECAP_OK;
}

/* Returns a segment that is one free block (in its free set) to the raw backend. The caller
 * holds the lock and is inside recap__unsafe_enter. A failing raw free keeps the segment
 * cached and returns false. */
static bool release_segment_block(recap__allocator *a, recap__block *b) {
  recap__segment *seg = b->segment;
  if (seg->expandable) return recap__expandable_release(a, b);
  if (a->raw.free(a->raw.ctx, (void *)seg->base) != RECAP_OK) return false;
  recap__free_set_remove(a, b);
  recap__segment_index_remove(a, b);
  recap__pool *pool = seg->pool;
  pool->reserved_bytes -= seg->size;
  pool->segment_count--;
  recap__stat_add(a->stats.reserved_bytes, seg->small, -(int64_t)seg->size);
  recap__stat_add(a->stats.reserved_count, seg->small, -1);
  a->stats.num_device_free++;
  recap__block_delete(a, b);
  free(seg);
  if (pool->id != 0) recap__pool_maybe_destroy(a, pool);
  return true;
}

static bool pool_releasable(const recap__pool *pool) {
  return pool->id == 0 || pool->use_count == 0;
}

/* Collects the unsplit free blocks of one free set through their `link` member. */
static void collect_whole(recap__tnode *node, void *user) {
  recap__block *b = RECAP__CONTAINER_OF(node, recap__block, by_size);
  recap__block **list = user;
  if (!recap__block_is_split(b)) {
    b->link = *list;
    *list = b;
  }
}

static void release_pool_locked(recap__allocator *a, recap__pool *pool) {
  /* Tails first: releasing whole segments may destroy the pool. */
  if (pool->expandable) recap__expandable_trim(a, pool);
  recap__block *list = NULL;
  recap__treap_walk(pool->free_small, collect_whole, &list);
  recap__treap_walk(pool->free_large, collect_whole, &list);
  /* The pool may be destroyed with its last segment; never touch it after the loop. */
  while (list) {
    recap__block *b = list;
    list = b->link;
    release_segment_block(a, b);
  }
}

void recap__release_cached_locked(recap__allocator *a) {
  release_pool_locked(a, &a->default_pool);
  recap__pool *next;
  for (recap__pool *p = a->private_pools; p; p = next) {
    next = p->next;
    if (pool_releasable(p)) release_pool_locked(a, p);
  }
}

/* ------------------------------------------------------------------------------------------
 * Free blocks: returning, merging, events
 * ---------------------------------------------------------------------------------------- */

/* Merges `b` (just freed) with free neighbours and puts the result in its free set; returns
 * the merged block. */
static recap__block *free_block(recap__allocator *a, recap__block *b) {
  bool small = b->segment->small;
  recap__pool *pool = b->segment->pool;
  recap__stat_add(a->stats.active_bytes, small, -(int64_t)b->size);
  recap__stat_add(a->stats.active_count, small, -1);
  pool->active_bytes -= b->size;
  b->state = RECAP__BLOCK_FREE;
  b->use_count = 0;
  recap__block *prev = b->prev;
  if (prev && prev->state == RECAP__BLOCK_FREE) {
    recap__free_set_remove(a, prev);
    prev->size += b->size;
    prev->next = b->next;
    if (b->next) b->next->prev = prev;
    recap__block_delete(a, b);
    b = prev;
  }
  recap__block *next = b->next;
  if (next && next->state == RECAP__BLOCK_FREE) {
    recap__free_set_remove(a, next);
    b->size += next->size;
    b->next = next->next;
    if (next->next) next->next->prev = b;
    recap__block_delete(a, next);
  }
  recap__free_set_insert(a, b);
  if (a->config.uncached && pool->id == 0) a->uncached_release_pending = true;
  return b;
}

/* Inside recap__unsafe_enter: a block free_block returned goes back to the backend when it is
 * the whole of a retired segment (retire_stream). */
static void release_if_retired(recap__allocator *a, recap__block *b) {
  if (b->segment->retired && !recap__block_is_split(b)) release_segment_block(a, b);
}

static recap_status event_take(recap__allocator *a, recap_event **out) {
  if (a->event_cache_count > 0) {
    *out = a->event_cache[--a->event_cache_count];
    return RECAP_OK;
  }
  return recap_event_create(a->device, RECAP_EVENT_DEFAULT, out);
}

static void event_give_back(recap__allocator *a, recap_event *event) {
  if (a->event_cache_count == a->event_cache_capacity) {
    size_t cap = a->event_cache_capacity ? 2 * a->event_cache_capacity : 16;
    recap_event **grown = realloc(a->event_cache, cap * sizeof *grown);
    if (!grown) {
      recap_event_destroy(event);
      return;
    }
    a->event_cache = grown;
    a->event_cache_capacity = cap;
  }
  a->event_cache[a->event_cache_count++] = event;
}

/* Records an event on every stream that used the pending block `b`, so it is reused once they
 * pass this point. Streams whose event could not be recorded stay in b->uses (the block then
 * goes on the deferred list and is tried again). Inside recap__unsafe_enter. */
static recap_status insert_events(recap__allocator *a, recap__block *b) {
  while (b->use_count > 0) {
    recap_stream *stream = b->uses[b->use_count - 1];
    if (a->pending_count == a->pending_capacity) {
      size_t cap = a->pending_capacity ? 2 * a->pending_capacity : 16;
      recap__pending_event *grown = realloc(a->pending, cap * sizeof *grown);
      if (!grown) return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for an event record");
      a->pending = grown;
      a->pending_capacity = cap;
    }
    recap_event *event = NULL;
    RECAP_TRY(event_take(a, &event));
    recap_status st = recap_event_record(event, stream);
    if (st != RECAP_OK) {
      event_give_back(a, event);
      return st;
    }
    a->pending[a->pending_count++] = (recap__pending_event){event, b};
    b->event_count++;
    b->use_count--;
  }
  return RECAP_OK;
}

static void defer_block(recap__allocator *a, recap__block *b) {
  b->link = a->deferred;
  a->deferred = b;
}

/* Inside recap__unsafe_enter: records the events of deferred frees, completes the frees whose
 * events have completed, and returns backend:cudaMalloc frees to the device. */
static void process_pending_unsafe(recap__allocator *a) {
  recap__block *deferred = a->deferred;
  a->deferred = NULL;
  while (deferred) {
    recap__block *b = deferred;
    deferred = b->link;
    if (insert_events(a, b) != RECAP_OK)
      defer_block(a, b);
    else if (b->event_count == 0)
      release_if_retired(a, free_block(a, b));
  }
  size_t kept = 0;
  for (size_t i = 0; i < a->pending_count; i++) {
    recap__pending_event pe = a->pending[i];
    /* An error (a faulted device) is treated as not ready: the block stays held rather than
     * being reused while work may still read it. */
    if (recap_event_query(pe.event) != RECAP_OK) {
      a->pending[kept++] = pe;
      continue;
    }
    event_give_back(a, pe.event);
    if (--pe.block->event_count == 0 && pe.block->use_count == 0)
      release_if_retired(a, free_block(a, pe.block));
  }
  a->pending_count = kept;
  if (a->uncached_release_pending) {
    a->uncached_release_pending = false;
    release_pool_locked(a, &a->default_pool);
  }
}

static void process_pending_locked(recap__allocator *a) {
  if (!a->deferred && a->pending_count == 0 && !a->uncached_release_pending) return;
  if (recap__capture_count() > 0 || !recap__unsafe_enter()) return;
  process_pending_unsafe(a);
  recap__unsafe_exit();
}

/* ------------------------------------------------------------------------------------------
 * malloc
 * ---------------------------------------------------------------------------------------- */

/* Best fit on `stream` in the pool's set for the size class, removed from the set; NULL on a
 * miss. */
static recap__block *take_free_block(recap__allocator *a, recap__pool *pool, bool small,
                                     recap_stream *stream, size_t size) {
  recap__block *b =
      recap__free_set_lower_bound(small ? pool->free_small : pool->free_large, stream, size);
  size_t max_split = a->config.max_split_size;
  /* A retired segment's stream is gone (retire_stream); its address may be this stream's. */
  if (b && (b->segment->stream != stream || b->segment->retired)) b = NULL;
  /* An unsplittable (oversize) block is not handed to a request that could be served from
   * a splittable one, and an oversize request does not take a block much larger than itself:
   * both would waste most of the block. Blocks of expandable segments are always splittable
   * (the split-size limit exists to fight the fragmentation they avoid). */
  bool oversize_rules = b && !b->segment->expandable;
  if (oversize_rules && size < max_split && b->size >= max_split) b = NULL;
  if (oversize_rules && size >= max_split && b->size >= size + RECAP__ALLOC_LARGE_BUFFER) b = NULL;
  if (!b) {
    a->gc_epoch++;
    return NULL;
  }
  recap__free_set_remove(a, b);
  return b;
}

static bool should_split(const recap__allocator *a, const recap__block *b, size_t size) {
  size_t remaining = b->size - size;
  if (b->segment->small) return remaining >= RECAP__ALLOC_MIN_BLOCK;
  if (b->segment->expandable) return remaining > RECAP__ALLOC_SMALL_SIZE;
  return size < a->config.max_split_size && remaining > RECAP__ALLOC_SMALL_SIZE;
}

/* Cuts `b` (free, out of any set) to `size` bytes; the rest becomes a free block. Without host
 * memory for the new block record the block stays whole, which wastes space but is correct. */
static void split_block(recap__allocator *a, recap__block *b, size_t size) {
  recap__block *rest = recap__block_new(a);
  if (!rest) return;
  rest->addr = b->addr + size;
  rest->size = b->size - size;
  rest->segment = b->segment;
  rest->state = RECAP__BLOCK_FREE;
  rest->prev = b;
  rest->next = b->next;
  if (b->next) b->next->prev = rest;
  b->next = rest;
  b->size = size;
  recap__free_set_insert(a, rest);
}

/* PyTorch's garbage collection: once reserved memory passes the threshold of the allowed
 * memory, release the cached segments that have been free longest (at least the average age)
 * until usage is back under the threshold. Inside recap__unsafe_enter. */
static void garbage_collect(recap__allocator *a) {
  size_t target = (size_t)(a->config.gc_threshold * (double)a->allowed_bytes);
  if ((size_t)a->stats.reserved_bytes[RECAP_STAT_ALL].current <= target) return;
  for (;;) {
    recap__block *list = NULL;
    recap__treap_walk(a->default_pool.free_small, collect_whole, &list);
    recap__treap_walk(a->default_pool.free_large, collect_whole, &list);
    for (recap__pool *p = a->private_pools; p; p = p->next) {
      if (!pool_releasable(p)) continue;
      recap__treap_walk(p->free_small, collect_whole, &list);
      recap__treap_walk(p->free_large, collect_whole, &list);
    }
    if (!list) return;
    uint64_t total_age = 0, count = 0;
    for (recap__block *b = list; b; b = b->link, count++) total_age += a->gc_epoch - b->free_epoch;
    uint64_t average = total_age / count;
    bool released = false;
    recap__block *next;
    for (recap__block *b = list; b; b = next) {
      next = b->link;
      if ((size_t)a->stats.reserved_bytes[RECAP_STAT_ALL].current <= target) return;
      if (a->gc_epoch - b->free_epoch >= average) {
        released |= release_segment_block(a, b);
      }
    }
    if (!released) return;
  }
}

static void format_oom(recap__allocator *a, size_t size, const char *cause, bool capturing) {
  char req[32], cap[32], alloc[32], reserved[32], priv[32], freeb[32];
  size_t free_bytes = 0, total_bytes = 0;
  bool have_info = false;
  if (a->raw.mem_get_info && recap__unsafe_enter()) {
    have_info = a->raw.mem_get_info(a->raw.ctx, &free_bytes, &total_bytes) == RECAP_OK;
    recap__unsafe_exit();
  }
  size_t in_private = 0;
  for (recap__pool *p = a->private_pools; p; p = p->next) in_private += p->reserved_bytes;
  recap__format_bytes(req, sizeof req, size);
  recap__format_bytes(cap, sizeof cap, total_bytes);
  recap__format_bytes(alloc, sizeof alloc,
                      (size_t)a->stats.allocated_bytes[RECAP_STAT_ALL].current);
  recap__format_bytes(reserved, sizeof reserved,
                      (size_t)a->stats.reserved_bytes[RECAP_STAT_ALL].current);
  recap__format_bytes(priv, sizeof priv, in_private);
  recap__format_bytes(freeb, sizeof freeb, free_bytes);
  recap__fail_plain(RECAP_STATUS_OUT_OF_MEMORY,
                    "%s:%d out of memory: tried to allocate %s; device capacity %s; %s "
                    "allocated; %s reserved by recap; %s held in private pools; %s free%s%s "
                    "(cause: %s)",
                    recap_backend_name(a->device.backend), a->device.index, req,
                    have_info ? cap : "unknown", alloc, reserved, priv,
                    have_info ? freeb : "unknown",
                    capturing ? "; a capture is under way, so the cache was not flushed and "
                                "the allocation was not retried"
                              : "",
                    a->fraction_set ? "; capped by the memory fraction" : "", cause);
}

recap_status recap__allocator_malloc(recap__allocator *a, size_t size, recap_stream *stream,
                                     void **out) {
  RECAP_CHECK_ARG(a && stream && out);
  if (!same_device(stream->device, a->device))
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "the stream belongs to %s:%d, the allocator to %s:%d",
                      recap_backend_name(stream->device.backend), stream->device.index,
                      recap_backend_name(a->device.backend), a->device.index);
  if (size == 0) {
    *out = NULL;
    return RECAP_OK;
  }
  if (size > SIZE_MAX / 4)
    return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "tried to allocate %zu bytes", size);
  if (a->config.async) return recap__async_malloc(a, size, stream, out);
  pthread_mutex_lock(&a->lock);
  bool retried = false;
  for (;;) {
    /* Room in the live map first: once a block is taken, nothing may fail. Checked on every
     * pass, since the out-of-memory retry drops the lock and other threads may use the room. */
    recap_status room = recap__block_map_reserve(&a->live, 1);
    if (room != RECAP_OK) {
      pthread_mutex_unlock(&a->lock);
      return room;
    }
    process_pending_locked(a);
    recap__pool *pool = recap__route_lookup(a, stream);
    bool uncached = a->config.uncached && pool->id == 0;
    size_t rounded = uncached ? size : recap__alloc_round_size(&a->config, size);
    bool small = rounded <= RECAP__ALLOC_SMALL_SIZE;
    recap__block *b = uncached ? NULL : take_free_block(a, pool, small, stream, rounded);
    if (!b) {
      if (!uncached && a->fraction_set && a->config.gc_threshold > 0 && recap__unsafe_enter()) {
        garbage_collect(a);
        recap__unsafe_exit();
      }
      size_t bytes = uncached ? size : recap__alloc_segment_size(rounded, pool->id != 0);
      recap_status st = !uncached && a->config.expandable
                            ? recap__expandable_grow(a, pool, stream, small, rounded, &b)
                            : alloc_segment(a, pool, stream, small, bytes, &b);
      if (st == RECAP_STATUS_OUT_OF_MEMORY && !retried && recap__capture_count() == 0) {
        /* Wait for the device without the lock (other threads keep allocating from the
         * cache), then release every unused segment and try once more from the start: the
         * route or the free blocks may have changed meanwhile. */
        retried = true;
        a->stats.num_alloc_retries++;
        pthread_mutex_unlock(&a->lock);
        bool synced = false;
        if (a->raw.synchronize && recap__unsafe_enter()) {
          synced = a->raw.synchronize(a->raw.ctx) == RECAP_OK;
          recap__unsafe_exit();
        }
        pthread_mutex_lock(&a->lock);
        if (synced) a->stats.num_sync_all_streams++;
        if (recap__unsafe_enter()) {
          process_pending_unsafe(a);
          recap__release_cached_locked(a);
          recap__unsafe_exit();
        }
        continue;
      }
      if (st != RECAP_OK) {
        if (st == RECAP_STATUS_OUT_OF_MEMORY) {
          a->stats.num_ooms++;
          char cause[512];
          snprintf(cause, sizeof cause, "%s", recap_last_error());
          format_oom(a, size, cause, recap__capture_count() > 0);
        }
        pthread_mutex_unlock(&a->lock);
        return st;
      }
    }
    if (!uncached && should_split(a, b, rounded)) split_block(a, b, rounded);
    b->state = RECAP__BLOCK_ALLOCATED;
    b->requested = size;
    recap__stat_add(a->stats.allocated_bytes, small, (int64_t)b->size);
    recap__stat_add(a->stats.allocated_count, small, 1);
    recap__stat_add(a->stats.active_bytes, small, (int64_t)b->size);
    recap__stat_add(a->stats.active_count, small, 1);
    recap__stat_add(a->stats.requested_bytes, small, (int64_t)size);
    recap__stat_add(a->stats.requested_count, small, 1);
    pool->allocated_bytes += b->size;
    pool->active_bytes += b->size;
    recap__block_map_insert(&a->live, b->addr, b);
    *out = (void *)b->addr;
    pthread_mutex_unlock(&a->lock);
    return RECAP_OK;
  }
}

/* ------------------------------------------------------------------------------------------
 * free, record_stream, empty_cache, memory fraction
 * ---------------------------------------------------------------------------------------- */

/* The allocated block starting at ptr (the live map holds exactly those), or NULL. */
static recap__block *find_allocated(recap__allocator *a, void *ptr) {
  return recap__block_map_find(&a->live, (uintptr_t)ptr);
}

bool recap__allocator_owns(recap__allocator *a, void *ptr) {
  if (a->config.async) return recap__async_owns(a, ptr);
  pthread_mutex_lock(&a->lock);
  bool owns = find_allocated(a, ptr) != NULL;
  pthread_mutex_unlock(&a->lock);
  return owns;
}

recap_status recap__allocator_free(recap__allocator *a, void *ptr) {
  RECAP_CHECK_ARG(a);
  if (!ptr) return RECAP_OK;
  if (a->config.async) return recap__async_free(a, ptr);
  bool owned = false;
  recap_status st = recap__allocator_try_free(a, ptr, &owned);
  if (st == RECAP_OK && !owned)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "%p is not a block allocated by this allocator (or it was freed already)",
                      ptr);
  return st;
}

recap_status recap__allocator_try_free(recap__allocator *a, void *ptr, bool *owned) {
  RECAP_CHECK_ARG(a && ptr && owned);
  *owned = false;
  if (a->config.async) {
    if (!recap__async_owns(a, ptr)) return RECAP_OK;
    *owned = true;
    return recap__async_free(a, ptr);
  }
  pthread_mutex_lock(&a->lock);
  recap__block *b = recap__block_map_remove(&a->live, (uintptr_t)ptr);
  if (!b) {
    pthread_mutex_unlock(&a->lock);
    return RECAP_OK;
  }
  *owned = true;
  bool small = b->segment->small;
  recap__stat_add(a->stats.allocated_bytes, small, -(int64_t)b->size);
  recap__stat_add(a->stats.allocated_count, small, -1);
  recap__stat_add(a->stats.requested_bytes, small, -(int64_t)b->requested);
  recap__stat_add(a->stats.requested_count, small, -1);
  b->segment->pool->allocated_bytes -= b->size;
  b->requested = 0;
  recap_status st = RECAP_OK;
  if (b->use_count > 0) {
    b->state = RECAP__BLOCK_PENDING;
    /* During a capture an event recorded on a capturing stream would become a graph node,
     * and its query would be illegal: wait until no capture is under way. */
    if (recap__capture_count() == 0 && recap__unsafe_enter()) {
      st = insert_events(a, b);
      recap__unsafe_exit();
      if (st != RECAP_OK) defer_block(a, b);
    } else {
      defer_block(a, b);
    }
  } else {
    recap__block *merged = free_block(a, b);
    if (merged->segment->retired && recap__capture_count() == 0 && recap__unsafe_enter()) {
      release_if_retired(a, merged);
      recap__unsafe_exit();
    }
    process_pending_locked(a);
  }
  pthread_mutex_unlock(&a->lock);
  return st;
}

/* Marks the segments of `stream` retired in `a` and collects, through `link`, the first
 * blocks of those that are one free block. */
typedef struct {
  recap_stream *stream;
  recap__block *whole;
  size_t count;
} retire_walk;

static void retire_segment(recap__tnode *node, void *user) {
  recap__block *first = RECAP__CONTAINER_OF(node, recap__block, by_base);
  retire_walk *w = user;
  if (first->segment->stream != w->stream) return;
  first->segment->retired = true;
  if (first->state == RECAP__BLOCK_FREE && !recap__block_is_split(first)) {
    first->link = w->whole;
    w->whole = first;
    w->count++;
  }
}

/* Retires `stream`'s segments in every allocator; with `release`, gives those that are one free
 * block back to the backend (not during a capture). Returns how many such segments it found. */
static size_t retire_segments(recap_stream *stream, bool release) {
  size_t found = 0;
  pthread_mutex_lock(&registry_lock);
  for (recap__allocator *a = registry_head; a; a = a->registry_next) {
    if (a->config.async) continue; /* the driver's pool orders its frees itself */
    pthread_mutex_lock(&a->lock);
    retire_walk w = {stream, NULL, 0};
    recap__treap_walk(a->segments, retire_segment, &w);
    found += w.count;
    if (release && w.whole && recap__capture_count() == 0 && recap__unsafe_enter()) {
      while (w.whole) {
        recap__block *b = w.whole;
        w.whole = b->link;
        release_segment_block(a, b);
      }
      recap__unsafe_exit();
    }
    pthread_mutex_unlock(&a->lock);
  }
  pthread_mutex_unlock(&registry_lock);
  return found;
}

/* The stream release hook (runtime/stream_hooks.h). A segment's blocks are handed out only on
 * the stream that allocated it (PyTorch's rule, whose streams live as long as the process), so
 * without this each pipeline created and destroyed left its streams' cached segments behind for
 * good. The free ones go back to the backend once the stream's work is done (its frees were
 * stream-ordered: the memory may still be in use by it); a stream with none is not waited for
 * (a wrapped caller's stream among them). A stream that cannot be waited for (a faulted device,
 * or a capture under way on any stream) keeps them cached, never reused, for empty_cache or the
 * out-of-memory retry. */
static recap_status retire_stream(recap_stream *stream) {
  if (retire_segments(stream, false) == 0) return RECAP_OK;
  /* Waiting is what a capture forbids (in CUDA's global mode, one on another thread is
   * invalidated by it), so it happens between recap__unsafe_enter and exit, never holding an
   * allocator's lock; during a capture the segments stay cached. */
  if (recap__capture_count() > 0 || !recap__unsafe_enter()) return RECAP_OK;
  const bool drained = recap_stream_synchronize(stream) == RECAP_OK;
  recap__unsafe_exit();
  if (!drained) {
    recap_clear_error();
    return RECAP_OK;
  }
  retire_segments(stream, true);
  return RECAP_OK;
}

recap_status recap__allocator_record_stream(recap__allocator *a, void *ptr, recap_stream *stream) {
  RECAP_CHECK_ARG(a && ptr && stream);
  if (!same_device(stream->device, a->device))
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "the stream belongs to %s:%d, the allocator to %s:%d",
                      recap_backend_name(stream->device.backend), stream->device.index,
                      recap_backend_name(a->device.backend), a->device.index);
  if (a->config.async) return recap__async_record_stream(a, ptr, stream);
  pthread_mutex_lock(&a->lock);
  recap_status st = RECAP_OK;
  /* Usually the block's own pointer (the live map); else an interior one. */
  recap__block *b = find_allocated(a, ptr);
  if (!b) b = recap__find_block(a, (uintptr_t)ptr);
  if (!b || b->state != RECAP__BLOCK_ALLOCATED) {
    st = RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "%p lies in no allocated block", ptr);
    goto done;
  }
  st = recap__uses_add(&b->uses, &b->use_count, &b->use_capacity, b->segment->stream, stream);
done:
  pthread_mutex_unlock(&a->lock);
  return st;
}

recap_status recap__allocator_empty_cache(recap__allocator *a) {
  RECAP_CHECK_ARG(a);
  if (a->config.async) return recap__async_empty_cache(a);
  pthread_mutex_lock(&a->lock);
  if (!recap__unsafe_enter()) {
    pthread_mutex_unlock(&a->lock);
    return RECAP_FAIL(RECAP_STATUS_ILLEGAL_DURING_CAPTURE,
                      "empty_cache while a capture is under way (releasing memory would "
                      "invalidate it); call it after the capture ends");
  }
  process_pending_unsafe(a);
  recap__release_cached_locked(a);
  recap__unsafe_exit();
  pthread_mutex_unlock(&a->lock);
  return RECAP_OK;
}

recap_status recap__allocator_set_memory_fraction(recap__allocator *a, double fraction) {
  RECAP_CHECK_ARG(a);
  if (!(fraction > 0.0 && fraction <= 1.0))
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "memory fraction %g is not in (0, 1]",
                      fraction);
  if (a->config.async)
    return RECAP_FAIL(RECAP_STATUS_NOT_SUPPORTED,
                      "backend:cudaMallocAsync has no memory fraction (the driver's pool grows "
                      "as it needs)");
  if (!a->raw.mem_get_info)
    return RECAP_FAIL(RECAP_STATUS_NOT_SUPPORTED,
                      "the %s raw backend cannot report the device's capacity", a->raw.name);
  size_t free_bytes = 0, total_bytes = 0;
  RECAP_TRY(a->raw.mem_get_info(a->raw.ctx, &free_bytes, &total_bytes));
  pthread_mutex_lock(&a->lock);
  a->fraction_set = true;
  a->fraction = fraction;
  a->allowed_bytes = (size_t)(fraction * (double)total_bytes);
  pthread_mutex_unlock(&a->lock);
  return RECAP_OK;
}

/* ------------------------------------------------------------------------------------------
 * IPC
 * ---------------------------------------------------------------------------------------- */

recap_status recap__allocator_ipc_handle(recap__allocator *a, void *ptr, recap_ipc_mem_handle *out,
                                         size_t *offset) {
  RECAP_CHECK_ARG(a && ptr && out && offset);
  if (a->config.async)
    return RECAP_FAIL(RECAP_STATUS_NOT_SUPPORTED,
                      "IPC of memory from backend:cudaMallocAsync is not supported (the "
                      "device's default pool is not exportable); use backend:caching for "
                      "memory shared with other processes");
  pthread_mutex_lock(&a->lock);
  recap_status st = RECAP_OK;
  recap__block *b = recap__find_block(a, (uintptr_t)ptr);
  if (!b || b->state != RECAP__BLOCK_ALLOCATED) {
    st = RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "%p lies in no allocated block", ptr);
  } else if (b->segment->expandable) {
    /* cudaIpcGetMemHandle works on cudaMalloc allocations only; a mapped chunk would need a
     * shareable handle type per chunk and a matching importer, which recap does not have. */
    st = RECAP_FAIL(RECAP_STATUS_NOT_SUPPORTED,
                    "%p lies in an expandable segment: memory mapped with cuMemMap cannot be "
                    "shared through CUDA IPC; allocate memory to share with "
                    "expandable_segments:False",
                    ptr);
  } else if (!a->raw.ipc_handle) {
    st = RECAP_FAIL(RECAP_STATUS_NOT_SUPPORTED, "the %s raw backend has no IPC", a->raw.name);
  } else {
    st = a->raw.ipc_handle(a->raw.ctx, (void *)b->segment->base, out);
    if (st == RECAP_OK) *offset = (uintptr_t)ptr - b->segment->base;
  }
  pthread_mutex_unlock(&a->lock);
  return st;
}
