/*
 * graph_test.c: the graph API (capture any stream work with a private pool, replay), run on
 * the host backend in CI and on CUDA where a GPU is present. The work is backend-neutral:
 * fills, copies (recap_memcpy_async, tested here too) and random draws, so one body serves
 * both backends.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/backend.h"
#include "runtime/rng.h"
#include "tests/test_util.h"

static recap_device device;
static recap_stream *stream;

static int use_host(void) {
  device = (recap_device){RECAP_BACKEND_HOST, 0};
  return recap_stream_create(device, 0, RECAP_STREAM_NON_BLOCKING, &stream) != RECAP_OK;
}

static int use_cuda(void) {
  device = (recap_device){RECAP_BACKEND_CUDA, 0};
  return recap_stream_create(device, 0, RECAP_STREAM_NON_BLOCKING, &stream) != RECAP_OK;
}

static int done(void) {
  recap_status st = recap_stream_destroy(stream);
  stream = NULL;
  return st != RECAP_OK;
}

static const recap__backend *backend(void) {
  return recap__backend_get(device.backend);
}

/* Copies n bytes of device memory to a fresh host buffer (caller frees). */
static unsigned char *download(const void *src, size_t n) {
  unsigned char *host = malloc(n);
  CU_ASSERT_PTR_NOT_NULL_FATAL(host);
  CHECK_OK(recap_memcpy_async(host, src, n, stream));
  CHECK_OK(recap_stream_synchronize(stream));
  return host;
}

/* The captured work: tmp = fill(value); out = tmp; tmp2 = fill(value + 1); out2 = tmp2.
 * Intermediates come from the pool; they are freed inside the capture, as an engine frees
 * an intermediate after its last use. Returns the intermediate addresses. */
static void submit_work(void *out, void *out2, size_t n, int value, void **tmp_addr) {
  void *tmp = NULL, *tmp2 = NULL;
  CHECK_OK(recap_malloc(device, n, stream, &tmp));
  CHECK_OK(backend()->memset_async(tmp, value, n, stream));
  CHECK_OK(recap_memcpy_async(out, tmp, n, stream));
  CHECK_OK(recap_malloc(device, n, stream, &tmp2));
  CHECK_OK(backend()->memset_async(tmp2, value + 1, n, stream));
  CHECK_OK(recap_memcpy_async(out2, tmp2, n, stream));
  if (tmp_addr) tmp_addr[0] = tmp, tmp_addr[1] = tmp2;
  CHECK_OK(recap_free(tmp));
  CHECK_OK(recap_free(tmp2));
}

static int all_bytes_equal(const unsigned char *p, size_t n, int value) {
  for (size_t i = 0; i < n; i++)
    if (p[i] != (unsigned char)value) return 0;
  return 1;
}

static void test_replay_reproduces_eager_results_with_stable_pool_memory(void) {
  const size_t n = 3 << 20;
  void *out = NULL, *out2 = NULL;
  CHECK_OK(recap_malloc(device, n, stream, &out));
  CHECK_OK(recap_malloc(device, n, stream, &out2));
  submit_work(out, out2, n, 5, NULL); /* eager warmup */

  recap_graph *g = NULL;
  CHECK_OK(recap_graph_create(&g));
  CHECK_OK(recap_graph_capture_begin(g, stream, NULL, RECAP_CAPTURE_MODE_THREAD_LOCAL));
  void *tmp[2];
  submit_work(out, out2, n, 9, tmp);
  CHECK_OK(recap_graph_capture_end(g));

  recap_pool_id pool;
  CHECK_OK(recap_graph_pool(g, &pool));
  recap_pool_stats before;
  CHECK_OK(recap_pool_stats_get(device, pool, &before));
  CU_ASSERT(before.reserved_bytes >= n);
  recap_memory_stats stats_before, stats_after;
  CHECK_OK(recap_memory_stats_get(device, &stats_before));

  for (int replay = 0; replay < 3; replay++) {
    CHECK_OK(backend()->memset_async(out, 0, n, stream));
    CHECK_OK(backend()->memset_async(out2, 0, n, stream));
    CHECK_OK(recap_graph_replay(g, NULL));
    unsigned char *a = download(out, n), *b = download(out2, n);
    CU_ASSERT(all_bytes_equal(a, n, 9));
    CU_ASSERT(all_bytes_equal(b, n, 10));
    free(a);
    free(b);
  }
  /* Replays allocate nothing: the pool's memory stays where the capture put it. */
  recap_pool_stats after;
  CHECK_OK(recap_pool_stats_get(device, pool, &after));
  CU_ASSERT_EQUAL(after.reserved_bytes, before.reserved_bytes);
  CHECK_OK(recap_memory_stats_get(device, &stats_after));
  CU_ASSERT_EQUAL(stats_after.num_device_alloc, stats_before.num_device_alloc);
  /* The intermediates' blocks, though freed, are kept for the graph: a plain allocation on
   * the same stream outside the capture does not get them. */
  void *outside = NULL;
  CHECK_OK(recap_malloc(device, n, stream, &outside));
  CU_ASSERT(outside != tmp[0] && outside != tmp[1]);
  CHECK_OK(recap_free(outside));

  recap_graph_info info;
  CHECK_OK(recap_graph_info_get(g, &info));
  CU_ASSERT_EQUAL(info.captures, 1);
  CU_ASSERT_EQUAL(info.instantiations, 1);
  CU_ASSERT_EQUAL(info.replays, 3);
  CU_ASSERT(info.nodes >= 4);
  CHECK_OK(recap_graph_destroy(g));
  CHECK_OK(recap_free(out));
  CHECK_OK(recap_free(out2));
}

