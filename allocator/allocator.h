/*
 * allocator.h: the caching allocator's internal API, for the graph layer and the tests.
 *
 * The public functions in include/recap.h ("Caching allocator and private pools") act on one
 * process-wide allocator per device, created on first use. This header exposes what lies
 * below them:
 * - raw backends: where segments come from (the runtime's device memory, a backend that fails
 *   on demand for out-of-memory tests);
 * - allocator instances over an injected raw backend and configuration, so a test owns an
 *   allocator that no other test or thread touches;
 * - routing of side streams into a pool, which the graph layer needs when a capture forks
 *   onto other streams.
 *
 * Test usage:
 *
 *   recap__raw_runtime host_state;
 *   recap__raw_backend host;
 *   recap__raw_runtime_init(&host_state, (recap_device){RECAP_BACKEND_HOST, 0}, &host);
 *   recap__raw_failing *failing;
 *   recap__raw_failing_create(&host, &failing);
 *   recap__raw_backend raw;
 *   recap__raw_failing_backend(failing, &raw);
 *   recap__allocator_options opts = {.device = {RECAP_BACKEND_HOST, 0}, .raw = &raw,
 *                                    .conf = "max_split_size_mb:40"};
 *   recap__allocator *a;
 *   recap__allocator_create(&opts, &a);
 *   recap__raw_failing_fail_after(failing, 0);       // every further segment fails
 *   ... recap__allocator_malloc(a, 4096, stream, &p) == RECAP_STATUS_OUT_OF_MEMORY ...
 *   recap__allocator_destroy(a);
 *   recap__raw_failing_destroy(failing);
 *
 * Graph-layer usage (capture with a private pool; see recap_pool_* in recap.h):
 *
 *   recap_pool_route_begin(dev, pool, stream);        // before recap__capture_begin
 *   recap__capture_begin(stream, mode);
 *   ... work forks onto `side` through an event ...
 *   recap__pool_route_add_stream(dev, stream, side);   // side's allocations join the pool
 *   recap__capture_end(stream, &graph);
 *   recap_pool_route_end(dev, stream);                 // ends the side stream's route too
 *
 * Locking: every function here takes the instance's lock itself; none may be called while a
 * capture is being begun or ended by the same thread (recap__capture_end runs the allocator's
 * capture-end hook, which takes the locks of every instance).
 */
#ifndef RECAP_ALLOCATOR_ALLOCATOR_H
#define RECAP_ALLOCATOR_ALLOCATOR_H

#include <stdbool.h>
#include <stddef.h>

