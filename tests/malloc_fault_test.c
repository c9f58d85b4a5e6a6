/*
 * malloc_fault_test.c: every host allocation of spec loading, IR building and planning, and of
 * the caching allocator's alloc/free/capture/replay sequences, fails in turn; each run must
 * fail cleanly with RECAP_STATUS_OUT_OF_MEMORY and leak nothing. The same sequences also run
 * with every device (raw backend) allocation failing in turn.
 *
 * How host allocations fail: this binary alone is linked with
 * -Wl,--wrap=malloc,--wrap=calloc,--wrap=realloc,--wrap=strdup,--wrap=free (tests/BUILD), so
 * every call to those functions from recap's code, libyaml and this file goes through the
 * __wrap_* functions below. While a run is armed they count allocations, fail exactly the Nth
 * (later ones succeed, so an error cannot hide behind a later failure), and remember every
 * pointer handed out; whatever is still remembered when the run has cleaned up is a leak. A
 * run is repeated for N = 1, 2, ... until one completes without reaching N: then every
 * allocation site on that path has failed once. Allocations glibc makes internally (realpath,
 * fopen) are not wrapped and never fail here. Under --config=asan LeakSanitizer checks the
 * whole process as well.
 *
 * Before the injected runs, each sequence runs once unarmed, so lazily created process-wide
 * state (the op registry, the capture registry) is not mistaken for a leak.
 */
#include <dirent.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "allocator/allocator.h"
#include "engine/plan.h"
#include "engine/spec.h"
#include "runtime/backend.h"
#include "runtime/capture.h"
#include "tests/test_util.h"

/* ------------------------------------------------------------------------------------------
 * The interposer
 * ---------------------------------------------------------------------------------------- */

void *__real_malloc(size_t size);
void *__real_calloc(size_t count, size_t size);
void *__real_realloc(void *ptr, size_t size);
char *__real_strdup(const char *s);
void __real_free(void *ptr);

void *__wrap_malloc(size_t size);
void *__wrap_calloc(size_t count, size_t size);
void *__wrap_realloc(void *ptr, size_t size);
char *__wrap_strdup(const char *s);
void __wrap_free(void *ptr);

/* Pointers handed out while armed: open addressing with linear probing, deleted by backward
 * shifting so the table needs no reset between runs. 2^18 slots hold far more live
 * allocations than any run here makes. */
enum { TABLE_BITS = 18, TABLE_SIZE = 1 << TABLE_BITS };
static uintptr_t live_table[TABLE_SIZE];
static size_t live_count;
static bool table_full;

static struct {
  bool armed;
  unsigned long calls;   /* allocation calls counted in this run */
  unsigned long fail_at; /* the call that fails (1-based; 0: none) */
  bool injected;         /* the fail_at-th call happened */
} g_fault;

static size_t slot_of(uintptr_t p) {
  return (size_t)((p >> 4) * 0x9E3779B97F4A7C15ull >> (64 - TABLE_BITS));
}

static void live_add(void *ptr) {
  if (!ptr) return;
  if (live_count >= TABLE_SIZE / 2) {
    table_full = true; /* reported by the run; the pointer is just not tracked */
    return;
  }
  size_t i = slot_of((uintptr_t)ptr);
  while (live_table[i]) i = (i + 1) & (TABLE_SIZE - 1);
  live_table[i] = (uintptr_t)ptr;
  live_count++;
}

static void live_remove(void *ptr) {
  if (!ptr || live_count == 0) return;
  size_t i = slot_of((uintptr_t)ptr);
  while (live_table[i] && live_table[i] != (uintptr_t)ptr) i = (i + 1) & (TABLE_SIZE - 1);
  if (!live_table[i]) return; /* not allocated while armed */
  live_table[i] = 0;
  live_count--;
  /* Backward shift: move later entries of the cluster into the hole when their home slot
   * allows, so every lookup still finds them without tombstones. */
  size_t hole = i;
  for (size_t j = (i + 1) & (TABLE_SIZE - 1); live_table[j]; j = (j + 1) & (TABLE_SIZE - 1)) {
    size_t home = slot_of(live_table[j]);
    bool movable = hole <= j ? (home <= hole || home > j) : (home <= hole && home > j);
    if (movable) {
      live_table[hole] = live_table[j];
      live_table[j] = 0;
      hole = j;
    }
  }
}

