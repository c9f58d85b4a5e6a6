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
#include "cli/plan_text.h"
#include "engine/pipeline.h"
#include "engine/plan.h"
#include "engine/spec.h"
#include "runtime/backend.h"
#include "runtime/capture.h"
#include "runtime/error.h"
#include "runtime/host_fault.h"
#include "runtime/host_graph.h"
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
    g_injected_alloc_raw, g_injected_pipeline_host, g_injected_pipeline_device;

/* Runs `run` unarmed once (it must succeed), then with the Nth host allocation failing for
 * N = 1, 2, ... until a run allocates fewer than N times. Each failing run must return
 * RECAP_STATUS_OUT_OF_MEMORY with a message, and leave no tracked allocation behind. With
 * `may_recover`, a run may also succeed: the caching allocator answers an allocation failure by
 * releasing its cache and retrying once, and the retry is the (N+1)th allocation, which
 * succeeds; those runs are counted in *recovered. Loading a spec has no such retry, so there a
 * success would mean a failure was swallowed. Returns the number of injected failures
 * survived; prints the first few problems. */
/* A host kernel (the host GEMM's packing buffers) whose own malloc fails returns
 * RECAP_STATUS_OUT_OF_MEMORY from inside the "device", and the host backend makes every kernel
 * failure a sticky device fault, as a CUDA context is after a fault: the run then returns
 * RECAP_STATUS_DEVICE_ERROR whose message names the OUT_OF_MEMORY. The pipeline sequences
 * accept that (and count it); the sequence itself resets the fault before going on. */
static bool g_accept_kernel_oom;
static unsigned long g_kernel_oom;