#include "include/recap.h"
#include "runtime/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------------------------
 * Size classes (PyTorch's CUDA caching allocator uses the same numbers)
 * ---------------------------------------------------------------------------------------- */

enum {
  RECAP__ALLOC_MIN_BLOCK = 512,            /* every block is a multiple of this */
  RECAP__ALLOC_SMALL_SIZE = 1 << 20,       /* requests up to this go to the small pool */
  RECAP__ALLOC_SMALL_BUFFER = 2 << 20,     /* segment size of the small pool */
  RECAP__ALLOC_LARGE_BUFFER = 20 << 20,    /* segment size for 1-10 MiB requests */
  RECAP__ALLOC_MIN_LARGE_ALLOC = 10 << 20, /* from here segments fit the request */
  RECAP__ALLOC_ROUND_LARGE = 2 << 20,      /* ... rounded up to this */
  RECAP__ALLOC_ROUNDUP_INTERVALS = 16,     /* power-of-two intervals from 1 MiB */
};

/* ------------------------------------------------------------------------------------------
 * Configuration (RECAP_ALLOC_CONF)
 * ---------------------------------------------------------------------------------------- */

typedef struct {
  bool uncached;         /* backend:cudaMalloc: every request is its own raw allocation */
  bool async;            /* backend:cudaMallocAsync: the raw backend's stream-ordered pool */
  bool expandable;       /* expandable_segments:True: segments grow by mapping chunks */
  size_t max_split_size; /* blocks this large are never split; SIZE_MAX: no limit */
  double gc_threshold;   /* garbage_collection_threshold in (0, 1); 0: off */
  /* roundup_power2_divisions per power-of-two size interval: [i] applies to requests in
   * [2^i MiB, 2^(i+1) MiB) ([0] also to smaller ones, [15] to all larger); 0 or 1: plain
   * 512-byte rounding. */
  unsigned roundup_divisions[RECAP__ALLOC_ROUNDUP_INTERVALS];
} recap__alloc_config;

void recap__alloc_config_default(recap__alloc_config *out);
/* Parses "key:value,key:value" (PyTorch's PYTORCH_CUDA_ALLOC_CONF syntax) over the defaults.
 * Keys: backend (native|caching|cudaMalloc|cudaMallocAsync), max_split_size_mb (> 20),
 * garbage_collection_threshold (0 < t < 1), roundup_power2_divisions (a power of two, or a list
 * "[256:1,512:2,>:8]" whose keys are power-of-two MiB interval starts and ">" the rest),
 * expandable_segments (True|False; only with the caching backend). NULL or "" gives the
 * defaults. The first backend:native of the process prints a note on stderr: its meaning
 * changed (config.c says why).
 * RECAP_STATUS_INVALID_ARGUMENT naming the key on an unknown key or a malformed value; *out
 * is then untouched. */
recap_status recap__alloc_config_parse(const char *text, recap__alloc_config *out);
/* The block size a request of `size` bytes gets (512-byte multiples, or the next power-of-two
 * division when roundup_power2_divisions applies). */
size_t recap__alloc_round_size(const recap__alloc_config *config, size_t size);
/* The size of the segment the allocator reserves for a block of `rounded` bytes. In the
 * default pool a 1-10 MiB block gets a 20 MiB segment that later requests of that range share
 * (PyTorch's kLargeBuffer rule, against churn); in a private pool (graph memory: one planned
 * arena, no churn) it gets its size rounded up to 2 MiB, so a 1.25 MiB arena reserves 2 MiB,
 * not 20. */
size_t recap__alloc_segment_size(size_t rounded, bool private_pool);

/* ------------------------------------------------------------------------------------------
 * Raw backends
 * ---------------------------------------------------------------------------------------- */

typedef struct {
  const char *name;
  void *ctx;
  /* Reserves `bytes` of device memory. RECAP_STATUS_OUT_OF_MEMORY when the device is full
   * (the allocator then frees its cache and retries); other errors pass through. */
  recap_status (*alloc)(void *ctx, size_t bytes, void **out);
  recap_status (*free)(void *ctx, void *ptr);
  /* Waits for all work on the device, before an out-of-memory retry (optional). */
  recap_status (*synchronize)(void *ctx);
  /* Sets the calling thread's capture interaction mode and returns the previous one: pools
   * grow during a capture under RECAP_CAPTURE_MODE_RELAXED (optional: then the backend's
   * alloc does not care about captures). */
  recap_status (*exchange_capture_mode)(void *ctx, recap_capture_mode *mode);
  /* Free and total device memory, for error messages and the memory fraction (optional). */
  recap_status (*mem_get_info)(void *ctx, size_t *free_bytes, size_t *total_bytes);

  /* Virtual memory, for expandable segments (optional: all five or none). Addresses and sizes
   * passed to map/unmap are multiples of the granularity, and each map call is undone by
   * exactly one unmap of the same range (CUDA's rule for cuMemMap/cuMemUnmap). */
  recap_status (*vmm_granularity)(void *ctx, size_t *out);
  /* Reserves `bytes` of address space with nothing behind it. */
  recap_status (*vmm_reserve)(void *ctx, size_t bytes, void **base);
  /* Gives a reservation back; RECAP_STATUS_BUSY while any of it is still mapped. */
  recap_status (*vmm_release)(void *ctx, void *base, size_t bytes);
  /* Backs [addr, addr + bytes) with new physical memory, readable and writable by the device.
   * RECAP_STATUS_OUT_OF_MEMORY when the device is full. */
  recap_status (*vmm_map)(void *ctx, void *addr, size_t bytes);
  /* Unmaps a range mapped by one vmm_map call and frees its physical memory. */
  recap_status (*vmm_unmap)(void *ctx, void *addr, size_t bytes);

  /* A stream-ordered pool, for backend:cudaMallocAsync (optional: all four or none). The
   * memory of a free may be reused by later work on `stream` at once and by other streams
   * after they synchronize with it. */
  recap_status (*async_alloc)(void *ctx, size_t bytes, recap_stream *stream, void **out);
  recap_status (*async_free)(void *ctx, void *ptr, recap_stream *stream);
  /* Bytes the pool holds from the device now and at its peak. */
  recap_status (*async_reserved)(void *ctx, size_t *current, size_t *peak);
  /* Returns the pool's unused memory to the device (cudaMemPoolTrimTo(pool, 0)). */
  recap_status (*async_trim)(void *ctx);

  /* An IPC handle for memory that `alloc` returned (ptr is the allocation's start)
   * (optional). */
  recap_status (*ipc_handle)(void *ctx, void *ptr, recap_ipc_mem_handle *out);
} recap__raw_backend;

/* The runtime backend's device memory (cudaMalloc on CUDA, aligned host memory on host). */
typedef struct {
  const recap__backend *backend;
  int device;
} recap__raw_runtime;
/* Fills *out with a raw backend whose ctx is `state`, which must outlive it. Virtual memory:
 * the CUDA driver's (through cudaGetDriverEntryPointByVersion; absent when the driver lacks
 * it) or, on the host backend, an emulation over mmap that is as strict as CUDA (unmapped
 * chunks fault on access, a double map or a release of mapped memory is refused). The
 * stream-ordered pool: the device's default memory pool on CUDA, an emulation that frees in
 * stream order (launch_host) on host. */
recap_status recap__raw_runtime_init(recap__raw_runtime *state, recap_device device,
                                     recap__raw_backend *out);

/* A raw backend over another one that fails on demand, and counts what it was asked. */
typedef struct recap__raw_failing recap__raw_failing;
typedef bool (*recap__raw_fail_predicate)(size_t bytes, void *user);
typedef struct {
  size_t alloc_calls, alloc_failures, free_calls, sync_calls;
  /* vmm_map and async_alloc count as allocations, vmm_unmap and async_free as frees. */
  size_t live_allocations, live_bytes;
  size_t live_reservations; /* vmm_reserve minus vmm_release */
} recap__raw_failing_counts;

/* `inner` is copied and must stay valid (its ctx) while the failing backend lives. */
recap_status recap__raw_failing_create(const recap__raw_backend *inner, recap__raw_failing **out);
/* Accepts NULL. Memory still reserved through it is not released. */
void recap__raw_failing_destroy(recap__raw_failing *failing);
void recap__raw_failing_backend(recap__raw_failing *failing, recap__raw_backend *out);
/* The next `successes` allocations succeed, every later one fails; -1 turns this off. */
void recap__raw_failing_fail_after(recap__raw_failing *failing, long successes);
/* An allocation fails when predicate(bytes, user) is true; NULL turns this off. */
void recap__raw_failing_set_predicate(recap__raw_failing *failing,
                                      recap__raw_fail_predicate predicate, void *user);
/* A simulated device capacity: allocations that would exceed it fail, and mem_get_info
 * reports it. 0: the inner backend's. */
void recap__raw_failing_set_capacity(recap__raw_failing *failing, size_t bytes);
void recap__raw_failing_counts_get(recap__raw_failing *failing, recap__raw_failing_counts *out);

/* ------------------------------------------------------------------------------------------
 * Allocator instances
 * ---------------------------------------------------------------------------------------- */

typedef struct recap__allocator recap__allocator;

typedef struct {
  recap_device device;           /* streams and events the allocator sees belong to it */
  const recap__raw_backend *raw; /* copied; its ctx must outlive the allocator */
  const char *conf;              /* RECAP_ALLOC_CONF syntax; NULL: defaults */
} recap__allocator_options;

/* RECAP_STATUS_INVALID_ARGUMENT (naming the key) on a bad configuration. */
recap_status recap__allocator_create(const recap__allocator_options *options,
                                     recap__allocator **out);
/* Releases every segment. RECAP_STATUS_BUSY (and nothing changes) while blocks are allocated
 * or waiting on other streams, a route is active, a private pool is still referenced, or a
 * capture is under way. NULL is accepted. */
recap_status recap__allocator_destroy(recap__allocator *allocator);

/* The process-wide allocator of `device`, created on first use (configured from
 * RECAP_ALLOC_CONF; a bad value fails here, every time, with the parser's message). */
recap_status recap__allocator_for_device(recap_device device, recap__allocator **out);

/* Whether `device`'s allocator has private pools: false under backend:cudaMallocAsync, whose
 * driver pool recap does not partition. Graphs and pipelines then capture without a pool (an
 * allocation inside such a capture is refused). True when the allocator cannot be created,
 * so that the pool call that follows reports why. */
bool recap__allocator_has_pools(recap_device device);

/* The instance forms of the public functions; they behave as documented in recap.h. Under
 * backend:cudaMallocAsync, stats, summary, snapshot and pool calls return
 * RECAP_STATUS_NOT_SUPPORTED (recap__allocator_stats is the exception: it has no status and
 * fills what the pool knows; see recap__allocator_stats_checked). */
recap_status recap__allocator_malloc(recap__allocator *a, size_t size, recap_stream *stream,
                                     void **out);
recap_status recap__allocator_free(recap__allocator *a, void *ptr);
/* Whether ptr is the start of a block `a` has allocated (and not yet freed). */
bool recap__allocator_owns(recap__allocator *a, void *ptr);
/* recap__allocator_free when `a` owns ptr (*owned = true, the free's status); else nothing
 * happens, *owned = false and RECAP_OK: recap_free asks each device's allocator in turn with
 * one lock and one lookup each, not an owns-then-free pair. */
recap_status recap__allocator_try_free(recap__allocator *a, void *ptr, bool *owned);
recap_status recap__allocator_record_stream(recap__allocator *a, void *ptr, recap_stream *stream);
recap_status recap__allocator_empty_cache(recap__allocator *a);
recap_status recap__allocator_set_memory_fraction(recap__allocator *a, double fraction);
void recap__allocator_stats(recap__allocator *a, recap_memory_stats *out);
/* As recap__allocator_stats, but RECAP_STATUS_NOT_SUPPORTED where the numbers would be wrong
 * (backend:cudaMallocAsync knows no blocks or segments). */
recap_status recap__allocator_stats_checked(recap__allocator *a, recap_memory_stats *out);
/* allocated/reserved current and peak: the numbers every backend knows. */
recap_status recap__allocator_totals(recap__allocator *a, size_t *allocated, size_t *reserved,
                                     size_t *max_allocated, size_t *max_reserved);
recap_status recap__allocator_ipc_handle(recap__allocator *a, void *ptr,
                                         recap_ipc_mem_handle *out, size_t *offset);
void recap__allocator_reset_peak(recap__allocator *a);
recap_status recap__allocator_summary(recap__allocator *a, char **text);
recap_status recap__allocator_snapshot_json(recap__allocator *a, char **json);

recap_status recap__allocator_pool_create(recap__allocator *a, recap_pool_id *out);
recap_status recap__allocator_pool_retain(recap__allocator *a, recap_pool_id pool);
recap_status recap__allocator_pool_release(recap__allocator *a, recap_pool_id pool);
recap_status recap__allocator_pool_stats(recap__allocator *a, recap_pool_id pool,
                                         recap_pool_stats *out);
recap_status recap__allocator_route_begin(recap__allocator *a, recap_pool_id pool,
                                          recap_stream *stream);
/* Routes `side` into the pool `routed` is routed to, until recap__allocator_route_end(a,
 * routed). RECAP_STATUS_INVALID_ARGUMENT when `routed` has no route of its own (it is itself
 * a side stream, or not routed); RECAP_STATUS_BUSY when `side` is routed elsewhere. Adding a
 * side stream twice is harmless. */
recap_status recap__allocator_route_add_stream(recap__allocator *a, recap_stream *routed,
                                               recap_stream *side);
recap_status recap__allocator_route_end(recap__allocator *a, recap_stream *stream);

/* The graph layer's entry point: recap__allocator_route_add_stream on the device's
 * process-wide allocator. */
recap_status recap__pool_route_add_stream(recap_device device, recap_stream *routed,
                                          recap_stream *side);

#ifdef __cplusplus
}
#endif

#endif
