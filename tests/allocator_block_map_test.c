/*
 * allocator_block_map_test.c: the structures behind the allocator's O(1) malloc+free pair:
 * the live block map (address -> allocated block hash), the segment index that resolves
 * interior pointers, recycled block records, and the rules the cached pair must keep
 * (a block goes back only to its stream, never while another stream may still use it, and the
 * stats stay exact).
 *
 * The map's own tests need no device; the allocator tests run on the host backend in CI and
 * again in the CUDA suite on a GPU (inactive elsewhere).
 */
#include <stdlib.h>
#include <string.h>

#include "allocator/allocator.h"
#include "allocator/block_map.h"
#include "runtime/backend.h"
#include "runtime/capture.h"
#include "tests/allocator_check.h"
#include "tests/test_util.h"

/* ------------------------------------------------------------------------------------------
 * The block map on its own (blocks are opaque to it: any distinct pointers do)
 * ---------------------------------------------------------------------------------------- */

enum { MAP_KEYS = 20000 };

static uintptr_t key_of(int i) {
  /* Block-like addresses: 512-byte multiples in three "segments" far apart, so many keys
   * share low bits and probe runs form and wrap. */
  return ((uintptr_t)(1 + i % 3) << 40) + (uintptr_t)(i / 3) * 512;
}

static struct recap__block *value_of(int i) {
  return (struct recap__block *)(uintptr_t)(0x1000 + 16 * (uintptr_t)i);
}

static void test_block_map_keeps_every_entry_through_growth_and_removals(void) {
  recap__block_map map = {0};
  CU_ASSERT_PTR_NULL(recap__block_map_find(&map, key_of(0)));
  CU_ASSERT_PTR_NULL(recap__block_map_remove(&map, key_of(0)));
  for (int i = 0; i < MAP_KEYS; i++) {
    CHECK_OK(recap__block_map_reserve(&map, 1));
    recap__block_map_insert(&map, key_of(i), value_of(i));
  }
  CU_ASSERT_EQUAL(map.count, MAP_KEYS);
  CU_ASSERT(map.capacity >= 2 * MAP_KEYS);
  /* Remove every third key (i = 3j), in a scattered order: j -> j * 7919 mod THIRDS is a
   * permutation (7919 is a prime larger than THIRDS). */
  enum { THIRDS = (MAP_KEYS + 2) / 3 };
  for (long j = 0; j < THIRDS; j++) {
    int k = (int)(j * 7919 % THIRDS) * 3;
    CU_ASSERT_PTR_EQUAL(recap__block_map_remove(&map, key_of(k)), value_of(k));
  }
  CU_ASSERT_EQUAL(map.count, MAP_KEYS - THIRDS);
  for (int i = 0; i < MAP_KEYS; i++) {
    struct recap__block *want = i % 3 == 0 ? NULL : value_of(i);
    CU_ASSERT_PTR_EQUAL(recap__block_map_find(&map, key_of(i)), want);
  }
  /* Remove the rest: the map ends empty, and absent keys stay absent. */
  for (int i = 0; i < MAP_KEYS; i++) recap__block_map_remove(&map, key_of(i));
  CU_ASSERT_EQUAL(map.count, 0);
  for (int i = 0; i < MAP_KEYS; i++) CU_ASSERT_PTR_NULL(recap__block_map_find(&map, key_of(i)));
  recap__block_map_destroy(&map);
  CU_ASSERT_PTR_NULL(map.slots);
}

static void test_block_map_remove_of_an_absent_key_changes_nothing(void) {
  recap__block_map map = {0};
  CHECK_OK(recap__block_map_reserve(&map, 3));
  recap__block_map_insert(&map, 512, value_of(1));
  recap__block_map_insert(&map, 1024, value_of(2));
  CU_ASSERT_PTR_NULL(recap__block_map_remove(&map, 1536));
  CU_ASSERT_PTR_NULL(recap__block_map_remove(&map, 0));
  CU_ASSERT_EQUAL(map.count, 2);
  CU_ASSERT_PTR_EQUAL(recap__block_map_find(&map, 512), value_of(1));
  CU_ASSERT_PTR_EQUAL(recap__block_map_find(&map, 1024), value_of(2));
  recap__block_map_destroy(&map);
}

