/*
 * allocator_test.c: the caching allocator: size classes, split/merge, streams, record_stream,
 * private pools, captures, out-of-memory handling, configuration, stats vs snapshot.
 *
 * Most tests own an allocator instance over the failing raw backend (wrapping the device's
 * runtime memory), so each starts from an empty allocator and can inject out-of-memory. The
 * host suite runs everything in CI; the CUDA suite re-runs the device-specific cases on a GPU
 * and is inactive elsewhere.
 */
#include "allocator/allocator.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/backend.h"
#include "runtime/capture.h"
#include "tests/allocator_check.h"
#include "tests/test_util.h"

enum { KIB = 1024, MIB = 1024 * 1024 };

/* The device the running suite tests (set by the suite's init function). */

/* ------------------------------------------------------------------------------------------
 * Fixture: an allocator of our own over a failing backend over the device's memory
 * ---------------------------------------------------------------------------------------- */

typedef struct {
  recap__raw_runtime runtime;
  recap__raw_backend inner, raw;
  recap__raw_failing *failing;
  recap__allocator *a;
  recap_stream *s1, *s2, *s3;
} fixture;

static void fx_open(fixture *f, const char *conf) {
  memset(f, 0, sizeof *f);
  CHECK_OK(recap__raw_runtime_init(&f->runtime, test_device, &f->inner));
  CHECK_OK(recap__raw_failing_create(&f->inner, &f->failing));
  recap__raw_failing_backend(f->failing, &f->raw);
  recap__allocator_options options = {.device = test_device, .raw = &f->raw, .conf = conf};
  CHECK_OK(recap__allocator_create(&options, &f->a));
  CHECK_OK(recap_stream_create(test_device, 0, RECAP_STREAM_NON_BLOCKING, &f->s1));
  CHECK_OK(recap_stream_create(test_device, 0, RECAP_STREAM_NON_BLOCKING, &f->s2));
  CHECK_OK(recap_stream_create(test_device, 0, RECAP_STREAM_NON_BLOCKING, &f->s3));
}

/* Destroys the allocator (every block must be freed by then) and checks that it returned
 * all of its raw memory. */
static void fx_close(fixture *f) {
  CHECK_OK(recap__allocator_destroy(f->a));
  recap__raw_failing_counts counts;
  recap__raw_failing_counts_get(f->failing, &counts);
  CU_ASSERT_EQUAL(counts.live_allocations, 0);
  CU_ASSERT_EQUAL(counts.live_bytes, 0);
  recap__raw_failing_destroy(f->failing);
  CHECK_OK(recap_stream_destroy(f->s1));
  CHECK_OK(recap_stream_destroy(f->s2));
  CHECK_OK(recap_stream_destroy(f->s3));
}

static recap_memory_stats stats_of(fixture *f) {
  recap_memory_stats s;
  recap__allocator_stats(f->a, &s);
  return s;
}

/* The one block (over all segments) at `address`; NULL if none. */
static json_t *snapshot_block(json_t *root, uintptr_t address) {
  size_t i, j;
  json_t *seg, *b;
  json_array_foreach(json_object_get(root, "segments"), i, seg) {
    json_array_foreach(json_object_get(seg, "blocks"), j, b) {
      if ((uintptr_t)json_int(b, "address") == address) return b;
    }
  }
  return NULL;
}

static json_t *snapshot_segment_of(json_t *root, uintptr_t address) {
  size_t i;
  json_t *seg;
  json_array_foreach(json_object_get(root, "segments"), i, seg) {
    uintptr_t base = (uintptr_t)json_int(seg, "address");
    if (address >= base && address < base + (uintptr_t)json_int(seg, "total_size")) return seg;
  }
  return NULL;
}

/* The base address of the segment holding `p` (0 if none). */
static uintptr_t snapshot_segment_of_p(recap__allocator *a, void *p) {
  json_t *root = allocator_snapshot(a);
  json_t *seg = snapshot_segment_of(root, (uintptr_t)p);
  uintptr_t base = seg ? (uintptr_t)json_int(seg, "address") : 0;
  json_decref(root);
  return base;
}

static const char *block_state(recap__allocator *a, void *p) {
  static char state[32];
  json_t *root = allocator_snapshot(a);
  json_t *b = snapshot_block(root, (uintptr_t)p);
  snprintf(state, sizeof state, "%s", b ? json_string_value(json_object_get(b, "state")) : "none");
  json_decref(root);
  return state;
}

static void *alloc_ok(fixture *f, size_t size, recap_stream *s) {
  void *p = NULL;
  CHECK_OK(recap__allocator_malloc(f->a, size, s, &p));
  CU_ASSERT_PTR_NOT_NULL_FATAL(p);
  CU_ASSERT_EQUAL((uintptr_t)p % 256, 0);
  allocator_check_consistent(f->a);
  return p;
}

static void free_ok(fixture *f, void *p) {
  CHECK_OK(recap__allocator_free(f->a, p));
  allocator_check_consistent(f->a);
}

/* ------------------------------------------------------------------------------------------
 * Size classes and rounding
 * ---------------------------------------------------------------------------------------- */

static void test_round_size_uses_512_byte_granularity(void) {
  recap__alloc_config c;
  recap__alloc_config_default(&c);
  CU_ASSERT_EQUAL(recap__alloc_round_size(&c, 1), 512);
  CU_ASSERT_EQUAL(recap__alloc_round_size(&c, 512), 512);
  CU_ASSERT_EQUAL(recap__alloc_round_size(&c, 513), 1024);
  CU_ASSERT_EQUAL(recap__alloc_round_size(&c, MIB), MIB);
  CU_ASSERT_EQUAL(recap__alloc_round_size(&c, 84 * MIB + 1), 84 * MIB + 512);
}

static void test_roundup_power2_divisions_rounds_84_mib_to_96_mib(void) {
  recap__alloc_config c;
  CHECK_OK(recap__alloc_config_parse("roundup_power2_divisions:4", &c));
  CU_ASSERT_EQUAL(recap__alloc_round_size(&c, 84 * MIB), 96 * MIB);
  CU_ASSERT_EQUAL(recap__alloc_round_size(&c, 64 * MIB), 64 * MIB);
  CU_ASSERT_EQUAL(recap__alloc_round_size(&c, 65 * MIB), 80 * MIB);
  CU_ASSERT_EQUAL(recap__alloc_round_size(&c, 80 * MIB), 80 * MIB);
  CU_ASSERT_EQUAL(recap__alloc_round_size(&c, 97 * MIB), 112 * MIB);
  /* Up to 512 * divisions bytes, plain 512-byte rounding applies. */
  CU_ASSERT_EQUAL(recap__alloc_round_size(&c, 2000), 2048);
  CU_ASSERT_EQUAL(recap__alloc_round_size(&c, 1500), 1536);
  CU_ASSERT_EQUAL(recap__alloc_round_size(&c, 3000), 3072); /* 2048 / 4 steps of 512 */
}

