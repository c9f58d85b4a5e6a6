/*
 * async.c: backend:cudaMallocAsync, the allocator over the driver's stream-ordered pool
 * (cudaMallocAsync / cudaFreeAsync; PyTorch's backend:cudaMallocAsync).
 *
 * The driver caches and reuses memory itself, in stream order, so this layer only remembers
 * each live allocation (its size and stream, for stats and for recap_free, which gets no
 * stream) and turns recap_record_stream into stream order: a free of a block used on other
 * streams first makes the block's stream wait for them (an event per stream), so the driver
 * reuses the memory only after that work.
 *
 * What it does not give, and says so with RECAP_STATUS_NOT_SUPPORTED rather than wrong
 * numbers: blocks and segments (snapshot, summary, the full stats with splitting and
 * inactive counts), private pools (pool and route calls, hence recap_graph captures and the
 * engine's graph mode), allocations or frees on a stream that is capturing, memory IPC, the
 * memory fraction. What it gives: malloc, free, record_stream, empty_cache (trims the pool),
 * allocated bytes (current and peak: the sizes requested) and reserved bytes (the pool's
 * own counters), via recap_memory_allocated/reserved and their max_ forms.
 */
#include <stdlib.h>

#include "allocator/internal.h"
#include "runtime/capture.h"
#include "runtime/error.h"

typedef struct {
  recap__tnode node;
  uintptr_t addr;
  size_t size;
  recap_stream *stream;
  recap_stream **uses;
  int use_count, use_capacity;
} live_block;

static int cmp_addr(const recap__tnode *x, const recap__tnode *y) {
  const live_block *a = RECAP__CONTAINER_OF(x, live_block, node);
  const live_block *b = RECAP__CONTAINER_OF(y, live_block, node);
  return a->addr < b->addr ? -1 : a->addr > b->addr;
}

/* The live block starting at ptr (or, with interior, containing it). Under the lock. */
static live_block *lookup(recap__allocator *a, uintptr_t ptr, bool interior) {
  live_block key = {.addr = ptr};
  recap__tnode *n = recap__treap_floor(a->async_live, &key.node, cmp_addr);
  if (!n) return NULL;
  live_block *b = RECAP__CONTAINER_OF(n, live_block, node);
  if (b->addr == ptr) return b;
  return interior && ptr < b->addr + b->size ? b : NULL;
}

static recap_status refuse_capture(const char *what) {
  return RECAP_FAIL(RECAP_STATUS_NOT_SUPPORTED,
                    "%s on a stream that is capturing: backend:cudaMallocAsync would make it a "
                    "graph memory node, which recap does not manage; use backend:caching for "
                    "captures",
                    what);
}

static void account(recap__allocator *a, size_t size, int sign) {
  bool small = size <= RECAP__ALLOC_SMALL_SIZE;
  int64_t bytes = sign * (int64_t)size;
  recap__stat_add(a->stats.allocated_bytes, small, bytes);
  recap__stat_add(a->stats.allocated_count, small, sign);
  recap__stat_add(a->stats.active_bytes, small, bytes);
  recap__stat_add(a->stats.active_count, small, sign);
  recap__stat_add(a->stats.requested_bytes, small, bytes);
  recap__stat_add(a->stats.requested_count, small, sign);
}

