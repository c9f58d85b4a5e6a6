/*
 * allocator_async_test.c: backend:cudaMallocAsync, the allocator over a stream-ordered pool:
 * what it gives (malloc, free in stream order, record_stream ordering, allocated/reserved
 * totals, empty_cache) and what it refuses with RECAP_STATUS_NOT_SUPPORTED instead of wrong
 * numbers (snapshot, summary, full stats, private pools, memory fraction, IPC, captures).
 *
 * The host suite runs over the host backend's emulation of the pool (frees run as host
 * functions in stream order); the CUDA suite re-runs the device cases on a GPU.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "allocator/allocator.h"
#include "runtime/backend.h"
#include "tests/allocator_check.h"
#include "tests/test_util.h"

enum { MIB = 1024 * 1024 };

typedef allocator_fixture fixture;

static void fx_open(fixture *f) {
  allocator_fixture_open(f, "backend:cudaMallocAsync", 0);
}

static void fx_close(fixture *f) {
  CHECK_OK(recap_stream_synchronize(f->s1));
  CHECK_OK(recap__allocator_destroy(f->a));
  recap__raw_failing_counts c;
  recap__raw_failing_counts_get(f->failing, &c);
  CU_ASSERT_EQUAL(c.live_allocations, 0);
  recap__raw_failing_destroy(f->failing);
  CHECK_OK(recap_stream_destroy(f->s1));
  CHECK_OK(recap_stream_destroy(f->s2));
}

static size_t allocated_of(recap__allocator *a) {
  size_t allocated, reserved, max_allocated, max_reserved;
  CHECK_OK(recap__allocator_totals(a, &allocated, &reserved, &max_allocated, &max_reserved));
  return allocated;
}

static size_t reserved_of(recap__allocator *a) {
  size_t allocated, reserved, max_allocated, max_reserved;
  CHECK_OK(recap__allocator_totals(a, &allocated, &reserved, &max_allocated, &max_reserved));
  return reserved;
}

static void test_async_allocates_usable_memory_and_counts_it(void) {
  fixture f;
  fx_open(&f);
  void *p = NULL;
  CHECK_OK(recap__allocator_malloc(f.a, 3 * MIB + 5, f.s1, &p));
  CU_ASSERT_PTR_NOT_NULL_FATAL(p);
  CU_ASSERT_EQUAL((uintptr_t)p % 256, 0);
  CU_ASSERT(recap__allocator_owns(f.a, p));
  CU_ASSERT_EQUAL(allocated_of(f.a), 3 * MIB + 5);
  CU_ASSERT(reserved_of(f.a) >= 3 * MIB + 5);
  unsigned char *host = malloc(3 * MIB + 5);
  CU_ASSERT_PTR_NOT_NULL_FATAL(host);
  CHECK_OK(f.s1->backend->memset_async(p, 0x77, 3 * MIB + 5, f.s1));
  CHECK_OK(f.s1->backend->memcpy_async(host, p, 3 * MIB + 5, f.s1));
  CHECK_OK(recap_stream_synchronize(f.s1));
  CU_ASSERT(host[0] == 0x77 && host[3 * MIB + 4] == 0x77);
  free(host);
  CHECK_OK(recap__allocator_free(f.a, p));
  CU_ASSERT_EQUAL(allocated_of(f.a), 0);
  CHECK_STATUS(recap__allocator_free(f.a, p), RECAP_STATUS_INVALID_ARGUMENT);
  recap_memory_stats s;
  recap__allocator_stats(f.a, &s);
  CU_ASSERT_EQUAL(s.allocated_bytes[RECAP_STAT_ALL].peak, 3 * MIB + 5);
  CHECK_OK(recap_stream_synchronize(f.s1));
  CHECK_OK(recap__allocator_empty_cache(f.a));
  fx_close(&f);
}

static void test_async_refuses_block_level_calls_with_not_supported(void) {
  fixture f;
  fx_open(&f);
  char *text = NULL;
  CHECK_STATUS(recap__allocator_snapshot_json(f.a, &text), RECAP_STATUS_NOT_SUPPORTED);
  CHECK_ERROR_MENTIONS("cudaMallocAsync");
  CHECK_STATUS(recap__allocator_summary(f.a, &text), RECAP_STATUS_NOT_SUPPORTED);
  recap_memory_stats stats;
  CHECK_STATUS(recap__allocator_stats_checked(f.a, &stats), RECAP_STATUS_NOT_SUPPORTED);
  CHECK_ERROR_MENTIONS("splitting");
  recap_pool_id pool = {0};
  CHECK_STATUS(recap__allocator_pool_create(f.a, &pool), RECAP_STATUS_NOT_SUPPORTED);
  CHECK_ERROR_MENTIONS("private pools");
  recap_pool_stats ps;
  CHECK_STATUS(recap__allocator_pool_stats(f.a, pool, &ps), RECAP_STATUS_NOT_SUPPORTED);
  CHECK_STATUS(recap__allocator_route_begin(f.a, pool, f.s1), RECAP_STATUS_NOT_SUPPORTED);
  CHECK_STATUS(recap__allocator_set_memory_fraction(f.a, 0.5), RECAP_STATUS_NOT_SUPPORTED);
  void *p = NULL;
  CHECK_OK(recap__allocator_malloc(f.a, 4096, f.s1, &p));
  recap_ipc_mem_handle h;
  size_t offset = 0;
  CHECK_STATUS(recap__allocator_ipc_handle(f.a, p, &h, &offset), RECAP_STATUS_NOT_SUPPORTED);
  CHECK_ERROR_MENTIONS("IPC");
  /* A live block keeps the allocator alive. */
  CHECK_STATUS(recap__allocator_destroy(f.a), RECAP_STATUS_BUSY);
  CHECK_OK(recap__allocator_free(f.a, p));
  fx_close(&f);
}

