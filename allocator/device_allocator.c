/*
 * device_allocator.c: the process-wide allocator of each device, and the public API.
 *
 * Each device's allocator is created on first use over the runtime's device memory and
 * configured from RECAP_ALLOC_CONF. It lives for the rest of the process (as CUDA's primary
 * context does), so a pointer from recap_malloc stays valid on any thread until recap_free.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "allocator/internal.h"
#include "allocator/raw_impl.h"
#include "runtime/error.h"

enum { MAX_DEVICES = 64, BACKEND_KINDS = 2 };

typedef struct {
  /* Set once, under devices_lock; read without it (recap_malloc's fast path). */
  recap__allocator *_Atomic allocator;
  recap__raw_runtime raw_state;
} device_slot;

static pthread_mutex_t devices_lock = PTHREAD_MUTEX_INITIALIZER;
static device_slot devices[BACKEND_KINDS][MAX_DEVICES];
/* The created allocators, for recap_free and recap_record_stream, which get no device. */
static recap__allocator *_Atomic created[BACKEND_KINDS * MAX_DEVICES];
static _Atomic int created_count;

recap_status recap__allocator_for_device(recap_device device, recap__allocator **out) {
  RECAP_CHECK_ARG(out);
  if ((int)device.backend < 0 || (int)device.backend >= BACKEND_KINDS || device.index < 0 ||
      device.index >= MAX_DEVICES)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "no allocator for device %d:%d",
                      (int)device.backend, device.index);
  device_slot *slot = &devices[device.backend][device.index];
  /* An allocator, once created, lives for the rest of the process: every call but the first
   * finds it without the lock. The acquire pairs with the release below, so the allocator's
   * contents are visible before its pointer is. */
  recap__allocator *a = atomic_load_explicit(&slot->allocator, memory_order_acquire);
  if (a) {
    *out = a;
    return RECAP_OK;
  }
  pthread_mutex_lock(&devices_lock);
  recap_status st = RECAP_OK;
  a = atomic_load_explicit(&slot->allocator, memory_order_relaxed);
  if (!a) {
    recap__raw_backend raw;
    st = recap__raw_runtime_init(&slot->raw_state, device, &raw);
    if (st == RECAP_OK) {
      recap__allocator_options options = {
          .device = device, .raw = &raw, .conf = getenv("RECAP_ALLOC_CONF")};
      st = recap__allocator_create(&options, &a);
    }
    if (st == RECAP_OK) {
      created[created_count] = a;
      created_count++;
      atomic_store_explicit(&slot->allocator, a, memory_order_release);
    }
  }
  if (st == RECAP_OK) *out = a;
  pthread_mutex_unlock(&devices_lock);
  return st;
}

/* The created allocator holding a block at (or, with interior, containing) ptr. */
static recap__allocator *owner_of(void *ptr) {
  int n = created_count;
  for (int i = 0; i < n; i++)
    if (recap__allocator_owns(created[i], ptr)) return created[i];
  return NULL;
}

recap_status recap_malloc(recap_device device, size_t size, recap_stream *stream, void **out) {
  recap__allocator *a;
  RECAP_TRY(recap__allocator_for_device(device, &a));
  return recap__allocator_malloc(a, size, stream, out);
}

recap_status recap_free(void *ptr) {
  if (!ptr) return RECAP_OK;
  int n = created_count;
  for (int i = 0; i < n; i++) {
    bool owned = false;
    recap_status st = recap__allocator_try_free(created[i], ptr, &owned);
    if (owned || st != RECAP_OK) return st;
  }
  return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                    "%p was not returned by recap_malloc (or was freed already)", ptr);
}

recap_status recap_record_stream(void *ptr, recap_stream *stream) {
  RECAP_CHECK_ARG(ptr && stream);
  recap__allocator *a;
  RECAP_TRY(recap__allocator_for_device(recap_stream_device(stream), &a));
  return recap__allocator_record_stream(a, ptr, stream);
}

recap_status recap_empty_cache(recap_device device) {
  recap__allocator *a;
  RECAP_TRY(recap__allocator_for_device(device, &a));
  return recap__allocator_empty_cache(a);
}

recap_status recap_set_memory_fraction(recap_device device, double fraction) {
  recap__allocator *a;
  RECAP_TRY(recap__allocator_for_device(device, &a));
  return recap__allocator_set_memory_fraction(a, fraction);
}

recap_status recap_memory_stats_get(recap_device device, recap_memory_stats *out) {
  RECAP_CHECK_ARG(out);
  recap__allocator *a;
  RECAP_TRY(recap__allocator_for_device(device, &a));
  return recap__allocator_stats_checked(a, out);
}

recap_status recap_memory_reset_peak(recap_device device) {
  recap__allocator *a;
  RECAP_TRY(recap__allocator_for_device(device, &a));
  recap__allocator_reset_peak(a);
  return RECAP_OK;
}

typedef enum { PICK_ALLOCATED, PICK_RESERVED, PICK_MAX_ALLOCATED, PICK_MAX_RESERVED } pick;