static void test_roundup_divisions_list_applies_per_interval(void) {
  recap__alloc_config c;
  CHECK_OK(recap__alloc_config_parse("roundup_power2_divisions:[64:4,>:1]", &c));
  CU_ASSERT_EQUAL(recap__alloc_round_size(&c, 84 * MIB), 96 * MIB); /* 64-128 MiB: 4 */
  CU_ASSERT_EQUAL(recap__alloc_round_size(&c, 3 * MIB + 1),
                  3 * MIB + 512 * KIB);                                         /* below: also 4 */
  CU_ASSERT_EQUAL(recap__alloc_round_size(&c, 200 * MIB + 1), 200 * MIB + 512); /* >: 1 */
}

static void test_segment_size_follows_size_class(void) {
  CU_ASSERT_EQUAL(recap__alloc_segment_size(512, false), 2 * MIB);
  CU_ASSERT_EQUAL(recap__alloc_segment_size(MIB, false), 2 * MIB);
  CU_ASSERT_EQUAL(recap__alloc_segment_size(MIB + 512, false), 20 * MIB);
  CU_ASSERT_EQUAL(recap__alloc_segment_size(10 * MIB - 512, false), 20 * MIB);
  CU_ASSERT_EQUAL(recap__alloc_segment_size(10 * MIB, false), 10 * MIB);
  CU_ASSERT_EQUAL(recap__alloc_segment_size(11 * MIB, false), 12 * MIB);
}

static void test_private_pool_segments_round_1_to_10_mib_up_to_2_mib(void) {
  CU_ASSERT_EQUAL(recap__alloc_segment_size(512, true), 2 * MIB);
  CU_ASSERT_EQUAL(recap__alloc_segment_size(MIB + 512, true), 2 * MIB);
  CU_ASSERT_EQUAL(recap__alloc_segment_size(5 * MIB, true), 6 * MIB);
  CU_ASSERT_EQUAL(recap__alloc_segment_size(10 * MIB - 512, true), 10 * MIB);
  CU_ASSERT_EQUAL(recap__alloc_segment_size(11 * MIB, true), 12 * MIB);
}

/* ------------------------------------------------------------------------------------------
 * Split and merge
 * ---------------------------------------------------------------------------------------- */

static void test_small_requests_are_packed_into_one_2_mib_segment(void) {
  fixture f;
  fx_open(&f, NULL);
  char *a = alloc_ok(&f, 100, f.s1);
  char *b = alloc_ok(&f, 600, f.s1);
  char *c = alloc_ok(&f, 512, f.s1);
  CU_ASSERT_EQUAL(b, a + 512);
  CU_ASSERT_EQUAL(c, b + 1024);
  recap_memory_stats s = stats_of(&f);
  CU_ASSERT_EQUAL(s.reserved_bytes[RECAP_STAT_SMALL].current, 2 * MIB);
  CU_ASSERT_EQUAL(s.reserved_count[RECAP_STAT_ALL].current, 1);
  CU_ASSERT_EQUAL(s.allocated_bytes[RECAP_STAT_SMALL].current, 2048);
  CU_ASSERT_EQUAL(s.requested_bytes[RECAP_STAT_ALL].current, 1212);
  CU_ASSERT_EQUAL(s.inactive_split_bytes[RECAP_STAT_SMALL].current, 2 * MIB - 2048);
  free_ok(&f, a);
  free_ok(&f, b);
  free_ok(&f, c);
  fx_close(&f);
}

static void test_freed_neighbours_merge_back_into_one_block(void) {
  fixture f;
  fx_open(&f, NULL);
  char *a = alloc_ok(&f, 4096, f.s1);
  char *b = alloc_ok(&f, 4096, f.s1);
  char *c = alloc_ok(&f, 4096, f.s1);
  free_ok(&f, b);
  recap_memory_stats s = stats_of(&f);
  CU_ASSERT_EQUAL(s.inactive_split_count[RECAP_STAT_ALL].current, 2); /* b's hole and the tail */
  free_ok(&f, a);                                                     /* merges with b's hole */
  s = stats_of(&f);
  CU_ASSERT_EQUAL(s.inactive_split_count[RECAP_STAT_ALL].current, 2);
  CU_ASSERT_EQUAL(s.inactive_split_bytes[RECAP_STAT_ALL].current, 2 * MIB - 4096);
  free_ok(&f, c); /* everything merges: one unsplit free block */
  s = stats_of(&f);
  CU_ASSERT_EQUAL(s.inactive_split_count[RECAP_STAT_ALL].current, 0);
  CU_ASSERT_EQUAL(s.reserved_bytes[RECAP_STAT_ALL].current, 2 * MIB);
  json_t *root = allocator_snapshot(f.a);
  json_t *seg = json_array_get(json_object_get(root, "segments"), 0);
  CU_ASSERT_EQUAL(json_array_size(json_object_get(seg, "blocks")), 1);
  json_decref(root);
  /* The merged block serves a request as large as the three together, at the same place. */
  char *big = alloc_ok(&f, 3 * 4096, f.s1);
  CU_ASSERT_EQUAL(big, a);
  free_ok(&f, big);
  CHECK_OK(recap__allocator_empty_cache(f.a));
  CU_ASSERT_EQUAL(stats_of(&f).reserved_bytes[RECAP_STAT_ALL].current, 0);
  allocator_check_consistent(f.a);
  fx_close(&f);
}

static void test_best_fit_takes_the_smallest_block_that_fits(void) {
  fixture f;
  fx_open(&f, NULL);
  char *p[6];
  for (int i = 0; i < 6; i++) p[i] = alloc_ok(&f, (i % 2 == 0) ? 8192 : 512, f.s1);
  /* Blocks of 8 KiB and 512 bytes alternate. Free p0 (an 8 KiB hole) and p3 + p4 (merged
   * into an 8.5 KiB hole); the segment's 2 MiB tail is a third candidate. */
  free_ok(&f, p[0]);
  free_ok(&f, p[3]);
  free_ok(&f, p[4]); /* merges with p3: a hole of 8704 bytes */
  char *q = alloc_ok(&f, 8192, f.s1);
  CU_ASSERT_EQUAL(q, p[0]); /* exact fit beats the larger hole and the segment's tail */
  char *r = alloc_ok(&f, 8704, f.s1);
  CU_ASSERT_EQUAL(r, p[3]);
  free_ok(&f, q);
  free_ok(&f, r);
  free_ok(&f, p[1]);
  free_ok(&f, p[2]);
  free_ok(&f, p[5]);
  fx_close(&f);
}

static void test_large_blocks_split_only_when_the_rest_exceeds_1_mib(void) {
  fixture f;
  fx_open(&f, NULL);
  char *a = alloc_ok(&f, 5 * MIB, f.s1); /* a 20 MiB segment, split: 15 MiB stay free */
  recap_memory_stats s = stats_of(&f);
  CU_ASSERT_EQUAL(s.reserved_bytes[RECAP_STAT_LARGE].current, 20 * MIB);
  CU_ASSERT_EQUAL(s.allocated_bytes[RECAP_STAT_LARGE].current, 5 * MIB);
  /* 14.5 MiB of the 15 MiB rest: 0.5 MiB is not worth a block, the whole rest is used. */
  char *b = alloc_ok(&f, 14 * MIB + 512 * KIB, f.s1);
  CU_ASSERT_EQUAL(b, a + 5 * MIB);
  s = stats_of(&f);
  CU_ASSERT_EQUAL(s.allocated_bytes[RECAP_STAT_LARGE].current, 20 * MIB);
  CU_ASSERT_EQUAL(s.requested_bytes[RECAP_STAT_LARGE].current, 19 * MIB + 512 * KIB);
  CU_ASSERT_EQUAL(s.reserved_count[RECAP_STAT_ALL].current, 1);
  free_ok(&f, a);
  free_ok(&f, b);
  fx_close(&f);
}

