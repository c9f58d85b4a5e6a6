/*
 * host_async.c: the stream-ordered pool of backend:cudaMallocAsync, emulated for the host
 * backend so CI exercises the allocator's async mode.
 *
 * cudaFreeAsync releases memory when the stream reaches the free, not when it is called; the
 * emulation does the same by freeing from a host function queued on the stream (launch_host),
 * so memory that queued work still uses is never released early. It caches nothing (the
 * driver's pool is where caching happens on CUDA), so trim has nothing to do.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "allocator/raw_impl.h"
#include "runtime/error.h"

enum { ALIGNMENT = 256 };

static atomic_size_t reserved_now, reserved_peak;

/* Each allocation carries its size in a header of one alignment unit before the pointer,
 * so the stream-ordered free needs no lookup. */
static size_t rounded(size_t bytes) {
  return (bytes + ALIGNMENT - 1) / ALIGNMENT * ALIGNMENT;
}

recap_status recap__host_async_alloc(void *ctx, size_t bytes, recap_stream *stream, void **out) {
  (void)stream;
  recap__raw_runtime *rt = ctx;
  if (bytes == 0 || bytes > SIZE_MAX / 2)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "stream-ordered allocation of %zu bytes",
                      bytes);
  /* The device's capacity applies as to any allocation, and what the pool holds counts
   * against it: the backend's free bytes know only its own allocations. */
  size_t free_bytes = 0, total = 0;
  RECAP_TRY(rt->backend->mem_get_info(rt->device, &free_bytes, &total));
  size_t size = rounded(bytes);
  size_t pooled = atomic_load(&reserved_now);
  size_t available = free_bytes > pooled ? free_bytes - pooled : 0;
  if (size > available)
    return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY,
                      "stream-ordered allocation of %zu bytes: %zu bytes free on the host device "
                      "(%zu of its %zu bytes held by the stream-ordered pool)",
                      bytes, available, pooled, total);
  char *p = aligned_alloc(ALIGNMENT, size + ALIGNMENT);
  if (!p)
    return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "stream-ordered allocation of %zu bytes", bytes);
  memcpy(p, &size, sizeof size);
  size_t now = atomic_fetch_add(&reserved_now, size) + size;
  size_t peak = atomic_load(&reserved_peak);
  while (now > peak && !atomic_compare_exchange_weak(&reserved_peak, &peak, now)) {
  }
  *out = p + ALIGNMENT;
  return RECAP_OK;
}

static recap_status free_in_order(void *args) {
  char *p;
  memcpy(&p, args, sizeof p);
  size_t size;
  memcpy(&size, p, sizeof size);
  free(p);
  atomic_fetch_sub(&reserved_now, size);
  return RECAP_OK;
}

recap_status recap__host_async_free(void *ctx, void *ptr, recap_stream *stream) {
  (void)ctx;
  RECAP_CHECK_ARG(ptr && stream);
  char *p = (char *)ptr - ALIGNMENT;
  return stream->backend->launch_host(stream, free_in_order, &p, sizeof p);
}

recap_status recap__host_async_reserved(void *ctx, size_t *current, size_t *peak) {
  (void)ctx;
  *current = atomic_load(&reserved_now);
  *peak = atomic_load(&reserved_peak);
  return RECAP_OK;
}

recap_status recap__host_async_trim(void *ctx) {
  (void)ctx;
  return RECAP_OK;
}
