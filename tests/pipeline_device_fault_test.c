/*
 * pipeline_device_fault_test.c: every device allocation of a pipeline's whole life fails in
 * turn, on CUDA and on the host backend; each failure must come back as
 * RECAP_STATUS_OUT_OF_MEMORY with a message, the pipeline must then work (the failed step,
 * retried, succeeds and every later one too, with the same results) or be cleanly destroyable,
 * and nothing may leak: after destroy and recap_empty_cache the allocator's statistics are what
 * they were before the pipeline was created, and the device's free memory is not lower. Device
 * allocations of real sizes that cannot fit are checked too.
 *
 * How device allocations fail: this binary alone is linked with
 * -Wl,--wrap=cudaMalloc,--wrap=aligned_alloc (tests/BUILD), so every cudaMalloc of recap's
 * code (the CUDA backend's mem_alloc: the caching allocator's segments, the GEMM module's
 * per-stream workspaces, the RNG's capture slots) and every aligned_alloc (the host backend's
 * device memory, its only caller) goes through the wrappers below. While armed for the
 * running backend, they count allocations and fail the Nth one (and, in "sticky" mode, every
 * later one until the sequence sees the failure and disarms: then the caching allocator's
 * free-cache-and-retry cannot hide it). A failing cudaMalloc is a real one, asked for 2^50
 * bytes, so cudart's state after it (its per-thread last error) is what a real out-of-memory
 * leaves. The sequence runs for N = 1, 2, ... until a run makes fewer than N allocations: then
 * every device allocation of the life has failed once. cuBLAS's own allocations (inside
 * libcublas) are not recap's and are not counted.
 *
 * The caching allocator (the default) runs in this process. The same sequences run again in a
 * child process (this binary re-executed with --child) under RECAP_ALLOC_CONF=backend:cudaMalloc,
 * where every recap_malloc is its own raw allocation, so each block of the life fails in turn
 * rather than each 2 MiB segment. The CUDA suites are inactive on a machine without a GPU.
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "runtime/error.h"
#include "tests/test_util.h"

#if RECAP_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

/* ------------------------------------------------------------------------------------------
 * The interposers
 * ---------------------------------------------------------------------------------------- */

static struct {
  bool armed;
  recap_backend_kind backend; /* whose allocations count */
  bool sticky;                /* fail from fail_at on, not only at fail_at */
  unsigned long calls;        /* device allocations counted in this run */
  unsigned long fail_at;      /* 1-based */
  unsigned long failed;       /* allocations refused in this run */
} g_fault;

static bool fail_now(recap_backend_kind backend) {
  if (!g_fault.armed || g_fault.backend != backend) return false;
  unsigned long n = ++g_fault.calls;
  if (n < g_fault.fail_at || (n > g_fault.fail_at && !g_fault.sticky)) return false;
  g_fault.failed++;
  return true;
}

static void arm(recap_backend_kind backend, unsigned long fail_at, bool sticky) {
  g_fault.backend = backend;
  g_fault.calls = 0;
  g_fault.fail_at = fail_at;
  g_fault.sticky = sticky;
  g_fault.failed = 0;
  g_fault.armed = true;
}

static void disarm(void) { g_fault.armed = false; }

void *__real_aligned_alloc(size_t alignment, size_t size);
void *__wrap_aligned_alloc(size_t alignment, size_t size);

void *__wrap_aligned_alloc(size_t alignment, size_t size) {
  if (fail_now(RECAP_BACKEND_HOST)) {
    errno = ENOMEM;
    return NULL;
  }
  return __real_aligned_alloc(alignment, size);
}

#if RECAP_WITH_CUDA
cudaError_t __real_cudaMalloc(void **ptr, size_t size);
cudaError_t __wrap_cudaMalloc(void **ptr, size_t size);

/* 2^50 bytes: more than any GPU has, so the real cudaMalloc refuses it. */
static const size_t IMPOSSIBLE_BYTES = (size_t)1 << 50;

