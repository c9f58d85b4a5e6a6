/*
 * pinned.c: the caching allocator of pinned (page-locked) host memory, for staging copies
 * between host and device (recap_host_malloc; PyTorch's CachingHostAllocator).
 *
 * cudaHostAlloc is slow (it pins pages and maps them for the device), so freed blocks are
 * cached by power-of-two size class. A block that copies used (recap_host_record_stream) may
 * still be read or written by them after recap_host_free: it is reused only once an event
 * recorded at free time on each such stream has completed. Events are neither recorded nor
 * queried while a capture is under way (both are illegal then); such frees wait until no
 * capture is, as the device allocator's do.
 *
 * Without a CUDA device (host-only builds, CI) the memory is ordinary page-aligned host memory
 * with the same caching and event rules, so the logic is tested everywhere.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "allocator/internal.h"
#include "allocator/raw_impl.h"
#include "runtime/capture.h"
#include "runtime/error.h"

enum { CLASSES = 48, MIN_SIZE = 512, PAGE = 4096 };

typedef struct host_block {
  recap__tnode node; /* in `live` while allocated or waiting */
  void *ptr;
  size_t size; /* the size class */
  bool pinned; /* from cudaHostAlloc */
  recap_stream **uses;
  recap_event **events; /* events[i] recorded on uses[i] at free time */
  int use_count, use_capacity, event_count;
  bool freed; /* waiting for its events */
  struct host_block *next; /* the free list of its class, or the waiting list */
} host_block;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static recap__tnode *live;
static host_block *free_lists[CLASSES];
static host_block *waiting; /* freed, with events not yet recorded or not yet complete */
static recap_host_memory_stats stats;

static int cmp_ptr(const recap__tnode *x, const recap__tnode *y) {
  const host_block *a = RECAP__CONTAINER_OF(x, host_block, node);
  const host_block *b = RECAP__CONTAINER_OF(y, host_block, node);
  return (uintptr_t)a->ptr < (uintptr_t)b->ptr ? -1 : (uintptr_t)a->ptr > (uintptr_t)b->ptr;
}

static host_block *find_live(void *ptr) {
  host_block key = {.ptr = ptr};
  recap__tnode *n = recap__treap_floor(live, &key.node, cmp_ptr);
  if (!n) return NULL;
  host_block *b = RECAP__CONTAINER_OF(n, host_block, node);
  return (uintptr_t)ptr < (uintptr_t)b->ptr + b->size ? b : NULL;
}

static int class_of(size_t size, size_t *rounded) {
  size_t s = MIN_SIZE;
  int c = 0;
  while (s < size) s <<= 1, c++;
  *rounded = s;
  return c;
}

static void stat_move(recap_memory_stat *s, int64_t delta) {
  s->current += delta;
  if (delta > 0) {
    s->allocated += delta;
    if (s->current > s->peak) s->peak = s->current;
  } else {
    s->freed -= delta;
  }
}

#if RECAP_WITH_CUDA
static pthread_once_t probe_once = PTHREAD_ONCE_INIT;
static bool have_cuda;

static void probe(void) {
  int n = 0;
  have_cuda = recap_device_count(RECAP_BACKEND_CUDA, &n) == RECAP_OK && n > 0;
}
#endif

/* Whether the pinned path is available: a CUDA device exists (looked up once). */
static bool use_cuda_host(void) {
#if RECAP_WITH_CUDA
  pthread_once(&probe_once, probe);
  return have_cuda;
#else
  return false;
#endif
}

/* Records the events of a block being freed (those not recorded yet). */
static recap_status record_events(host_block *b) {
  while (b->event_count < b->use_count) {
    recap_stream *s = b->uses[b->event_count];
    recap_event *e = NULL;
    RECAP_TRY(recap_event_create(recap_stream_device(s), RECAP_EVENT_DEFAULT, &e));
    recap_status st = recap_event_record(e, s);
    if (st != RECAP_OK) {
      recap_event_destroy(e);
      return st;
    }
    b->events[b->event_count++] = e;
  }
  return RECAP_OK;
}

static void to_free_list(host_block *b) {
  size_t rounded;
  int c = class_of(b->size, &rounded);
  recap__treap_remove(&live, &b->node, cmp_ptr);
  b->use_count = 0;
  b->event_count = 0;
  b->freed = false;
  b->next = free_lists[c];
  free_lists[c] = b;
  stats.waiting_count--;
}

/* Moves waiting blocks whose events completed to their free lists. Under the lock. */
static void process_waiting(void) {
  if (!waiting || recap__capture_count() > 0 || !recap__unsafe_enter()) return;
  host_block **link = &waiting;
  while (*link) {
    host_block *b = *link;
    bool ready = true;
    for (int i = 0; ready && i < b->event_count; i++)
      ready = recap_event_query(b->events[i]) == RECAP_OK;
    if (!ready) {
      link = &b->next;
      continue;
    }
    *link = b->next;
    for (int i = 0; i < b->event_count; i++) recap_event_destroy(b->events[i]);
    to_free_list(b);
  }
  recap__unsafe_exit();
}

static recap_status raw_alloc(size_t size, bool *pinned, void **out) {
  *pinned = use_cuda_host();
#if RECAP_WITH_CUDA
  if (*pinned) return recap__cuda_host_alloc(size, out);
#endif
  void *p = aligned_alloc(PAGE, size < PAGE ? PAGE : size);
  if (!p) return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no host memory for %zu bytes", size);
  *out = p;
  return RECAP_OK;
}