/* Whether this allocation call is the one to fail. */
static bool fail_now(void) {
  if (!g_fault.armed) return false;
  if (++g_fault.calls != g_fault.fail_at) return false;
  g_fault.injected = true;
  return true;
}

void *__wrap_malloc(size_t size) {
  if (fail_now()) return NULL;
  void *p = __real_malloc(size);
  if (g_fault.armed) live_add(p);
  return p;
}

void *__wrap_calloc(size_t count, size_t size) {
  if (fail_now()) return NULL;
  void *p = __real_calloc(count, size);
  if (g_fault.armed) live_add(p);
  return p;
}

void *__wrap_realloc(void *ptr, size_t size) {
  /* realloc(p, 0) frees (glibc): not an allocation that can fail. */
  if (size != 0 && fail_now()) return NULL;
  void *p = __real_realloc(ptr, size);
  if (g_fault.armed && (p || size == 0)) {
    live_remove(ptr);
    live_add(p);
  }
  return p;
}

char *__wrap_strdup(const char *s) {
  if (fail_now()) return NULL;
  char *p = __real_strdup(s);
  if (g_fault.armed) live_add(p);
  return p;
}

void __wrap_free(void *ptr) {
  live_remove(ptr);
  __real_free(ptr);
}

static void arm(unsigned long fail_at) {
  g_fault.calls = 0;
  g_fault.fail_at = fail_at;
  g_fault.injected = false;
  table_full = false;
  g_fault.armed = true;
}

static void disarm(void) {
  g_fault.armed = false;
}

/* Past this many injected runs of one sequence something loops: stop and fail. */
enum { MAX_RUNS = 200000 };

/* Totals for the summary (and docs/RELIABILITY.md). */
static unsigned long g_injected_spec, g_injected_bad_specs, g_injected_alloc_host,
    g_injected_alloc_raw;

/* Runs `run` unarmed once (it must succeed), then with the Nth host allocation failing for
 * N = 1, 2, ... until a run allocates fewer than N times. Each failing run must return
 * RECAP_STATUS_OUT_OF_MEMORY with a message, and leave no tracked allocation behind. With
 * `may_recover`, a run may also succeed: the caching allocator answers an allocation failure by
 * releasing its cache and retrying once, and the retry is the (N+1)th allocation, which
 * succeeds; those runs are counted in *recovered. Loading a spec has no such retry, so there a
 * success would mean a failure was swallowed. Returns the number of injected failures
 * survived; prints the first few problems. */
static unsigned long inject_host_expecting(const char *what, recap_status (*run)(const void *ctx),
                                           const void *ctx, recap_status clean, bool may_recover,
                                           unsigned long *recovered) {
  recap_status st = run(ctx);
  if (st != clean) {
    fprintf(stderr, "\n  %s: without injection: %s (expected %s): %s\n", what,
            recap_status_name(st), recap_status_name(clean), recap_last_error());
    CU_FAIL("the sequence does not behave as expected without injection");
    return 0;
  }
  unsigned long survived = 0, problems = 0;
  for (unsigned long n = 1; n <= MAX_RUNS; ++n) {
    recap_clear_error();
    arm(n);
    st = run(ctx);
    disarm();
    size_t leaked = live_count;
    if (!g_fault.injected) {
      /* The run made fewer than n allocations: every site has failed once. */
      if (st != clean) {
        fprintf(stderr, "\n  %s: the run after the last injection gives %s\n", what,
                recap_status_name(st));
        CU_FAIL("a run without injection changed its result");
      }
      CU_ASSERT_EQUAL(leaked, 0);
      return survived;
    }
    /* A spec's error whose message could not be allocated is still counted (ir.h), so a
     * bad spec stays refused as a spec error. */
    bool recovered_here = may_recover && st == clean;
    bool still_refused = clean == RECAP_STATUS_SPEC_ERROR && st == clean;
    bool ok = (recovered_here || still_refused ||
               (st == RECAP_STATUS_OUT_OF_MEMORY && recap_last_error()[0] != '\0')) &&
              leaked == 0 && !table_full;
    if (ok) {
      survived++;
      if (recovered_here) ++*recovered;
    } else if (problems++ < 5) {
      fprintf(stderr, "\n  %s: allocation %lu failed -> %s (%s), %zu allocations leaked%s\n", what,
              n, recap_status_name(st), recap_last_error(), leaked,
              table_full ? " (tracking table full)" : "");
    }
    CU_ASSERT_TRUE(ok);
    /* Forget a leak once reported, so the next run is judged on its own. */
    if (leaked) {
      memset(live_table, 0, sizeof live_table);
      live_count = 0;
    }
  }
  CU_FAIL("more injected runs than MAX_RUNS: the sequence does not terminate");
  return survived;
}