cudaError_t __wrap_cudaMalloc(void **ptr, size_t size) {
  if (fail_now(RECAP_BACKEND_CUDA)) {
    cudaError_t e = __real_cudaMalloc(ptr, IMPOSSIBLE_BYTES);
    if (e == cudaSuccess) { /* a machine with a petabyte: fail anyway */
      cudaFree(*ptr);
      e = cudaErrorMemoryAllocation;
    }
    return e;
  }
  return __real_cudaMalloc(ptr, size);
}
#endif

/* ------------------------------------------------------------------------------------------
 * The pipeline and its life
 * ---------------------------------------------------------------------------------------- */

/* A param, an input, a state and a scalar; intermediates (h, s, s2, y_rows) in the arena; two
 * streams (a GEMM on each, so each gets a GEMM workspace); two buckets of B; kv_append with the
 * engine's row count, so padding rows stay out of the cache. Small, so that hundreds of whole
 * lives take seconds. */
static const char SPEC[] =
    "name: device-fault-life\n"
    "dtype: f32\n"
    "seed: 7\n"
    "dims: {B: [2, 4], D: 32, S: 4}\n"
    "tensors:\n"
    "  x:     {shape: [B, D], role: input}\n"
    "  w:     {shape: [D, D], role: param, init: normal, std: 0.1}\n"
    "  w2:    {shape: [D, D], role: param, init: normal, std: 0.1}\n"
    "  g:     {shape: [D], role: param, init: uniform}\n"
    "  pos:   {role: scalar, value: 1}\n"
    "  cache: {shape: [B, S, 1, D], role: state, init: zeros}\n"
    "ops:\n"
    "  - {op: linear, in: [x, w], out: h, act: gelu, name: proj}\n"
    "  - {op: linear, in: [x, w2], out: s, stream: 1, name: side_proj}\n"
    "  - {op: mul, in: [s, g], out: s2, stream: 1, name: side_scale}\n"
    "  - {op: add, in: [h, s2], out: y, name: join}\n"
    "  - {op: reshape, in: [y], out: y_rows, shape: [B, 1, 1, D]}\n"
    "  - {op: kv_append, in: [cache, y_rows, pos], out: cache_after, name: append}\n"
    "outputs: [y, cache_after]\n";

enum { B_MAX = 4, D = 32, S = 4, BATCH = 3 };
enum { X_BYTES = B_MAX * D * 4, Y_BYTES = BATCH * D * 4, CACHE_BYTES = B_MAX * S * D * 4 };

typedef struct {
  float x[B_MAX * D];
  float y_ref[BATCH * D];
  float cache_ref[B_MAX * S * D];
  float y[BATCH * D];
  float cache[B_MAX * S * D];
  bool record; /* the next check writes the references */
  float tolerance;
} life_ctx;

static recap_pipeline_options life_options(void) {
  recap_pipeline_options o = RECAP_PIPELINE_OPTIONS_INIT;
  o.override_device = 1;
  o.device = test_device;
  o.override_mode = 1;
  o.mode = RECAP_MODE_GRAPH;
  o.warmup = 1;
  return o;
}

static bool close_enough(const float *got, const float *want, size_t n, float tolerance) {
  for (size_t i = 0; i < n; ++i) {
    float d = fabsf(got[i] - want[i]);
    if (!(d <= tolerance * (1.0f + fabsf(want[i])))) return false;
  }
  return true;
}

/* Copies y (the run's rows) and the cache (whole) out, and records or compares them. */
static recap_status check_results(life_ctx *ctx, recap_pipeline *p, const char *when) {
  RECAP_TRY(recap_pipeline_copy_out(p, "y", ctx->y, Y_BYTES, BATCH));
  RECAP_TRY(recap_pipeline_copy_out(p, "cache", ctx->cache, CACHE_BYTES, 0));
  if (ctx->record) {
    /* The first run of the reference life; its later runs are compared with it. */
    memcpy(ctx->y_ref, ctx->y, Y_BYTES);
    memcpy(ctx->cache_ref, ctx->cache, CACHE_BYTES);
    ctx->record = false;
    return RECAP_OK;
  }
  if (!close_enough(ctx->y, ctx->y_ref, BATCH * D, ctx->tolerance))
    return RECAP_FAIL(RECAP_STATUS_INTERNAL, "%s: y differs from the run without injection",
                      when);
  if (!close_enough(ctx->cache, ctx->cache_ref, B_MAX * S * D, ctx->tolerance))
    return RECAP_FAIL(RECAP_STATUS_INTERNAL, "%s: the cache differs from the run without injection",
                      when);
  return RECAP_OK;
}