static void test_max_split_size_keeps_oversize_blocks_whole(void) {
  fixture f;
  fx_open(&f, "max_split_size_mb:40");
  char *big = alloc_ok(&f, 50 * MIB, f.s1);
  free_ok(&f, big);
  /* A small-enough request never takes (and chops) the oversize block. */
  char *mid = alloc_ok(&f, 12 * MIB, f.s1);
  CU_ASSERT_NOT_EQUAL(mid, big);
  /* An oversize request takes it whole when it wastes less than 20 MiB. */
  char *again = alloc_ok(&f, 45 * MIB, f.s1);
  CU_ASSERT_EQUAL(again, big);
  CU_ASSERT_EQUAL(stats_of(&f).allocated_bytes[RECAP_STAT_ALL].current, 50 * MIB + 12 * MIB);
  free_ok(&f, again);
  free_ok(&f, mid);
  fx_close(&f);
}

/* ------------------------------------------------------------------------------------------
 * Streams
 * ---------------------------------------------------------------------------------------- */

static void test_blocks_are_reused_only_on_their_stream(void) {
  fixture f;
  fx_open(&f, NULL);
  void *a = alloc_ok(&f, 4096, f.s1);
  free_ok(&f, a);
  void *b = alloc_ok(&f, 4096, f.s2);
  CU_ASSERT_NOT_EQUAL(b, a);
  CU_ASSERT_EQUAL(stats_of(&f).reserved_count[RECAP_STAT_ALL].current, 2);
  void *c = alloc_ok(&f, 4096, f.s1);
  CU_ASSERT_EQUAL(c, a);
  free_ok(&f, b);
  free_ok(&f, c);
  fx_close(&f);
}

/* A destroyed stream's segments: the free ones go back to the backend then, one still holding
 * a block when that block is freed, and no other stream (one created after it may get its
 * address) is handed their memory. Before, they stayed cached for good: a server creating and
 * destroying pipelines grew by their streams' segments each time. */
static void test_a_destroyed_streams_segments_go_back_to_the_backend(void) {
  fixture f;
  fx_open(&f, NULL);
  recap_stream *gone = NULL, *next = NULL;
  CHECK_OK(recap_stream_create(test_device, 0, RECAP_STREAM_NON_BLOCKING, &gone));
  void *freed = alloc_ok(&f, 4096, gone);
  void *held = alloc_ok(&f, 4 << 20, gone);
  free_ok(&f, freed);
  CU_ASSERT_EQUAL(stats_of(&f).reserved_count[RECAP_STAT_ALL].current, 2);
  CHECK_OK(recap_stream_destroy(gone));
  allocator_check_consistent(f.a);
  CU_ASSERT_EQUAL(stats_of(&f).reserved_count[RECAP_STAT_ALL].current, 1);
  CU_ASSERT_EQUAL(stats_of(&f).num_device_free, 1);
  CHECK_OK(recap_stream_create(test_device, 0, RECAP_STREAM_NON_BLOCKING, &next));
  void *small = alloc_ok(&f, 4096, next);
  void *large = alloc_ok(&f, 4 << 20, next);
  CU_ASSERT_EQUAL(stats_of(&f).reserved_count[RECAP_STAT_ALL].current, 3);
  CU_ASSERT(snapshot_segment_of_p(f.a, large) != snapshot_segment_of_p(f.a, held));
  free_ok(&f, held);
  CU_ASSERT_EQUAL(stats_of(&f).reserved_count[RECAP_STAT_ALL].current, 2);
  free_ok(&f, small);
  free_ok(&f, large);
  CHECK_OK(recap_stream_destroy(next));
  CU_ASSERT_EQUAL(stats_of(&f).reserved_count[RECAP_STAT_ALL].current, 0);
  fx_close(&f);
}

static void test_record_stream_holds_the_block_until_the_other_stream_passes(void) {
  fixture f;
  fx_open(&f, NULL);
  char *a = alloc_ok(&f, 4096, f.s1);
  /* Any address inside the block names it. */
  CHECK_OK(recap__allocator_record_stream(f.a, a + 100, f.s2));
  CHECK_OK(recap__allocator_record_stream(f.a, a + 4000, f.s2)); /* twice: one use */
  CHECK_OK(recap__allocator_record_stream(f.a, a, f.s1));        /* its own stream: no use */
  free_ok(&f, a);
  CU_ASSERT_STRING_EQUAL(block_state(f.a, a), "active_pending_free");
  CU_ASSERT_EQUAL(stats_of(&f).active_count[RECAP_STAT_ALL].current, 1);
  CU_ASSERT_EQUAL(stats_of(&f).allocated_count[RECAP_STAT_ALL].current, 0);
  CHECK_OK(recap_stream_synchronize(f.s2));
  /* The next allocation polls the event, finds s2 past the free, and reuses the block. */
  char *b = alloc_ok(&f, 4096, f.s1);
  CU_ASSERT_EQUAL(b, a);
  free_ok(&f, b);
  fx_close(&f);
}