recap_status recap__async_malloc(recap__allocator *a, size_t size, recap_stream *stream,
                                 void **out) {
  if (recap_stream_is_capturing(stream)) return refuse_capture("allocation");
  live_block *b = calloc(1, sizeof *b);
  if (!b) return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no host memory for a block record");
  void *ptr = NULL;
  recap_status st = a->raw.async_alloc(a->raw.ctx, size, stream, &ptr);
  if (st == RECAP_STATUS_OUT_OF_MEMORY && recap__capture_count() == 0 && a->raw.synchronize &&
      recap__unsafe_enter()) {
    /* Frees issued on other streams complete at a synchronization; then the pool can reuse
     * their memory. Retry once, as the caching backend does. */
    bool synced = a->raw.synchronize(a->raw.ctx) == RECAP_OK;
    recap__unsafe_exit();
    pthread_mutex_lock(&a->lock);
    a->stats.num_alloc_retries++;
    if (synced) a->stats.num_sync_all_streams++;
    pthread_mutex_unlock(&a->lock);
    if (synced) st = a->raw.async_alloc(a->raw.ctx, size, stream, &ptr);
  }
  if (st != RECAP_OK) {
    free(b);
    if (st == RECAP_STATUS_OUT_OF_MEMORY) {
      pthread_mutex_lock(&a->lock);
      a->stats.num_ooms++;
      pthread_mutex_unlock(&a->lock);
    }
    return st;
  }
  b->addr = (uintptr_t)ptr;
  b->size = size;
  b->stream = stream;
  pthread_mutex_lock(&a->lock);
  recap__treap_insert(&a->async_live, &b->node, cmp_addr);
  account(a, size, 1);
  a->stats.num_device_alloc++;
  pthread_mutex_unlock(&a->lock);
  *out = ptr;
  return RECAP_OK;
}

/* Makes b's stream wait for the work queued so far on every stream that used b. */
static recap_status order_after_uses(recap__allocator *a, live_block *b) {
  for (int i = 0; i < b->use_count; i++) {
    recap_event *e = NULL;
    RECAP_TRY(recap_event_create(a->device, RECAP_EVENT_DEFAULT, &e));
    recap_status st = recap_event_record(e, b->uses[i]);
    if (st == RECAP_OK) st = recap_stream_wait_event(b->stream, e);
    /* Destroying a recorded event is fine: the wait already holds what it needs. */
    recap_event_destroy(e);
    RECAP_TRY(st);
  }
  return RECAP_OK;
}

recap_status recap__async_free(recap__allocator *a, void *ptr) {
  pthread_mutex_lock(&a->lock);
  live_block *b = lookup(a, (uintptr_t)ptr, false);
  recap_status st = RECAP_OK;
  if (!b) {
    st = RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                    "%p is not a block allocated by this allocator (or it was freed already)",
                    ptr);
  } else if (recap_stream_is_capturing(b->stream)) {
    st = refuse_capture("free");
  } else {
    recap__treap_remove(&a->async_live, &b->node, cmp_addr);
  }
  pthread_mutex_unlock(&a->lock);
  if (st != RECAP_OK) return st;
  /* Stream ordering first; if it fails the memory is leaked rather than reused too early. */
  st = order_after_uses(a, b);
  if (st == RECAP_OK) st = a->raw.async_free(a->raw.ctx, ptr, b->stream);
  pthread_mutex_lock(&a->lock);
  account(a, b->size, -1);
  if (st == RECAP_OK) a->stats.num_device_free++;
  pthread_mutex_unlock(&a->lock);
  free(b->uses);
  free(b);
  return st;
}

bool recap__async_owns(recap__allocator *a, void *ptr) {
  pthread_mutex_lock(&a->lock);
  bool owns = lookup(a, (uintptr_t)ptr, false) != NULL;
  pthread_mutex_unlock(&a->lock);
  return owns;
}

recap_status recap__async_record_stream(recap__allocator *a, void *ptr, recap_stream *stream) {
  pthread_mutex_lock(&a->lock);
  recap_status st = RECAP_OK;
  live_block *b = lookup(a, (uintptr_t)ptr, true);
  if (!b) {
    st = RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "%p lies in no allocated block", ptr);
    goto done;
  }
  st = recap__uses_add(&b->uses, &b->use_count, &b->use_capacity, b->stream, stream);
done:
  pthread_mutex_unlock(&a->lock);
  return st;
}

recap_status recap__async_empty_cache(recap__allocator *a) {
  if (!recap__unsafe_enter())
    return RECAP_FAIL(RECAP_STATUS_ILLEGAL_DURING_CAPTURE,
                      "empty_cache while a capture is under way; call it after the capture ends");
  recap_status st = a->raw.async_trim(a->raw.ctx);
  recap__unsafe_exit();
  return st;
}