static void test_graphs_sharing_a_pool_reserve_less_than_separate_pools(void) {
  const size_t n = 4 << 20;
  void *out[4];
  for (int i = 0; i < 4; i++) CHECK_OK(recap_malloc(device, n, stream, &out[i]));

  /* Two graphs in one pool: the second reuses what the first freed at its end. */
  recap_graph *g1, *g2;
  CHECK_OK(recap_graph_create(&g1));
  CHECK_OK(recap_graph_create(&g2));
  CHECK_OK(recap_graph_capture_begin(g1, stream, NULL, RECAP_CAPTURE_MODE_THREAD_LOCAL));
  submit_work(out[0], out[1], n, 1, NULL);
  CHECK_OK(recap_graph_capture_end(g1));
  recap_pool_id shared;
  CHECK_OK(recap_graph_pool(g1, &shared));
  CHECK_OK(recap_graph_capture_begin(g2, stream, &shared, RECAP_CAPTURE_MODE_THREAD_LOCAL));
  submit_work(out[2], out[3], n, 3, NULL);
  CHECK_OK(recap_graph_capture_end(g2));
  recap_pool_stats shared_stats;
  CHECK_OK(recap_pool_stats_get(device, shared, &shared_stats));
  CU_ASSERT_EQUAL(shared_stats.use_count, 2);

  /* The same two graphs in separate pools. */
  recap_graph *s1, *s2;
  CHECK_OK(recap_graph_create(&s1));
  CHECK_OK(recap_graph_create(&s2));
  CHECK_OK(recap_graph_capture_begin(s1, stream, NULL, RECAP_CAPTURE_MODE_THREAD_LOCAL));
  submit_work(out[0], out[1], n, 1, NULL);
  CHECK_OK(recap_graph_capture_end(s1));
  CHECK_OK(recap_graph_capture_begin(s2, stream, NULL, RECAP_CAPTURE_MODE_THREAD_LOCAL));
  submit_work(out[2], out[3], n, 3, NULL);
  CHECK_OK(recap_graph_capture_end(s2));
  recap_pool_id p1, p2;
  recap_pool_stats st1, st2;
  CHECK_OK(recap_graph_pool(s1, &p1));
  CHECK_OK(recap_graph_pool(s2, &p2));
  CU_ASSERT(p1.id != p2.id);
  CHECK_OK(recap_pool_stats_get(device, p1, &st1));
  CHECK_OK(recap_pool_stats_get(device, p2, &st2));
  CU_ASSERT(shared_stats.reserved_bytes < st1.reserved_bytes + st2.reserved_bytes);

  /* Replayed in capture order, the shared-pool graphs give the eager results. */
  CHECK_OK(recap_graph_replay(g1, stream));
  CHECK_OK(recap_graph_replay(g2, stream));
  int expect[4] = {1, 2, 3, 4};
  for (int i = 0; i < 4; i++) {
    unsigned char *h = download(out[i], n);
    CU_ASSERT(all_bytes_equal(h, n, expect[i]));
    free(h);
  }
  CHECK_OK(recap_graph_destroy(g1));
  CHECK_OK(recap_graph_destroy(g2));
  CHECK_OK(recap_graph_destroy(s1));
  CHECK_OK(recap_graph_destroy(s2));
  for (int i = 0; i < 4; i++) CHECK_OK(recap_free(out[i]));
}

