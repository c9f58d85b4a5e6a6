/*
 * pool.c: private pools and the routing of streams into them.
 *
 * A route maps a stream to a pool; malloc looks the stream up before anything else. Routes
 * are few (one per capture or pool scope under way), so a flat array scanned linearly is the
 * fastest structure, and the common case (no route at all) costs one comparison.
 *
 * A pool's use_count counts handles (create/retain/release) and routes. A pool with no uses is
 * "dead": nothing can route into it any more, its free segments are releasable, and its record
 * is freed once its last segment is (see recap__pool_maybe_destroy).
 */
#include <stdatomic.h>
#include <stdlib.h>

#include "allocator/internal.h"
#include "runtime/error.h"

/* Process-wide, so an id used with the wrong device's allocator is never silently found. */
static atomic_uint_fast64_t next_pool_id = 1;

recap__pool *recap__route_lookup(recap__allocator *a, const recap_stream *stream) {
  for (size_t i = 0; i < a->route_count; i++)
    if (a->routes[i].stream == stream) return a->routes[i].pool;
  return &a->default_pool;
}

static recap__pool *find_live_pool(recap__allocator *a, recap_pool_id id) {
  for (recap__pool *p = a->private_pools; p; p = p->next)
    if (p->id == id.id) return p->use_count > 0 ? p : NULL;
  return NULL;
}

static recap_status no_such_pool(recap__allocator *a, recap_pool_id id) {
  return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                    "pool %llu is not a live pool of %s:%d (unknown, of another device, or "
                    "its last reference is gone)",
                    (unsigned long long)id.id, recap_backend_name(a->device.backend),
                    a->device.index);
}

void recap__pool_maybe_destroy(recap__allocator *a, recap__pool *pool) {
  if (pool->id == 0 || pool->use_count > 0 || pool->segment_count > 0) return;
  for (recap__pool **link = &a->private_pools; *link; link = &(*link)->next) {
    if (*link == pool) {
      *link = pool->next;
      free(pool);
      return;
    }
  }
}

void recap__pools_destroy_all(recap__allocator *a) {
  while (a->private_pools) {
    recap__pool *p = a->private_pools;
    a->private_pools = p->next;
    free(p);
  }
}

/* backend:cudaMallocAsync has no pools of its own to route into (see async.c). */
static recap_status no_pools(recap__allocator *a) {
  if (!a->config.async) return RECAP_OK;
  return RECAP_FAIL(RECAP_STATUS_NOT_SUPPORTED,
                    "private pools (and so graph captures through recap_graph) are not supported "
                    "with backend:cudaMallocAsync; use backend:caching");
}

recap_status recap__allocator_pool_create(recap__allocator *a, recap_pool_id *out) {
  RECAP_CHECK_ARG(a && out);
  RECAP_TRY(no_pools(a));
  recap__pool *p = calloc(1, sizeof *p);
  if (!p) return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for a pool");
  p->id = atomic_fetch_add(&next_pool_id, 1);
  p->use_count = 1;
  pthread_mutex_lock(&a->lock);
  p->next = a->private_pools;
  a->private_pools = p;
  pthread_mutex_unlock(&a->lock);
  out->id = p->id;
  return RECAP_OK;
}

recap_status recap__allocator_pool_retain(recap__allocator *a, recap_pool_id id) {
  RECAP_CHECK_ARG(a);
  pthread_mutex_lock(&a->lock);
  recap__pool *p = find_live_pool(a, id);
  recap_status st = p ? RECAP_OK : no_such_pool(a, id);
  if (p) p->use_count++;
  pthread_mutex_unlock(&a->lock);
  return st;
}

recap_status recap__allocator_pool_release(recap__allocator *a, recap_pool_id id) {
  RECAP_CHECK_ARG(a);
  pthread_mutex_lock(&a->lock);
  recap__pool *p = find_live_pool(a, id);
  recap_status st = p ? RECAP_OK : no_such_pool(a, id);
  if (p && --p->use_count == 0) recap__pool_maybe_destroy(a, p);
  pthread_mutex_unlock(&a->lock);
  return st;
}