/* ------------------------------------------------------------------------------------------
 * The allocator's fast paths
 * ---------------------------------------------------------------------------------------- */

enum { KIB = 1024, MIB = 1024 * 1024 };

typedef allocator_fixture fixture;

static void fx_open(fixture *f) {
  allocator_fixture_open(f, NULL, 0);
}

/* Destroys the allocator (every block freed by then) and checks all raw memory came back. */
static void fx_close(fixture *f) {
  CHECK_OK(recap__allocator_destroy(f->a));
  recap__raw_failing_counts counts;
  recap__raw_failing_counts_get(f->failing, &counts);
  CU_ASSERT_EQUAL(counts.live_allocations, 0);
  recap__raw_failing_destroy(f->failing);
  CHECK_OK(recap_stream_destroy(f->s1));
  CHECK_OK(recap_stream_destroy(f->s2));
}

static recap_memory_stats stats_of(fixture *f) {
  recap_memory_stats s;
  recap__allocator_stats(f->a, &s);
  return s;
}

static void *alloc_ok(fixture *f, size_t size, recap_stream *s) {
  void *p = NULL;
  CHECK_OK(recap__allocator_malloc(f->a, size, s, &p));
  CU_ASSERT_PTR_NOT_NULL_FATAL(p);
  return p;
}

enum { PAIRS = 10000 };

/* The benchmark's loop: one block, split from its segment and merged back every time. */
static void test_cached_pair_reuses_one_block_with_exact_stats(void) {
  fixture f;
  fx_open(&f);
  void *first = alloc_ok(&f, 512, f.s1);
  CHECK_OK(recap__allocator_free(f.a, first));
  for (int i = 0; i < PAIRS; i++) {
    void *p = alloc_ok(&f, 500, f.s1);
    CU_ASSERT_PTR_EQUAL(p, first);
    CHECK_OK(recap__allocator_free(f.a, p));
  }
  recap_memory_stats s = stats_of(&f);
  CU_ASSERT_EQUAL(s.num_device_alloc, 1);
  CU_ASSERT_EQUAL(s.allocated_count[RECAP_STAT_ALL].current, 0);
  CU_ASSERT_EQUAL(s.allocated_count[RECAP_STAT_SMALL].allocated, PAIRS + 1);
  CU_ASSERT_EQUAL(s.allocated_bytes[RECAP_STAT_ALL].allocated, (PAIRS + 1) * 512);
  CU_ASSERT_EQUAL(s.allocated_bytes[RECAP_STAT_ALL].freed, (PAIRS + 1) * 512);
  CU_ASSERT_EQUAL(s.allocated_bytes[RECAP_STAT_ALL].peak, 512);
  CU_ASSERT_EQUAL(s.requested_bytes[RECAP_STAT_ALL].allocated, 512 + PAIRS * 500);
  CU_ASSERT_EQUAL(s.active_count[RECAP_STAT_ALL].current, 0);
  /* Merged back every time: the segment is one free block again, not a split one. */
  CU_ASSERT_EQUAL(s.inactive_split_count[RECAP_STAT_ALL].current, 0);
  allocator_check_consistent(f.a);
  fx_close(&f);
}

/* Two streams take turns: each gets back only blocks of its own segment. */
static void test_cached_pair_hands_blocks_only_to_their_stream(void) {
  fixture f;
  fx_open(&f);
  void *p1 = alloc_ok(&f, 64 * KIB, f.s1);
  CHECK_OK(recap__allocator_free(f.a, p1));
  void *p2 = alloc_ok(&f, 64 * KIB, f.s2);
  CU_ASSERT_PTR_NOT_EQUAL(p2, p1);
  CHECK_OK(recap__allocator_free(f.a, p2));
  for (int i = 0; i < 100; i++) {
    void *q1 = alloc_ok(&f, 64 * KIB, f.s1);
    void *q2 = alloc_ok(&f, 64 * KIB, f.s2);
    CU_ASSERT_PTR_EQUAL(q1, p1);
    CU_ASSERT_PTR_EQUAL(q2, p2);
    CHECK_OK(recap__allocator_free(f.a, q2));
    CHECK_OK(recap__allocator_free(f.a, q1));
  }
  CU_ASSERT_EQUAL(stats_of(&f).reserved_count[RECAP_STAT_ALL].current, 2);
  allocator_check_consistent(f.a);
  fx_close(&f);
}