static void test_illegal_call_discards_capture_and_next_capture_works(void) {
  const size_t n = 1 << 16;
  void *out = NULL, *out2 = NULL;
  CHECK_OK(recap_malloc(device, n, stream, &out));
  CHECK_OK(recap_malloc(device, n, stream, &out2));
  recap_graph *g;
  CHECK_OK(recap_graph_create(&g));
  CHECK_OK(recap_graph_capture_begin(g, stream, NULL, RECAP_CAPTURE_MODE_GLOBAL));
  CHECK_OK(backend()->memset_async(out, 1, n, stream));
  CHECK_STATUS(recap_stream_synchronize(stream), RECAP_STATUS_ILLEGAL_DURING_CAPTURE);
  /* Until the capture ends, the stream refuses work (a copy here), as CUDA does. */
  CHECK_STATUS(recap_memcpy_async(out2, out, n, stream), RECAP_STATUS_CAPTURE_INVALIDATED);
  CHECK_STATUS(recap_graph_capture_end(g), RECAP_STATUS_CAPTURE_INVALIDATED);
  CHECK_ERROR_MENTIONS("discarded");
  CU_ASSERT_FALSE(recap_stream_is_capturing(stream));
  CHECK_STATUS(recap_graph_replay(g, stream), RECAP_STATUS_INVALID_ARGUMENT);

  /* The stream, the pool and the graph object all still work. */
  CHECK_OK(recap_stream_synchronize(stream));
  CHECK_OK(recap_graph_capture_begin(g, stream, NULL, RECAP_CAPTURE_MODE_GLOBAL));
  submit_work(out, out2, n, 21, NULL);
  CHECK_OK(recap_graph_capture_end(g));
  CHECK_OK(recap_graph_replay(g, stream));
  unsigned char *h = download(out2, n);
  CU_ASSERT(all_bytes_equal(h, n, 22));
  free(h);
  CHECK_OK(recap_graph_destroy(g));
  CHECK_OK(recap_free(out));
  CHECK_OK(recap_free(out2));
}

static void test_out_of_memory_inside_capture_fails_cleanly(void) {
  size_t free_bytes = 0, total_bytes = 0;
  CHECK_OK(recap_device_mem_get_info(device, &free_bytes, &total_bytes));
  recap_graph *g;
  CHECK_OK(recap_graph_create(&g));
  CHECK_OK(recap_graph_capture_begin(g, stream, NULL, RECAP_CAPTURE_MODE_GLOBAL));
  void *huge = NULL;
  /* Twice the device's capacity: the pool cannot grow that far. */
  CHECK_STATUS(recap_malloc(device, total_bytes * 2, stream, &huge), RECAP_STATUS_OUT_OF_MEMORY);
  CU_ASSERT_PTR_NULL(huge);
  CHECK_ERROR_MENTIONS("tried to allocate");
  /* The capture survived the refusal: a small allocation still works and the graph ends. */
  void *small = NULL;
  CHECK_OK(recap_malloc(device, 4096, stream, &small));
  CHECK_OK(backend()->memset_async(small, 3, 4096, stream));
  CHECK_OK(recap_free(small));
  CHECK_OK(recap_graph_capture_end(g));
  CHECK_OK(recap_graph_replay(g, stream));
  CHECK_OK(recap_stream_synchronize(stream));
  recap_memory_stats stats;
  CHECK_OK(recap_memory_stats_get(device, &stats));
  CU_ASSERT(stats.num_ooms >= 1);
  CHECK_OK(recap_graph_destroy(g));
}