static recap_status memory_value(recap_device device, pick which, size_t *out) {
  RECAP_CHECK_ARG(out);
  recap__allocator *a;
  RECAP_TRY(recap__allocator_for_device(device, &a));
  size_t allocated, reserved, max_allocated, max_reserved;
  RECAP_TRY(recap__allocator_totals(a, &allocated, &reserved, &max_allocated, &max_reserved));
  switch (which) {
    case PICK_ALLOCATED:
      *out = allocated;
      break;
    case PICK_RESERVED:
      *out = reserved;
      break;
    case PICK_MAX_ALLOCATED:
      *out = max_allocated;
      break;
    case PICK_MAX_RESERVED:
      *out = max_reserved;
      break;
  }
  return RECAP_OK;
}

recap_status recap_memory_allocated(recap_device device, size_t *out) {
  return memory_value(device, PICK_ALLOCATED, out);
}

recap_status recap_memory_reserved(recap_device device, size_t *out) {
  return memory_value(device, PICK_RESERVED, out);
}

recap_status recap_memory_max_allocated(recap_device device, size_t *out) {
  return memory_value(device, PICK_MAX_ALLOCATED, out);
}

recap_status recap_memory_max_reserved(recap_device device, size_t *out) {
  return memory_value(device, PICK_MAX_RESERVED, out);
}

recap_status recap_memory_summary(recap_device device, char **text) {
  recap__allocator *a;
  RECAP_TRY(recap__allocator_for_device(device, &a));
  return recap__allocator_summary(a, text);
}

recap_status recap_memory_snapshot_json(recap_device device, char **json) {
  recap__allocator *a;
  RECAP_TRY(recap__allocator_for_device(device, &a));
  return recap__allocator_snapshot_json(a, json);
}

bool recap__allocator_has_pools(recap_device device) {
  recap__allocator *a;
  if (recap__allocator_for_device(device, &a) != RECAP_OK) {
    recap_clear_error();
    return true;
  }
  return !a->config.async;
}

recap_status recap_pool_create(recap_device device, recap_pool_id *out) {
  recap__allocator *a;
  RECAP_TRY(recap__allocator_for_device(device, &a));
  return recap__allocator_pool_create(a, out);
}

recap_status recap_pool_retain(recap_device device, recap_pool_id pool) {
  recap__allocator *a;
  RECAP_TRY(recap__allocator_for_device(device, &a));
  return recap__allocator_pool_retain(a, pool);
}

recap_status recap_pool_release(recap_device device, recap_pool_id pool) {
  recap__allocator *a;
  RECAP_TRY(recap__allocator_for_device(device, &a));
  return recap__allocator_pool_release(a, pool);
}

recap_status recap_pool_stats_get(recap_device device, recap_pool_id pool, recap_pool_stats *out) {
  recap__allocator *a;
  RECAP_TRY(recap__allocator_for_device(device, &a));
  return recap__allocator_pool_stats(a, pool, out);
}

recap_status recap_pool_route_begin(recap_device device, recap_pool_id pool, recap_stream *stream) {
  recap__allocator *a;
  RECAP_TRY(recap__allocator_for_device(device, &a));
  return recap__allocator_route_begin(a, pool, stream);
}

recap_status recap_pool_route_end(recap_device device, recap_stream *stream) {
  recap__allocator *a;
  RECAP_TRY(recap__allocator_for_device(device, &a));
  return recap__allocator_route_end(a, stream);
}

recap_status recap__pool_route_add_stream(recap_device device, recap_stream *routed,
                                          recap_stream *side) {
  recap__allocator *a;
  RECAP_TRY(recap__allocator_for_device(device, &a));
  return recap__allocator_route_add_stream(a, routed, side);
}

recap_status recap_ipc_mem_handle_get(void *ptr, recap_ipc_mem_handle *out, size_t *offset) {
  RECAP_CHECK_ARG(ptr && out && offset);
  recap__allocator *a = owner_of(ptr);
  if (!a)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "%p was not returned by recap_malloc (or was freed already)", ptr);
  return recap__allocator_ipc_handle(a, ptr, out, offset);
}

recap_status recap_ipc_mem_open(recap_device device, const recap_ipc_mem_handle *handle,
                                void **out) {
  RECAP_CHECK_ARG(handle && out);
  const recap__backend *backend;
  RECAP_TRY(recap__device_backend(device, &backend));
#if RECAP_WITH_CUDA
  if (device.backend == RECAP_BACKEND_CUDA) return recap__cuda_ipc_open(device.index, handle, out);
#endif
  return RECAP_FAIL(RECAP_STATUS_NOT_SUPPORTED, "memory IPC needs a CUDA device, not %s:%d",
                    recap_backend_name(device.backend), device.index);
}

recap_status recap_ipc_mem_close(recap_device device, void *ptr) {
  RECAP_CHECK_ARG(ptr);
  const recap__backend *backend;
  RECAP_TRY(recap__device_backend(device, &backend));
#if RECAP_WITH_CUDA
  if (device.backend == RECAP_BACKEND_CUDA) return recap__cuda_ipc_close(device.index, ptr);
#endif
  return RECAP_FAIL(RECAP_STATUS_NOT_SUPPORTED, "memory IPC needs a CUDA device, not %s:%d",
                    recap_backend_name(device.backend), device.index);
}
