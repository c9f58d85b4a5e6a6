/*
 * stats.c: the allocator's counters, the human-readable summary and the JSON snapshot.
 *
 * The snapshot is taken under the allocator's lock, so its segments and its "stats" object
 * describe one moment: tests (and users chasing a leak) can check one against the other.
 */
#include <inttypes.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "allocator/internal.h"
#include "runtime/error.h"

/* The stat arrays of recap_memory_stats: recap's name (the struct's, the summary's) and the
 * name torch.cuda.memory_stats() gives the same number (the snapshot's "memory_stats").
 * PyTorch counts no requests, so requested_count keeps recap's name there. */
typedef struct {
  const char *name;
  const char *torch_name;
  size_t offset;
  bool bytes;
} stat_field;

#define STAT_FIELD_(name, torch_name, bytes) \
  { #name, torch_name, offsetof(recap_memory_stats, name), bytes }
static const stat_field stat_fields[] = {
    STAT_FIELD_(allocated_bytes, "allocated_bytes", true),
    STAT_FIELD_(allocated_count, "allocation", false),
    STAT_FIELD_(reserved_bytes, "reserved_bytes", true),
    STAT_FIELD_(reserved_count, "segment", false),
    STAT_FIELD_(active_bytes, "active_bytes", true),
    STAT_FIELD_(active_count, "active", false),
    STAT_FIELD_(inactive_split_bytes, "inactive_split_bytes", true),
    STAT_FIELD_(inactive_split_count, "inactive_split", false),
    STAT_FIELD_(requested_bytes, "requested_bytes", true),
    STAT_FIELD_(requested_count, "requested_count", false),
};
#undef STAT_FIELD_
enum { STAT_FIELD_COUNT = sizeof stat_fields / sizeof stat_fields[0] };

static recap_memory_stat *field_of(recap_memory_stats *stats, const stat_field *f) {
  return (recap_memory_stat *)(void *)((char *)stats + f->offset);
}

void recap__stats_reset_peak(recap_memory_stats *stats) {
  for (int i = 0; i < STAT_FIELD_COUNT; i++) {
    recap_memory_stat *s = field_of(stats, &stat_fields[i]);
    for (int t = 0; t < RECAP_STAT_TYPE_COUNT; t++) s[t].peak = s[t].current;
  }
}

void recap__format_bytes(char *buf, size_t capacity, size_t bytes) {
  static const char *units[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
  double v = (double)bytes;
  int u = 0;
  while (v >= 1024.0 && u < 4) v /= 1024.0, u++;
  if (u == 0)
    snprintf(buf, capacity, "%zu bytes", bytes);
  else
    snprintf(buf, capacity, "%.2f %s", v, units[u]);
}

void recap__allocator_stats(recap__allocator *a, recap_memory_stats *out) {
  pthread_mutex_lock(&a->lock);
  *out = a->stats;
  pthread_mutex_unlock(&a->lock);
}

static recap_status no_blocks(recap__allocator *a, const char *what) {
  if (!a->config.async) return RECAP_OK;
  return RECAP_FAIL(RECAP_STATUS_NOT_SUPPORTED,
                    "%s is not available with backend:cudaMallocAsync: the driver's pool shows no "
                    "blocks or segments (recap_memory_allocated and recap_memory_reserved work)",
                    what);
}

recap_status recap__allocator_stats_checked(recap__allocator *a, recap_memory_stats *out) {
  RECAP_CHECK_ARG(a && out);
  RECAP_TRY(no_blocks(a, "the full memory stats (splitting, inactive and segment counts)"));
  recap__allocator_stats(a, out);
  return RECAP_OK;
}

recap_status recap__allocator_totals(recap__allocator *a, size_t *allocated, size_t *reserved,
                                     size_t *max_allocated, size_t *max_reserved) {
  RECAP_CHECK_ARG(a && allocated && reserved && max_allocated && max_reserved);
  recap_memory_stats s;
  recap__allocator_stats(a, &s);
  *allocated = (size_t)s.allocated_bytes[RECAP_STAT_ALL].current;
  *max_allocated = (size_t)s.allocated_bytes[RECAP_STAT_ALL].peak;
  if (a->config.async) return a->raw.async_reserved(a->raw.ctx, reserved, max_reserved);
  *reserved = (size_t)s.reserved_bytes[RECAP_STAT_ALL].current;
  *max_reserved = (size_t)s.reserved_bytes[RECAP_STAT_ALL].peak;
  return RECAP_OK;
}

void recap__allocator_reset_peak(recap__allocator *a) {
  pthread_mutex_lock(&a->lock);
  recap__stats_reset_peak(&a->stats);
  pthread_mutex_unlock(&a->lock);
}

/* ------------------------------------------------------------------------------------------
 * Summary
 * ---------------------------------------------------------------------------------------- */

/* A growing string; an allocation failure sticks and is reported at the end. */
typedef struct {
  char *data;
  size_t len, cap;
  bool failed;
} text_buf;

static void text_printf(text_buf *t, const char *fmt, ...) RECAP__PRINTF(2, 3);
static void text_printf(text_buf *t, const char *fmt, ...) {
  if (t->failed) return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(t->data ? t->data + t->len : NULL, t->data ? t->cap - t->len : 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
      t->failed = true;
      return;
    }
    if (t->data && t->len + (size_t)n < t->cap) {
      t->len += (size_t)n;
      return;
    }
    size_t cap = t->cap ? t->cap : 1024;
    while (cap <= t->len + (size_t)n) cap *= 2;
    char *grown = realloc(t->data, cap);
    if (!grown) {
      t->failed = true;
      return;
    }
    t->data = grown;
    t->cap = cap;
  }
}

static void summary_value(char *buf, size_t cap, int64_t v, bool bytes) {
  if (bytes)
    recap__format_bytes(buf, cap, (size_t)(v < 0 ? 0 : v));
  else
    snprintf(buf, cap, "%" PRId64, v);
}

recap_status recap__allocator_summary(recap__allocator *a, char **text) {
  RECAP_CHECK_ARG(a && text);
  RECAP_TRY(no_blocks(a, "the memory summary"));
  recap_memory_stats s;
  recap__allocator_stats(a, &s);
  static const char *type_names[] = {"all", "small", "large"};
  text_buf t = {0};
  text_printf(&t, "recap memory summary, %s:%d\n", recap_backend_name(a->device.backend),
              a->device.index);
  text_printf(&t, "%-28s %14s %14s %14s %14s\n", "metric", "current", "peak", "allocated", "freed");
  for (int i = 0; i < STAT_FIELD_COUNT; i++) {
    recap_memory_stat *f = field_of(&s, &stat_fields[i]);
    for (int ty = 0; ty < RECAP_STAT_TYPE_COUNT; ty++) {
      char name[64], cur[32], peak[32], alloc[32], freed[32];
      snprintf(name, sizeof name, "%s (%s)", stat_fields[i].name, type_names[ty]);
      summary_value(cur, sizeof cur, f[ty].current, stat_fields[i].bytes);
      summary_value(peak, sizeof peak, f[ty].peak, stat_fields[i].bytes);
      summary_value(alloc, sizeof alloc, f[ty].allocated, stat_fields[i].bytes);
      summary_value(freed, sizeof freed, f[ty].freed, stat_fields[i].bytes);
      text_printf(&t, "%-28s %14s %14s %14s %14s\n", name, cur, peak, alloc, freed);
    }
  }
  text_printf(&t,
              "device allocations: %" PRId64 ", device frees: %" PRId64
              ", out-of-memory retries: %" PRId64 ", out-of-memory errors: %" PRId64
              ", device synchronizations: %" PRId64 "\n",
              s.num_device_alloc, s.num_device_free, s.num_alloc_retries, s.num_ooms,
              s.num_sync_all_streams);
  if (t.failed) {
    free(t.data);
    return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for the summary text");
  }
  *text = t.data;
  return RECAP_OK;
}

/* ------------------------------------------------------------------------------------------
 * JSON snapshot
 * ---------------------------------------------------------------------------------------- */

/* torch.cuda.memory_stats()'s flat dict: "<stat>.<all|small_pool|large_pool>.<current|peak|
 * allocated|freed>" and the counters. max_split_size is in bytes, -1 without a limit (PyTorch's
 * SIZE_MAX read as a signed number). PyTorch's oversize_allocations and oversize_segments are
 * left out: recap does not count blocks past max_split_size. */
static json_t *stats_json(const recap_memory_stats *stats, const recap__alloc_config *config) {
  static const char *pool_names[] = {"all", "small_pool", "large_pool"};
  static const char *metric_names[] = {"current", "peak", "allocated", "freed"};
  recap_memory_stats s = *stats;
  json_t *root = json_object();
  bool ok = root != NULL;
  for (int i = 0; ok && i < STAT_FIELD_COUNT; i++) {
    const recap_memory_stat *f = field_of(&s, &stat_fields[i]);
    for (int ty = 0; ok && ty < RECAP_STAT_TYPE_COUNT; ty++) {
      const int64_t values[4] = {f[ty].current, f[ty].peak, f[ty].allocated, f[ty].freed};
      for (int m = 0; ok && m < 4; m++) {
        char key[80];
        snprintf(key, sizeof key, "%s.%s.%s", stat_fields[i].torch_name, pool_names[ty],
                 metric_names[m]);
        ok = json_object_set_new(root, key, json_integer((json_int_t)values[m])) == 0;
      }
    }
  }
  const json_int_t max_split =
      config->max_split_size == SIZE_MAX ? -1 : (json_int_t)config->max_split_size;
  json_t *counters =
      ok ? json_pack("{s:I,s:I,s:I,s:I,s:I,s:I}", "num_alloc_retries",
                     (json_int_t)s.num_alloc_retries, "num_ooms", (json_int_t)s.num_ooms,
                     "num_device_alloc", (json_int_t)s.num_device_alloc, "num_device_free",
                     (json_int_t)s.num_device_free, "num_sync_all_streams",
                     (json_int_t)s.num_sync_all_streams, "max_split_size", max_split)
         : NULL;
  ok = counters && json_object_update(root, counters) == 0;
  json_decref(counters);
  if (!ok) {
    json_decref(root);
    return NULL;
  }
  return root;
}

static const char *state_name(recap__block_state state) {
  switch (state) {
    case RECAP__BLOCK_ALLOCATED:
      return "active_allocated";
    case RECAP__BLOCK_PENDING:
      return "active_pending_free";
    case RECAP__BLOCK_FREE:
      break;
  }
  return "inactive";
}

typedef struct {
  json_t *segments;
  json_t *segment; /* the segment being filled */
  json_t *blocks;  /* its blocks */
  size_t allocated, active, requested;
  int device; /* the allocator's device index, each segment's "device" */
  bool failed;
} snapshot_walk;

/* Closes the current segment object, adding its totals. Every value is handed to jansson
 * (the *_new calls take ownership even when they fail), so nothing leaks on failure. */
static void segment_finish(snapshot_walk *w) {
  if (!w->segment) return;
  int bad = 0;
  bad |= json_object_set_new(w->segment, "allocated_size", json_integer((json_int_t)w->allocated));
  bad |= json_object_set_new(w->segment, "active_size", json_integer((json_int_t)w->active));
  bad |= json_object_set_new(w->segment, "requested_size", json_integer((json_int_t)w->requested));
  bad |= json_object_set_new(w->segment, "blocks", w->blocks);
  bad |= json_array_append_new(w->segments, w->segment);
  if (bad) w->failed = true;
  w->segment = w->blocks = NULL;
}

static void snapshot_block(snapshot_walk *w, const recap__block *b) {
  if (w->failed) return;
  if (!b->prev) {
    segment_finish(w);
    const recap__segment *seg = b->segment;
    /* PyTorch's segment keys; a private pool's id goes second in segment_pool_id, as the id
     * of a pool made by graph_pool_handle() does. reserved_address_space is recap's own. No
     * stack is recorded, so "frames" is empty (memory_viz shows the blocks without one). */
    w->segment = json_pack(
        "{s:i,s:I,s:I,s:I,s:s,s:[i,I],s:b,s:[],s:I}", "device", w->device, "address",
        (json_int_t)seg->base, "total_size", (json_int_t)seg->size, "stream",
        (json_int_t)(uintptr_t)seg->stream, "segment_type", seg->small ? "small" : "large",
        "segment_pool_id", 0, (json_int_t)seg->pool->id, "is_expandable", seg->expandable, "frames",
        "reserved_address_space", (json_int_t)(seg->expandable ? seg->va_size : seg->size));
    w->blocks = json_array();
    w->allocated = w->active = w->requested = 0;
    if (!w->segment || !w->blocks) {
      json_decref(w->segment);
      json_decref(w->blocks);
      w->segment = w->blocks = NULL;
      w->failed = true;
      return;
    }
  }
  if (b->state == RECAP__BLOCK_ALLOCATED) w->allocated += b->size;
  if (b->state != RECAP__BLOCK_FREE) w->active += b->size;
  w->requested += b->requested;
  json_t *jb = json_pack("{s:I,s:I,s:I,s:s,s:[]}", "address", (json_int_t)b->addr, "size",
                         (json_int_t)b->size, "requested_size", (json_int_t)b->requested, "state",
                         state_name(b->state), "frames");
  if (!jb || json_array_append_new(w->blocks, jb) != 0) w->failed = true;
}

/* The segment index holds each segment's first block: its list gives the rest in order. */
static void snapshot_segment(recap__tnode *node, void *user) {
  for (const recap__block *b = RECAP__CONTAINER_OF(node, recap__block, by_base); b; b = b->next)
    snapshot_block(user, b);
}

recap_status recap__allocator_snapshot_json(recap__allocator *a, char **out) {
  RECAP_CHECK_ARG(a && out);
  RECAP_TRY(no_blocks(a, "the memory snapshot"));
  json_t *root = json_object(), *pools = json_array(), *stats = NULL;
  snapshot_walk w = {.segments = json_array(), .device = a->device.index};
  bool ok = root && w.segments && pools;
  pthread_mutex_lock(&a->lock);
  if (ok) {
    recap__treap_walk(a->segments, snapshot_segment, &w);
    segment_finish(&w);
    ok = !w.failed;
  }
  for (recap__pool *p = a->private_pools; ok && p; p = p->next) {
    json_t *jp = json_pack("{s:I,s:i,s:I,s:I}", "id", (json_int_t)p->id, "use_count", p->use_count,
                           "reserved_bytes", (json_int_t)p->reserved_bytes, "segment_count",
                           (json_int_t)p->segment_count);
    ok = jp && json_array_append_new(pools, jp) == 0;
  }
  if (ok) stats = stats_json(&a->stats, &a->config);
  pthread_mutex_unlock(&a->lock);
  json_t *device = json_pack("{s:s,s:i}", "backend", recap_backend_name(a->device.backend), "index",
                             a->device.index);
  /* PyTorch's device_traces holds one list of events per device index; recap records no
   * history, so every list is empty (PyTorch's viewers then show the blocks, no events). */
  json_t *traces = json_array();
  for (int d = 0; traces && d <= a->device.index; d++)
    if (json_array_append_new(traces, json_array()) != 0) {
      json_decref(traces);
      traces = NULL;
    }
  ok = ok && stats && device && traces && json_object_set(root, "device", device) == 0 &&
       json_object_set(root, "segments", w.segments) == 0 &&
       json_object_set(root, "device_traces", traces) == 0 &&
       json_object_set(root, "pools", pools) == 0 &&
       json_object_set(root, "memory_stats", stats) == 0;
  char *text = ok ? json_dumps(root, JSON_COMPACT) : NULL;
  /* json_object_set took its own references; drop ours (NULL is ignored). */
  json_decref(device);
  json_decref(traces);
  json_decref(stats);
  json_decref(pools);
  json_decref(w.segments);
  json_decref(w.segment);
  json_decref(w.blocks);
  json_decref(root);
  if (!text) return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for the snapshot");
  *out = text;
  return RECAP_OK;
}