static void test_record_stream_rejects_pointers_outside_allocated_blocks(void) {
  fixture f;
  fx_open(&f, NULL);
  char *a = alloc_ok(&f, 4096, f.s1);
  CHECK_STATUS(recap__allocator_record_stream(f.a, a + 8192, f.s2), RECAP_STATUS_INVALID_ARGUMENT);
  int local;
  CHECK_STATUS(recap__allocator_record_stream(f.a, &local, f.s2), RECAP_STATUS_INVALID_ARGUMENT);
  free_ok(&f, a);
  CHECK_STATUS(recap__allocator_record_stream(f.a, a, f.s2), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_STATUS(recap__allocator_free(f.a, a), RECAP_STATUS_INVALID_ARGUMENT); /* double free */
  CHECK_STATUS(recap__allocator_free(f.a, a + 512), RECAP_STATUS_INVALID_ARGUMENT);
  fx_close(&f);
}

/* ------------------------------------------------------------------------------------------
 * Captures: deferred frees, growth under the relaxed mode, OOM inside a capture
 * ---------------------------------------------------------------------------------------- */

static void end_capture_ok(recap_stream *stream) {
  recap__graph *graph = NULL;
  CHECK_OK(recap__capture_end(stream, &graph));
  CU_ASSERT_PTR_NOT_NULL(graph);
  if (graph) stream->backend->graph_destroy(graph);
}

static void test_cross_stream_free_during_capture_waits_for_the_capture_to_end(void) {
  fixture f;
  fx_open(&f, NULL);
  char *a = alloc_ok(&f, 4096, f.s1);
  CHECK_OK(recap__allocator_record_stream(f.a, a, f.s2));
  CHECK_OK(recap__capture_begin(f.s3, RECAP_CAPTURE_MODE_GLOBAL));
  free_ok(&f, a); /* no event may be recorded or queried now */
  CU_ASSERT_STRING_EQUAL(block_state(f.a, a), "active_pending_free");
  char *b = alloc_ok(&f, 4096, f.s1); /* must not reuse the held block */
  CU_ASSERT_NOT_EQUAL(b, a);
  CHECK_STATUS(recap__allocator_empty_cache(f.a), RECAP_STATUS_ILLEGAL_DURING_CAPTURE);
  end_capture_ok(f.s3); /* the capture was not disturbed by any of it */
  /* The capture-end hook recorded the event; on host it completes at once. */
  CU_ASSERT_STRING_EQUAL(block_state(f.a, a), "inactive");
  allocator_check_consistent(f.a);
  free_ok(&f, b);
  fx_close(&f);
}

static void test_pool_grows_during_capture_without_invalidating_it(void) {
  fixture f;
  fx_open(&f, NULL);
  recap_pool_id pool;
  CHECK_OK(recap__allocator_pool_create(f.a, &pool));
  CHECK_OK(recap__allocator_route_begin(f.a, pool, f.s1));
  CHECK_OK(recap__capture_begin(f.s1, RECAP_CAPTURE_MODE_GLOBAL));
  void *p = alloc_ok(&f, 4 * MIB, f.s1); /* a new segment, reserved under the relaxed mode */
  void *q = alloc_ok(&f, 1000, f.s1);
  free_ok(&f, q); /* freed inside the capture: reusable inside it */
  void *r = alloc_ok(&f, 1000, f.s1);
  CU_ASSERT_EQUAL(r, q);
  end_capture_ok(f.s1);
  CHECK_OK(recap__allocator_route_end(f.a, f.s1));
  recap_pool_stats ps;
  CHECK_OK(recap__allocator_pool_stats(f.a, pool, &ps));
  CU_ASSERT_EQUAL(ps.reserved_bytes, 6 * MIB); /* 4 MiB (a private pool's rounding) + 2 MiB */
  CU_ASSERT_EQUAL(ps.segment_count, 2);
  free_ok(&f, p);
  free_ok(&f, r);
  CHECK_OK(recap__allocator_pool_release(f.a, pool));
  fx_close(&f);
}

static void test_oom_during_capture_fails_cleanly_without_retry(void) {
  fixture f;
  fx_open(&f, NULL);
  recap_pool_id pool;
  CHECK_OK(recap__allocator_pool_create(f.a, &pool));
  CHECK_OK(recap__allocator_route_begin(f.a, pool, f.s1));
  void *kept = alloc_ok(&f, 4096, f.s1);
  CHECK_OK(recap__capture_begin(f.s1, RECAP_CAPTURE_MODE_GLOBAL));
  recap__raw_failing_fail_after(f.failing, 0);
  void *p = NULL;
  CHECK_STATUS(recap__allocator_malloc(f.a, 8 * MIB, f.s1, &p), RECAP_STATUS_OUT_OF_MEMORY);
  CU_ASSERT_PTR_NULL(p);
  CHECK_ERROR_MENTIONS("capture is under way");
  recap_memory_stats s = stats_of(&f);
  CU_ASSERT_EQUAL(s.num_ooms, 1);
  CU_ASSERT_EQUAL(s.num_alloc_retries, 0);
  CU_ASSERT_EQUAL(s.num_sync_all_streams, 0);
  recap__raw_failing_counts counts;
  recap__raw_failing_counts_get(f.failing, &counts);
  CU_ASSERT_EQUAL(counts.sync_calls, 0);
  CU_ASSERT_EQUAL(counts.free_calls, 0);
  allocator_check_consistent(f.a);
  /* The pool still serves what it can. */
  void *q = alloc_ok(&f, 4096, f.s1);
  end_capture_ok(f.s1);
  recap__raw_failing_fail_after(f.failing, -1);
  void *r = alloc_ok(&f, 8 * MIB, f.s1);
  CHECK_OK(recap__allocator_route_end(f.a, f.s1));
  free_ok(&f, kept);
  free_ok(&f, q);
  free_ok(&f, r);
  CHECK_OK(recap__allocator_pool_release(f.a, pool));
  fx_close(&f);
}

/* ------------------------------------------------------------------------------------------
 * Private pools
 * ---------------------------------------------------------------------------------------- */

static uint64_t segment_pool(recap__allocator *a, void *p) {
  json_t *root = allocator_snapshot(a);
  json_t *seg = snapshot_segment_of(root, (uintptr_t)p);
  uint64_t id = seg ? (uint64_t)snapshot_pool_id(seg) : UINT64_MAX;
  json_decref(root);
  return id;
}

static void test_pool_blocks_are_reused_only_inside_the_pool(void) {
  fixture f;
  fx_open(&f, NULL);
  recap_pool_id pool;
  CHECK_OK(recap__allocator_pool_create(f.a, &pool));
  CU_ASSERT_NOT_EQUAL(pool.id, 0);
  void *outside = alloc_ok(&f, 4096, f.s1);
  CU_ASSERT_EQUAL(segment_pool(f.a, outside), 0);
  CHECK_OK(recap__allocator_route_begin(f.a, pool, f.s1));
  void *inside = alloc_ok(&f, 4096, f.s1);
  CU_ASSERT_EQUAL(segment_pool(f.a, inside), pool.id);
  free_ok(&f, inside);
  CHECK_OK(recap__allocator_route_end(f.a, f.s1));
  void *after = alloc_ok(&f, 4096, f.s1); /* default pool again: not the pool's block */
  CU_ASSERT_EQUAL(segment_pool(f.a, after), 0);
  CU_ASSERT_NOT_EQUAL(after, inside);
  CHECK_OK(recap__allocator_route_begin(f.a, pool, f.s1));
  void *again = alloc_ok(&f, 4096, f.s1);
  CU_ASSERT_EQUAL(again, inside);
  CHECK_OK(recap__allocator_route_end(f.a, f.s1));
  free_ok(&f, again);
  free_ok(&f, after);
  free_ok(&f, outside);
  CHECK_OK(recap__allocator_pool_release(f.a, pool));
  fx_close(&f);
}

/* specs/fork_join.yaml's 1.25 MiB arena: 2 MiB in a graph's pool (PyTorch reserves 8 MiB),
 * while the default pool keeps the 20 MiB segment that 1-10 MiB requests share. */
static void test_private_pool_reserves_2_mib_for_a_1_25_mib_request(void) {
  fixture f;
  fx_open(&f, NULL);
  recap_pool_id pool;
  CHECK_OK(recap__allocator_pool_create(f.a, &pool));
  CHECK_OK(recap__allocator_route_begin(f.a, pool, f.s1));
  void *arena = alloc_ok(&f, MIB + MIB / 4, f.s1);
  CHECK_OK(recap__allocator_route_end(f.a, f.s1));
  recap_pool_stats ps;
  CHECK_OK(recap__allocator_pool_stats(f.a, pool, &ps));
  CU_ASSERT_EQUAL(ps.reserved_bytes, 2 * MIB);
  CU_ASSERT_EQUAL(ps.segment_count, 1);
  CU_ASSERT_EQUAL(stats_of(&f).reserved_bytes[RECAP_STAT_ALL].current, 2 * MIB);
  void *general = alloc_ok(&f, MIB + MIB / 4, f.s1);
  CU_ASSERT_EQUAL(stats_of(&f).reserved_bytes[RECAP_STAT_ALL].current, 22 * MIB);
  free_ok(&f, general);
  free_ok(&f, arena);
  CHECK_OK(recap__allocator_pool_release(f.a, pool));
  fx_close(&f);
}

static void test_shared_pool_serves_two_scopes_from_the_same_memory(void) {
  fixture f;
  fx_open(&f, NULL);
  recap_pool_id pool;
  CHECK_OK(recap__allocator_pool_create(f.a, &pool));
  CHECK_OK(recap__allocator_pool_retain(f.a, pool)); /* a second user (graph) */
  recap_pool_stats ps;
  CHECK_OK(recap__allocator_pool_stats(f.a, pool, &ps));
  CU_ASSERT_EQUAL(ps.use_count, 2);
  CHECK_OK(recap__allocator_route_begin(f.a, pool, f.s1));
  void *first = alloc_ok(&f, 3 * MIB, f.s1);
  free_ok(&f, first);
  CHECK_OK(recap__allocator_route_end(f.a, f.s1));
  CHECK_OK(recap__allocator_route_begin(f.a, pool, f.s1));
  void *second = alloc_ok(&f, 3 * MIB, f.s1);
  CU_ASSERT_EQUAL(second, first);
  CHECK_OK(recap__allocator_pool_stats(f.a, pool, &ps));
  /* One segment for both scopes: 3 MiB rounded up to 2 MiB in a private pool, and the 1 MiB
   * left is too small to split off a large block. */
  CU_ASSERT_EQUAL(ps.reserved_bytes, 4 * MIB);
  CU_ASSERT_EQUAL(ps.allocated_bytes, 4 * MIB);
  CU_ASSERT_EQUAL(ps.use_count, 3);
  CHECK_OK(recap__allocator_route_end(f.a, f.s1));
  free_ok(&f, second);
  CHECK_OK(recap__allocator_pool_release(f.a, pool));
  CHECK_OK(recap__allocator_pool_release(f.a, pool));
  CHECK_STATUS(recap__allocator_pool_release(f.a, pool), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_STATUS(recap__allocator_pool_retain(f.a, pool), RECAP_STATUS_INVALID_ARGUMENT);
  fx_close(&f);
}

static void test_empty_cache_keeps_memory_of_referenced_pools(void) {
  fixture f;
  fx_open(&f, NULL);
  recap_pool_id pool;
  CHECK_OK(recap__allocator_pool_create(f.a, &pool));
  CHECK_OK(recap__allocator_route_begin(f.a, pool, f.s1));
  void *p = alloc_ok(&f, 4096, f.s1);
  CHECK_OK(recap__allocator_route_end(f.a, f.s1));
  void *d = alloc_ok(&f, 4096, f.s1);
  free_ok(&f, p);
  free_ok(&f, d);
  CHECK_OK(recap__allocator_empty_cache(f.a));
  allocator_check_consistent(f.a);
  recap_pool_stats ps;
  CHECK_OK(recap__allocator_pool_stats(f.a, pool, &ps));
  CU_ASSERT_EQUAL(ps.reserved_bytes, 2 * MIB); /* kept: the pool is still referenced */
  CU_ASSERT_EQUAL(stats_of(&f).reserved_bytes[RECAP_STAT_ALL].current, 2 * MIB);
  CHECK_OK(recap__allocator_pool_release(f.a, pool));
  CHECK_OK(recap__allocator_empty_cache(f.a));
  allocator_check_consistent(f.a);
  CU_ASSERT_EQUAL(stats_of(&f).reserved_bytes[RECAP_STAT_ALL].current, 0);
  CHECK_STATUS(recap__allocator_pool_stats(f.a, pool, &ps), RECAP_STATUS_INVALID_ARGUMENT);
  fx_close(&f);
}

static void test_released_pool_keeps_live_blocks_valid(void) {
  fixture f;
  fx_open(&f, NULL);
  recap_pool_id pool;
  CHECK_OK(recap__allocator_pool_create(f.a, &pool));
  CHECK_OK(recap__allocator_route_begin(f.a, pool, f.s1));
  char *p = alloc_ok(&f, 4096, f.s1);
  CHECK_OK(recap__allocator_route_end(f.a, f.s1));
  CHECK_OK(recap__allocator_pool_release(f.a, pool)); /* the last reference goes */
  CHECK_OK(recap__allocator_empty_cache(f.a));
  CU_ASSERT_EQUAL(segment_pool(f.a, p), pool.id); /* still there: p is allocated */
  free_ok(&f, p);
  CHECK_OK(recap__allocator_empty_cache(f.a));
  CU_ASSERT_EQUAL(stats_of(&f).reserved_bytes[RECAP_STAT_ALL].current, 0);
  allocator_check_consistent(f.a);
  fx_close(&f);
}

static void test_side_stream_allocations_join_the_origin_route(void) {
  fixture f;
  fx_open(&f, NULL);
  recap_pool_id pool;
  CHECK_OK(recap__allocator_pool_create(f.a, &pool));
  CHECK_STATUS(recap__allocator_route_add_stream(f.a, f.s1, f.s2), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_OK(recap__allocator_route_begin(f.a, pool, f.s1));
  CHECK_OK(recap__allocator_route_add_stream(f.a, f.s1, f.s2));
  CHECK_OK(recap__allocator_route_add_stream(f.a, f.s1, f.s2)); /* harmless twice */
  void *side = alloc_ok(&f, 4096, f.s2);
  CU_ASSERT_EQUAL(segment_pool(f.a, side), pool.id);
  CHECK_STATUS(recap__allocator_route_end(f.a, f.s2), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_STATUS(recap__allocator_route_begin(f.a, pool, f.s2), RECAP_STATUS_BUSY);
  CHECK_STATUS(recap__allocator_route_begin(f.a, pool, f.s1), RECAP_STATUS_BUSY);
  CHECK_OK(recap__allocator_route_end(f.a, f.s1));
  void *after = alloc_ok(&f, 4096, f.s2);
  CU_ASSERT_EQUAL(segment_pool(f.a, after), 0);
  CHECK_STATUS(recap__allocator_route_end(f.a, f.s1), RECAP_STATUS_INVALID_ARGUMENT);
  free_ok(&f, side);
  free_ok(&f, after);
  CHECK_OK(recap__allocator_pool_release(f.a, pool));
  fx_close(&f);
}

static void test_destroy_refuses_while_blocks_or_pools_are_live(void) {
  fixture f;
  fx_open(&f, NULL);
  void *p = alloc_ok(&f, 4096, f.s1);
  CHECK_STATUS(recap__allocator_destroy(f.a), RECAP_STATUS_BUSY);
  free_ok(&f, p);
  recap_pool_id pool;
  CHECK_OK(recap__allocator_pool_create(f.a, &pool));
  CHECK_STATUS(recap__allocator_destroy(f.a), RECAP_STATUS_BUSY);
  CHECK_OK(recap__allocator_pool_release(f.a, pool));
  fx_close(&f);
}

/* ------------------------------------------------------------------------------------------
 * Out of memory
 * ---------------------------------------------------------------------------------------- */

static void test_oom_releases_the_cache_and_retries_once(void) {
  fixture f;
  fx_open(&f, NULL);
  recap__raw_failing_set_capacity(f.failing, 40 * MIB);
  void *a = alloc_ok(&f, 5 * MIB, f.s1);  /* a 20 MiB segment */
  free_ok(&f, a);                         /* cached */
  void *b = alloc_ok(&f, 30 * MIB, f.s1); /* 20 + 30 > 40: release the cache, retry */
  recap_memory_stats s = stats_of(&f);
  CU_ASSERT_EQUAL(s.num_alloc_retries, 1);
  CU_ASSERT_EQUAL(s.num_sync_all_streams, 1);
  CU_ASSERT_EQUAL(s.num_ooms, 0);
  CU_ASSERT_EQUAL(s.num_device_free, 1);
  CU_ASSERT_EQUAL(s.reserved_bytes[RECAP_STAT_ALL].current, 30 * MIB);
  recap__raw_failing_counts counts;
  recap__raw_failing_counts_get(f.failing, &counts);
  CU_ASSERT_EQUAL(counts.sync_calls, 1);
  free_ok(&f, b);
  fx_close(&f);
}

static void test_oom_after_retry_reports_what_memory_is_where(void) {
  fixture f;
  fx_open(&f, NULL);
  recap__raw_failing_set_capacity(f.failing, 30 * MIB);
  recap_pool_id pool;
  CHECK_OK(recap__allocator_pool_create(f.a, &pool));
  CHECK_OK(recap__allocator_route_begin(f.a, pool, f.s1));
  void *in_pool = alloc_ok(&f, 4096, f.s1);
  CHECK_OK(recap__allocator_route_end(f.a, f.s1));
  void *a = alloc_ok(&f, 20 * MIB, f.s1);
  void *p = NULL;
  CHECK_STATUS(recap__allocator_malloc(f.a, 10 * MIB, f.s1, &p), RECAP_STATUS_OUT_OF_MEMORY);
  CU_ASSERT_PTR_NULL(p);
  CHECK_ERROR_MENTIONS("tried to allocate 10.00 MiB");
  CHECK_ERROR_MENTIONS("device capacity 30.00 MiB");
  CHECK_ERROR_MENTIONS("20.00 MiB allocated");
  CHECK_ERROR_MENTIONS("22.00 MiB reserved");
  CHECK_ERROR_MENTIONS("2.00 MiB held in private pools");
  CHECK_ERROR_MENTIONS("8.00 MiB free");
  recap_memory_stats s = stats_of(&f);
  CU_ASSERT_EQUAL(s.num_ooms, 1);
  CU_ASSERT_EQUAL(s.num_alloc_retries, 1);
  allocator_check_consistent(f.a);
  free_ok(&f, a);
  free_ok(&f, in_pool);
  CHECK_OK(recap__allocator_pool_release(f.a, pool));
  fx_close(&f);
}

static void test_memory_fraction_caps_reserved_memory(void) {
  fixture f;
  fx_open(&f, NULL);
  recap__raw_failing_set_capacity(f.failing, 100 * MIB);
  CHECK_STATUS(recap__allocator_set_memory_fraction(f.a, 0.0), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_STATUS(recap__allocator_set_memory_fraction(f.a, 1.5), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_OK(recap__allocator_set_memory_fraction(f.a, 0.5));
  void *p = NULL;
  CHECK_STATUS(recap__allocator_malloc(f.a, 60 * MIB, f.s1, &p), RECAP_STATUS_OUT_OF_MEMORY);
  CHECK_ERROR_MENTIONS("memory fraction");
  void *q = alloc_ok(&f, 40 * MIB, f.s1);
  free_ok(&f, q);
  fx_close(&f);
}

static bool reject_over_8_mib(size_t bytes, void *user) {
  (void)user;
  return bytes > 8 * MIB;
}

static void test_failing_backend_fails_by_predicate(void) {
  fixture f;
  fx_open(&f, NULL);
  recap__raw_failing_set_predicate(f.failing, reject_over_8_mib, NULL);
  void *p = NULL;
  CHECK_STATUS(recap__allocator_malloc(f.a, 2 * MIB, f.s1, &p), RECAP_STATUS_OUT_OF_MEMORY);
  CHECK_ERROR_MENTIONS("predicate");
  void *q = alloc_ok(&f, 4096, f.s1);
  free_ok(&f, q);
  recap__raw_failing_set_predicate(f.failing, NULL, NULL);
  void *r = alloc_ok(&f, 2 * MIB, f.s1);
  free_ok(&f, r);
  fx_close(&f);
}

static void test_garbage_collection_releases_long_unused_segments(void) {
  fixture f;
  fx_open(&f, "garbage_collection_threshold:0.5");
  recap__raw_failing_set_capacity(f.failing, 100 * MIB);
  CHECK_OK(recap__allocator_set_memory_fraction(f.a, 1.0));
  void *p[4];
  for (int i = 0; i < 4; i++) p[i] = alloc_ok(&f, (size_t)(12 + 2 * i) * MIB, f.s1);
  for (int i = 0; i < 4; i++) free_ok(&f, p[i]);
  CU_ASSERT_EQUAL(stats_of(&f).reserved_bytes[RECAP_STAT_ALL].current, 60 * MIB);
  void *big = alloc_ok(&f, 30 * MIB, f.s1); /* reserved 60 MiB > 50 MiB: collect first */
  recap_memory_stats s = stats_of(&f);
  CU_ASSERT(s.num_device_free >= 1);
  CU_ASSERT_EQUAL(s.num_alloc_retries, 0);
  CU_ASSERT(s.reserved_bytes[RECAP_STAT_ALL].current <= 50 * MIB + 30 * MIB);
  free_ok(&f, big);
  fx_close(&f);
}

/* ------------------------------------------------------------------------------------------
 * backend:cudaMalloc (no caching) and backend:native (PyTorch's name of the caching allocator)
 * ---------------------------------------------------------------------------------------- */

static void test_cudamalloc_backend_gives_each_request_its_own_exact_allocation(void) {
  fixture f;
  fx_open(&f, "backend:cudaMalloc");
  void *a = alloc_ok(&f, 1000, f.s1);
  void *b = alloc_ok(&f, 1000, f.s1);
  recap__raw_failing_counts counts;
  recap__raw_failing_counts_get(f.failing, &counts);
  CU_ASSERT_EQUAL(counts.alloc_calls, 2);
  CU_ASSERT_EQUAL(counts.live_bytes, 2000);
  free_ok(&f, a);
  recap__raw_failing_counts_get(f.failing, &counts);
  CU_ASSERT_EQUAL(counts.live_bytes, 1000); /* back to the device at once */
  CU_ASSERT_EQUAL(stats_of(&f).reserved_bytes[RECAP_STAT_ALL].current, 1000);
  free_ok(&f, b);
  fx_close(&f);
}

static void test_native_backend_is_the_caching_allocator_with_one_note_at_most(void) {
  test_stderr_capture_begin();
  for (int i = 0; i < 3; i++) {
    recap__alloc_config c;
    CHECK_OK(recap__alloc_config_parse("backend:native,expandable_segments:True", &c));
    CU_ASSERT(!c.uncached && !c.async && c.expandable);
    CHECK_OK(recap__alloc_config_parse("backend:caching", &c));
    CU_ASSERT(!c.uncached && !c.async);
  }
  char *text = test_stderr_capture_end();
  /* Once per process: an earlier test may have had it already (cli_test sees it once). */
  CU_ASSERT(test_count_occurrences(text, "recap: note:") <= 1);
  if (*text) CU_ASSERT_PTR_NOT_NULL(strstr(text, "backend:cudaMalloc"));
  free(text);
  /* Reusing blocks is what caching means: the second request gets the first's memory. */
  fixture f;
  fx_open(&f, "backend:native");
  void *a = alloc_ok(&f, 1000, f.s1);
  free_ok(&f, a);
  void *b = alloc_ok(&f, 1000, f.s1);
  CU_ASSERT_PTR_EQUAL(a, b);
  recap__raw_failing_counts counts;
  recap__raw_failing_counts_get(f.failing, &counts);
  CU_ASSERT_EQUAL(counts.alloc_calls, 1);
  free_ok(&f, b);
  fx_close(&f);
}

/* ------------------------------------------------------------------------------------------
 * Configuration
 * ---------------------------------------------------------------------------------------- */

static void test_malformed_alloc_conf_is_rejected_naming_the_key(void) {
  static const struct {
    const char *conf, *mentions;
  } bad[] = {
      {"foo:1", "unknown setting 'foo'"},
      {"max_split_size_mb:abc", "max_split_size_mb"},
      {"max_split_size_mb:10", "greater than 20"},
      {"max_split_size_mb:-64", "max_split_size_mb"},
      {"garbage_collection_threshold:1.5", "garbage_collection_threshold"},
      {"garbage_collection_threshold:x", "garbage_collection_threshold"},
      {"roundup_power2_divisions:3", "roundup_power2_divisions"},
      {"roundup_power2_divisions:[256:1,128:2]", "intervals must increase"},
      {"roundup_power2_divisions:[>:2,256:1]", "'>' must be the last"},
      {"roundup_power2_divisions:[100:2]", "powers of two"},
      {"roundup_power2_divisions:[256:1", "roundup_power2_divisions"},
      {"backend:cuda", "backend"},
      {"max_split_size_mb", "no value"},
      {"backend:native,", "trailing comma"},
      {",backend:native", "empty setting"},
      {":4", "no key"},
      {"expandable_segments:Maybe", "expected True or False"},
      {"backend:cudaMalloc,expandable_segments:True", "not backend:cudaMalloc"},
      {"backend:lazy", "expected native (or caching), cudaMalloc or cudaMallocAsync"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    recap_clear_error();
    CHECK_STATUS(recap_alloc_conf_check(bad[i].conf), RECAP_STATUS_INVALID_ARGUMENT);
    CHECK_ERROR_MENTIONS(bad[i].mentions);
  }
  CHECK_OK(recap_alloc_conf_check(NULL));
  CHECK_OK(recap_alloc_conf_check(""));
  CHECK_OK(recap_alloc_conf_check(
      " backend : native , max_split_size_mb:64,roundup_power2_divisions:[256:1,512:2,>:8],"
      "garbage_collection_threshold:0.6"));
  /* An allocator with a bad configuration is not created. */
  recap__raw_runtime runtime;
  recap__raw_backend raw;
  CHECK_OK(recap__raw_runtime_init(&runtime, test_device, &raw));
  recap__allocator_options options = {.device = test_device, .raw = &raw, .conf = "max_split:5"};
  recap__allocator *a = NULL;
  CHECK_STATUS(recap__allocator_create(&options, &a), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("max_split");
  CU_ASSERT_PTR_NULL(a);
}

static void test_parsed_settings_take_effect(void) {
  recap__alloc_config c;
  CHECK_OK(recap__alloc_config_parse(
      "backend:cudaMalloc,max_split_size_mb:64,garbage_collection_threshold:0.25", &c));
  CU_ASSERT_TRUE(c.uncached);
  CU_ASSERT_EQUAL(c.max_split_size, 64 * (size_t)MIB);
  CU_ASSERT_DOUBLE_EQUAL(c.gc_threshold, 0.25, 1e-12);
  CHECK_OK(recap__alloc_config_parse(NULL, &c));
  CU_ASSERT_FALSE(c.uncached);
  CU_ASSERT_EQUAL(c.max_split_size, SIZE_MAX);
}

/* ------------------------------------------------------------------------------------------
 * Stats, summary, snapshot
 * ---------------------------------------------------------------------------------------- */

static void test_stats_equal_snapshot_sums_after_every_step(void) {
  fixture f;
  fx_open(&f, NULL);
  recap_pool_id pool;
  CHECK_OK(recap__allocator_pool_create(f.a, &pool));
  char *p[8];
  size_t sizes[8] = {100, 3000, 700 * KIB, 2 * MIB, 6 * MIB, 11 * MIB + 3, 512, 1 * MIB};
  for (int i = 0; i < 8; i++) {
    if (i == 4) CHECK_OK(recap__allocator_route_begin(f.a, pool, f.s2));
    p[i] = alloc_ok(&f, sizes[i], i % 2 ? f.s2 : f.s1); /* alloc_ok checks after each step */
  }
  CHECK_OK(recap__allocator_record_stream(f.a, p[1] + 7, f.s3));
  allocator_check_consistent(f.a);
  for (int i = 7; i >= 0; i -= 2) free_ok(&f, p[i]);
  CHECK_OK(recap__allocator_route_end(f.a, f.s2));
  CHECK_OK(recap__allocator_empty_cache(f.a));
  allocator_check_consistent(f.a);
  for (int i = 0; i < 8; i += 2) free_ok(&f, p[i]);
  recap_memory_stats s = stats_of(&f);
  CU_ASSERT_EQUAL(s.allocated_bytes[RECAP_STAT_ALL].current, 0);
  CU_ASSERT(s.allocated_bytes[RECAP_STAT_ALL].peak > 0);
  CU_ASSERT_EQUAL(s.allocated_count[RECAP_STAT_ALL].allocated, 8);
  CU_ASSERT_EQUAL(s.allocated_count[RECAP_STAT_ALL].freed, 8);
  recap__allocator_reset_peak(f.a);
  s = stats_of(&f);
  CU_ASSERT_EQUAL(s.allocated_bytes[RECAP_STAT_ALL].peak, 0);
  CU_ASSERT_EQUAL(s.reserved_bytes[RECAP_STAT_ALL].peak, s.reserved_bytes[RECAP_STAT_ALL].current);
  char *text = NULL;
  CHECK_OK(recap__allocator_summary(f.a, &text));
  CU_ASSERT_PTR_NOT_NULL(strstr(text, "allocated_bytes (all)"));
  CU_ASSERT_PTR_NOT_NULL(strstr(text, "out-of-memory retries"));
  free(text);
  CHECK_OK(recap__allocator_pool_release(f.a, pool));
  CHECK_OK(recap__allocator_empty_cache(f.a));
  allocator_check_consistent(f.a);
  fx_close(&f);
}

/* The process-wide allocator through the public API (shared with other tests in this
 * process, so it checks differences, not absolute values). */
static void test_public_api_allocates_frees_and_reports(void) {
  recap_stream *s, *t;
  CHECK_OK(recap_stream_create(test_device, 0, RECAP_STREAM_NON_BLOCKING, &s));
  CHECK_OK(recap_stream_create(test_device, 0, RECAP_STREAM_NON_BLOCKING, &t));
  size_t before = 0, after = 0;
  CHECK_OK(recap_memory_allocated(test_device, &before));
  void *p = NULL;
  CHECK_OK(recap_malloc(test_device, 1000, s, &p));
  CU_ASSERT_PTR_NOT_NULL_FATAL(p);
  CHECK_OK(recap_memory_allocated(test_device, &after));
  CU_ASSERT_EQUAL(after, before + 1024);
  size_t reserved = 0, max_alloc = 0, max_reserved = 0;
  CHECK_OK(recap_memory_reserved(test_device, &reserved));
  CHECK_OK(recap_memory_max_allocated(test_device, &max_alloc));
  CHECK_OK(recap_memory_max_reserved(test_device, &max_reserved));
  CU_ASSERT(reserved >= after && max_alloc >= after && max_reserved >= reserved);
  CHECK_OK(recap_record_stream((char *)p + 10, t));
  void *zero = (void *)1;
  CHECK_OK(recap_malloc(test_device, 0, s, &zero));
  CU_ASSERT_PTR_NULL(zero);
  CHECK_STATUS(recap_malloc(test_device, 10, NULL, &zero), RECAP_STATUS_INVALID_ARGUMENT);
  char *json = NULL, *text = NULL;
  CHECK_OK(recap_memory_snapshot_json(test_device, &json));
  CU_ASSERT_PTR_NOT_NULL(strstr(json, "\"segments\""));
  free(json);
  CHECK_OK(recap_memory_summary(test_device, &text));
  free(text);
  recap_pool_id pool;
  CHECK_OK(recap_pool_create(test_device, &pool));
  CHECK_OK(recap_pool_route_begin(test_device, pool, s));
  void *q = NULL;
  CHECK_OK(recap_malloc(test_device, 5000, s, &q));
  recap_pool_stats ps;
  CHECK_OK(recap_pool_stats_get(test_device, pool, &ps));
  CU_ASSERT_EQUAL(ps.allocated_bytes, 5120);
  CHECK_OK(recap_pool_route_end(test_device, s));
  CHECK_OK(recap_free(q));
  CHECK_OK(recap_pool_release(test_device, pool));
  CHECK_OK(recap_free(p));
  CHECK_OK(recap_free(NULL));
  CHECK_STATUS(recap_free(p), RECAP_STATUS_INVALID_ARGUMENT);
  int local;
  CHECK_STATUS(recap_free(&local), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_OK(recap_memory_allocated(test_device, &after));
  CU_ASSERT_EQUAL(after, before);
  CHECK_OK(recap_empty_cache(test_device));
  CHECK_OK(recap_memory_reset_peak(test_device));
  recap_memory_stats st;
  CHECK_OK(recap_memory_stats_get(test_device, &st));
  CU_ASSERT_EQUAL(st.allocated_bytes[RECAP_STAT_ALL].peak,
                  st.allocated_bytes[RECAP_STAT_ALL].current);
  CHECK_OK(recap_stream_destroy(s));
  CHECK_OK(recap_stream_destroy(t));
}

int main(void) {
  static const test_case tests[] = {
#define T_(fn, dev) {#fn, fn, dev}
      T_(test_round_size_uses_512_byte_granularity, false),
      T_(test_roundup_power2_divisions_rounds_84_mib_to_96_mib, false),
      T_(test_roundup_divisions_list_applies_per_interval, false),
      T_(test_segment_size_follows_size_class, false),
      T_(test_private_pool_segments_round_1_to_10_mib_up_to_2_mib, false),
      T_(test_small_requests_are_packed_into_one_2_mib_segment, true),
      T_(test_freed_neighbours_merge_back_into_one_block, true),
      T_(test_best_fit_takes_the_smallest_block_that_fits, true),
      T_(test_large_blocks_split_only_when_the_rest_exceeds_1_mib, true),
      T_(test_max_split_size_keeps_oversize_blocks_whole, true),
      T_(test_blocks_are_reused_only_on_their_stream, true),
      T_(test_a_destroyed_streams_segments_go_back_to_the_backend, true),
      T_(test_record_stream_holds_the_block_until_the_other_stream_passes, true),
      T_(test_record_stream_rejects_pointers_outside_allocated_blocks, true),
      T_(test_cross_stream_free_during_capture_waits_for_the_capture_to_end, true),
      T_(test_pool_grows_during_capture_without_invalidating_it, true),
      T_(test_oom_during_capture_fails_cleanly_without_retry, true),
      T_(test_pool_blocks_are_reused_only_inside_the_pool, true),
      T_(test_private_pool_reserves_2_mib_for_a_1_25_mib_request, true),
      T_(test_shared_pool_serves_two_scopes_from_the_same_memory, true),
      T_(test_empty_cache_keeps_memory_of_referenced_pools, true),
      T_(test_released_pool_keeps_live_blocks_valid, true),
      T_(test_side_stream_allocations_join_the_origin_route, true),
      T_(test_destroy_refuses_while_blocks_or_pools_are_live, false),
      T_(test_oom_releases_the_cache_and_retries_once, true),
      T_(test_oom_after_retry_reports_what_memory_is_where, true),
      T_(test_memory_fraction_caps_reserved_memory, true),
      T_(test_failing_backend_fails_by_predicate, false),
      T_(test_garbage_collection_releases_long_unused_segments, true),
      T_(test_cudamalloc_backend_gives_each_request_its_own_exact_allocation, true),
      T_(test_native_backend_is_the_caching_allocator_with_one_note_at_most, true),
      T_(test_malformed_alloc_conf_is_rejected_naming_the_key, false),
      T_(test_parsed_settings_take_effect, false),
      T_(test_stats_equal_snapshot_sums_after_every_step, true),
      T_(test_public_api_allocates_frees_and_reports, true),
#undef T_
  };
  test_add_host_and_cuda_suites("allocator", tests, sizeof tests / sizeof tests[0]);
  return test_run_all();
}