static void test_replays_draw_new_random_numbers_like_eager(void) {
  const size_t n = 1000;
  float *buf = NULL;
  CHECK_OK(recap_malloc(device, n * sizeof(float), stream, (void **)&buf));
  CHECK_OK(recap_rng_manual_seed(device, 1234));
  /* Eager reference: three consecutive draws. */
  float *eager[3];
  for (int i = 0; i < 3; i++) {
    CHECK_OK(recap__rng_fill_uniform(stream, buf, n, 0.0f, 1.0f));
    eager[i] = (float *)download(buf, n * sizeof(float));
  }
  recap_graph *g;
  CHECK_OK(recap_graph_create(&g));
  CHECK_OK(recap__rng_fill_uniform(stream, buf, n, 0.0f, 1.0f)); /* warmup draw */
  CHECK_OK(recap_graph_capture_begin(g, stream, NULL, RECAP_CAPTURE_MODE_THREAD_LOCAL));
  CHECK_OK(recap__rng_fill_uniform(stream, buf, n, 0.0f, 1.0f));
  CHECK_OK(recap_graph_capture_end(g));
  CHECK_OK(recap_rng_manual_seed(device, 1234));
  for (int i = 0; i < 3; i++) {
    CHECK_OK(recap_graph_replay(g, stream));
    float *got = (float *)download(buf, n * sizeof(float));
    CU_ASSERT_EQUAL(memcmp(got, eager[i], n * sizeof(float)), 0);
    free(got);
    free(eager[i]);
  }
  recap_rng_state state;
  CHECK_OK(recap_rng_get_state(device, &state));
  CU_ASSERT_EQUAL(state.offset, 3);
  CHECK_OK(recap_graph_destroy(g));
  CHECK_OK(recap_free(buf));
}

static void test_recapture_updates_the_executable_in_place(void) {
  const size_t n = 1 << 12;
  void *a, *b, *c, *d;
  CHECK_OK(recap_malloc(device, n, stream, &a));
  CHECK_OK(recap_malloc(device, n, stream, &b));
  CHECK_OK(recap_malloc(device, n, stream, &c));
  CHECK_OK(recap_malloc(device, n, stream, &d));
  recap_graph *g;
  CHECK_OK(recap_graph_create(&g));
  CHECK_OK(recap_graph_capture_begin(g, stream, NULL, RECAP_CAPTURE_MODE_THREAD_LOCAL));
  submit_work(a, b, n, 30, NULL);
  CHECK_OK(recap_graph_capture_end(g));
  /* Same topology, other buffers (a rebind): the executable is updated, not rebuilt. */
  CHECK_OK(recap_graph_capture_begin(g, stream, NULL, RECAP_CAPTURE_MODE_THREAD_LOCAL));
  submit_work(c, d, n, 40, NULL);
  CHECK_OK(recap_graph_capture_end(g));
  recap_graph_info info;
  CHECK_OK(recap_graph_info_get(g, &info));
  CU_ASSERT_EQUAL(info.captures, 2);
  CU_ASSERT_EQUAL(info.instantiations, 1);
  CU_ASSERT_EQUAL(info.updates, 1);
  CHECK_OK(backend()->memset_async(a, 0, n, stream));
  CHECK_OK(recap_graph_replay(g, stream));
  unsigned char *hc = download(c, n), *ha = download(a, n);
  CU_ASSERT(all_bytes_equal(hc, n, 40));
  CU_ASSERT(all_bytes_equal(ha, n, 0)); /* the old buffer is no longer written */
  free(hc);
  free(ha);
  /* A different topology needs a new executable. */
  CHECK_OK(recap_graph_capture_begin(g, stream, NULL, RECAP_CAPTURE_MODE_THREAD_LOCAL));
  CHECK_OK(backend()->memset_async(a, 50, n, stream));
  CHECK_OK(recap_graph_capture_end(g));
  CHECK_OK(recap_graph_info_get(g, &info));
  CU_ASSERT_EQUAL(info.instantiations, 2);
  CU_ASSERT_EQUAL(info.updates, 1);
  CHECK_OK(recap_graph_replay(g, stream));
  ha = download(a, n);
  CU_ASSERT(all_bytes_equal(ha, n, 50));
  free(ha);
  CHECK_OK(recap_graph_destroy(g));
  CHECK_OK(recap_free(a));
  CHECK_OK(recap_free(b));
  CHECK_OK(recap_free(c));
  CHECK_OK(recap_free(d));
}

