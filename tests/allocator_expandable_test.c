/*
 * allocator_expandable_test.c: expandable segments (RECAP_ALLOC_CONF=expandable_segments:True):
 * growth over several chunks at a stable base, less memory reserved than fixed segments on a
 * fragmenting trace, what empty_cache unmaps (free tails only; never a live block, never a
 * pool a graph still holds), failures that map nothing, IPC refused, and the host emulation of
 * the virtual memory API being as strict as CUDA's.
 *
 * The host suite runs in CI over the host backend's VMM emulation, where an unmapped chunk is
 * PROT_NONE: a replay or a check that touched unmapped memory would crash the test, not pass.
 * The CUDA suite re-runs the device cases on a GPU (inactive elsewhere); contents are checked
 * through stream copies, so both backends run the same code.
 */
#include <stdlib.h>
#include <string.h>

#include "allocator/allocator.h"
#include "allocator/raw_impl.h"
#include "runtime/backend.h"
#include "tests/allocator_check.h"
#include "tests/test_util.h"

enum { KIB = 1024, MIB = 1024 * 1024, CHUNK_LARGE = 20 * MIB, CHUNK_SMALL = 2 * MIB };

typedef allocator_fixture fixture;

/* An allocator of our own over a failing backend (which counts every mapped chunk as a live
 * allocation) with a simulated capacity, which is also what each segment reserves. */
static void fx_open(fixture *f, const char *conf, size_t capacity) {
  allocator_fixture_open(f, conf, capacity);
}

static recap__raw_failing_counts counts_of(fixture *f) {
  recap__raw_failing_counts c;
  recap__raw_failing_counts_get(f->failing, &c);
  return c;
}

/* Destroys the allocator and checks that every chunk was unmapped and every reservation
 * released. */
static void fx_close(fixture *f) {
  CHECK_OK(recap__allocator_destroy(f->a));
  recap__raw_failing_counts c = counts_of(f);
  CU_ASSERT_EQUAL(c.live_allocations, 0);
  CU_ASSERT_EQUAL(c.live_bytes, 0);
  CU_ASSERT_EQUAL(c.live_reservations, 0);
  recap__raw_failing_destroy(f->failing);
  CHECK_OK(recap_stream_destroy(f->s1));
  CHECK_OK(recap_stream_destroy(f->s2));
}

