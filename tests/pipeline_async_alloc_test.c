/*
 * Pipelines and graphs under RECAP_ALLOC_CONF=backend:cudaMallocAsync, on the host backend
 * (which emulates the driver's stream-ordered pool). That backend has no private pools: graphs
 * capture without one and pipelines allocate everything before capturing. The process-wide
 * allocator reads RECAP_ALLOC_CONF once, so main sets it before any allocation.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/backend.h"
#include "tests/test_util.h"

static const recap_device host = {RECAP_BACKEND_HOST, 0};

/* y = relu(x W^T + b) with W = 0.25 and b = -0.5: each output is 0.25 * rowsum(x) - 0.5. */
static const char SPEC[] =
    "name: async\n"
    "device: host\n"
    "dtype: f32\n"
    "dims: {B: [1, 4], D: 16, H: 5}\n"
    "tensors:\n"
    "  x: {shape: [B, D], role: input}\n"
    "  w: {shape: [H, D], role: param, init: value, value: 0.25}\n"
    "  b: {shape: [H], role: param, init: value, value: -0.5}\n"
    "ops:\n"
    "  - {op: linear, in: [x, w, b], out: h}\n"
    "  - {op: relu, in: [h], out: y}\n"
    "outputs: [y]\n";

enum { D = 16, H = 5, ROWS = 3 };

static void check_run(recap_pipeline *p) {
  float x[ROWS * D], y[ROWS * H];
  for (int i = 0; i < ROWS * D; ++i) x[i] = (float)((i * 5) % 9) - 2.5f;
  CHECK_OK(recap_pipeline_copy_in(p, "x", x, sizeof x, ROWS));
  CHECK_OK(recap_pipeline_run(p, ROWS));
  CHECK_OK(recap_pipeline_copy_out(p, "y", y, sizeof y, ROWS));
  for (int r = 0; r < ROWS; ++r) {
    float sum = 0.0f;
    for (int k = 0; k < D; ++k) sum += x[r * D + k];
    for (int c = 0; c < H; ++c)
      CU_ASSERT_DOUBLE_EQUAL(y[r * H + c], fmaxf(0.25f * sum - 0.5f, 0.0f), 1e-5);
  }
}

/* Graph mode works: buckets are captured and replayed, and no pool memory is reserved. */
static void test_pipeline_captures_and_replays_without_a_pool(void) {
  recap_pipeline *p = NULL;
  CHECK_OK(recap_pipeline_create_string(SPEC, strlen(SPEC), "async.yaml", NULL, &p));
  check_run(p);
  check_run(p);
  recap_pipeline_stats s;
  CHECK_OK(recap_pipeline_stats_get(p, &s));
  CU_ASSERT_EQUAL(s.replays, 2);
  CU_ASSERT_EQUAL(s.eager_runs, 0);
  CU_ASSERT(s.captures >= 1);
  CU_ASSERT_EQUAL(s.pool_reserved_bytes, 0);
  CHECK_OK(recap_pipeline_destroy(p));
}

/* The params outlive the pipeline that loaded them: a clone keeps running after its source is
 * destroyed, and freeing the params later touches no destroyed stream (ASan in CI). */
static void test_clone_outlives_its_source(void) {
  recap_pipeline *source = NULL, *clone = NULL;
  CHECK_OK(recap_pipeline_create_string(SPEC, strlen(SPEC), "async.yaml", NULL, &source));
  CHECK_OK(recap_pipeline_clone(source, NULL, &clone));
  CHECK_OK(recap_pipeline_destroy(source));
  check_run(clone);
  CHECK_OK(recap_pipeline_destroy(clone));
}

/* A create that fails after the params are loaded (the intermediates do not fit the host
 * memory cap) returns OUT_OF_MEMORY; its cleanup used to free the params through the destroyed
 * pipeline stream. */