static unsigned long inject_host(const char *what, recap_status (*run)(const void *ctx),
                                 const void *ctx, bool may_recover, unsigned long *recovered) {
  return inject_host_expecting(what, run, ctx, RECAP_OK, may_recover, recovered);
}

/* ------------------------------------------------------------------------------------------
 * Spec loading, IR building, planning
 * ---------------------------------------------------------------------------------------- */

/* Everything the engine does with a spec before touching a device: load (which builds every
 * bucket's IR), build each bucket's IR, plan the largest, check the others fit, format. */
static recap_status load_and_plan(const void *ctx) {
  const char *path = ctx;
  recap__spec_options opts = {.device_memory_bytes = 80ull << 30};
  recap__diag diag = {0};
  recap__spec *spec = NULL;
  recap__ir *largest = NULL;
  recap__plan *plan = NULL;
  char *text = NULL;
  recap_status st = recap__spec_load_file(path, &opts, &spec, &diag);
  if (st != RECAP_OK) goto done;
  size_t buckets = recap__spec_num_buckets(spec);
  st = recap__ir_build(spec, buckets - 1, &largest, &diag);
  if (st != RECAP_OK) goto done;
  st = recap__plan_build(largest, &plan);
  if (st != RECAP_OK) goto done;
  for (size_t b = 0; b + 1 < buckets && st == RECAP_OK; ++b) {
    recap__ir *ir = NULL;
    st = recap__ir_build(spec, b, &ir, &diag);
    if (st == RECAP_OK) st = recap__plan_check_fits(plan, ir);
    recap__ir_destroy(ir);
  }
  if (st != RECAP_OK) goto done;
  st = recap__plan_format(largest, plan, &text);
done:
  free(text);
  recap__plan_destroy(plan);
  recap__ir_destroy(largest);
  recap__spec_destroy(spec);
  recap__diag_free(&diag);
  return st;
}

