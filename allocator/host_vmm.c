/*
 * host_vmm.c: the CUDA virtual memory API emulated for the host backend, so CI exercises
 * expandable segments (growth at a stable base, what gets unmapped) without a GPU.
 *
 * It is strict where CUDA is, and stricter where a mistake would otherwise go unnoticed:
 * - a reservation is address space only (mmap PROT_NONE): touching it before a map faults;
 * - an unmapped chunk goes back to PROT_NONE and loses its pages, so any later access (a graph
 *   replay into unmapped memory, a use after trim) faults at once instead of reading stale data;
 * - mapping a granule twice, unmapping anything but exactly one earlier mapping, and releasing a
 *   reservation with live mappings are refused (CUDA returns CUDA_ERROR_INVALID_VALUE);
 * - mapping and reserving follow the host backend's capture rules for memory allocation (a
 *   global-mode capture is invalidated unless the caller switched to relaxed mode).
 *
 * Granularity is 2 MiB, CUDA's usual minimum on current GPUs. Reservations are few (one per
 * expandable segment), so a list under one lock suffices.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "allocator/raw_impl.h"
#include "runtime/error.h"

enum { GRANULARITY = 2 << 20 };

/* map_len[i] for granule i: 0 unmapped, n > 0 the first granule of a mapping of n granules,
 * CONTINUED inside one. */
#define CONTINUED UINT32_MAX

typedef struct reservation {
  uintptr_t base;
  size_t bytes;
  uint32_t *map_len;
  size_t mapped_granules;
  struct reservation *next;
} reservation;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static reservation *reservations;

/* The reservation holding [addr, addr + bytes), or NULL. Under the lock. */
static reservation *find(uintptr_t addr, size_t bytes) {
  for (reservation *r = reservations; r; r = r->next)
    if (addr >= r->base && addr - r->base <= r->bytes && bytes <= r->bytes - (addr - r->base))
      return r;
  return NULL;
}

/* The host backend's capture rules for allocation, applied by asking it for zero bytes: the
 * same check (and the same invalidation of an offended capture) as a real allocation. */
static recap_status capture_rules(recap__raw_runtime *rt) {
  void *none = NULL;
  return rt->backend->mem_alloc(rt->device, 0, &none);
}

recap_status recap__host_vmm_granularity(void *ctx, size_t *out) {
  (void)ctx;
  *out = GRANULARITY;
  return RECAP_OK;
}

recap_status recap__host_vmm_reserve(void *ctx, size_t bytes, void **base) {
  RECAP_CHECK_ARG(ctx && base);
  if (bytes == 0 || bytes % GRANULARITY != 0 || bytes > SIZE_MAX / 2)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "reserving %zu bytes: not a positive multiple of the %d-byte granularity",
                      bytes, GRANULARITY);
  RECAP_TRY(capture_rules(ctx));
  reservation *r = calloc(1, sizeof *r);
  uint32_t *map_len = calloc(bytes / GRANULARITY, sizeof *map_len);
  /* Over-reserve by one granule so the base can be aligned to it, as cuMemAddressReserve's
   * alignment argument guarantees. */
  void *raw = (r && map_len) ? mmap(NULL, bytes + GRANULARITY, PROT_NONE,
                                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0)
                             : MAP_FAILED;
  if (raw == MAP_FAILED) {
    free(r);
    free(map_len);
    return RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "cannot reserve %zu bytes of address space",
                      bytes);
  }
  uintptr_t start = (uintptr_t)raw;
  uintptr_t aligned = (start + GRANULARITY - 1) / GRANULARITY * GRANULARITY;
  if (aligned > start) munmap(raw, aligned - start);
  uintptr_t slack_end = start + bytes + GRANULARITY;
  if (slack_end > aligned + bytes) munmap((void *)(aligned + bytes), slack_end - aligned - bytes);
  r->base = aligned;
  r->bytes = bytes;
  r->map_len = map_len;
  pthread_mutex_lock(&lock);
  r->next = reservations;
  reservations = r;
  pthread_mutex_unlock(&lock);
  *base = (void *)aligned;
  return RECAP_OK;
}