/* What a caller does per request: a fresh cache (so every run appends to the same state),
 * the input, a run of BATCH rows (bucket 4), the results. */
static recap_status feed_run_check(life_ctx *ctx, recap_pipeline *p, const char *when) {
  static const float zeros[B_MAX * S * D];
  RECAP_TRY(recap_pipeline_copy_in(p, "cache", zeros, CACHE_BYTES, 0));
  RECAP_TRY(recap_pipeline_copy_in(p, "x", ctx->x, X_BYTES, 0));
  RECAP_TRY(recap_pipeline_run(p, BATCH));
  return check_results(ctx, p, when);
}

/* The life, as steps: each can be retried after it failed (the pipeline's state says what is
 * done). */
typedef enum {
  STEP_CREATE,        /* load, check, plan; params, buffers, arena, private pool */
  STEP_CAPTURE,       /* warmup of both buckets, capture, instantiate, upload */
  STEP_REPLAY,        /* copy in, replay bucket 4 with 3 rows, copy out */
  STEP_BUFFER,        /* the caller's own device memory for x */
  STEP_REBIND,        /* x rebound to it: both graphs re-captured */
  STEP_REPLAY_REBOUND,
  STEP_CLONE,         /* shares the params; its own buffers, arena, pool, streams */
  STEP_CLONE_CAPTURE, /* the clone's warmup and captures, on its own streams */
  STEP_CLONE_RUN,
  NUM_STEPS
} life_step;

static const char *const STEP_NAMES[NUM_STEPS] = {
    "create", "capture", "replay", "caller's buffer", "rebind", "replay after the rebind",
    "clone", "the clone's capture", "the clone's replay"};

typedef struct {
  recap_pipeline *p, *clone;
  void *buffer;
} life_state;

static recap_status run_step(life_ctx *ctx, life_state *s, life_step step) {
  recap_pipeline_options o = life_options();
  switch (step) {
    case STEP_CREATE:
      if (s->p) return RECAP_OK;
      return recap_pipeline_create_string(SPEC, strlen(SPEC), "device_fault_life.yaml", &o, &s->p);
    case STEP_CAPTURE:
      return recap_pipeline_capture(s->p);
    case STEP_REPLAY:
      return feed_run_check(ctx, s->p, "the first replay");
    case STEP_BUFFER:
      if (s->buffer) return RECAP_OK;
      return recap_malloc(test_device, X_BYTES, recap_pipeline_stream(s->p), &s->buffer);
    case STEP_REBIND:
      return recap_pipeline_rebind(s->p, "x", s->buffer);
    case STEP_REPLAY_REBOUND:
      return feed_run_check(ctx, s->p, "the replay after the rebind");
    case STEP_CLONE:
      if (s->clone) return RECAP_OK;
      return recap_pipeline_clone(s->p, NULL, &s->clone);
    case STEP_CLONE_CAPTURE:
      /* Explicitly: a capture that the first graph-mode run triggers and that fails makes that
       * run (and later ones) eager with a warning instead of failing it (recap.h). */
      return recap_pipeline_capture(s->clone);
    case STEP_CLONE_RUN:
      return feed_run_check(ctx, s->clone, "the clone's replay");
    case NUM_STEPS:
      break;
  }
  return RECAP_FAIL(RECAP_STATUS_INTERNAL, "no step %d", (int)step);
}

/* Device memory as the allocator and the device see it, with the cache emptied. */
typedef struct {
  int64_t allocated_bytes, allocated_count, reserved_bytes, reserved_count, active_bytes;
  size_t device_free;
} memory_mark;