static bool is_kernel_oom(recap_status st, const char *message) {
  return g_accept_kernel_oom && st == RECAP_STATUS_DEVICE_ERROR &&
         strstr(message, "RECAP_STATUS_OUT_OF_MEMORY") != NULL;
}

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
    /* The complete text of a failure (recap_last_error_full: a spec's whole error list) is the
     * thread's until its next failure, not a leak: release it before counting, keeping the
     * message that is judged below. */
    char message[2048];
    snprintf(message, sizeof message, "%s", recap_last_error());
    recap_clear_error();
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
    bool ok = (recovered_here || still_refused || is_kernel_oom(st, message) ||
               (st == RECAP_STATUS_OUT_OF_MEMORY && message[0] != '\0')) &&
              leaked == 0 && !table_full;
    if (ok) {
      survived++;
      if (recovered_here) ++*recovered;
    } else if (problems++ < 5) {
      fprintf(stderr, "\n  %s: allocation %lu failed -> %s (%s), %zu allocations leaked%s\n", what,
              n, recap_status_name(st), message, leaked,
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

/* Everything the engine does with a spec before touching a device: the load path (every
 * bucket's IR, fusion, the plan over every bucket), a check that each bucket fits the plan,
 * and the plan's text. */
static recap_status load_and_plan(const void *ctx) {
  const char *path = ctx;
  recap__load_options opts = {.device_memory_bytes = 80ull << 30};
  recap__diag diag = {0};
  recap__model *m = NULL;
  char *text = NULL;
  recap_status st = recap__load_file(path, &opts, &m, &diag);
  for (size_t b = 0; st == RECAP_OK && b < m->num_buckets; ++b)
    st = recap__plan_check_fits(m->plan, m->irs[b]);
  if (st == RECAP_OK) st = cli_plan_format(m->irs[m->num_buckets - 1], m->plan, &text);
  free(text);
  recap__model_free_loaded(m);
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
  recap__load_options opts = {.spec = {.base_dir = "tests/data/bad_specs"},
                              .device_memory_bytes = 80ull << 30};
  recap__model *m = NULL;
  recap__diag diag = {0};
  recap_status st = recap__load_file(ctx, &opts, &m, &diag);
  recap__model_free_loaded(m);
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

/* ------------------------------------------------------------------------------------------
 * Pipelines: create, capture, replay, copies, rebind, clone, destroy
 * ---------------------------------------------------------------------------------------- */

/* A spec shrunk through recap_pipeline_options.dims so that thousands of whole pipeline lives
 * fit in the test's time. */
typedef struct {
  const char *path;
  const char *const *dims;
  int64_t batch;     /* real rows of every run: below the largest bucket */
  const char *input; /* copied in, then rebound to memory of the test's */
} pipe_case;

enum { MAX_CHECKED = 8 };

/* One tensor compared after every run: outputs (the run's rows) and states (whole). */
typedef struct {
  char *name; /* a copy: the IR it comes from is gone */
  int64_t rows;
  size_t bytes;
  unsigned char *ref;     /* what the run without injection produced */
  unsigned char *scratch; /* copied out here (allocated before arming) */
} checked_tensor;

typedef struct {
  const pipe_case *c;
  bool record; /* this run writes the references */
  checked_tensor checked[MAX_CHECKED];
  size_t num_checked;
  unsigned char *input; /* the input's bytes, the whole buffer */
  size_t input_bytes;
  /* Device mode: RECAP_HOST_MEMORY_BYTES is lowered for the run and lifted at the first
   * failure ("faults stop"); failed and failed_raw_index say where the run failed. */
  bool device_faults;
  bool failed;
  int64_t failed_raw_index; /* raw (device) allocations that succeeded before the failure */
} pipe_ctx;

static const recap_device HOST = {RECAP_BACKEND_HOST, 0};
static const char *const CAPACITY_ENV = "RECAP_HOST_MEMORY_BYTES";

static int64_t device_allocs(void) {
  recap_memory_stats s;
  if (recap_memory_stats_get(HOST, &s) != RECAP_OK) return -1;
  return s.num_device_alloc;
}

/* Copies out every checked tensor of `p` and records it (reference run) or compares it. */
static recap_status check_results(pipe_ctx *ctx, recap_pipeline *p, const char *when) {
  for (size_t i = 0; i < ctx->num_checked; ++i) {
    checked_tensor *t = &ctx->checked[i];
    RECAP_TRY(recap_pipeline_copy_out(p, t->name, t->scratch, t->bytes, t->rows));
    if (ctx->record && strcmp(when, "first replay") == 0) {
      memcpy(t->ref, t->scratch, t->bytes);
    } else if (memcmp(t->ref, t->scratch, t->bytes) != 0) {
      return RECAP_FAIL(RECAP_STATUS_INTERNAL,
                        "%s: tensor '%s' differs from the run without injection", when, t->name);
    }
  }
  return RECAP_OK;
}

/* Feeds the input, runs `batch` rows and checks every result: what a caller does. */
static recap_status feed_run_check(pipe_ctx *ctx, recap_pipeline *p, const char *when) {
  RECAP_TRY(recap_pipeline_copy_in(p, ctx->c->input, ctx->input, ctx->input_bytes, 0));
  RECAP_TRY(recap_pipeline_run(p, ctx->c->batch));
  return check_results(ctx, p, when);
}

/* The whole life of a pipeline on the host backend: create (load, plan, params, buffers,
 * arena, pool), warmup and capture of every bucket, replay, copy in and out, rebind of the
 * input to memory of the caller's (a re-capture), a clone (its own capture and replay), and
 * destroy. The first failure ends the sequence; then faults stop (device mode lifts the
 * capacity; a host malloc fails only once anyway) and every pipeline still alive must be
 * usable: fed, run and checked bit for bit against the run without injection, which also
 * shows that a capture failure that turned graphs off left correct eager runs. Then
 * everything is destroyed, which must succeed. Returns the first failure's status with its
 * message, RECAP_OK when nothing failed, or RECAP_STATUS_INTERNAL when the recovery did not
 * work. */
static recap_status pipeline_life(const void *ctx_in) {
  pipe_ctx *ctx = (pipe_ctx *)ctx_in;
  const pipe_case *c = ctx->c;
  recap_pipeline_options o = {
      .struct_size = sizeof o, .override_device = 1, .device = HOST, .warmup = 1, .dims = c->dims};
  recap_pipeline *p = NULL, *clone = NULL;
  void *buffer = NULL;
  recap_status st = RECAP_OK, first = RECAP_OK;
  static char why[4096];
  why[0] = '\0';
  int64_t allocs_before = device_allocs();
  ctx->failed = false;

#define STEP(expr)                   \
  do {                               \
    st = (expr);                     \
    if (st != RECAP_OK) goto failed; \
  } while (0)
  STEP(recap_pipeline_create_file(c->path, &o, &p));
  STEP(recap_pipeline_copy_in(p, c->input, ctx->input, ctx->input_bytes, 0));
  STEP(recap_pipeline_capture(p));
  STEP(recap_pipeline_run(p, c->batch));
  STEP(check_results(ctx, p, "first replay"));
  STEP(recap_malloc(HOST, ctx->input_bytes, recap_pipeline_stream(p), &buffer));
  STEP(recap_pipeline_rebind(p, c->input, buffer));
  STEP(feed_run_check(ctx, p, "replay after the rebind"));
  STEP(recap_pipeline_clone(p, NULL, &clone));
  STEP(feed_run_check(ctx, clone, "the clone's replay"));
  recap_pipeline_stats stats;
  STEP(recap_pipeline_stats_get(p, &stats));
  if (!ctx->record && !ctx->device_faults && stats.capture_failures == 0 &&
      (stats.replays != 2 || stats.eager_runs != 0)) {
    st = RECAP_FAIL(RECAP_STATUS_INTERNAL, "%llu replays and %llu eager runs, expected 2 and 0",
                    (unsigned long long)stats.replays, (unsigned long long)stats.eager_runs);
    goto failed;
  }
#undef STEP
  goto teardown;

failed:
  first = st;
  snprintf(why, sizeof why, "%s", recap_last_error());
  ctx->failed = true;
  ctx->failed_raw_index = device_allocs() - allocs_before;
  if (ctx->device_faults) unsetenv(CAPACITY_ENV);
  if (is_kernel_oom(st, why)) {
    /* A device fault: the context is lost (docs/RELIABILITY.md, "Device faults"), so the
     * pipelines need only be destroyable, which they must be with the fault still there;
     * the reset then stands for the new process a server would start. */
    g_kernel_oom++;
    recap_pipeline_destroy(clone);
    recap_pipeline_destroy(p);
    clone = p = NULL;
    recap__host_backend_reset_fault_for_testing();
    goto teardown;
  }
  if (st == RECAP_STATUS_INTERNAL) goto teardown; /* a wrong result: reported as it is */
  /* Usable once faults stop. */
  if (p && (st = feed_run_check(ctx, p, "recovery of the pipeline")) != RECAP_OK) goto broken;
  if (clone && (st = feed_run_check(ctx, clone, "recovery of the clone")) != RECAP_OK) goto broken;

teardown:
  if ((st = recap_pipeline_destroy(clone)) != RECAP_OK) goto broken;
  clone = NULL;
  if ((st = recap_pipeline_destroy(p)) != RECAP_OK) goto broken;
  p = NULL;
  if ((st = recap_free(buffer)) != RECAP_OK) goto broken;
  buffer = NULL;
  /* Cached segments and their blocks' bookkeeping would look like leaks, and so would the
   * pinned staging blocks copy_in caches. */
  if ((st = recap_empty_cache(HOST)) != RECAP_OK) goto broken;
  if ((st = recap_host_empty_cache()) != RECAP_OK) goto broken;
  if (first != RECAP_OK) return recap__fail_plain(first, "%s", why);
  return RECAP_OK;

broken:
  fprintf(stderr, "\n  %s: after %s (%s): the recovery failed: %s: %s\n", c->path,
          recap_status_name(first), why, recap_status_name(st), recap_last_error());
  recap__host_backend_reset_fault_for_testing();
  recap_pipeline_destroy(clone);
  recap_pipeline_destroy(p);
  recap_free(buffer);
  recap_empty_cache(HOST);
  recap_host_empty_cache();
  return RECAP_FAIL(RECAP_STATUS_INTERNAL, "the pipeline was not usable after a failure");
}

/* Small values of the input's dtype, never NaN, so bitwise comparison is meaningful. */
static void fill_input(unsigned char *out, size_t bytes, recap_dtype dtype) {
  uint32_t x = 12345;
  size_t es = recap_dtype_size(dtype);
  for (size_t i = 0; i + es <= bytes; i += es) {
    x = x * 1664525u + 1013904223u;
    uint16_t h;
    switch (dtype) {
      case RECAP_DTYPE_F16:
        h = (uint16_t)(((x >> 16) & 0x83FF) | 0x3000); /* +-[0.125, 0.25) */
        memcpy(out + i, &h, 2);
        break;
      case RECAP_DTYPE_BF16:
        h = (uint16_t)(((x >> 16) & 0x807F) | 0x3E00); /* +-[0.125, 0.25) */
        memcpy(out + i, &h, 2);
        break;
      default: {
        float f = (float)((x >> 8) & 0xFFFF) / 65536.0f - 0.5f;
        memcpy(out + i, &f, es < sizeof f ? es : sizeof f);
      }
    }
  }
}

/* Sets up the context from an unarmed pipeline: the input's bytes, the tensors to check. */
static void pipe_ctx_init(pipe_ctx *ctx, const pipe_case *c) {
  memset(ctx, 0, sizeof *ctx);
  ctx->c = c;
  recap_pipeline_options o = {
      .struct_size = sizeof o, .override_device = 1, .device = HOST, .dims = c->dims};
  recap_pipeline *p = NULL;
  CHECK_OK(recap_pipeline_create_file(c->path, &o, &p));
  CU_ASSERT_PTR_NOT_NULL_FATAL(p);
  const recap__model *m = p->model;
  const recap__ir *ir = m->irs[m->num_buckets - 1];
  int64_t most = m->bucket_values[m->num_buckets - 1];
  for (size_t t = 0; t < ir->num_tensors; ++t) {
    const recap__ir_tensor *tt = &ir->tensors[t];
    if (strcmp(tt->name, c->input) == 0) {
      ctx->input_bytes = (size_t)tt->bytes;
      ctx->input = malloc(ctx->input_bytes);
      fill_input(ctx->input, ctx->input_bytes, tt->dtype);
    }
    bool output = tt->role == RECAP_ROLE_INTERMEDIATE && tt->is_output;
    if (!output && tt->role != RECAP_ROLE_STATE) continue;
    CU_ASSERT_TRUE_FATAL(ctx->num_checked < MAX_CHECKED);
    checked_tensor *k = &ctx->checked[ctx->num_checked++];
    k->name = strdup(tt->name);
    /* A run's rows of an output (its padding rows are not defined); a state whole, so that
     * padding rows and warmups that leave a trace are seen. */
    bool rows = output && tt->bucket_axis >= 0 && c->batch > 0;
    k->rows = rows ? c->batch : 0;
    k->bytes = rows ? (size_t)tt->bytes / (size_t)most * (size_t)c->batch : (size_t)tt->bytes;
    k->ref = malloc(k->bytes);
    k->scratch = malloc(k->bytes);
  }
  CU_ASSERT_PTR_NOT_NULL_FATAL(ctx->input);
  CHECK_OK(recap_pipeline_destroy(p));
  /* The reference run, which also creates the process-wide state the sequence touches. */
  ctx->record = true;
  CHECK_OK(pipeline_life(ctx));
  ctx->record = false;
}

static void pipe_ctx_free(pipe_ctx *ctx) {
  free(ctx->input);
  for (size_t i = 0; i < ctx->num_checked; ++i) {
    free(ctx->checked[i].name);
    free(ctx->checked[i].ref);
    free(ctx->checked[i].scratch);
  }
}

static const char *const MLP_DIMS[] = {"H=64", "B=1,2,4", NULL};
static const char *const DECODE_DIMS[] = {"B=1,2,4", "D=16", "H=2", "Dh=8", "Smax=8", NULL};
static const char *const FORK_JOIN_DIMS[] = {"B=2,4", "D=64", NULL};
static const pipe_case PIPE_CASES[] = {
    {"specs/mlp_decode.yaml", MLP_DIMS, 3, "x"},
    {"specs/decode_step.yaml", DECODE_DIMS, 3, "x"},
    {"specs/fork_join.yaml", FORK_JOIN_DIMS, 3, "x"},
};
enum { NUM_PIPE_CASES = sizeof PIPE_CASES / sizeof PIPE_CASES[0] };

static void test_every_host_allocation_of_a_pipelines_life_fails_cleanly(void) {
  g_accept_kernel_oom = true;
  for (size_t i = 0; i < NUM_PIPE_CASES; ++i) {
    pipe_ctx ctx;
    pipe_ctx_init(&ctx, &PIPE_CASES[i]);
    unsigned long recovered = 0, kernel_before = g_kernel_oom;
    unsigned long survived = inject_host(PIPE_CASES[i].path, pipeline_life, &ctx, true, &recovered);
    printf(
        "\n  %s (shrunk): %lu host allocation failures survived (%lu absorbed by the "
        "allocator's retry, %lu in a host kernel: a device fault)",
        PIPE_CASES[i].path, survived, recovered, g_kernel_oom - kernel_before);
    CU_ASSERT_TRUE(survived > 0);
    g_injected_pipeline_host += survived;
    pipe_ctx_free(&ctx);
  }
  g_accept_kernel_oom = false;
  printf("\n  pipelines: %lu injected host allocation failures survived in all\n",
         g_injected_pipeline_host);
}

/* Device allocations fail through the host device's capacity: RECAP_HOST_MEMORY_BYTES set to
 * the bytes in use plus k, for k = 1, 3, 5, ... MiB. Every segment the caching allocator
 * takes is a multiple of 2 MiB (2 MiB for small blocks, 20 MiB or the size rounded to 2 MiB
 * for large ones), so each step moves the failure to the next raw allocation or further into
 * a large one, until the whole life fits. The cache is emptied before each run so every run
 * starts from the same memory. */
enum { MAX_DEVICE_STEPS = 4096 };

static void test_every_device_allocation_of_a_pipelines_life_fails_cleanly(void) {
  for (size_t i = 0; i < NUM_PIPE_CASES; ++i) {
    pipe_ctx ctx;
    pipe_ctx_init(&ctx, &PIPE_CASES[i]);
    ctx.device_faults = true;
    unsigned long survived = 0, absorbed = 0, distinct = 0;
    int64_t last_index = -1;
    bool done = false;
    for (size_t k = 1; k < 2 * MAX_DEVICE_STEPS && !done; k += 2) {
      CHECK_OK(recap_empty_cache(HOST));
      size_t free_bytes = 0, total = 0;
      CHECK_OK(recap_device_mem_get_info(HOST, &free_bytes, &total));
      char capacity[32];
      snprintf(capacity, sizeof capacity, "%zu", total - free_bytes + k * MIB);
      recap_memory_stats before, after;
      CHECK_OK(recap_memory_stats_get(HOST, &before));
      setenv(CAPACITY_ENV, capacity, 1);
      recap_clear_error();
      recap_status st = pipeline_life(&ctx);
      unsetenv(CAPACITY_ENV);
      CHECK_OK(recap_memory_stats_get(HOST, &after));
      bool retried =
          after.num_alloc_retries > before.num_alloc_retries || after.num_ooms > before.num_ooms;
      if (!ctx.failed && !retried) {
        CHECK_OK(st);
        done = true;
        break;
      }
      bool ok = (st == RECAP_OK && !ctx.failed) ||
                (st == RECAP_STATUS_OUT_OF_MEMORY && recap_last_error()[0] != '\0');
      if (!ok)
        fprintf(stderr, "\n  %s: capacity in use + %zu MiB -> %s: %s\n", PIPE_CASES[i].path, k,
                recap_status_name(st), recap_last_error());
      CU_ASSERT_TRUE(ok);
      survived++;
      if (!ctx.failed) absorbed++;
      if (ctx.failed && ctx.failed_raw_index != last_index) distinct++;
      if (ctx.failed) last_index = ctx.failed_raw_index;
    }
    CU_ASSERT_TRUE(done);
    printf(
        "\n  %s (shrunk): %lu device allocation failures survived (%lu distinct raw "
        "allocations; %lu absorbed by the allocator's retry)",
        PIPE_CASES[i].path, survived, distinct, absorbed);
    CU_ASSERT_TRUE(survived > 0);
    g_injected_pipeline_device += survived;
    pipe_ctx_free(&ctx);
  }
  printf("\n  pipelines: %lu injected device allocation failures survived in all\n",
         g_injected_pipeline_device);
}

static void test_print_the_total(void) {
  unsigned long total = g_injected_spec + g_injected_bad_specs + g_injected_alloc_host +
                        g_injected_alloc_raw + g_injected_pipeline_host +
                        g_injected_pipeline_device;
  printf(
      "\n  injected allocation failures survived: %lu (specs %lu, bad specs %lu, allocator "
      "host %lu, allocator device %lu, pipelines host %lu, pipelines device %lu)\n",
      total, g_injected_spec, g_injected_bad_specs, g_injected_alloc_host, g_injected_alloc_raw,
      g_injected_pipeline_host, g_injected_pipeline_device);
  CU_ASSERT_TRUE(total > 0);
}

int main(void) {
  CU_pSuite s = test_add_suite("malloc_fault", NULL, NULL);
  CU_ADD_TEST(s, test_every_host_allocation_of_loading_and_planning_every_spec_fails_cleanly);
  CU_ADD_TEST(s, test_every_host_allocation_of_rejecting_every_bad_spec_fails_cleanly);
  CU_ADD_TEST(s, test_every_host_allocation_of_allocator_sequences_fails_cleanly);
  CU_ADD_TEST(s, test_every_raw_allocation_of_allocator_sequences_fails_cleanly);
  CU_ADD_TEST(s, test_every_host_allocation_of_a_pipelines_life_fails_cleanly);
  CU_ADD_TEST(s, test_every_device_allocation_of_a_pipelines_life_fails_cleanly);
  CU_ADD_TEST(s, test_print_the_total);
  return test_run_all();
}
