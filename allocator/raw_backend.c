/*
 * raw_backend.c: where the allocator's segments come from.
 *
 * - runtime: the runtime backend's device memory (cudaMalloc/cudaFree on CUDA, aligned host
 *   memory on host). Its mem_alloc follows CUDA's capture rules, which is why the caching
 *   layer switches to the relaxed capture mode before growing a pool inside a capture.
 * - failing: wraps another raw backend and fails on demand (after N allocations, by
 *   predicate, or past a simulated capacity), so tests can put an out-of-memory anywhere
 *   (libuv's test-loop-oom idea). It counts every call.
 */
#include <pthread.h>
#include <stdlib.h>

#include "allocator/allocator.h"
#include "allocator/raw_impl.h"
#include "runtime/error.h"

/* ------------------------------------------------------------------------------------------
 * runtime
 * ---------------------------------------------------------------------------------------- */

static recap_status runtime_alloc(void *ctx, size_t bytes, void **out) {
  recap__raw_runtime *r = ctx;
  return r->backend->mem_alloc(r->device, bytes, out);
}

static recap_status runtime_free(void *ctx, void *ptr) {
  recap__raw_runtime *r = ctx;
  return r->backend->mem_free(r->device, ptr);
}

static recap_status runtime_synchronize(void *ctx) {
  recap__raw_runtime *r = ctx;
  return r->backend->device_synchronize(r->device);
}

static recap_status runtime_exchange_capture_mode(void *ctx, recap_capture_mode *mode) {
  recap__raw_runtime *r = ctx;
  return r->backend->exchange_capture_mode(mode);
}

static recap_status runtime_mem_get_info(void *ctx, size_t *free_bytes, size_t *total_bytes) {
  recap__raw_runtime *r = ctx;
  return r->backend->mem_get_info(r->device, free_bytes, total_bytes);
}

recap_status recap__raw_runtime_init(recap__raw_runtime *state, recap_device device,
                                     recap__raw_backend *out) {
  RECAP_CHECK_ARG(state && out);
  const recap__backend *backend;
  RECAP_TRY(recap__device_backend(device, &backend));
  state->backend = backend;
  state->device = device.index;
  *out = (recap__raw_backend){
      .name = backend->name,
      .ctx = state,
      .alloc = runtime_alloc,
      .free = runtime_free,
      .synchronize = runtime_synchronize,
      .exchange_capture_mode =
          backend->exchange_capture_mode ? runtime_exchange_capture_mode : NULL,
      .mem_get_info = runtime_mem_get_info,
  };
  if (device.backend == RECAP_BACKEND_HOST) {
    out->vmm_granularity = recap__host_vmm_granularity;
    out->vmm_reserve = recap__host_vmm_reserve;
    out->vmm_release = recap__host_vmm_release;
    out->vmm_map = recap__host_vmm_map;
    out->vmm_unmap = recap__host_vmm_unmap;
    out->async_alloc = recap__host_async_alloc;
    out->async_free = recap__host_async_free;
    out->async_reserved = recap__host_async_reserved;
    out->async_trim = recap__host_async_trim;
  }
#if RECAP_WITH_CUDA
  if (device.backend == RECAP_BACKEND_CUDA) {
    if (recap__cuda_vmm_available()) {
      out->vmm_granularity = recap__cuda_vmm_granularity;
      out->vmm_reserve = recap__cuda_vmm_reserve;
      out->vmm_release = recap__cuda_vmm_release;
      out->vmm_map = recap__cuda_vmm_map;
      out->vmm_unmap = recap__cuda_vmm_unmap;
    }
    out->async_alloc = recap__cuda_async_alloc;
    out->async_free = recap__cuda_async_free;
    out->async_reserved = recap__cuda_async_reserved;
    out->async_trim = recap__cuda_async_trim;
    out->ipc_handle = recap__cuda_ipc_handle;
  }
#endif
  return RECAP_OK;
}

/* ------------------------------------------------------------------------------------------
 * failing
 * ---------------------------------------------------------------------------------------- */

/* Live allocations are remembered by address so a free can subtract the right size. A small
 * open-addressed table would do; a linked list keeps the test backend obviously correct,
 * and tests hold few segments. */
typedef struct live_alloc {
  void *ptr;
  size_t bytes;
  struct live_alloc *next;
} live_alloc;

struct recap__raw_failing {
  recap__raw_backend inner;
  pthread_mutex_t lock;
  long successes_left; /* -1: no limit */
  recap__raw_fail_predicate predicate;
  void *predicate_user;
  size_t capacity;
  recap__raw_failing_counts counts;
  live_alloc *live;
};

/* The inner call an allocation makes once the failing checks pass. */
typedef recap_status (*inner_alloc_fn)(recap__raw_failing *f, size_t bytes, void *arg,
                                       void **out);

static recap_status inner_alloc(recap__raw_failing *f, size_t bytes, void *arg, void **out) {
  (void)arg;
  return f->inner.alloc(f->inner.ctx, bytes, out);
}

/* Every kind of allocation (alloc, vmm_map, async_alloc) goes through here: it may be made to
 * fail, and what it returns is remembered by address. */