static void test_side_stream_joined_by_event_is_captured_and_pooled(void) {
  const size_t n = 1 << 14;
  recap_stream *side;
  CHECK_OK(recap_stream_create(device, 0, RECAP_STREAM_NON_BLOCKING, &side));
  void *out, *out2;
  CHECK_OK(recap_malloc(device, n, stream, &out));
  CHECK_OK(recap_malloc(device, n, stream, &out2));
  recap_graph *g;
  CHECK_OK(recap_graph_create(&g));
  CHECK_OK(recap_graph_capture_begin(g, stream, NULL, RECAP_CAPTURE_MODE_THREAD_LOCAL));
  CHECK_OK(recap_stream_wait_stream(side, stream)); /* fork */
  CHECK_OK(recap_graph_capture_join(g, side));
  void *tmp;
  CHECK_OK(recap_malloc(device, n, side, &tmp));
  recap_pool_id pool;
  CHECK_OK(recap_graph_pool(g, &pool));
  recap_pool_stats ps;
  CHECK_OK(recap_pool_stats_get(device, pool, &ps));
  CU_ASSERT(ps.allocated_bytes >= n); /* the side stream's block came from the pool */
  CHECK_OK(backend()->memset_async(tmp, 77, n, side));
  CHECK_OK(recap_memcpy_async(out2, tmp, n, side));
  CHECK_OK(backend()->memset_async(out, 66, n, stream));
  CHECK_OK(recap_stream_wait_stream(stream, side)); /* join */
  CHECK_OK(recap_free(tmp));
  CHECK_OK(recap_graph_capture_end(g));
  CU_ASSERT_FALSE(recap_stream_is_capturing(side));
  CHECK_OK(recap_graph_replay(g, stream));
  unsigned char *h1 = download(out, n), *h2 = download(out2, n);
  CU_ASSERT(all_bytes_equal(h1, n, 66));
  CU_ASSERT(all_bytes_equal(h2, n, 77));
  free(h1);
  free(h2);
  CHECK_OK(recap_graph_destroy(g));
  CHECK_OK(recap_free(out));
  CHECK_OK(recap_free(out2));
  CHECK_OK(recap_stream_destroy(side));
}