static void test_async_allocation_on_a_capturing_stream_is_refused(void) {
  fixture f;
  fx_open(&f);
  void *p = NULL;
  CHECK_OK(recap__allocator_malloc(f.a, 4096, f.s1, &p));
  recap_graph *g;
  CHECK_OK(recap_graph_create(&g));
  /* The graph's own pool comes from the process-wide (caching) allocator; this test's
   * allocator is async. */
  CHECK_OK(recap_graph_capture_begin(g, f.s1, NULL, RECAP_CAPTURE_MODE_THREAD_LOCAL));
  void *q = NULL;
  CHECK_STATUS(recap__allocator_malloc(f.a, 4096, f.s1, &q), RECAP_STATUS_NOT_SUPPORTED);
  CHECK_ERROR_MENTIONS("capturing");
  CHECK_STATUS(recap__allocator_free(f.a, p), RECAP_STATUS_NOT_SUPPORTED);
  CHECK_STATUS(recap__allocator_empty_cache(f.a), RECAP_STATUS_ILLEGAL_DURING_CAPTURE);
  CHECK_OK(recap_graph_capture_end(g));
  CHECK_OK(recap_graph_destroy(g));
  /* The refused free left the block live and usable. */
  CU_ASSERT(recap__allocator_owns(f.a, p));
  CHECK_OK(recap__allocator_free(f.a, p));
  fx_close(&f);
}

typedef struct {
  atomic_int *done;
} slow_args;

static recap_status slow_fn(void *p) {
  slow_args *args = p;
  struct timespec delay = {0, 50 * 1000 * 1000};
  nanosleep(&delay, NULL);
  atomic_store(args->done, 1);
  return RECAP_OK;
}

/* The free of a block another stream used waits for that stream: on the host emulation the
 * memory is released only after the other stream's slow work. */
static void test_async_free_waits_for_recorded_streams(void) {
  fixture f;
  fx_open(&f);
  void *p = NULL;
  CHECK_OK(recap__allocator_malloc(f.a, 8 * MIB, f.s1, &p));
  size_t with_block = reserved_of(f.a);
  atomic_int done = 0;
  slow_args args = {&done};
  CHECK_OK(f.s2->backend->launch_host(f.s2, slow_fn, &args, sizeof args));
  CHECK_OK(recap__allocator_record_stream(f.a, (char *)p + 100, f.s2));
  CHECK_STATUS(recap__allocator_record_stream(f.a, (char *)p + 8 * MIB, f.s2),
               RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_OK(recap__allocator_free(f.a, p));
  /* Read the pool first: it can shrink only after the slow work finished. */
  size_t right_after = reserved_of(f.a);
  if (test_device.backend == RECAP_BACKEND_HOST)
    CU_ASSERT(right_after == with_block || atomic_load(&done) == 1);
  CHECK_OK(recap_stream_synchronize(f.s1));
  CU_ASSERT_EQUAL(atomic_load(&done), 1);
  if (test_device.backend == RECAP_BACKEND_HOST)
    CU_ASSERT_EQUAL(reserved_of(f.a), with_block - 8 * MIB);
  fx_close(&f);
}

static void test_async_out_of_memory_is_reported_after_one_retry(void) {
  fixture f;
  fx_open(&f);
  recap__raw_failing_fail_after(f.failing, 0);
  void *p = NULL;
  CHECK_STATUS(recap__allocator_malloc(f.a, 4096, f.s1, &p), RECAP_STATUS_OUT_OF_MEMORY);
  recap_memory_stats s;
  recap__allocator_stats(f.a, &s);
  CU_ASSERT_EQUAL(s.num_ooms, 1);
  CU_ASSERT_EQUAL(s.num_alloc_retries, 1);
  recap__raw_failing_fail_after(f.failing, -1);
  fx_close(&f);
}

static void test_async_conf_is_accepted_and_combinations_checked(void) {
  CHECK_OK(recap_alloc_conf_check("backend:cudaMallocAsync"));
  CHECK_STATUS(recap_alloc_conf_check("backend:cudaMallocAsync,expandable_segments:True"),
               RECAP_STATUS_INVALID_ARGUMENT);
  recap__alloc_config c;
  CHECK_OK(recap__alloc_config_parse("backend:cudaMallocAsync", &c));
  CU_ASSERT(c.async && !c.uncached && !c.expandable);
}

int main(void) {
  static const test_case tests[] = {
#define T_(fn, dev) {#fn, fn, dev}
      T_(test_async_allocates_usable_memory_and_counts_it, true),
      T_(test_async_refuses_block_level_calls_with_not_supported, true),
      T_(test_async_allocation_on_a_capturing_stream_is_refused, true),
      T_(test_async_free_waits_for_recorded_streams, true),
      T_(test_async_out_of_memory_is_reported_after_one_retry, true),
      T_(test_async_conf_is_accepted_and_combinations_checked, false),
#undef T_
  };
  test_add_host_and_cuda_suites("allocator_async", tests, sizeof tests / sizeof tests[0]);
  return test_run_all();
}
