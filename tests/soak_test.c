/*
 * soak_test.c: a million graph replays of a small pipeline leave the process as they found it.
 *
 * After a warm-up (capture of every bucket, 30,000 replays, one copy-out each), it takes a
 * snapshot of the process's resident memory (/proc/self/statm), the allocator's statistics
 * (recap_memory_stats_get: every current and peak value, raw allocations and frees, OOMs) and
 * the device's free memory (recap_device_mem_get_info), then replays tests/data/serve_tiny.yaml
 * RECAP_SOAK_REPLAYS times (default 1,000,000 on CUDA, 20,000 on the host backend), cycling
 * the batch through its three buckets with recap_pipeline_run_async. Every 10,000th replay is
 * checked: its output is copied out and must equal, bit for bit, that bucket's output after
 * the warm-up. At the end the snapshot must be identical.
 *
 * Not run by `bazel test //tests/...` (tagged manual: a million replays are a soak, not a unit
 * test); scripts/gpu/gpu_soak.sh runs it on the GPU machine. Run from the repository (or stage)
 * root, where tests/data/ lies.
 */
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "test_util.h"

enum { CHECK_EVERY = 10000, WARMUP_CHECKS = 3, NUM_BATCHES = 3, MAX_ROWS = 4, D = 16 };
static const int64_t BATCHES[NUM_BATCHES] = {1, 2, 4};
static const char SPEC_PATH[] = "tests/data/serve_tiny.yaml";

typedef struct {
  long resident_pages;
  recap_memory_stats alloc;
  size_t device_free;
} snapshot;

static long resident_pages(void) {
  long size = 0, resident = -1;
  FILE *f = fopen("/proc/self/statm", "r");
  if (f) {
    if (fscanf(f, "%ld %ld", &size, &resident) != 2) resident = -1;
    fclose(f);
  }
  return resident;
}

static void take(snapshot *s) {
  memset(s, 0, sizeof *s);
  s->resident_pages = resident_pages();
  CHECK_OK(recap_memory_stats_get(test_device, &s->alloc));
  size_t total = 0;
  CHECK_OK(recap_device_mem_get_info(test_device, &s->device_free, &total));
}

/* Compares what must not move: current and peak of every statistic (cumulative sums grow by
 * design), raw allocations and frees, OOMs and retries; prints each difference. */