static recap_status mark_memory(memory_mark *out) {
  RECAP_TRY(recap_empty_cache(test_device));
  recap_memory_stats s;
  RECAP_TRY(recap_memory_stats_get(test_device, &s));
  out->allocated_bytes = s.allocated_bytes[RECAP_STAT_ALL].current;
  out->allocated_count = s.allocated_count[RECAP_STAT_ALL].current;
  out->reserved_bytes = s.reserved_bytes[RECAP_STAT_ALL].current;
  out->reserved_count = s.reserved_count[RECAP_STAT_ALL].current;
  out->active_bytes = s.active_bytes[RECAP_STAT_ALL].current;
  size_t total = 0;
  return recap_device_mem_get_info(test_device, &out->device_free, &total);
}

/* The allocator's figures must be equal. The device's free memory must not have dropped; it
 * may have risen: seen on the H100, 2 MiB more free after a life whose very first cudaMalloc
 * failed (nothing was created), memory of the driver's own that lives with pipelines keep
 * (the baseline's) and that a failing cudaMalloc makes it release. */
static recap_status compare_marks(const memory_mark *before, const memory_mark *after) {
  if (before->allocated_bytes == after->allocated_bytes &&
      before->allocated_count == after->allocated_count &&
      before->reserved_bytes == after->reserved_bytes &&
      before->reserved_count == after->reserved_count &&
      before->active_bytes == after->active_bytes && after->device_free >= before->device_free)
    return RECAP_OK;
  return RECAP_FAIL(RECAP_STATUS_INTERNAL,
                    "memory leaked: allocated %lld -> %lld bytes (%lld -> %lld blocks), "
                    "reserved %lld -> %lld bytes (%lld -> %lld segments), active %lld -> %lld "
                    "bytes, device free %zu -> %zu bytes",
                    (long long)before->allocated_bytes, (long long)after->allocated_bytes,
                    (long long)before->allocated_count, (long long)after->allocated_count,
                    (long long)before->reserved_bytes, (long long)after->reserved_bytes,
                    (long long)before->reserved_count, (long long)after->reserved_count,
                    (long long)before->active_bytes, (long long)after->active_bytes,
                    before->device_free, after->device_free);
}

/* What one run of the life did. */
typedef struct {
  recap_status first;  /* the first failure's status (RECAP_OK: none) */
  char why[2048];      /* ... and its message */
  int failed_step;     /* NUM_STEPS: none */
  recap_status result; /* RECAP_OK, or RECAP_STATUS_INTERNAL with the problem in `problem` */
  char problem[2048];
} life_result;

/* One whole life. The first step that fails ends the injection (faults stop); that step is
 * retried and every later one run, all of which must now succeed with the reference results.
 * Then everything is destroyed, which must succeed, and the memory must be back at `baseline`.
 * With `stop_after_failure`, the life stops at the first failure instead and only destroys:
 * that pipelines are cleanly destroyable in whatever state a failure left them. */