static recap_status failing_take(recap__raw_failing *f, size_t bytes, inner_alloc_fn call,
                                 void *arg, void **out) {
  pthread_mutex_lock(&f->lock);
  f->counts.alloc_calls++;
  const char *why = NULL;
  if (f->successes_left == 0)
    why = "the failing backend was told to fail from this allocation on";
  else if (f->predicate && f->predicate(bytes, f->predicate_user))
    why = "the failing backend's predicate rejected this size";
  else if (f->capacity && f->counts.live_bytes + bytes > f->capacity)
    why = "the failing backend's simulated capacity is exhausted";
  live_alloc *rec = why ? NULL : malloc(sizeof *rec);
  if (!why && !rec) why = "no host memory for the failing backend's record";
  recap_status st = RECAP_STATUS_OUT_OF_MEMORY;
  if (!why) {
    st = call(f, bytes, arg, out);
    if (st != RECAP_OK) free(rec);
  }
  if (why) {
    recap__fail_plain(RECAP_STATUS_OUT_OF_MEMORY, "%s (%zu bytes)", why, bytes);
  } else if (st == RECAP_OK) {
    rec->ptr = *out;
    rec->bytes = bytes;
    rec->next = f->live;
    f->live = rec;
    f->counts.live_allocations++;
    f->counts.live_bytes += bytes;
    if (f->successes_left > 0) f->successes_left--;
  }
  if (st != RECAP_OK) f->counts.alloc_failures++;
  pthread_mutex_unlock(&f->lock);
  return st;
}

static recap_status failing_alloc(void *ctx, size_t bytes, void **out) {
  return failing_take(ctx, bytes, inner_alloc, NULL, out);
}

/* Forgets the record of ptr once the inner free succeeded. */
static void failing_forget(recap__raw_failing *f, recap_status st, void *ptr) {
  f->counts.free_calls++;
  if (st == RECAP_OK) {
    for (live_alloc **link = &f->live; *link; link = &(*link)->next) {
      if ((*link)->ptr == ptr) {
        live_alloc *dead = *link;
        *link = dead->next;
        f->counts.live_allocations--;
        f->counts.live_bytes -= dead->bytes;
        free(dead);
        break;
      }
    }
  }
}

static recap_status failing_free(void *ctx, void *ptr) {
  recap__raw_failing *f = ctx;
  pthread_mutex_lock(&f->lock);
  recap_status st = f->inner.free(f->inner.ctx, ptr);
  failing_forget(f, st, ptr);
  pthread_mutex_unlock(&f->lock);
  return st;
}

static recap_status failing_vmm_granularity(void *ctx, size_t *out) {
  recap__raw_failing *f = ctx;
  return f->inner.vmm_granularity(f->inner.ctx, out);
}

static recap_status failing_vmm_reserve(void *ctx, size_t bytes, void **base) {
  recap__raw_failing *f = ctx;
  recap_status st = f->inner.vmm_reserve(f->inner.ctx, bytes, base);
  pthread_mutex_lock(&f->lock);
  if (st == RECAP_OK) f->counts.live_reservations++;
  pthread_mutex_unlock(&f->lock);
  return st;
}

static recap_status failing_vmm_release(void *ctx, void *base, size_t bytes) {
  recap__raw_failing *f = ctx;
  recap_status st = f->inner.vmm_release(f->inner.ctx, base, bytes);
  pthread_mutex_lock(&f->lock);
  if (st == RECAP_OK) f->counts.live_reservations--;
  pthread_mutex_unlock(&f->lock);
  return st;
}

static recap_status inner_map(recap__raw_failing *f, size_t bytes, void *arg, void **out) {
  recap_status st = f->inner.vmm_map(f->inner.ctx, arg, bytes);
  if (st == RECAP_OK) *out = arg;
  return st;
}

static recap_status failing_vmm_map(void *ctx, void *addr, size_t bytes) {
  void *mapped = NULL;
  return failing_take(ctx, bytes, inner_map, addr, &mapped);
}

static recap_status failing_vmm_unmap(void *ctx, void *addr, size_t bytes) {
  recap__raw_failing *f = ctx;
  pthread_mutex_lock(&f->lock);
  recap_status st = f->inner.vmm_unmap(f->inner.ctx, addr, bytes);
  failing_forget(f, st, addr);
  pthread_mutex_unlock(&f->lock);
  return st;
}

static recap_status inner_async_alloc(recap__raw_failing *f, size_t bytes, void *arg,
                                      void **out) {
  return f->inner.async_alloc(f->inner.ctx, bytes, arg, out);
}

static recap_status failing_async_alloc(void *ctx, size_t bytes, recap_stream *stream,
                                        void **out) {
  return failing_take(ctx, bytes, inner_async_alloc, stream, out);
}

static recap_status failing_async_free(void *ctx, void *ptr, recap_stream *stream) {
  recap__raw_failing *f = ctx;
  pthread_mutex_lock(&f->lock);
  recap_status st = f->inner.async_free(f->inner.ctx, ptr, stream);
  failing_forget(f, st, ptr);
  pthread_mutex_unlock(&f->lock);
  return st;
}