static void test_failed_create_after_params_unwinds(void) {
  static const char big[] =
      "name: too-big\n"
      "device: host\n"
      "dtype: f32\n"
      "dims: {B: 2048, D: 2048}\n"
      "tensors:\n"
      "  x: {shape: [B, 16], role: input}\n"
      "  w1: {shape: [D, 16], role: param, init: ones}\n"
      "  w2: {shape: [D, 16], role: param, init: ones}\n"
      "ops:\n"
      "  - {op: linear, in: [x, w1], out: h1}\n"
      "  - {op: linear, in: [x, w2], out: h2}\n"
      "  - {op: add, in: [h1, h2], out: y}\n"
      "outputs: [y]\n";
  /* 24 MiB: the params (256 KiB) fit, and each 16 MiB tensor alone, but not h1 and h2: in one
   * arena, or (arena planning off) as separate blocks of the stream-ordered pool, which count
   * against the capacity together. */
  char *saved_arena = getenv("RECAP_ARENA") ? strdup(getenv("RECAP_ARENA")) : NULL;
  for (int arena = 0; arena < 2; ++arena) {
    setenv("RECAP_ARENA", arena ? "1" : "0", 1);
    setenv("RECAP_HOST_MEMORY_BYTES", "25165824", 1);
    recap_pipeline *p = NULL;
    recap_status st = recap_pipeline_create_string(big, strlen(big), "big.yaml", NULL, &p);
    unsetenv("RECAP_HOST_MEMORY_BYTES");
    CHECK_STATUS(st, RECAP_STATUS_OUT_OF_MEMORY);
    CU_ASSERT_PTR_NULL(p);
    size_t allocated = 1;
    CHECK_OK(recap_memory_allocated(host, &allocated));
    CU_ASSERT_EQUAL(allocated, 0);
  }
  if (saved_arena)
    setenv("RECAP_ARENA", saved_arena, 1);
  else
    unsetenv("RECAP_ARENA");
  free(saved_arena);
}

/* recap_graph: a capture without a pool works, asking for one is refused with the reason, and
 * so is an allocation inside the capture. */
static void test_graph_capture_without_a_pool(void) {
  recap_stream *s = NULL;
  CHECK_OK(recap_stream_create(host, 0, RECAP_STREAM_NON_BLOCKING, &s));
  void *buf = NULL, *inside = NULL;
  CHECK_OK(recap_malloc(host, 256, s, &buf));
  recap_graph *g = NULL;
  CHECK_OK(recap_graph_create(&g));
  CHECK_OK(recap_graph_capture_begin(g, s, NULL, RECAP_CAPTURE_MODE_THREAD_LOCAL));
  CHECK_STATUS(recap_malloc(host, 256, s, &inside), RECAP_STATUS_NOT_SUPPORTED);
  CHECK_OK(s->backend->memset_async(buf, 7, 256, s));
  CHECK_OK(recap_graph_capture_end(g));
  CHECK_OK(recap_graph_replay(g, s));
  CHECK_OK(recap_stream_synchronize(s));
  recap_pool_id pool;
  CHECK_STATUS(recap_graph_pool(g, &pool), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_ERROR_MENTIONS("cudaMallocAsync");
  CHECK_OK(recap_graph_destroy(g));

  CHECK_STATUS(recap_pool_create(host, &pool), RECAP_STATUS_NOT_SUPPORTED);
  CHECK_ERROR_MENTIONS("cudaMallocAsync");
  CHECK_OK(recap_free(buf));
  CHECK_OK(recap_stream_destroy(s));
}

int main(void) {
  setenv("RECAP_ALLOC_CONF", "backend:cudaMallocAsync", 1);
  CU_pSuite s = test_add_suite("pipeline_async_alloc/host", NULL, NULL);
  CU_ADD_TEST(s, test_pipeline_captures_and_replays_without_a_pool);
  CU_ADD_TEST(s, test_clone_outlives_its_source);
  CU_ADD_TEST(s, test_failed_create_after_params_unwinds);
  CU_ADD_TEST(s, test_graph_capture_without_a_pool);
  return test_run_all();
}