static void test_misuse_is_rejected_with_a_reason(void) {
  recap_graph *g;
  CHECK_OK(recap_graph_create(&g));
  CHECK_STATUS(recap_graph_capture_end(g), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("not capturing");
  CHECK_STATUS(recap_graph_replay(g, stream), RECAP_STATUS_INVALID_ARGUMENT);
  recap_pool_id pool;
  CHECK_STATUS(recap_graph_pool(g, &pool), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_STATUS(recap_stream_wrap_external(device, NULL, &(recap_stream *){NULL}),
               RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("legacy default stream");
  CHECK_OK(recap_graph_capture_begin(g, stream, NULL, RECAP_CAPTURE_MODE_THREAD_LOCAL));
  CHECK_STATUS(recap_graph_capture_begin(g, stream, NULL, RECAP_CAPTURE_MODE_THREAD_LOCAL),
               RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_STATUS(recap_graph_destroy(g), RECAP_STATUS_BUSY);
  CHECK_STATUS(recap_stream_destroy(stream), RECAP_STATUS_BUSY);
  /* An empty capture is allowed (with a warning) and replays as a no-op. */
  CHECK_OK(recap_graph_capture_end(g));
  CHECK_OK(recap_graph_replay(g, stream));
  char path[] = "/tmp/recap_graph_dotXXXXXX";
  int fd = mkstemp(path);
  CU_ASSERT(fd >= 0);
  close(fd);
  CHECK_OK(recap_graph_debug_dump(g, path));
  FILE *f = fopen(path, "r");
  CU_ASSERT_PTR_NOT_NULL_FATAL(f);
  char head[64] = {0};
  CU_ASSERT(fread(head, 1, sizeof head - 1, f) > 0);
  CU_ASSERT_PTR_NOT_NULL(strstr(head, "digraph"));
  fclose(f);
  unlink(path);
  CHECK_OK(recap_graph_destroy(g));
  CHECK_OK(recap_graph_destroy(NULL));
}

/* recap_memcpy_async moves data host -> device -> device -> host in stream order; the host
 * buffers come from recap_host_malloc (pinned where CUDA is), as the header recommends. */
static void test_memcpy_async_copies_in_stream_order(void) {
  enum { N = 4096 };
  unsigned char *in = NULL, *out = NULL;
  void *a = NULL, *b = NULL;
  CHECK_OK(recap_host_malloc(N, (void **)&in));
  CHECK_OK(recap_host_malloc(N, (void **)&out));
  CHECK_OK(recap_malloc(device, N, stream, &a));
  CHECK_OK(recap_malloc(device, N, stream, &b));
  for (int i = 0; i < N; i++) in[i] = (unsigned char)(i * 7 + 3);
  memset(out, 0, N);
  CHECK_OK(recap_memcpy_async(a, in, N, stream));
  CHECK_OK(recap_memcpy_async(b, a, N, stream));
  CHECK_OK(recap_memcpy_async(out, b, N, stream));
  CHECK_OK(recap_stream_synchronize(stream));
  CU_ASSERT_EQUAL(memcmp(in, out, N), 0);
  /* Nothing to copy is a no-op, whatever the pointers. */
  CHECK_OK(recap_memcpy_async(NULL, NULL, 0, stream));
  CHECK_OK(recap_host_free(out));
  CHECK_OK(recap_host_free(in));
  CHECK_OK(recap_free(b));
  CHECK_OK(recap_free(a));
}

static void test_memcpy_async_misuse_is_rejected(void) {
  enum { N = 256 };
  void *a = NULL;
  unsigned char host[N] = {0};
  CHECK_OK(recap_malloc(device, N, stream, &a));
  CHECK_STATUS(recap_memcpy_async(a, host, N, NULL), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_STATUS(recap_memcpy_async(NULL, host, N, stream), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_STATUS(recap_memcpy_async(a, NULL, N, stream), RECAP_STATUS_INVALID_ARGUMENT);
  /* Overlap is refused on both backends (CUDA would leave it undefined). */
  CHECK_STATUS(recap_memcpy_async((char *)a + 8, a, 64, stream), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("overlap");
  CHECK_STATUS(recap_memcpy_async(a, a, 64, stream), RECAP_STATUS_INVALID_ARGUMENT);
  /* Adjacent ranges do not overlap. */
  CHECK_OK(recap_memcpy_async((char *)a + 64, a, 64, stream));
  CHECK_OK(recap_stream_synchronize(stream));
  CHECK_OK(recap_free(a));
}

/* Captured, a copy is recorded and made by every replay, reading the source as it is then:
 * the host backend defers it exactly as CUDA's graph does. */
static void test_memcpy_async_in_capture_copies_at_each_replay(void) {
  enum { N = 1024 };
  unsigned char *host = NULL;
  void *src = NULL; /* and dst after it: one block */
  CHECK_OK(recap_host_malloc(N, (void **)&host));
  CHECK_OK(recap_malloc(device, 2 * N, stream, &src));
  char *dst = (char *)src + N;
  CHECK_OK(backend()->memset_async(src, 5, N, stream));
  CHECK_OK(backend()->memset_async(dst, 0, N, stream));
  recap_graph *g;
  CHECK_OK(recap_graph_create(&g));
  CHECK_OK(recap_graph_capture_begin(g, stream, NULL, RECAP_CAPTURE_MODE_THREAD_LOCAL));
  CHECK_OK(recap_memcpy_async(dst, src, N, stream));
  CHECK_OK(recap_graph_capture_end(g));
  unsigned char *h = download(dst, N);
  CU_ASSERT(all_bytes_equal(h, N, 0)); /* recorded, not made */
  free(h);
  memset(host, 9, N);
  CHECK_OK(recap_memcpy_async(src, host, N, stream));
  CHECK_OK(recap_graph_replay(g, stream));
  h = download(dst, N);
  CU_ASSERT(all_bytes_equal(h, N, 9)); /* the source as the replay found it */
  free(h);
  CHECK_OK(recap_graph_destroy(g));
  CHECK_OK(recap_host_free(host));
  CHECK_OK(recap_free(src));
}

static void add_cases(CU_pSuite s) {
  CU_ADD_TEST(s, test_replay_reproduces_eager_results_with_stable_pool_memory);
  CU_ADD_TEST(s, test_graphs_sharing_a_pool_reserve_less_than_separate_pools);
  CU_ADD_TEST(s, test_illegal_call_discards_capture_and_next_capture_works);
  CU_ADD_TEST(s, test_out_of_memory_inside_capture_fails_cleanly);
  CU_ADD_TEST(s, test_replays_draw_new_random_numbers_like_eager);
  CU_ADD_TEST(s, test_recapture_updates_the_executable_in_place);
  CU_ADD_TEST(s, test_side_stream_joined_by_event_is_captured_and_pooled);
  CU_ADD_TEST(s, test_misuse_is_rejected_with_a_reason);
  CU_ADD_TEST(s, test_memcpy_async_copies_in_stream_order);
  CU_ADD_TEST(s, test_memcpy_async_misuse_is_rejected);
  CU_ADD_TEST(s, test_memcpy_async_in_capture_copies_at_each_replay);
}

int main(void) {
  add_cases(test_add_suite("graph/host", use_host, done));
  add_cases(test_add_cuda_suite("graph/cuda", use_cuda, done));
  return test_run_all();
}