static int compare(const snapshot *a, const snapshot *b) {
  int diffs = 0;
#define SAME(what, x, y)                                                                           \
  do {                                                                                             \
    if ((x) != (y)) {                                                                              \
      fprintf(stderr, "\n  soak: %s changed: %lld -> %lld", what, (long long)(x), (long long)(y)); \
      diffs++;                                                                                     \
    }                                                                                              \
  } while (0)
  SAME("resident pages", a->resident_pages, b->resident_pages);
  SAME("device free bytes", a->device_free, b->device_free);
  const recap_memory_stats *x = &a->alloc, *y = &b->alloc;
  for (int t = 0; t < RECAP_STAT_TYPE_COUNT; ++t) {
#define STAT(field)                                                  \
  SAME(#field ".current", x->field[t].current, y->field[t].current); \
  SAME(#field ".peak", x->field[t].peak, y->field[t].peak)
    STAT(allocated_bytes);
    STAT(allocated_count);
    STAT(reserved_bytes);
    STAT(reserved_count);
    STAT(active_bytes);
    STAT(active_count);
    STAT(inactive_split_bytes);
    STAT(inactive_split_count);
    STAT(requested_bytes);
    STAT(requested_count);
#undef STAT
  }
  SAME("num_device_alloc", x->num_device_alloc, y->num_device_alloc);
  SAME("num_device_free", x->num_device_free, y->num_device_free);
  SAME("num_ooms", x->num_ooms, y->num_ooms);
  SAME("num_alloc_retries", x->num_alloc_retries, y->num_alloc_retries);
#undef SAME
  return diffs;
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static long long replays_wanted(void) {
  const char *env = getenv("RECAP_SOAK_REPLAYS");
  if (env && *env) return atoll(env);
  return test_device.backend == RECAP_BACKEND_CUDA ? 1000000 : 20000;
}

static void test_replays_keep_memory_and_every_checked_result_identical(void) {
  long long replays = replays_wanted();
  CU_ASSERT_FATAL(replays >= CHECK_EVERY);
  recap_pipeline_options o = RECAP_PIPELINE_OPTIONS_INIT;
  o.override_device = 1;
  o.device = test_device;
  o.override_mode = 1;
  o.mode = RECAP_MODE_GRAPH;
  recap_pipeline *p = NULL;
  CHECK_OK(recap_pipeline_create_file(SPEC_PATH, &o, &p));

  /* Fixed inputs (a full largest bucket; each batch reads its first rows). */
  float x[MAX_ROWS * D], want[NUM_BATCHES][MAX_ROWS * D], got[MAX_ROWS * D];
  test_rng rng;
  test_rng_init(&rng);
  for (int i = 0; i < MAX_ROWS * D; ++i) x[i] = (float)test_rng_uniform(&rng, -1, 1);
  CHECK_OK(recap_pipeline_copy_in(p, "x", x, sizeof x, 0));

  /* Warm-up: capture, then the very pattern of the soak (CHECK_EVERY replays queued before
   * each copy-out), so queues and staging buffers have reached their steady size. */
  for (int i = 1; i <= WARMUP_CHECKS * CHECK_EVERY; ++i) {
    int b = i % NUM_BATCHES;
    CHECK_OK(recap_pipeline_run_async(p, BATCHES[b], NULL));
    if (i % CHECK_EVERY == 0)
      CHECK_OK(recap_pipeline_copy_out(p, "y", got, (size_t)BATCHES[b] * D * sizeof(float),
                                        BATCHES[b]));
  }
  for (int b = 0; b < NUM_BATCHES; ++b) {
    CHECK_OK(recap_pipeline_run(p, BATCHES[b]));
    size_t bytes = (size_t)BATCHES[b] * D * sizeof(float);
    CHECK_OK(recap_pipeline_copy_out(p, "y", want[b], bytes, BATCHES[b]));
  }
  recap_pipeline_stats s0;
  CHECK_OK(recap_pipeline_stats_get(p, &s0));
  CU_ASSERT_EQUAL(s0.captures, NUM_BATCHES);
  snapshot before, after;
  /* Everything the end of the soak calls, once, before the snapshot it is compared with. */
  CHECK_OK(recap_stream_synchronize(recap_pipeline_stream(p)));
  take(&after);
  take(&before);

  double t0 = now();
  long long checked = 0, mismatched = 0;
  for (long long i = 1; i <= replays; ++i) {
    int b = (int)(i % NUM_BATCHES);
    recap_status st = recap_pipeline_run_async(p, BATCHES[b], NULL);
    if (st != RECAP_OK) {
      CHECK_OK(st);
      break;
    }
    if (i % CHECK_EVERY != 0) continue;
    size_t bytes = (size_t)BATCHES[b] * D * sizeof(float);
    CHECK_OK(recap_pipeline_copy_out(p, "y", got, bytes, BATCHES[b]));
    checked++;
    if (memcmp(got, want[b], bytes) != 0) {
      if (mismatched == 0)
        fprintf(stderr, "\n  soak: replay %lld (batch %lld) differs from the warm-up result", i,
                (long long)BATCHES[b]);
      mismatched++;
    }
  }
  CHECK_OK(recap_stream_synchronize(recap_pipeline_stream(p)));
  double seconds = now() - t0;
  take(&after);
  recap_pipeline_stats s1;
  CHECK_OK(recap_pipeline_stats_get(p, &s1));
  int diffs = compare(&before, &after);
  printf(
      "\nsoak (%s): %lld replays in %.1f s (%.1f us each), %lld checked, %lld mismatched; "
      "%llu eager runs, %llu captures; resident %ld pages, device free %zu bytes, "
      "allocated %lld bytes in %lld blocks, reserved %lld bytes: %s\n",
      recap_backend_name(test_device.backend), (long long)(s1.replays - s0.replays), seconds,
      1e6 * seconds / (double)replays, checked, mismatched,
      (unsigned long long)(s1.eager_runs - s0.eager_runs), (unsigned long long)s1.captures,
      after.resident_pages, after.device_free,
      (long long)after.alloc.allocated_bytes[RECAP_STAT_ALL].current,
      (long long)after.alloc.allocated_count[RECAP_STAT_ALL].current,
      (long long)after.alloc.reserved_bytes[RECAP_STAT_ALL].current,
      diffs ? "CHANGED" : "identical before and after");
  CU_ASSERT_EQUAL(s1.replays - s0.replays, (uint64_t)replays);
  CU_ASSERT_EQUAL(s1.eager_runs, s0.eager_runs);
  CU_ASSERT_EQUAL(s1.captures, s0.captures);
  CU_ASSERT_EQUAL(checked, replays / CHECK_EVERY);
  CU_ASSERT_EQUAL(mismatched, 0);
  CU_ASSERT_EQUAL(diffs, 0);
  CHECK_OK(recap_pipeline_destroy(p));
}

int main(void) {
  CU_pSuite host = test_add_suite("soak/host", test_suite_use_host, NULL);
  CU_ADD_TEST(host, test_replays_keep_memory_and_every_checked_result_identical);
  CU_pSuite cuda = test_add_cuda_suite("soak/cuda", test_suite_use_cuda, NULL);
  CU_ADD_TEST(cuda, test_replays_keep_memory_and_every_checked_result_identical);
  return test_run_all();
}