static int compare_names(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static void test_every_host_allocation_of_loading_and_planning_every_spec_fails_cleanly(void) {
  DIR *dir = opendir("specs");
  CU_ASSERT_PTR_NOT_NULL_FATAL(dir);
  char *names[256];
  size_t count = 0;
  struct dirent *e;
  while ((e = readdir(dir)) && count < 256) {
    size_t n = strlen(e->d_name);
    if (n > 5 && strcmp(e->d_name + n - 5, ".yaml") == 0) names[count++] = strdup(e->d_name);
  }
  closedir(dir);
  CU_ASSERT_TRUE_FATAL(count > 0);
  qsort(names, count, sizeof *names, compare_names);
  for (size_t i = 0; i < count; ++i) {
    char path[512];
    snprintf(path, sizeof path, "specs/%s", names[i]);
    unsigned long recovered = 0;
    unsigned long survived = inject_host(path, load_and_plan, path, false, &recovered);
    printf("\n  %s: %lu host allocation failures survived", path, survived);
    CU_ASSERT_TRUE(survived > 0);
    g_injected_spec += survived;
    free(names[i]);
  }
  printf("\n  specs: %lu injected host allocation failures survived in all\n", g_injected_spec);
}

/* A malformed spec, loaded as a server loads untrusted ones (files restricted to its folder):
 * the error paths must clean up under allocation failure as well as the success path. */
static recap_status load_bad(const void *ctx) {
  recap__spec_options opts = {.base_dir = "tests/data/bad_specs",
                              .device_memory_bytes = 80ull << 30};
  recap__spec *spec = NULL;
  recap__diag diag = {0};
  recap_status st = recap__spec_load_file(ctx, &opts, &spec, &diag);
  recap__spec_destroy(spec);
  recap__diag_free(&diag);
  return st;
}

static void test_every_host_allocation_of_rejecting_every_bad_spec_fails_cleanly(void) {
  DIR *dir = opendir("tests/data/bad_specs");
  CU_ASSERT_PTR_NOT_NULL_FATAL(dir);
  char *names[1024];
  size_t count = 0;
  struct dirent *e;
  while ((e = readdir(dir)) && count < 1024) {
    size_t n = strlen(e->d_name);
    if (n > 5 && strcmp(e->d_name + n - 5, ".yaml") == 0) names[count++] = strdup(e->d_name);
  }
  closedir(dir);
  CU_ASSERT_TRUE_FATAL(count > 0);
  qsort(names, count, sizeof *names, compare_names);
  unsigned long survived = 0, refused_anyway = 0;
  for (size_t i = 0; i < count; ++i) {
    char path[512];
    snprintf(path, sizeof path, "tests/data/bad_specs/%s", names[i]);
    survived +=
        inject_host_expecting(path, load_bad, path, RECAP_STATUS_SPEC_ERROR, true, &refused_anyway);
    free(names[i]);
  }
  g_injected_bad_specs = survived;
  printf(
      "\n  %zu bad specs: %lu injected host allocation failures survived (%lu of them still "
      "reported the spec's error)\n",
      count, survived, refused_anyway);
  CU_ASSERT_TRUE(survived > 0);
}

/* ------------------------------------------------------------------------------------------
 * The caching allocator: alloc, free, record_stream, pools, capture, replay
 * ---------------------------------------------------------------------------------------- */

enum { KIB = 1024, MIB = 1024 * 1024 };

/* Which raw allocation fails (fail_after), or -1 for none. */
typedef struct {
  long raw_fail_after;
  bool *raw_injected;                          /* set when the raw backend refused an allocation */
  recap__raw_failing_counts *raw_counts_after; /* the raw backend's counts after teardown */
} alloc_ctx;

/* One alloc/free/capture/replay sequence over an allocator instance of its own, on the host
 * device, over the failing raw backend. The first failure ends the work; everything is then
 * unwound (capture ended, route ended, blocks freed, pool released, allocator destroyed) and
 * the teardown itself must succeed, so the allocator is always left cleanly destroyable. */
static recap_status allocator_sequence(const void *ctx_in) {
  const alloc_ctx *ctx = ctx_in;
  recap_device dev = {RECAP_BACKEND_HOST, 0};
  recap__raw_runtime runtime;
  recap__raw_backend inner, raw;
  recap__raw_failing *failing = NULL;
  recap__allocator *a = NULL;
  recap_stream *s1 = NULL, *s2 = NULL;
  recap__graph *graph = NULL;
  recap__graph_exec *exec = NULL;
  void *p[8] = {0};
  recap_pool_id pool = {0};
  bool have_pool = false, routed = false, capturing = false;
  recap_status st, teardown = RECAP_OK;

  int teardown_line = 0;
#define TEARDOWN_FAILED()                         \
  do {                                            \
    teardown = RECAP_STATUS_INTERNAL;             \
    if (!teardown_line) teardown_line = __LINE__; \
  } while (0)
/* A free that fails to record its cross-stream events still releases the block (recap.h). */
#define FREE(ptr)                       \
  do {                                  \
    st = recap__allocator_free(a, ptr); \
    ptr = NULL;                         \
    if (st != RECAP_OK) goto unwind;    \
  } while (0)
#define STEP(expr)                   \
  do {                               \
    st = (expr);                     \
    if (st != RECAP_OK) goto unwind; \
  } while (0)

  STEP(recap__raw_runtime_init(&runtime, dev, &inner));
  STEP(recap__raw_failing_create(&inner, &failing));
  recap__raw_failing_backend(failing, &raw);
  recap__raw_failing_fail_after(failing, ctx->raw_fail_after);
  recap__allocator_options options = {.device = dev, .raw = &raw, .conf = "max_split_size_mb:40"};
  STEP(recap__allocator_create(&options, &a));
  STEP(recap_stream_create(dev, 0, RECAP_STREAM_NON_BLOCKING, &s1));
  STEP(recap_stream_create(dev, 0, RECAP_STREAM_NON_BLOCKING, &s2));

  /* Eager: small, large and oversize blocks on two streams, a split and a merge, a block
   * used on another stream, the cache emptied. */
  STEP(recap__allocator_malloc(a, 4 * KIB, s1, &p[0]));
  STEP(recap__allocator_malloc(a, 3 * MIB, s1, &p[1]));
  STEP(recap__allocator_malloc(a, 48 * MIB, s2, &p[2]));
  STEP(recap__allocator_record_stream(a, p[0], s2));
  FREE(p[1]);
  STEP(recap__allocator_malloc(a, 1 * MIB, s1, &p[1]));
  FREE(p[0]);
  STEP(recap__allocator_empty_cache(a));

  /* A capture into a private pool: growth under the relaxed mode, a free and reuse inside
   * the capture, a cross-stream free deferred to the capture's end, then replays. */
  STEP(recap__allocator_pool_create(a, &pool));
  have_pool = true;
  STEP(recap__allocator_route_begin(a, pool, s1));
  routed = true;
  STEP(recap__allocator_malloc(a, 2 * MIB, s1, &p[3]));
  STEP(recap__allocator_record_stream(a, p[3], s2));
  STEP(recap__capture_begin(s1, RECAP_CAPTURE_MODE_GLOBAL));
  capturing = true;
  STEP(recap__allocator_malloc(a, 8 * MIB, s1, &p[4]));
  STEP(recap__allocator_malloc(a, 1000, s1, &p[5]));
  STEP(s1->backend->memset_async(p[4], 0x5A, 8 * MIB, s1));
  FREE(p[5]);
  STEP(recap__allocator_malloc(a, 1000, s1, &p[5]));
  FREE(p[3]); /* used on s2: the free waits for the capture to end */
  capturing = false;
  STEP(recap__capture_end(s1, &graph));
  STEP(recap__allocator_route_end(a, s1));
  routed = false;
  STEP(s1->backend->graph_instantiate(graph, &exec));
  for (int i = 0; i < 3; ++i) STEP(s1->backend->graph_launch(exec, s1));
  STEP(recap_stream_synchronize(s1));
  recap_memory_stats stats;
  recap__allocator_stats(a, &stats);
  (void)stats;

unwind:
  /* Teardown: every step must succeed whatever failed above. */
  if (capturing) {
    recap__graph *discarded = NULL;
    if (recap__capture_end(s1, &discarded) == RECAP_OK && discarded)
      s1->backend->graph_destroy(discarded);
  }
  if (routed && recap__allocator_route_end(a, s1) != RECAP_OK) TEARDOWN_FAILED();
  if (exec) s1->backend->graph_exec_destroy(exec);
  if (graph) s1->backend->graph_destroy(graph);
  for (size_t i = 0; i < sizeof p / sizeof p[0]; ++i)
    if (p[i] && recap__allocator_free(a, p[i]) != RECAP_OK) TEARDOWN_FAILED();
  if (have_pool && recap__allocator_pool_release(a, pool) != RECAP_OK) TEARDOWN_FAILED();
  if (a) {
    recap_memory_stats s;
    recap__allocator_stats(a, &s);
    if (s.allocated_bytes[RECAP_STAT_ALL].current != 0) TEARDOWN_FAILED();
  }
  if (recap__allocator_destroy(a) != RECAP_OK) TEARDOWN_FAILED();
  if (s1 && recap_stream_destroy(s1) != RECAP_OK) TEARDOWN_FAILED();
  if (s2 && recap_stream_destroy(s2) != RECAP_OK) TEARDOWN_FAILED();
  if (failing) {
    recap__raw_failing_counts counts;
    recap__raw_failing_counts_get(failing, &counts);
    if (ctx->raw_injected) *ctx->raw_injected = counts.alloc_failures > 0;
    if (ctx->raw_counts_after) *ctx->raw_counts_after = counts;
  }
  recap__raw_failing_destroy(failing);
#undef STEP
#undef FREE
#undef TEARDOWN_FAILED
  if (teardown != RECAP_OK) {
    fprintf(stderr, "\n  allocator sequence: teardown after %s failed (line %d): %s\n",
            recap_status_name(st), teardown_line, recap_last_error());
    return teardown;
  }
  return st;
}

static void test_every_host_allocation_of_allocator_sequences_fails_cleanly(void) {
  alloc_ctx ctx = {.raw_fail_after = -1};
  unsigned long recovered = 0;
  g_injected_alloc_host =
      inject_host("allocator sequence", allocator_sequence, &ctx, true, &recovered);
  printf(
      "\n  allocator: %lu injected host allocation failures survived (%lu of them absorbed by "
      "the out-of-memory retry: the run then succeeded)\n",
      g_injected_alloc_host, recovered);
  CU_ASSERT_TRUE(g_injected_alloc_host > 0);
}

static void test_every_raw_allocation_of_allocator_sequences_fails_cleanly(void) {
  unsigned long survived = 0;
  for (long n = 0; n < 1000; ++n) {
    bool injected = false;
    recap__raw_failing_counts after;
    alloc_ctx ctx = {.raw_fail_after = n, .raw_injected = &injected, .raw_counts_after = &after};
    recap_clear_error();
    recap_status st = allocator_sequence(&ctx);
    /* Every segment went back to the raw backend. */
    CU_ASSERT_EQUAL(after.live_allocations, 0);
    CU_ASSERT_EQUAL(after.live_bytes, 0);
    if (!injected) {
      CHECK_OK(st);
      g_injected_alloc_raw = survived;
      printf("\n  allocator: %lu injected device allocation failures survived\n", survived);
      CU_ASSERT_TRUE(survived > 0);
      return;
    }
    if (st != RECAP_STATUS_OUT_OF_MEMORY)
      fprintf(stderr, "\n  raw allocation %ld failed -> %s: %s\n", n + 1, recap_status_name(st),
              recap_last_error());
    CU_ASSERT_EQUAL(st, RECAP_STATUS_OUT_OF_MEMORY);
    survived++;
  }
  CU_FAIL("the sequence keeps reaching new raw allocations");
}

static void test_print_the_total(void) {
  unsigned long total =
      g_injected_spec + g_injected_bad_specs + g_injected_alloc_host + g_injected_alloc_raw;
  printf(
      "\n  injected allocation failures survived: %lu (specs %lu, bad specs %lu, allocator "
      "host %lu, allocator device %lu)\n",
      total, g_injected_spec, g_injected_bad_specs, g_injected_alloc_host, g_injected_alloc_raw);
  CU_ASSERT_TRUE(total > 0);
}

int main(void) {
  CU_pSuite s = test_add_suite("malloc_fault", NULL, NULL);
  CU_ADD_TEST(s, test_every_host_allocation_of_loading_and_planning_every_spec_fails_cleanly);
  CU_ADD_TEST(s, test_every_host_allocation_of_rejecting_every_bad_spec_fails_cleanly);
  CU_ADD_TEST(s, test_every_host_allocation_of_allocator_sequences_fails_cleanly);
  CU_ADD_TEST(s, test_every_raw_allocation_of_allocator_sequences_fails_cleanly);
  CU_ADD_TEST(s, test_print_the_total);
  return test_run_all();
}