static void raw_free(host_block *b) {
#if RECAP_WITH_CUDA
  if (b->pinned) {
    recap__cuda_host_free(b->ptr);
    return;
  }
#endif
  free(b->ptr);
}

recap_status recap_host_malloc(size_t size, void **out) {
  RECAP_CHECK_ARG(out);
  if (size == 0) {
    *out = NULL;
    return RECAP_OK;
  }
  if (size > SIZE_MAX / 4)
    return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "tried to allocate %zu host bytes", size);
  size_t rounded;
  int c = class_of(size, &rounded);
  if (c >= CLASSES)
    return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "tried to allocate %zu host bytes", size);
  pthread_mutex_lock(&lock);
  process_waiting();
  host_block *b = free_lists[c];
  recap_status st = RECAP_OK;
  if (b) {
    free_lists[c] = b->next;
  } else {
    b = calloc(1, sizeof *b);
    if (!b) {
      st = RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for a host block record");
      goto done;
    }
    /* Under the lock: pinned allocations are rare once the cache is warm, and a refusal
     * (e.g. during a global-mode capture, as for cudaMalloc) is passed to the caller. */
    st = raw_alloc(rounded, &b->pinned, &b->ptr);
    if (st != RECAP_OK) {
      free(b);
      goto done;
    }
    b->size = rounded;
    stat_move(&stats.reserved_bytes, (int64_t)rounded);
    stat_move(&stats.reserved_count, 1);
    stats.num_host_alloc++;
  }
  b->next = NULL;
  recap__treap_insert(&live, &b->node, cmp_ptr);
  stat_move(&stats.allocated_bytes, (int64_t)b->size);
  stat_move(&stats.allocated_count, 1);
  *out = b->ptr;
done:
  pthread_mutex_unlock(&lock);
  return st;
}

recap_status recap_host_record_stream(void *ptr, recap_stream *stream) {
  RECAP_CHECK_ARG(ptr && stream);
  pthread_mutex_lock(&lock);
  recap_status st = RECAP_OK;
  host_block *b = find_live(ptr);
  if (!b || b->freed) {
    st = RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "%p lies in no allocated host block", ptr);
    goto done;
  }
  for (int i = 0; i < b->use_count; i++)
    if (b->uses[i] == stream) goto done;
  if (b->use_count == b->use_capacity) {
    /* The event slots grow with the uses, so a free never needs memory. */
    int cap = b->use_capacity ? 2 * b->use_capacity : 2;
    recap_stream **uses = realloc(b->uses, (size_t)cap * sizeof *uses);
    if (uses) b->uses = uses;
    recap_event **events = uses ? realloc(b->events, (size_t)cap * sizeof *events) : NULL;
    if (events) b->events = events;
    if (!uses || !events) {
      st = RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory to record a stream use");
      goto done;
    }
    b->use_capacity = cap;
  }
  b->uses[b->use_count++] = stream;
done:
  pthread_mutex_unlock(&lock);
  return st;
}

recap_status recap_host_free(void *ptr) {
  if (!ptr) return RECAP_OK;
  pthread_mutex_lock(&lock);
  recap_status st = RECAP_OK;
  host_block *b = find_live(ptr);
  if (!b || b->ptr != ptr || b->freed) {
    st = RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                    "%p was not returned by recap_host_malloc (or was freed already)", ptr);
    goto done;
  }
  stat_move(&stats.allocated_bytes, -(int64_t)b->size);
  stat_move(&stats.allocated_count, -1);
  stats.waiting_count++;
  if (b->use_count == 0) {
    to_free_list(b);
    goto done;
  }
  b->freed = true;
  /* The events are recorded now, while the streams surely exist: a waiting block keeps no
   * stream pointer past this call (the stream may be destroyed right after). Without memory
   * for an event, the remaining copies are waited for instead. */
  if (record_events(b) != RECAP_OK) {
    for (int i = b->event_count; i < b->use_count; i++) recap_stream_synchronize(b->uses[i]);
    b->use_count = b->event_count;
  }
  if (b->event_count == 0) {
    to_free_list(b);
    goto done;
  }
  b->next = waiting;
  waiting = b;
  process_waiting();
done:
  pthread_mutex_unlock(&lock);
  return st;
}

recap_status recap_host_empty_cache(void) {
  pthread_mutex_lock(&lock);
  process_waiting();
  for (int c = 0; c < CLASSES; c++) {
    while (free_lists[c]) {
      host_block *b = free_lists[c];
      free_lists[c] = b->next;
      raw_free(b);
      stat_move(&stats.reserved_bytes, -(int64_t)b->size);
      stat_move(&stats.reserved_count, -1);
      stats.num_host_free++;
      free(b->uses);
      free(b->events);
      free(b);
    }
  }
  pthread_mutex_unlock(&lock);
  return RECAP_OK;
}

recap_status recap_host_memory_stats_get(recap_host_memory_stats *out) {
  RECAP_CHECK_ARG(out);
  pthread_mutex_lock(&lock);
  process_waiting();
  *out = stats;
  out->pinned = use_cuda_host();
  pthread_mutex_unlock(&lock);
  return RECAP_OK;
}
