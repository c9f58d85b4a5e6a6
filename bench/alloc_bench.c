/*
 * alloc_bench.c: the caching allocator's host-side cost on the GPU machine, against raw
 * cudaMalloc/cudaFree in the same run (bench/peer/torch_alloc_bench.sh runs it next to PyTorch's
 * caching allocator driven from C++ by bench/peer/torch_alloc_bench.cpp, and writes the table in
 * docs/ALLOCATOR.md). Two workloads, the same in both programs:
 *
 * - pair: recap_malloc + recap_free of one size, again and again (the cache hit); the median
 *   over REPS batches of the time per pair.
 * - trace: a mixed-size trace from a fixed seed (trace_next below; the C++ driver has the
 *   same generator): SLOTS live slots; each step picks a slot and frees it if full, else
 *   allocates a size drawn as 60% 512 B-1 MiB (log-uniform), 30% 1-10 MiB, 10% 10-128 MiB.
 *   Run once to warm the cache, then timed: time per operation (alloc or free). Raw
 *   cudaMalloc/cudaFree run its first RAW_TRACE_OPS steps (each call takes microseconds).
 *
 * `--backend host` runs recap's side on the host backend instead (the same caching logic over
 * host memory, no GPU needed), without the cudaMalloc column: the allocator's host-side cost
 * is what the pair loop measures, so this is how its hot path is profiled off the GPU machine
 * (e.g. under perf). The RESULT lines then say "recap-host". A --config=hostonly build has
 * only this mode.
 *
 * Every line "RESULT <impl> <case> <ns>" is for the script; the rest is for people.
 * Exits non-zero on any failure.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "include/recap.h"

#if RECAP_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

enum { REPS = 15, PAIR_BATCH = 10000, RAW_PAIR_BATCH = 200, SLOTS = 256 };
enum { TRACE_OPS = 200000, RAW_TRACE_OPS = 20000 };

static const size_t pair_sizes[] = {512, 64 << 10, 1 << 20, 8 << 20, 64 << 20};
enum { NUM_SIZES = sizeof pair_sizes / sizeof pair_sizes[0] };

#define CHECK(cond, ...)                              \
  do {                                                \
    if (!(cond)) {                                    \
      fprintf(stderr, "alloc_bench: " __VA_ARGS__);   \
      fprintf(stderr, " (%s)\n", recap_last_error()); \
      exit(1);                                        \
    }                                                 \
  } while (0)

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return v[n / 2];
}

/* The trace generator (a 64-bit LCG; bench/peer/torch_alloc_bench.cpp has the same). */
static uint64_t trace_next(uint64_t *x) {
  *x = *x * 6364136223846793005ULL + 1442695040888963407ULL;
  return *x >> 33;
}

static size_t trace_size(uint64_t *x) {
  uint64_t u = trace_next(x) % 100;
  if (u < 60) {
    unsigned e = 9 + (unsigned)(trace_next(x) % 11); /* [2^9, 2^20) */
    return ((size_t)1 << e) + (size_t)(trace_next(x) % ((uint64_t)1 << e));
  }
  if (u < 90) return ((size_t)1 << 20) + (size_t)(trace_next(x) % (9ULL << 20));
  return ((size_t)10 << 20) + (size_t)(trace_next(x) % (118ULL << 20));
}

typedef struct {
  recap_device dev;
  recap_stream *stream;
  int raw; /* cudaMalloc/cudaFree instead of recap's allocator */
} impl;

static void *impl_alloc(const impl *m, size_t size) {
  void *p = NULL;
#if RECAP_WITH_CUDA
  if (m->raw) {
    CHECK(cudaMalloc(&p, size) == cudaSuccess, "cudaMalloc(%zu) failed", size);
    return p;
  }
#endif
  CHECK(recap_malloc(m->dev, size, m->stream, &p) == RECAP_OK, "recap_malloc(%zu)", size);
  return p;
}

static void impl_free(const impl *m, void *p) {
  (void)m; /* only the raw (CUDA) path reads it */
#if RECAP_WITH_CUDA
  if (m->raw) {
    CHECK(cudaFree(p) == cudaSuccess, "cudaFree failed");
    return;
  }
#endif
  CHECK(recap_free(p) == RECAP_OK, "recap_free");
}

