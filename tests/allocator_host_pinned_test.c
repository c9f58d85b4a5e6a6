/*
 * allocator_host_pinned_test.c: the pinned host allocator (recap_host_malloc): size classes and
 * reuse, a block used by a stream is reused only after that stream's work completes, stats,
 * empty_cache, bad pointers. It is process-wide, so tests check differences in the stats.
 *
 * The host suite runs everywhere (ordinary memory, same caching and event rules); the CUDA
 * suite repeats the stream case with a CUDA stream and page-locked memory.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/backend.h"
#include "tests/test_util.h"

static recap_host_memory_stats host_stats(void) {
  recap_host_memory_stats s;
  CHECK_OK(recap_host_memory_stats_get(&s));
  return s;
}

static void test_freed_host_block_is_reused_for_its_size_class(void) {
  void *a = NULL, *b = NULL;
  CHECK_OK(recap_host_malloc(3000, &a));
  CU_ASSERT_PTR_NOT_NULL_FATAL(a);
  memset(a, 1, 3000);
  recap_host_memory_stats s0 = host_stats();
  CU_ASSERT_EQUAL(s0.pinned, test_have_cuda() ? 1 : 0);
  CHECK_OK(recap_host_free(a));
  CHECK_OK(recap_host_malloc(4000, &b)); /* same 4 KiB class */
  CU_ASSERT_PTR_EQUAL(b, a);
  recap_host_memory_stats s1 = host_stats();
  CU_ASSERT_EQUAL(s1.num_host_alloc, s0.num_host_alloc);
  CU_ASSERT_EQUAL(s1.allocated_bytes.current, s0.allocated_bytes.current);
  CHECK_OK(recap_host_free(b));
  void *zero = (void *)1;
  CHECK_OK(recap_host_malloc(0, &zero));
  CU_ASSERT_PTR_NULL(zero);
}

static void test_host_free_rejects_foreign_and_double_frees(void) {
  int local;
  CHECK_STATUS(recap_host_free(&local), RECAP_STATUS_INVALID_ARGUMENT);
  void *a = NULL;
  CHECK_OK(recap_host_malloc(100, &a));
  CHECK_OK(recap_host_free(a));
  CHECK_STATUS(recap_host_free(a), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_STATUS(recap_host_record_stream(a, NULL), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_OK(recap_host_free(NULL));
}

typedef struct {
  atomic_int *done;
} slow_args;

static recap_status slow_fn(void *p) {
  slow_args *args = p;
  struct timespec delay = {0, 60 * 1000 * 1000};
  nanosleep(&delay, NULL);
  atomic_store(args->done, 1);
  return RECAP_OK;
}

/* A block whose copy is still queued is not handed out again until the copy completed. */
static void test_host_block_is_reused_only_after_its_stream_completes(void) {
  recap_stream *s;
  CHECK_OK(recap_stream_create(test_device, 0, RECAP_STREAM_NON_BLOCKING, &s));
  void *dev = NULL;
  CHECK_OK(recap_malloc(test_device, 1 << 20, s, &dev));
  unsigned char *staging = NULL;
  CHECK_OK(recap_host_malloc(1 << 20, (void **)&staging));
  memset(staging, 0x42, 1 << 20);
  atomic_int done = 0;
  slow_args args = {&done};
  /* On CUDA the host function delays the stream too; the copy follows it. */
  CHECK_OK(s->backend->launch_host(s, slow_fn, &args, sizeof args));
  CHECK_OK(s->backend->memcpy_async(dev, staging, 1 << 20, s));
  CHECK_OK(recap_host_record_stream(staging + 5, s));
  CHECK_OK(recap_host_free(staging));
  void *again = NULL;
  CHECK_OK(recap_host_malloc(1 << 20, &again));
  /* Read `done` after the allocation: if the block came back, the copy had finished. */
  CU_ASSERT(again != staging || atomic_load(&done) == 1);
  CHECK_OK(recap_stream_synchronize(s));
  CU_ASSERT(host_stats().waiting_count >= 0);
  CHECK_OK(recap_host_free(again));
  /* Now the stream is done: the first block is reusable. */
  void *later = NULL, *later2 = NULL;
  CHECK_OK(recap_host_malloc(1 << 20, &later));
  CHECK_OK(recap_host_malloc(1 << 20, &later2));
  CU_ASSERT(later == staging || later2 == staging);
  unsigned char *back = malloc(1 << 20);
  CHECK_OK(s->backend->memcpy_async(back, dev, 1 << 20, s));
  CHECK_OK(recap_stream_synchronize(s));
  CU_ASSERT(back[0] == 0x42 && back[(1 << 20) - 1] == 0x42);
  free(back);
  CHECK_OK(recap_host_free(later));
  CHECK_OK(recap_host_free(later2));
  CHECK_OK(recap_free(dev));
  CHECK_OK(recap_stream_destroy(s));
}

static void test_host_empty_cache_releases_free_blocks(void) {
  void *a = NULL;
  CHECK_OK(recap_host_malloc(5 << 20, &a));
  CHECK_OK(recap_host_free(a));
  recap_host_memory_stats before = host_stats();
  CHECK_OK(recap_host_empty_cache());
  recap_host_memory_stats after = host_stats();
  CU_ASSERT(after.reserved_bytes.current <= before.reserved_bytes.current - (8 << 20));
  CU_ASSERT(after.num_host_free > before.num_host_free);
  CU_ASSERT_EQUAL(after.reserved_bytes.current - after.allocated_bytes.current >= 0, 1);
}

int main(void) {
  CU_pSuite host = test_add_suite("allocator_host_pinned/host", test_suite_use_host, NULL);
  CU_ADD_TEST(host, test_freed_host_block_is_reused_for_its_size_class);
  CU_ADD_TEST(host, test_host_free_rejects_foreign_and_double_frees);
  CU_ADD_TEST(host, test_host_block_is_reused_only_after_its_stream_completes);
  CU_ADD_TEST(host, test_host_empty_cache_releases_free_blocks);
  CU_pSuite cuda = test_add_cuda_suite("allocator_host_pinned/cuda", test_suite_use_cuda,
                                       test_suite_use_host);
  CU_ADD_TEST(cuda, test_host_block_is_reused_only_after_its_stream_completes);
  return test_run_all();
}