static void life(life_ctx *ctx, const memory_mark *baseline, bool stop_after_failure,
                 life_result *r) {
  life_state s = {0};
  r->first = RECAP_OK;
  r->why[0] = r->problem[0] = '\0';
  r->failed_step = NUM_STEPS;
  r->result = RECAP_OK;
  recap_status st = RECAP_OK;
  for (int k = 0; k < NUM_STEPS; ++k) {
    recap_clear_error();
    st = run_step(ctx, &s, (life_step)k);
    if (st == RECAP_OK) continue;
    if (r->first != RECAP_OK || st == RECAP_STATUS_INTERNAL || !g_fault.armed) {
      snprintf(r->problem, sizeof r->problem, "step '%s'%s: %s: %s", STEP_NAMES[k],
               r->first != RECAP_OK ? " (after the failure, faults off)" : "",
               recap_status_name(st), recap_last_error());
      r->result = RECAP_STATUS_INTERNAL;
      break;
    }
    /* The first failure: remember it, stop the faults, retry the step. */
    r->first = st;
    snprintf(r->why, sizeof r->why, "%s", recap_last_error());
    r->failed_step = k;
    disarm();
    if (stop_after_failure) break;
    --k;
  }
  disarm();
  /* Without a failure, every run was a replay of a graph captured once per bucket. */
  recap_pipeline_stats ps = {0}, cs = {0};
  if (r->result == RECAP_OK && r->first == RECAP_OK &&
      (recap_pipeline_stats_get(s.p, &ps) != RECAP_OK ||
       recap_pipeline_stats_get(s.clone, &cs) != RECAP_OK || ps.replays != 2 ||
       ps.eager_runs != 0 || cs.replays != 1 || cs.eager_runs != 0)) {
    snprintf(r->problem, sizeof r->problem,
             "a life without failure ran %llu eager runs and %llu replays (clone: %llu, %llu); "
             "expected 0 and 2 (clone: 0, 1)",
             (unsigned long long)ps.eager_runs, (unsigned long long)ps.replays,
             (unsigned long long)cs.eager_runs, (unsigned long long)cs.replays);
    r->result = RECAP_STATUS_INTERNAL;
  }
  /* A failed step may leave work in flight on any stream: destroy waits for it. */
  recap_status d1 = recap_pipeline_destroy(s.clone);
  recap_status d2 = recap_pipeline_destroy(s.p);
  recap_status d3 = recap_free(s.buffer);
  if (r->result == RECAP_OK && (d1 != RECAP_OK || d2 != RECAP_OK || d3 != RECAP_OK)) {
    snprintf(r->problem, sizeof r->problem, "teardown: destroy clone %s, destroy %s, free %s: %s",
             recap_status_name(d1), recap_status_name(d2), recap_status_name(d3),
             recap_last_error());
    r->result = RECAP_STATUS_INTERNAL;
  }
  memory_mark after;
  if (r->result == RECAP_OK && baseline) {
    st = mark_memory(&after);
    if (st == RECAP_OK) st = compare_marks(baseline, &after);
    if (st != RECAP_OK) {
      snprintf(r->problem, sizeof r->problem, "after the teardown: %s", recap_last_error());
      r->result = RECAP_STATUS_INTERNAL;
    }
  }
}

static void fill_input(life_ctx *ctx) {
  uint32_t v = 2024;
  for (size_t i = 0; i < B_MAX * D; ++i) {
    v = v * 1664525u + 1013904223u;
    ctx->x[i] = (float)((v >> 8) & 0xFFFF) / 65536.0f - 0.5f;
  }
}

/* The reference life (no injection): records the results, and creates what lives as long as
 * the process (the op registry, cuBLAS handles, the RNG's pooled capture slots), so that none
 * of it is taken for a leak. It runs twice: the second run must leave memory where the first
 * left it. */
static bool life_setup(life_ctx *ctx, memory_mark *baseline) {
  memset(ctx, 0, sizeof *ctx);
  fill_input(ctx);
  /* The host backend and its reference GEMM are deterministic; cuBLAS may choose another
   * algorithm once a workspace came and went, so CUDA results get f32 rounding room. */
  ctx->tolerance = test_device.backend == RECAP_BACKEND_HOST ? 0.0f : 1e-5f;
  ctx->record = true;
  life_result r;
  life(ctx, NULL, false, &r);
  if (r.result != RECAP_OK || r.first != RECAP_OK) {
    fprintf(stderr, "\n  the life without injection failed: %s%s\n", r.problem, r.why);
    return false;
  }
  recap_status st = mark_memory(baseline);
  if (st != RECAP_OK) {
    fprintf(stderr, "\n  reading the memory: %s\n", recap_last_error());
    return false;
  }
  life(ctx, baseline, false, &r);
  if (r.result != RECAP_OK || r.first != RECAP_OK) {
    fprintf(stderr, "\n  the second life without injection: %s%s\n", r.problem, r.why);
    return false;
  }
  return true;
}

/* Past this many injected runs something loops. */
enum { MAX_RUNS = 5000, MAX_PRINTED = 5 };

typedef struct {
  unsigned long survived, absorbed, by_step[NUM_STEPS];
} injection_totals;

/* Fails device allocation N (sticky: N and every later one until the life sees it) for
 * N = 1, 2, ... until a life completes without reaching N. */