static recap_status failing_async_reserved(void *ctx, size_t *current, size_t *peak) {
  recap__raw_failing *f = ctx;
  return f->inner.async_reserved(f->inner.ctx, current, peak);
}

static recap_status failing_async_trim(void *ctx) {
  recap__raw_failing *f = ctx;
  return f->inner.async_trim(f->inner.ctx);
}

static recap_status failing_ipc_handle(void *ctx, void *ptr, recap_ipc_mem_handle *out) {
  recap__raw_failing *f = ctx;
  return f->inner.ipc_handle(f->inner.ctx, ptr, out);
}

static recap_status failing_synchronize(void *ctx) {
  recap__raw_failing *f = ctx;
  pthread_mutex_lock(&f->lock);
  f->counts.sync_calls++;
  pthread_mutex_unlock(&f->lock);
  return f->inner.synchronize ? f->inner.synchronize(f->inner.ctx) : RECAP_OK;
}

static recap_status failing_exchange_capture_mode(void *ctx, recap_capture_mode *mode) {
  recap__raw_failing *f = ctx;
  return f->inner.exchange_capture_mode(f->inner.ctx, mode);
}

static recap_status failing_mem_get_info(void *ctx, size_t *free_bytes, size_t *total_bytes) {
  recap__raw_failing *f = ctx;
  pthread_mutex_lock(&f->lock);
  size_t capacity = f->capacity, used = f->counts.live_bytes;
  pthread_mutex_unlock(&f->lock);
  if (capacity) {
    *total_bytes = capacity;
    *free_bytes = capacity - used;
    return RECAP_OK;
  }
  if (!f->inner.mem_get_info)
    return RECAP_FAIL(RECAP_STATUS_NOT_SUPPORTED,
                      "the failing backend has no capacity set and its inner backend none");
  return f->inner.mem_get_info(f->inner.ctx, free_bytes, total_bytes);
}

recap_status recap__raw_failing_create(const recap__raw_backend *inner, recap__raw_failing **out) {
  RECAP_CHECK_ARG(inner && out && inner->alloc && inner->free);
  recap__raw_failing *f = calloc(1, sizeof *f);
  if (!f) return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "no memory for a failing backend");
  if (pthread_mutex_init(&f->lock, NULL) != 0) {
    free(f);
    return RECAP_FAIL(RECAP_STATUS_INTERNAL, "cannot initialize a lock");
  }
  f->inner = *inner;
  f->successes_left = -1;
  *out = f;
  return RECAP_OK;
}

void recap__raw_failing_destroy(recap__raw_failing *f) {
  if (!f) return;
  while (f->live) {
    live_alloc *dead = f->live;
    f->live = dead->next;
    free(dead);
  }
  pthread_mutex_destroy(&f->lock);
  free(f);
}

void recap__raw_failing_backend(recap__raw_failing *f, recap__raw_backend *out) {
  *out = (recap__raw_backend){
      .name = "failing",
      .ctx = f,
      .alloc = failing_alloc,
      .free = failing_free,
      .synchronize = failing_synchronize,
      .exchange_capture_mode =
          f->inner.exchange_capture_mode ? failing_exchange_capture_mode : NULL,
      .mem_get_info = failing_mem_get_info,
  };
  const recap__raw_backend *in = &f->inner;
  if (in->vmm_granularity && in->vmm_reserve && in->vmm_release && in->vmm_map && in->vmm_unmap) {
    out->vmm_granularity = failing_vmm_granularity;
    out->vmm_reserve = failing_vmm_reserve;
    out->vmm_release = failing_vmm_release;
    out->vmm_map = failing_vmm_map;
    out->vmm_unmap = failing_vmm_unmap;
  }
  if (in->async_alloc && in->async_free && in->async_reserved && in->async_trim) {
    out->async_alloc = failing_async_alloc;
    out->async_free = failing_async_free;
    out->async_reserved = failing_async_reserved;
    out->async_trim = failing_async_trim;
  }
  if (in->ipc_handle) out->ipc_handle = failing_ipc_handle;
}

void recap__raw_failing_fail_after(recap__raw_failing *f, long successes) {
  pthread_mutex_lock(&f->lock);
  f->successes_left = successes < 0 ? -1 : successes;
  pthread_mutex_unlock(&f->lock);
}

void recap__raw_failing_set_predicate(recap__raw_failing *f, recap__raw_fail_predicate predicate,
                                      void *user) {
  pthread_mutex_lock(&f->lock);
  f->predicate = predicate;
  f->predicate_user = user;
  pthread_mutex_unlock(&f->lock);
}

void recap__raw_failing_set_capacity(recap__raw_failing *f, size_t bytes) {
  pthread_mutex_lock(&f->lock);
  f->capacity = bytes;
  pthread_mutex_unlock(&f->lock);
}

void recap__raw_failing_counts_get(recap__raw_failing *f, recap__raw_failing_counts *out) {
  pthread_mutex_lock(&f->lock);
  *out = f->counts;
  pthread_mutex_unlock(&f->lock);
}