static double pair_ns(const impl *m, size_t size) {
  int batch = m->raw ? RAW_PAIR_BATCH : PAIR_BATCH;
  impl_free(m, impl_alloc(m, size)); /* warm: the segment is cached from here on */
  double t[REPS];
  for (int r = 0; r < REPS; r++) {
    double t0 = now_ns();
    for (int i = 0; i < batch; i++) impl_free(m, impl_alloc(m, size));
    t[r] = (now_ns() - t0) / batch;
  }
  return median(t, REPS);
}

/* Runs `ops` steps of the trace; returns the time per operation. */
static double trace_ns(const impl *m, int ops) {
  void *slot[SLOTS] = {0};
  uint64_t x = 42;
  double t0 = now_ns();
  for (int i = 0; i < ops; i++) {
    uint64_t s = trace_next(&x) % SLOTS;
    if (slot[s]) {
      impl_free(m, slot[s]);
      slot[s] = NULL;
    } else {
      slot[s] = impl_alloc(m, trace_size(&x));
    }
  }
  double per_op = (now_ns() - t0) / ops;
  for (int s = 0; s < SLOTS; s++)
    if (slot[s]) impl_free(m, slot[s]);
  return per_op;
}

static const char *size_name(size_t s, char *buf, size_t n) {
  if (s >= (1 << 20))
    snprintf(buf, n, "%zu MiB", s >> 20);
  else if (s >= 1024)
    snprintf(buf, n, "%zu KiB", s >> 10);
  else
    snprintf(buf, n, "%zu B", s);
  return buf;
}

int main(int argc, char **argv) {
  int host = !RECAP_WITH_CUDA;
  if (argc == 3 && strcmp(argv[1], "--backend") == 0 && strcmp(argv[2], "host") == 0) {
    host = 1;
  } else if (!(argc == 1 || (RECAP_WITH_CUDA && argc == 3 && strcmp(argv[1], "--backend") == 0 &&
                             strcmp(argv[2], "cuda") == 0))) {
    fprintf(stderr, "usage: alloc_bench [--backend cuda|host] (built %s CUDA)\n",
            RECAP_WITH_CUDA ? "with" : "without");
    return 2;
  }
  const char *impl_name = host ? "recap-host" : "recap";
  recap_backend_kind backend = host ? RECAP_BACKEND_HOST : RECAP_BACKEND_CUDA;
  impl ours = {.dev = {backend, 0}}, raw = {.dev = {RECAP_BACKEND_CUDA, 0}, .raw = 1};
  CHECK(recap_stream_create(ours.dev, 0, RECAP_STREAM_NON_BLOCKING, &ours.stream) == RECAP_OK,
        "no %s stream", host ? "host" : "CUDA");
#if RECAP_WITH_CUDA
  if (!host) CHECK(cudaSetDevice(0) == cudaSuccess, "cudaSetDevice");
#endif
  if (!host) printf("%-28s %14s %14s %10s\n", "case", "recap ns", "cudaMalloc ns", "speedup");
  for (int i = 0; i < NUM_SIZES; i++) {
    char name[32], label[48];
    snprintf(label, sizeof label, "pair_%s", size_name(pair_sizes[i], name, sizeof name));
    for (char *c = label; *c; c++)
      if (*c == ' ') *c = '_';
    double a = pair_ns(&ours, pair_sizes[i]), b = host ? 0 : pair_ns(&raw, pair_sizes[i]);
    printf("RESULT %s %s %.1f\n", impl_name, label, a);
    if (!host) printf("RESULT cudaMalloc %s %.1f\n", label, b);
    if (!host) printf("%-28s %14.1f %14.1f %9.1fx\n", label, a, b, b / a);
  }
  trace_ns(&ours, TRACE_OPS); /* warm the cache with the whole trace */
  double a = trace_ns(&ours, TRACE_OPS), b = host ? 0 : trace_ns(&raw, RAW_TRACE_OPS);
  printf("RESULT %s trace %.1f\n", impl_name, a);
  if (!host) printf("RESULT cudaMalloc trace %.1f\n", b);
  if (!host) printf("%-28s %14.1f %14.1f %9.1fx\n", "trace (per op)", a, b, b / a);
  size_t reserved = 0;
  CHECK(recap_memory_max_reserved(ours.dev, &reserved) == RECAP_OK, "max reserved");
  printf("recap peak reserved over the run: %.1f MiB\n", (double)reserved / (1 << 20));
  CHECK(recap_empty_cache(ours.dev) == RECAP_OK, "empty_cache");
  CHECK(recap_stream_destroy(ours.stream) == RECAP_OK, "stream destroy");
  return 0;
}