static void inject(bool sticky, bool stop_after_failure, injection_totals *t) {
  life_ctx ctx;
  memory_mark baseline;
  CU_ASSERT_TRUE_FATAL(life_setup(&ctx, &baseline));
  memset(t, 0, sizeof *t);
  unsigned long problems = 0;
  for (unsigned long n = 1; n <= MAX_RUNS; ++n) {
    recap_memory_stats before, after;
    CHECK_OK(recap_memory_stats_get(test_device, &before));
    arm(test_device.backend, n, sticky);
    life_result r;
    life(&ctx, &baseline, stop_after_failure, &r);
    bool injected = g_fault.failed > 0;
    disarm();
    CHECK_OK(recap_memory_stats_get(test_device, &after));
    if (!injected) {
      /* Fewer than n device allocations: every one has failed once. */
      if (r.result != RECAP_OK || r.first != RECAP_OK)
        fprintf(stderr, "\n  the life after the last injection: %s%s\n", r.problem, r.why);
      CU_ASSERT_TRUE(r.result == RECAP_OK && r.first == RECAP_OK);
      CU_ASSERT_TRUE(n > 1);
      return;
    }
    /* A one-shot failure may be absorbed: the caching allocator answers an out-of-memory by
     * releasing its cache and retrying once, and the retry is the next allocation. Nothing
     * else may swallow one. */
    bool retried = after.num_alloc_retries > before.num_alloc_retries;
    bool absorbed = r.first == RECAP_OK && !sticky && retried;
    bool reported = r.first == RECAP_STATUS_OUT_OF_MEMORY && r.why[0] != '\0';
    bool ok = r.result == RECAP_OK && (absorbed || reported);
    if (ok) {
      t->survived++;
      if (absorbed) t->absorbed++;
      if (reported) t->by_step[r.failed_step]++;
    } else if (problems++ < MAX_PRINTED) {
      fprintf(stderr, "\n  %s device allocation %lu failed%s: %s%s%s %s: %s%s%s\n",
              recap_backend_name(test_device.backend), n, sticky ? " (sticky)" : "",
              r.failed_step < NUM_STEPS ? "step '" : "",
              r.failed_step < NUM_STEPS ? STEP_NAMES[r.failed_step] : "no step failed",
              r.failed_step < NUM_STEPS ? "' returned" : "", recap_status_name(r.first), r.why,
              r.problem[0] ? "; then: " : "", r.problem);
    }
    CU_ASSERT_TRUE(ok);
  }
  CU_FAIL("more injected runs than MAX_RUNS: the life keeps reaching new allocations");
}

static void print_totals(const char *what, const injection_totals *t) {
  printf("\n  %s (%s): %lu device allocation failures survived", what,
         recap_backend_name(test_device.backend), t->survived);
  if (t->absorbed) printf(" (%lu absorbed by the allocator's retry)", t->absorbed);
  printf("; OUT_OF_MEMORY from:");
  for (int k = 0; k < NUM_STEPS; ++k)
    if (t->by_step[k]) printf(" %s %lu,", STEP_NAMES[k], t->by_step[k]);
  printf("\n");
}

static void test_every_device_allocation_of_a_life_fails_with_out_of_memory_and_retry_works(void) {
  injection_totals t;
  inject(true, false, &t);
  print_totals("sticky failures, failed step retried", &t);
  CU_ASSERT_TRUE(t.survived > 0);
}

static void test_every_device_allocation_failing_once_is_reported_or_absorbed_by_the_retry(void) {
  injection_totals t;
  inject(false, false, &t);
  print_totals("one-shot failures", &t);
  CU_ASSERT_TRUE(t.survived > 0);
}

static void test_a_pipeline_is_cleanly_destroyable_after_any_device_allocation_failure(void) {
  injection_totals t;
  inject(true, true, &t);
  print_totals("sticky failures, destroyed at once", &t);
  CU_ASSERT_TRUE(t.survived > 0);
}

/* ------------------------------------------------------------------------------------------
 * Real sizes that do not fit
 * ---------------------------------------------------------------------------------------- */

/* One linear layer whose width D comes from a dim override; y = x w. */
static const char WIDE_SPEC[] =
    "name: too-wide\n"
    "dtype: f32\n"
    "dims: {D: 8}\n"
    "tensors:\n"
    "  x:    {shape: [1, D], role: input}\n"
    "  wide: {shape: [D, D], role: %s, init: zeros}\n"
    "ops:\n"
    "  - {op: linear, in: [x, wide], out: y}\n"
    "outputs: [y]\n";