static int64_t reserved_of(recap__allocator *a) {
  recap_memory_stats s;
  recap__allocator_stats(a, &s);
  return s.reserved_bytes[RECAP_STAT_ALL].current;
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

/* Writes `value` over n bytes at p in stream order and waits. */
static void fill(void *p, size_t n, int value, recap_stream *s) {
  CHECK_OK(s->backend->memset_async(p, value, n, s));
  CHECK_OK(recap_stream_synchronize(s));
}

/* Whether all n bytes at p hold `value` (read back through a stream copy). */
static bool holds(const void *p, size_t n, int value, recap_stream *s) {
  unsigned char *host = malloc(n);
  CU_ASSERT_PTR_NOT_NULL_FATAL(host);
  CHECK_OK(s->backend->memcpy_async(host, p, n, s));
  CHECK_OK(recap_stream_synchronize(s));
  bool ok = true;
  for (size_t i = 0; i < n && ok; i++) ok = host[i] == (unsigned char)value;
  free(host);
  return ok;
}

/* The snapshot's segments as (count, first address, first total size, expandable flag). */
static size_t segments_of(recap__allocator *a, uintptr_t *base, int64_t *size, bool *expandable) {
  json_t *root = allocator_snapshot(a);
  json_t *segs = json_object_get(root, "segments");
  size_t n = json_array_size(segs);
  if (n > 0) {
    json_t *seg = json_array_get(segs, 0);
    *base = (uintptr_t)json_int(seg, "address");
    *size = json_int(seg, "total_size");
    *expandable = json_is_true(json_object_get(seg, "is_expandable"));
  }
  json_decref(root);
  return n;
}

/* ------------------------------------------------------------------------------------------
 * Growth
 * ---------------------------------------------------------------------------------------- */

static void test_large_segment_grows_over_three_chunks_at_a_stable_base(void) {
  fixture f;
  fx_open(&f, "expandable_segments:True", 256 * MIB);
  char *p1 = alloc_ok(&f, 15 * MIB, f.s1);
  uintptr_t base = 0;
  int64_t size = 0;
  bool expandable = false;
  CU_ASSERT_EQUAL(segments_of(f.a, &base, &size, &expandable), 1);
  CU_ASSERT_EQUAL(base, (uintptr_t)p1);
  CU_ASSERT_EQUAL(size, CHUNK_LARGE);
  CU_ASSERT(expandable);
  char *p2 = alloc_ok(&f, 15 * MIB, f.s1);
  char *p3 = alloc_ok(&f, 15 * MIB, f.s1);
  /* One segment, the same base, the blocks back to back, three chunks mapped. */
  CU_ASSERT_EQUAL(segments_of(f.a, &base, &size, &expandable), 1);
  CU_ASSERT_EQUAL(base, (uintptr_t)p1);
  CU_ASSERT_EQUAL(p2, p1 + 15 * MIB);
  CU_ASSERT_EQUAL(p3, p2 + 15 * MIB);
  CU_ASSERT_EQUAL(size, 3 * CHUNK_LARGE);
  CU_ASSERT_EQUAL(counts_of(&f).live_allocations, 3);
  CU_ASSERT_EQUAL(counts_of(&f).live_reservations, 1);
  CU_ASSERT_EQUAL(reserved_of(f.a), 3 * CHUNK_LARGE);
  /* Every byte of every block is usable memory. */
  fill(p1, 45 * MIB, 0x5a, f.s1);
  CU_ASSERT(holds(p1, 45 * MIB, 0x5a, f.s1));
  free_ok(&f, p3);
  free_ok(&f, p2);
  free_ok(&f, p1);
  fx_close(&f);
}

static void test_small_segment_grows_in_2_mib_chunks(void) {
  fixture f;
  fx_open(&f, "expandable_segments:True", 256 * MIB);
  char *p[7];
  for (int i = 0; i < 7; i++) p[i] = alloc_ok(&f, 900 * KIB, f.s1);
  for (int i = 1; i < 7; i++) CU_ASSERT_EQUAL(p[i], p[i - 1] + 900 * KIB);
  uintptr_t base = 0;
  int64_t size = 0;
  bool expandable = false;
  CU_ASSERT_EQUAL(segments_of(f.a, &base, &size, &expandable), 1);
  CU_ASSERT_EQUAL(base, (uintptr_t)p[0]);
  /* 7 x 900 KiB = 6.15 MiB: four 2 MiB chunks. */
  CU_ASSERT_EQUAL(size, 4 * CHUNK_SMALL);
  CU_ASSERT_EQUAL(counts_of(&f).live_allocations, 4);
  for (int i = 0; i < 7; i++) free_ok(&f, p[i]);
  fx_close(&f);
}

static void test_each_stream_grows_its_own_segment(void) {
  fixture f;
  fx_open(&f, "expandable_segments:True", 256 * MIB);
  void *a = alloc_ok(&f, 12 * MIB, f.s1);
  void *b = alloc_ok(&f, 12 * MIB, f.s2);
  json_t *root = allocator_snapshot(f.a);
  CU_ASSERT_EQUAL(json_array_size(json_object_get(root, "segments")), 2);
  json_decref(root);
  free_ok(&f, a);
  free_ok(&f, b);
  fx_close(&f);
}

/* A request that grows past the reserved address space gets a second segment. */
static void test_a_full_reservation_starts_a_new_segment(void) {
  fixture f;
  fx_open(&f, "expandable_segments:True", 60 * MIB);
  void *a = alloc_ok(&f, 30 * MIB, f.s1);
  void *b = alloc_ok(&f, 20 * MIB, f.s1); /* 50 MiB: three chunks, the whole 60 MiB range */
  recap__raw_failing_set_capacity(f.failing, 200 * MIB);
  void *c = alloc_ok(&f, 15 * MIB, f.s1); /* 10 MiB left in range: a new segment */
  json_t *root = allocator_snapshot(f.a);
  CU_ASSERT_EQUAL(json_array_size(json_object_get(root, "segments")), 2);
  json_decref(root);
  free_ok(&f, a);
  free_ok(&f, b);
  free_ok(&f, c);
  fx_close(&f);
}

/* Sizes that grow step by step, each freed after the next is allocated: fixed segments cannot
 * reuse a smaller freed segment for the next request and keep all of them; an expandable
 * segment extends its free tail. */
static int64_t fragmenting_trace_peak(const char *conf) {
  fixture f;
  fx_open(&f, conf, 4096 * (size_t)MIB);
  void *prev = NULL, *small[16] = {0};
  for (int i = 0; i < 16; i++) {
    void *p = alloc_ok(&f, (size_t)(11 + 2 * i) * MIB + 12345, f.s1);
    small[i] = alloc_ok(&f, (size_t)(3 + i % 5) * MIB, f.s1); /* 1-10 MiB: 20 MiB segments */
    if (prev) free_ok(&f, prev);
    if (i % 2 == 1) free_ok(&f, small[i - 1]), small[i - 1] = NULL;
    prev = p;
  }
  free_ok(&f, prev);
  for (int i = 0; i < 16; i++)
    if (small[i]) free_ok(&f, small[i]);
  recap_memory_stats s;
  recap__allocator_stats(f.a, &s);
  int64_t peak = s.reserved_bytes[RECAP_STAT_ALL].peak;
  fx_close(&f);
  return peak;
}

static void test_fragmenting_trace_reserves_far_less_than_fixed_segments(void) {
  int64_t fixed = fragmenting_trace_peak(NULL);
  int64_t expandable = fragmenting_trace_peak("expandable_segments:True");
  printf("\n  fragmenting trace: peak reserved %lld MiB fixed, %lld MiB expandable\n",
         (long long)(fixed / MIB), (long long)(expandable / MIB));
  CU_ASSERT(expandable * 2 < fixed);
}

/* ------------------------------------------------------------------------------------------
 * What gets unmapped
 * ---------------------------------------------------------------------------------------- */

static void test_empty_cache_unmaps_only_whole_free_chunks_at_the_end(void) {
  fixture f;
  fx_open(&f, "expandable_segments:True", 256 * MIB);
  char *a = alloc_ok(&f, 15 * MIB, f.s1);
  char *b = alloc_ok(&f, 15 * MIB, f.s1);
  char *c = alloc_ok(&f, 15 * MIB, f.s1);
  fill(a, 15 * MIB, 1, f.s1);
  free_ok(&f, c); /* free tail [30, 60) MiB: the chunk [40, 60) can go */
  CHECK_OK(recap__allocator_empty_cache(f.a));
  allocator_check_consistent(f.a);
  CU_ASSERT_EQUAL(reserved_of(f.a), 2 * CHUNK_LARGE);
  CU_ASSERT_EQUAL(counts_of(&f).live_allocations, 2);
  if (test_device.backend == RECAP_BACKEND_HOST) {
    CU_ASSERT(recap__host_vmm_is_mapped(b + 15 * MIB - 1));
    CU_ASSERT(recap__host_vmm_is_mapped(a + 40 * MIB - 1));
    CU_ASSERT(!recap__host_vmm_is_mapped(a + 40 * MIB));
  }
  free_ok(&f, b); /* free tail [15, 40): the chunk [20, 40) can go, [15, 20) shares a's chunk */
  CHECK_OK(recap__allocator_empty_cache(f.a));
  allocator_check_consistent(f.a);
  CU_ASSERT_EQUAL(reserved_of(f.a), CHUNK_LARGE);
  CU_ASSERT(holds(a, 15 * MIB, 1, f.s1));
  /* Growing again maps at the same addresses. */
  char *b2 = alloc_ok(&f, 15 * MIB, f.s1);
  CU_ASSERT_EQUAL(b2, b);
  free_ok(&f, b2);
  free_ok(&f, a);
  CHECK_OK(recap__allocator_empty_cache(f.a));
  CU_ASSERT_EQUAL(reserved_of(f.a), 0);
  CU_ASSERT_EQUAL(counts_of(&f).live_reservations, 0);
  fx_close(&f);
}

static void test_free_block_between_live_blocks_stays_mapped(void) {
  fixture f;
  fx_open(&f, "expandable_segments:True", 256 * MIB);
  char *a = alloc_ok(&f, 15 * MIB, f.s1);
  char *b = alloc_ok(&f, 15 * MIB, f.s1);
  char *c = alloc_ok(&f, 15 * MIB, f.s1);
  free_ok(&f, b);
  CHECK_OK(recap__allocator_empty_cache(f.a));
  CU_ASSERT_EQUAL(reserved_of(f.a), 3 * CHUNK_LARGE);
  fill(a, 45 * MIB, 7, f.s1);
  CU_ASSERT(holds(a, 45 * MIB, 7, f.s1));
  free_ok(&f, a);
  free_ok(&f, c);
  fx_close(&f);
}

static void test_oom_retry_releases_free_segments_of_other_streams(void) {
  fixture f;
  fx_open(&f, "expandable_segments:True", 60 * MIB);
  void *a = alloc_ok(&f, 35 * MIB, f.s1);
  free_ok(&f, a); /* 40 MiB stay mapped for s1 */
  void *b = alloc_ok(&f, 35 * MIB, f.s2);
  recap_memory_stats s;
  recap__allocator_stats(f.a, &s);
  CU_ASSERT_EQUAL(s.num_alloc_retries, 1);
  CU_ASSERT_EQUAL(reserved_of(f.a), 2 * CHUNK_LARGE);
  free_ok(&f, b);
  fx_close(&f);
}

static void test_failed_growth_maps_nothing_and_reports_out_of_memory(void) {
  fixture f;
  fx_open(&f, "expandable_segments:True", 256 * MIB);
  void *a = alloc_ok(&f, 15 * MIB, f.s1);
  recap__raw_failing_counts before = counts_of(&f);
  /* 50 MiB more needs three chunks; the second one fails (before and after the retry). */
  recap__raw_failing_fail_after(f.failing, 1);
  void *p = NULL;
  CHECK_STATUS(recap__allocator_malloc(f.a, 65 * MIB, f.s1, &p), RECAP_STATUS_OUT_OF_MEMORY);
  CHECK_ERROR_MENTIONS("out of memory");
  CU_ASSERT_PTR_NULL(p);
  recap__raw_failing_counts after = counts_of(&f);
  CU_ASSERT_EQUAL(after.live_bytes, before.live_bytes);
  CU_ASSERT_EQUAL(reserved_of(f.a), CHUNK_LARGE);
  allocator_check_consistent(f.a);
  recap__raw_failing_fail_after(f.failing, -1);
  void *q = alloc_ok(&f, 65 * MIB, f.s1);
  CU_ASSERT_EQUAL((char *)q, (char *)a + 15 * MIB);
  free_ok(&f, q);
  free_ok(&f, a);
  fx_close(&f);
}

static void test_memory_fraction_caps_growth(void) {
  fixture f;
  fx_open(&f, "expandable_segments:True", 100 * MIB);
  CHECK_OK(recap__allocator_set_memory_fraction(f.a, 0.5));
  void *a = alloc_ok(&f, 35 * MIB, f.s1);
  void *p = NULL;
  CHECK_STATUS(recap__allocator_malloc(f.a, 10 * MIB, f.s1, &p), RECAP_STATUS_OUT_OF_MEMORY);
  CHECK_ERROR_MENTIONS("memory fraction");
  free_ok(&f, a);
  fx_close(&f);
}

static void test_ipc_of_expandable_memory_is_refused_with_a_clear_error(void) {
  fixture f;
  fx_open(&f, "expandable_segments:True", 256 * MIB);
  void *a = alloc_ok(&f, 3 * MIB, f.s1);
  recap_ipc_mem_handle h;
  size_t offset = 7;
  CHECK_STATUS(recap__allocator_ipc_handle(f.a, a, &h, &offset), RECAP_STATUS_NOT_SUPPORTED);
  CHECK_ERROR_MENTIONS("expandable segment");
  CHECK_ERROR_MENTIONS("expandable_segments:False");
  CU_ASSERT_EQUAL(offset, 7);
  free_ok(&f, a);
  fx_close(&f);
}

static void test_expandable_needs_the_caching_backend(void) {
  CHECK_STATUS(recap_alloc_conf_check("backend:cudaMalloc,expandable_segments:True"),
               RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("backend:native");
  /* PyTorch's common spelling: native is the caching allocator there and here. */
  CHECK_OK(recap_alloc_conf_check("backend:native,expandable_segments:True"));
  CHECK_STATUS(recap_alloc_conf_check("expandable_segments:True,backend:cudaMallocAsync"),
               RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_OK(recap_alloc_conf_check("expandable_segments:False,backend:cudaMalloc"));
  /* A raw backend without virtual memory cannot give expandable segments: an error, not a
   * silent fallback. */
  recap__raw_runtime rt;
  recap__raw_backend raw;
  CHECK_OK(recap__raw_runtime_init(&rt, test_device, &raw));
  raw.vmm_map = NULL;
  recap__allocator_options options = {
      .device = test_device, .raw = &raw, .conf = "expandable_segments:True"};
  recap__allocator *a = NULL;
  CHECK_STATUS(recap__allocator_create(&options, &a), RECAP_STATUS_NOT_SUPPORTED);
  CHECK_ERROR_MENTIONS("virtual memory");
}

/* ------------------------------------------------------------------------------------------
 * Graphs: the process-wide allocator (configured expandable in main) and recap_graph
 * ---------------------------------------------------------------------------------------- */

static void test_graph_memory_is_never_unmapped_while_the_graph_lives(void) {
  recap_stream *s;
  CHECK_OK(recap_stream_create(test_device, 0, RECAP_STREAM_NON_BLOCKING, &s));
  recap_graph *g;
  CHECK_OK(recap_graph_create(&g));
  /* Global mode: growing the pool inside the capture must not invalidate it. */
  CHECK_OK(recap_graph_capture_begin(g, s, NULL, RECAP_CAPTURE_MODE_GLOBAL));
  void *p = NULL, *q = NULL;
  CHECK_OK(recap_malloc(test_device, 30 * MIB, s, &p));
  CHECK_OK(recap_malloc(test_device, 30 * MIB, s, &q));
  CHECK_OK(s->backend->memset_async(p, 0x3c, 30 * MIB, s));
  CHECK_OK(s->backend->memset_async(q, 0x3d, 30 * MIB, s));
  /* Freed during the capture, as a temporary is: the graph still writes it on replay. */
  CHECK_OK(recap_free(q));
  CHECK_OK(recap_graph_capture_end(g));
  recap_pool_id pool;
  CHECK_OK(recap_graph_pool(g, &pool));
  recap_pool_stats before, after;
  CHECK_OK(recap_pool_stats_get(test_device, pool, &before));
  CU_ASSERT(before.reserved_bytes >= 60 * MIB);
  CHECK_OK(recap_empty_cache(test_device));
  CHECK_OK(recap_pool_stats_get(test_device, pool, &after));
  CU_ASSERT_EQUAL(after.reserved_bytes, before.reserved_bytes);
  if (test_device.backend == RECAP_BACKEND_HOST)
    CU_ASSERT(recap__host_vmm_is_mapped((char *)q + 30 * MIB - 1));
  /* The replay writes into the freed block; unmapped memory would fault here. */
  fill(p, 30 * MIB, 0, s);
  CHECK_OK(recap_graph_replay(g, s));
  CHECK_OK(recap_stream_synchronize(s));
  CU_ASSERT(holds(p, 30 * MIB, 0x3c, s));
  CU_ASSERT(holds(q, 30 * MIB, 0x3d, s));
  CHECK_OK(recap_free(p));
  CHECK_OK(recap_empty_cache(test_device));
  CHECK_OK(recap_pool_stats_get(test_device, pool, &after));
  CU_ASSERT_EQUAL(after.reserved_bytes, before.reserved_bytes);
  /* Once the graph is gone, so is the pool's reference: its memory goes back. */
  CHECK_OK(recap_graph_destroy(g));
  CHECK_OK(recap_empty_cache(test_device));
  CHECK_STATUS(recap_pool_stats_get(test_device, pool, &after), RECAP_STATUS_INVALID_ARGUMENT);
  if (test_device.backend == RECAP_BACKEND_HOST) CU_ASSERT(!recap__host_vmm_is_mapped(q));
  char *json = NULL;
  CHECK_OK(recap_memory_snapshot_json(test_device, &json));
  CU_ASSERT_PTR_NULL(strstr(json, "\"expandable\":false"));
  free(json);
  CHECK_OK(recap_stream_destroy(s));
}

static void test_public_ipc_refuses_expandable_memory(void) {
  recap_stream *s;
  CHECK_OK(recap_stream_create(test_device, 0, RECAP_STREAM_NON_BLOCKING, &s));
  void *p = NULL;
  CHECK_OK(recap_malloc(test_device, 4 * MIB, s, &p));
  recap_ipc_mem_handle h;
  size_t offset = 0;
  CHECK_STATUS(recap_ipc_mem_handle_get(p, &h, &offset), RECAP_STATUS_NOT_SUPPORTED);
  CHECK_ERROR_MENTIONS("cannot be shared through CUDA IPC");
  CHECK_OK(recap_free(p));
  CHECK_OK(recap_stream_destroy(s));
}

/* ------------------------------------------------------------------------------------------
 * The host emulation of the VMM API
 * ---------------------------------------------------------------------------------------- */

static void test_host_vmm_emulation_refuses_what_cuda_refuses(void) {
  recap__raw_runtime rt;
  recap__raw_backend raw;
  CHECK_OK(recap__raw_runtime_init(&rt, (recap_device){RECAP_BACKEND_HOST, 0}, &raw));
  size_t g = 0;
  CHECK_OK(raw.vmm_granularity(raw.ctx, &g));
  CU_ASSERT_EQUAL(g, 2 * MIB);
  char *base = NULL;
  CHECK_OK(raw.vmm_reserve(raw.ctx, 8 * g, (void **)&base));
  CU_ASSERT_EQUAL((uintptr_t)base % g, 0);
  CU_ASSERT(!recap__host_vmm_is_mapped(base));
  CHECK_STATUS(raw.vmm_reserve(raw.ctx, g + 1, (void **)&base), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_OK(raw.vmm_map(raw.ctx, base, 2 * g));
  CU_ASSERT(recap__host_vmm_is_mapped(base + 2 * g - 1));
  base[2 * g - 1] = 1; /* mapped memory is writable */
  CHECK_STATUS(raw.vmm_map(raw.ctx, base + g, g), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("already mapped");
  CHECK_STATUS(raw.vmm_map(raw.ctx, base + 8 * g, g), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_STATUS(raw.vmm_unmap(raw.ctx, base, g), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("exactly one earlier mapping");
  CHECK_STATUS(raw.vmm_release(raw.ctx, base, 8 * g), RECAP_STATUS_BUSY);
  CHECK_OK(raw.vmm_unmap(raw.ctx, base, 2 * g));
  CU_ASSERT(!recap__host_vmm_is_mapped(base));
  CHECK_OK(raw.vmm_release(raw.ctx, base, 8 * g));
  CHECK_STATUS(raw.vmm_release(raw.ctx, base, 8 * g), RECAP_STATUS_INVALID_ARGUMENT);
}

static void test_host_vmm_map_follows_capture_rules(void) {
  recap_device dev = {RECAP_BACKEND_HOST, 0};
  recap__raw_runtime rt;
  recap__raw_backend raw;
  CHECK_OK(recap__raw_runtime_init(&rt, dev, &raw));
  size_t g = 0;
  CHECK_OK(raw.vmm_granularity(raw.ctx, &g));
  void *base = NULL;
  CHECK_OK(raw.vmm_reserve(raw.ctx, 4 * g, &base));
  recap_graph *graph;
  recap_stream *s;
  CHECK_OK(recap_graph_create(&graph));
  CHECK_OK(recap_stream_create(dev, 0, RECAP_STREAM_NON_BLOCKING, &s));
  CHECK_OK(recap_graph_capture_begin(graph, s, NULL, RECAP_CAPTURE_MODE_GLOBAL));
  CHECK_STATUS(raw.vmm_map(raw.ctx, base, g), RECAP_STATUS_ILLEGAL_DURING_CAPTURE);
  CHECK_STATUS(recap_graph_capture_end(graph), RECAP_STATUS_CAPTURE_INVALIDATED);
  CHECK_OK(recap_graph_destroy(graph));
  CHECK_OK(recap_stream_destroy(s));
  CHECK_OK(raw.vmm_release(raw.ctx, base, 4 * g));
}

int main(void) {
  /* The process-wide allocators of this binary use expandable segments (read at their first
   * use). */
  setenv("RECAP_ALLOC_CONF", "expandable_segments:True", 1);
  static const test_case tests[] = {
#define T_(fn, dev) {#fn, fn, dev}
      T_(test_large_segment_grows_over_three_chunks_at_a_stable_base, true),
      T_(test_small_segment_grows_in_2_mib_chunks, true),
      T_(test_each_stream_grows_its_own_segment, true),
      T_(test_a_full_reservation_starts_a_new_segment, true),
      T_(test_fragmenting_trace_reserves_far_less_than_fixed_segments, true),
      T_(test_empty_cache_unmaps_only_whole_free_chunks_at_the_end, true),
      T_(test_free_block_between_live_blocks_stays_mapped, true),
      T_(test_oom_retry_releases_free_segments_of_other_streams, true),
      T_(test_failed_growth_maps_nothing_and_reports_out_of_memory, true),
      T_(test_memory_fraction_caps_growth, true),
      T_(test_ipc_of_expandable_memory_is_refused_with_a_clear_error, true),
      T_(test_expandable_needs_the_caching_backend, true),
      T_(test_graph_memory_is_never_unmapped_while_the_graph_lives, true),
      T_(test_public_ipc_refuses_expandable_memory, true),
      T_(test_host_vmm_emulation_refuses_what_cuda_refuses, false),
      T_(test_host_vmm_map_follows_capture_rules, false),
#undef T_
  };
  test_add_host_and_cuda_suites("allocator_expandable", tests, sizeof tests / sizeof tests[0]);
  return test_run_all();
}