recap_status recap__allocator_pool_stats(recap__allocator *a, recap_pool_id id,
                                         recap_pool_stats *out) {
  RECAP_CHECK_ARG(a && out);
  RECAP_TRY(no_pools(a));
  pthread_mutex_lock(&a->lock);
  recap__pool *p = NULL;
  for (recap__pool *q = a->private_pools; q; q = q->next)
    if (q->id == id.id) p = q;
  recap_status st = RECAP_OK;
  if (p) {
    out->reserved_bytes = p->reserved_bytes;
    out->allocated_bytes = p->allocated_bytes;
    out->active_bytes = p->active_bytes;
    out->segment_count = p->segment_count;
    out->use_count = p->use_count;
  } else {
    st = RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                    "pool %llu is unknown to %s:%d (or gone with its last segment)",
                    (unsigned long long)id.id, recap_backend_name(a->device.backend),
                    a->device.index);
  }
  pthread_mutex_unlock(&a->lock);
  return st;
}

static recap_status route_append(recap__allocator *a, recap_stream *stream, recap_stream *origin,
                                 recap__pool *pool) {
  if (a->route_count == a->route_capacity) {
    size_t cap = a->route_capacity ? 2 * a->route_capacity : 4;
    recap__route *grown = realloc(a->routes, cap * sizeof *grown);
    if (!grown) return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for a route");
    a->routes = grown;
    a->route_capacity = cap;
  }
  a->routes[a->route_count++] = (recap__route){stream, origin, pool};
  return RECAP_OK;
}

static recap__route *find_route(recap__allocator *a, const recap_stream *stream) {
  for (size_t i = 0; i < a->route_count; i++)
    if (a->routes[i].stream == stream) return &a->routes[i];
  return NULL;
}

static recap_status check_stream(recap__allocator *a, const recap_stream *stream) {
  if (stream->device.backend != a->device.backend || stream->device.index != a->device.index)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "the stream belongs to %s:%d, the pool's allocator to %s:%d",
                      recap_backend_name(stream->device.backend), stream->device.index,
                      recap_backend_name(a->device.backend), a->device.index);
  return RECAP_OK;
}

recap_status recap__allocator_route_begin(recap__allocator *a, recap_pool_id id,
                                          recap_stream *stream) {
  RECAP_CHECK_ARG(a && stream);
  RECAP_TRY(no_pools(a));
  RECAP_TRY(check_stream(a, stream));
  pthread_mutex_lock(&a->lock);
  recap_status st = RECAP_OK;
  recap__pool *p = find_live_pool(a, id);
  recap__route *existing = find_route(a, stream);
  if (!p) {
    st = no_such_pool(a, id);
  } else if (existing) {
    st = RECAP_FAIL(RECAP_STATUS_BUSY, "the stream is already routed to pool %llu",
                    (unsigned long long)existing->pool->id);
  } else {
    st = route_append(a, stream, stream, p);
    if (st == RECAP_OK) p->use_count++;
  }
  pthread_mutex_unlock(&a->lock);
  return st;
}

recap_status recap__allocator_route_add_stream(recap__allocator *a, recap_stream *routed,
                                               recap_stream *side) {
  RECAP_CHECK_ARG(a && routed && side);
  RECAP_TRY(check_stream(a, side));
  pthread_mutex_lock(&a->lock);
  recap_status st = RECAP_OK;
  recap__route *origin = find_route(a, routed);
  recap__route *existing = find_route(a, side);
  if (!origin || origin->origin != routed) {
    st = RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                    "the stream side streams join has no route of its own");
  } else if (existing) {
    if (existing->origin != routed)
      st = RECAP_FAIL(RECAP_STATUS_BUSY, "the side stream is already routed to pool %llu",
                      (unsigned long long)existing->pool->id);
  } else {
    st = route_append(a, side, routed, origin->pool);
  }
  pthread_mutex_unlock(&a->lock);
  return st;
}

recap_status recap__allocator_route_end(recap__allocator *a, recap_stream *stream) {
  RECAP_CHECK_ARG(a && stream);
  pthread_mutex_lock(&a->lock);
  recap__route *route = find_route(a, stream);
  if (!route || route->origin != stream) {
    pthread_mutex_unlock(&a->lock);
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "the stream has no route of its own (never routed, ended already, or a "
                      "side stream whose route ends with its origin's)");
  }
  recap__pool *pool = route->pool;
  size_t kept = 0;
  for (size_t i = 0; i < a->route_count; i++)
    if (a->routes[i].origin != stream) a->routes[kept++] = a->routes[i];
  a->route_count = kept;
  if (--pool->use_count == 0) recap__pool_maybe_destroy(a, pool);
  pthread_mutex_unlock(&a->lock);
  return RECAP_OK;
}