static const char *const CAPACITY_ENV = "RECAP_HOST_MEMORY_BYTES";
enum { MIB = 1 << 20 };

/* The host device gets a capacity of 256 MiB for these tests, so that "more than free
 * memory" costs no real memory. */
static void limit_host_device(void) {
  if (test_device.backend == RECAP_BACKEND_HOST) setenv(CAPACITY_ENV, "268435456", 1);
}

static void unlimit_host_device(void) {
  if (test_device.backend == RECAP_BACKEND_HOST) unsetenv(CAPACITY_ENV);
}

static recap_status create_wide(const char *role, uint64_t d, recap_pipeline **out) {
  char yaml[1024], dim[64];
  snprintf(yaml, sizeof yaml, WIDE_SPEC, role);
  snprintf(dim, sizeof dim, "D=%llu", (unsigned long long)d);
  const char *dims[] = {dim, NULL};
  recap_pipeline_options o = life_options();
  o.dims = dims;
  return recap_pipeline_create_string(yaml, strlen(yaml), "too_wide.yaml", &o, out);
}

/* The smallest D whose [D, D] f32 tensor needs more than `bytes`. */
static uint64_t width_above(uint64_t bytes) {
  uint64_t d = (uint64_t)sqrt((double)bytes / 4.0);
  while (d * d * 4 <= bytes) ++d;
  return d;
}

static void test_a_dim_override_beyond_the_device_memory_is_refused_naming_the_tensor(void) {
  limit_host_device();
  size_t free_bytes = 0, total = 0;
  CHECK_OK(recap_device_mem_get_info(test_device, &free_bytes, &total));
  recap_pipeline *p = NULL;
  /* Found while checking the spec with the overridden dims, before any allocation: a spec
   * error at the tensor's position. */
  recap_clear_error();
  CHECK_STATUS(create_wide("param", width_above(total), &p), RECAP_STATUS_SPEC_ERROR);
  CHECK_ERROR_MENTIONS("tensor 'wide'");
  CHECK_ERROR_MENTIONS("more than the device memory");
  CU_ASSERT_PTR_NULL(p);
  unlimit_host_device();
}

/* A tensor that fits the device's total memory but not what is free: the check passes and the
 * real allocation fails. Free memory is lowered by a block the test holds, so the window
 * between free and total exists on every device. */
static void fails_beyond_free_memory(const char *role) {
  limit_host_device();
  void *held = NULL;
  recap_stream *stream = NULL;
  CHECK_OK(recap_stream_create(test_device, 0, RECAP_STREAM_NON_BLOCKING, &stream));
  memory_mark before, after;
  CHECK_OK(mark_memory(&before));
  CHECK_OK(recap_malloc(test_device, 64 * MIB, stream, &held));
  size_t free_bytes = 0, total = 0;
  CHECK_OK(recap_device_mem_get_info(test_device, &free_bytes, &total));
  uint64_t d = width_above(free_bytes + (total - free_bytes) / 2);
  recap_pipeline *p = NULL;
  recap_clear_error();
  recap_status st = create_wide(role, d, &p);
  printf("\n  a %s of [%llu, %llu] f32 (%llu bytes; %zu free of %zu): %s: %s", role,
         (unsigned long long)d, (unsigned long long)d, (unsigned long long)(d * d * 4),
         free_bytes, total, recap_status_name(st), recap_last_error());
  CHECK_STATUS(st, RECAP_STATUS_OUT_OF_MEMORY);
  CHECK_ERROR_MENTIONS("tensor 'wide'");
  CHECK_ERROR_MENTIONS("too_wide.yaml:6:3: error: "); /* where the spec declares it */
  CU_ASSERT_PTR_NULL(p);
  recap_pipeline_destroy(p);
  CHECK_OK(recap_free(held));
  CHECK_OK(mark_memory(&after));
  CHECK_OK(compare_marks(&before, &after));
  /* The device is fine afterwards: a pipeline that fits works. */
  CHECK_OK(create_wide(role, 8, &p));
  CHECK_OK(recap_pipeline_run(p, 0));
  CHECK_OK(recap_pipeline_destroy(p));
  CHECK_OK(recap_stream_destroy(stream));
  unlimit_host_device();
}