/* A block freed while another stream may still use it is handed to nobody, on either
 * stream, until that use is known to be over. A capture on a third stream holds the free back
 * (no event may be recorded while one is under way), on both backends alike. */
static void test_block_with_pending_uses_is_handed_to_no_stream(void) {
  fixture f;
  fx_open(&f);
  recap_stream *s3 = NULL;
  CHECK_OK(recap_stream_create(test_device, 0, RECAP_STREAM_NON_BLOCKING, &s3));
  void *a = alloc_ok(&f, 4 * KIB, f.s1);
  CHECK_OK(recap__allocator_record_stream(f.a, a, f.s2));
  CHECK_OK(recap__capture_begin(s3, RECAP_CAPTURE_MODE_GLOBAL));
  CHECK_OK(recap__allocator_free(f.a, a));
  CU_ASSERT_FALSE(recap__allocator_owns(f.a, a));
  CHECK_STATUS(recap__allocator_free(f.a, a), RECAP_STATUS_INVALID_ARGUMENT);
  void *b = alloc_ok(&f, 4 * KIB, f.s1);
  void *c = alloc_ok(&f, 4 * KIB, f.s2);
  CU_ASSERT_PTR_NOT_EQUAL(b, a);
  CU_ASSERT_PTR_NOT_EQUAL(c, a);
  CU_ASSERT_EQUAL(stats_of(&f).active_count[RECAP_STAT_ALL].current, 3);
  CU_ASSERT_EQUAL(stats_of(&f).allocated_count[RECAP_STAT_ALL].current, 2);
  recap__graph *graph = NULL;
  CHECK_OK(recap__capture_end(s3, &graph));
  if (graph) s3->backend->graph_destroy(graph);
  CHECK_OK(recap_stream_synchronize(f.s2));
  /* The capture-end hook recorded the event; once it completed, a is the best fit again. */
  void *d = alloc_ok(&f, 4 * KIB, f.s1);
  CU_ASSERT_PTR_EQUAL(d, a);
  CHECK_OK(recap__allocator_free(f.a, b));
  CHECK_OK(recap__allocator_free(f.a, c));
  CHECK_OK(recap__allocator_free(f.a, d));
  allocator_check_consistent(f.a);
  fx_close(&f);
  CHECK_OK(recap_stream_destroy(s3));
}

enum { LIVE = 3000 };

/* Enough live blocks to grow the live map many times over, in several segments of two
 * streams; freed in a scattered order, each exactly once. */
static void test_thousands_of_live_blocks_are_each_found_by_free(void) {
  fixture f;
  fx_open(&f);
  void **p = calloc(LIVE, sizeof *p);
  CU_ASSERT_PTR_NOT_NULL_FATAL(p);
  for (int i = 0; i < LIVE; i++) {
    size_t size = (size_t)(1 + i % 7) * KIB;
    p[i] = alloc_ok(&f, size, i % 2 ? f.s1 : f.s2);
  }
  CU_ASSERT_EQUAL(stats_of(&f).allocated_count[RECAP_STAT_ALL].current, LIVE);
  allocator_check_consistent(f.a);
  for (int i = 0; i < LIVE; i++) {
    int k = (int)(((long)i * 1543) % LIVE); /* 1543 is prime to 3000: a permutation */
    CU_ASSERT(recap__allocator_owns(f.a, p[k]));
    CU_ASSERT_FALSE(recap__allocator_owns(f.a, (char *)p[k] + 512));
    CHECK_STATUS(recap__allocator_free(f.a, (char *)p[k] + 512), RECAP_STATUS_INVALID_ARGUMENT);
    CHECK_OK(recap__allocator_free(f.a, p[k]));
    CU_ASSERT_FALSE(recap__allocator_owns(f.a, p[k]));
  }
  recap_memory_stats s = stats_of(&f);
  CU_ASSERT_EQUAL(s.allocated_count[RECAP_STAT_ALL].current, 0);
  CU_ASSERT_EQUAL(s.allocated_bytes[RECAP_STAT_ALL].current, 0);
  CU_ASSERT_EQUAL(s.inactive_split_count[RECAP_STAT_ALL].current, 0);
  allocator_check_consistent(f.a);
  free(p);
  fx_close(&f);
}