recap_status recap__host_vmm_release(void *ctx, void *base, size_t bytes) {
  (void)ctx;
  pthread_mutex_lock(&lock);
  reservation **link = &reservations;
  while (*link && !((*link)->base == (uintptr_t)base && (*link)->bytes == bytes))
    link = &(*link)->next;
  reservation *r = *link;
  recap_status st = RECAP_OK;
  if (!r)
    st = RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                    "releasing %p (%zu bytes): not a reservation made by vmm_reserve", base, bytes);
  else if (r->mapped_granules > 0)
    st = RECAP_FAIL(RECAP_STATUS_BUSY, "releasing %p: %zu granules of it are still mapped", base,
                    r->mapped_granules);
  else
    *link = r->next;
  pthread_mutex_unlock(&lock);
  if (st != RECAP_OK) return st;
  munmap((void *)r->base, r->bytes);
  free(r->map_len);
  free(r);
  return RECAP_OK;
}

static recap_status check_range(uintptr_t addr, size_t bytes, const char *what) {
  if (bytes == 0 || addr % GRANULARITY != 0 || bytes % GRANULARITY != 0)
    return RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                      "%s %#lx (%zu bytes): not aligned to the %d-byte granularity", what,
                      (unsigned long)addr, bytes, GRANULARITY);
  return RECAP_OK;
}

recap_status recap__host_vmm_map(void *ctx, void *addr, size_t bytes) {
  RECAP_CHECK_ARG(ctx);
  uintptr_t a = (uintptr_t)addr;
  RECAP_TRY(check_range(a, bytes, "mapping"));
  RECAP_TRY(capture_rules(ctx));
  pthread_mutex_lock(&lock);
  recap_status st = RECAP_OK;
  reservation *r = find(a, bytes);
  size_t first = r ? (a - r->base) / GRANULARITY : 0, n = bytes / GRANULARITY;
  if (!r) {
    st = RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "mapping %p (%zu bytes): outside any reservation",
                    addr, bytes);
    goto done;
  }
  for (size_t i = 0; i < n; i++) {
    if (r->map_len[first + i] != 0) {
      st = RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT, "mapping %p (%zu bytes): already mapped",
                      addr, bytes);
      goto done;
    }
  }
  if (n > UINT32_MAX - 1 || mprotect(addr, bytes, PROT_READ | PROT_WRITE) != 0) {
    st = RECAP_FAIL(RECAP_STATUS_OUT_OF_MEMORY, "mapping %p (%zu bytes): mprotect refused", addr,
                    bytes);
    goto done;
  }
  r->map_len[first] = (uint32_t)n;
  for (size_t i = 1; i < n; i++) r->map_len[first + i] = CONTINUED;
  r->mapped_granules += n;
done:
  pthread_mutex_unlock(&lock);
  return st;
}

recap_status recap__host_vmm_unmap(void *ctx, void *addr, size_t bytes) {
  (void)ctx;
  uintptr_t a = (uintptr_t)addr;
  RECAP_TRY(check_range(a, bytes, "unmapping"));
  pthread_mutex_lock(&lock);
  recap_status st = RECAP_OK;
  reservation *r = find(a, bytes);
  size_t first = r ? (a - r->base) / GRANULARITY : 0, n = bytes / GRANULARITY;
  if (!r || r->map_len[first] != n) {
    st = RECAP_FAIL(RECAP_STATUS_INVALID_ARGUMENT,
                    "unmapping %p (%zu bytes): not exactly one earlier mapping", addr, bytes);
    goto done;
  }
  /* Dropping the pages first makes a later map start from fresh memory, as a new physical
   * allocation would. */
  madvise(addr, bytes, MADV_DONTNEED);
  if (mprotect(addr, bytes, PROT_NONE) != 0) {
    st = RECAP_FAIL(RECAP_STATUS_DEVICE_ERROR, "unmapping %p (%zu bytes): mprotect refused", addr,
                    bytes);
    goto done;
  }
  for (size_t i = 0; i < n; i++) r->map_len[first + i] = 0;
  r->mapped_granules -= n;
done:
  pthread_mutex_unlock(&lock);
  return st;
}

bool recap__host_vmm_is_mapped(const void *addr) {
  uintptr_t a = (uintptr_t)addr;
  pthread_mutex_lock(&lock);
  reservation *r = find(a, 1);
  bool mapped = r && r->map_len[(a - r->base) / GRANULARITY] != 0;
  pthread_mutex_unlock(&lock);
  return mapped;
}