static void test_a_param_larger_than_free_memory_is_out_of_memory_naming_it(void) {
  fails_beyond_free_memory("param");
}

static void test_a_state_larger_than_free_memory_is_out_of_memory_naming_it(void) {
  fails_beyond_free_memory("state");
}

/* ------------------------------------------------------------------------------------------
 * The native allocator, in a child process
 * ---------------------------------------------------------------------------------------- */

static void add_life_tests(CU_pSuite s) {
  CU_ADD_TEST(s, test_every_device_allocation_of_a_life_fails_with_out_of_memory_and_retry_works);
  CU_ADD_TEST(s, test_every_device_allocation_failing_once_is_reported_or_absorbed_by_the_retry);
  CU_ADD_TEST(s, test_a_pipeline_is_cleanly_destroyable_after_any_device_allocation_failure);
}

/* A child that has not finished by then is hung. */
enum { CHILD_DEADLINE_S = 240 };

/* Runs this binary again with RECAP_ALLOC_CONF=backend:cudaMalloc and --child BACKEND: the process-
 * wide allocator reads its configuration once, at its creation. */
static void run_native_child(const char *backend) {
  fflush(NULL);
  pid_t pid = fork();
  CU_ASSERT_TRUE_FATAL(pid >= 0);
  if (pid == 0) {
    setenv("RECAP_ALLOC_CONF", "backend:cudaMalloc", 1);
    char *argv[] = {"pipeline_device_fault_test", "--child", (char *)backend, NULL};
    execv("/proc/self/exe", argv);
    _exit(127);
  }
  int wstatus = 0;
  struct timespec tick = {0, 20 * 1000 * 1000};
  pid_t got = 0;
  for (long waited = 0; (got = waitpid(pid, &wstatus, WNOHANG)) == 0; ++waited) {
    if (waited * 0.02 >= test_scaled_seconds(CHILD_DEADLINE_S)) {
      kill(pid, SIGKILL);
      waitpid(pid, &wstatus, 0);
      fprintf(stderr, "\n  native/%s: child hung; killed after %.0f s\n", backend,
              test_scaled_seconds(CHILD_DEADLINE_S));
      CU_FAIL("the child hung");
      return;
    }
    nanosleep(&tick, NULL);
  }
  bool ok = got == pid && WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0;
  if (!ok)
    fprintf(stderr, "\n  native/%s: child %s %d\n", backend,
            WIFEXITED(wstatus) ? "exited with" : "killed by signal",
            WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : WTERMSIG(wstatus));
  CU_ASSERT_TRUE(ok);
}

static void test_every_block_allocation_fails_cleanly_under_the_native_allocator(void) {
  run_native_child(test_device.backend == RECAP_BACKEND_CUDA ? "cuda" : "host");
}

static int child_main(const char *backend) {
  bool cuda = strcmp(backend, "cuda") == 0;
  CU_pSuite s = cuda ? test_add_cuda_suite("device_fault_life/cuda (backend:cudaMalloc)",
                                           test_suite_use_cuda, NULL)
                     : test_add_suite("device_fault_life/host (backend:cudaMalloc)",
                                      test_suite_use_host, NULL);
  add_life_tests(s);
  return test_run_all();
}

static void add_suite(CU_pSuite s) {
  add_life_tests(s);
  CU_ADD_TEST(s, test_every_block_allocation_fails_cleanly_under_the_native_allocator);
  CU_ADD_TEST(s, test_a_dim_override_beyond_the_device_memory_is_refused_naming_the_tensor);
  CU_ADD_TEST(s, test_a_param_larger_than_free_memory_is_out_of_memory_naming_it);
  CU_ADD_TEST(s, test_a_state_larger_than_free_memory_is_out_of_memory_naming_it);
}

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "--child") == 0) return child_main(argv[2]);
  /* The in-process runs use the default caching allocator, whatever the environment says. */
  unsetenv("RECAP_ALLOC_CONF");
  add_suite(test_add_suite("device_fault_life/host", test_suite_use_host, NULL));
  add_suite(test_add_cuda_suite("device_fault_life/cuda", test_suite_use_cuda, NULL));
  return test_run_all();
}