/* record_stream names a block by any address inside it: the segment index finds the segment
 * and its block list the block, in the middle of a segment of many blocks and in a second
 * segment; addresses in a segment's free rest name nothing. */
static void test_interior_pointers_find_their_block_through_the_segment_index(void) {
  fixture f;
  fx_open(&f);
  char *small[8];
  for (int i = 0; i < 8; i++) small[i] = alloc_ok(&f, 8 * KIB, f.s1);
  char *large = alloc_ok(&f, 4 * MIB, f.s1); /* a 20 MiB segment of its own */
  CHECK_OK(recap__allocator_record_stream(f.a, small[5] + 8 * KIB - 1, f.s2));
  CHECK_OK(recap__allocator_record_stream(f.a, large + 3 * MIB, f.s2));
  CHECK_STATUS(recap__allocator_record_stream(f.a, large + 4 * MIB, f.s2),
               RECAP_STATUS_INVALID_ARGUMENT); /* the free rest of the segment */
  CHECK_STATUS(recap__allocator_record_stream(f.a, small[7] + 8 * KIB, f.s2),
               RECAP_STATUS_INVALID_ARGUMENT); /* the small segment's free tail */
  for (int i = 0; i < 8; i++) CHECK_OK(recap__allocator_free(f.a, small[i]));
  CHECK_OK(recap__allocator_free(f.a, large));
  /* The two blocks with a use on s2 waited for it; the others were free at once. */
  recap_memory_stats s = stats_of(&f);
  CU_ASSERT(s.active_count[RECAP_STAT_ALL].current <= 2);
  CHECK_OK(recap_stream_synchronize(f.s2));
  CHECK_OK(recap__allocator_empty_cache(f.a));
  s = stats_of(&f);
  CU_ASSERT_EQUAL(s.active_count[RECAP_STAT_ALL].current, 0);
  CU_ASSERT_EQUAL(s.reserved_count[RECAP_STAT_ALL].current, 0);
  allocator_check_consistent(f.a);
  fx_close(&f);
}

int main(void) {
  CU_pSuite map = test_add_suite("allocator_block_map/map", NULL, NULL);
  CU_add_test(map, "test_block_map_keeps_every_entry_through_growth_and_removals",
              test_block_map_keeps_every_entry_through_growth_and_removals);
  CU_add_test(map, "test_block_map_remove_of_an_absent_key_changes_nothing",
              test_block_map_remove_of_an_absent_key_changes_nothing);
  struct {
    const char *name;
    CU_TestFunc fn;
  } tests[] = {
#define T_(fn) {#fn, fn}
      T_(test_cached_pair_reuses_one_block_with_exact_stats),
      T_(test_cached_pair_hands_blocks_only_to_their_stream),
      T_(test_block_with_pending_uses_is_handed_to_no_stream),
      T_(test_thousands_of_live_blocks_are_each_found_by_free),
      T_(test_interior_pointers_find_their_block_through_the_segment_index),
#undef T_
  };
  size_t n = sizeof tests / sizeof tests[0];
  CU_pSuite host = test_add_suite("allocator_block_map/host", test_suite_use_host, NULL);
  for (size_t i = 0; i < n; i++) CU_add_test(host, tests[i].name, tests[i].fn);
  CU_pSuite cuda =
      test_add_cuda_suite("allocator_block_map/cuda", test_suite_use_cuda, test_suite_use_host);
  for (size_t i = 0; i < n; i++) CU_add_test(cuda, tests[i].name, tests[i].fn);
  return test_run_all();
}
