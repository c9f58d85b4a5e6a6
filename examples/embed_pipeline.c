/*
 * embed_pipeline: a program that embeds a recap pipeline, using nothing but recap.h and
 * librecap.so. It loads a spec from a string, then serves it from several threads at once, the
 * way a server does: one pipeline holds the weights and each worker thread replays its own
 * clone (clones share the params but have their own inputs, outputs, memory, stream and
 * graphs, so they need no lock between them). Every output is checked against the same
 * arithmetic done here in plain C.
 *
 *   y = relu(x W^T + b) * g    with W = 0.25 everywhere and b = -0.5
 *
 * The values are small multiples of 1/4, exact in f32 (and in TF32 on a GPU), so the results
 * must match to rounding. Runs on the GPU when this recap has one, else on the host backend.
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "recap.h"

/* Batch buckets 1, 2 and 4: a batch of 3 replays bucket 4's graph with one padding row. */
static const char SPEC[] =
    "name: embed_threads\n"
    "dtype: f32\n"
    "dims: {B: [1, 2, 4], D: 8, H: 4}\n"
    "tensors:\n"
    "  x: {shape: [B, D], role: input}\n"
    "  g: {shape: [B, H], role: input}\n"
    "  w: {shape: [H, D], role: param, init: value, value: 0.25}\n"
    "  b: {shape: [H], role: param, init: value, value: -0.5}\n"
    "ops:\n"
    "  - {op: linear, in: [x, w, b], out: h, act: relu}\n"
    "  - {op: mul, in: [h, g], out: y}\n"
    "outputs: [y]\n";

enum { D = 8, H = 4, MAX_BATCH = 4, THREADS = 4, RUNS = 6 };

typedef struct {
  recap_pipeline *pipeline; /* this thread's clone */
  int index;
  int failed;
} worker;

static void report(int thread, const char *what, recap_status st) {
  fprintf(stderr, "FAIL: thread %d: %s: %s (%s)\n", thread, what, recap_status_name(st),
          recap_last_error());
}

/* One run of `batch` rows with inputs that depend on the thread and the run, so a clone that
 * read another's inputs or wrote another's outputs would be caught. */
static int run_once(worker *w, int run, int batch) {
  float x[MAX_BATCH * D], g[MAX_BATCH * H], y[MAX_BATCH * H];
  for (int i = 0; i < batch * D; i++) x[i] = (float)((i * 5 + w->index * 3 + run) % 9) - 4.0f;
  for (int i = 0; i < batch * H; i++) g[i] = (float)((i + w->index + run) % 5) * 0.5f;
  recap_status st;
  if ((st = recap_pipeline_copy_in(w->pipeline, "x", x, sizeof(float) * (size_t)(batch * D),
                                   batch)) != RECAP_OK ||
      (st = recap_pipeline_copy_in(w->pipeline, "g", g, sizeof(float) * (size_t)(batch * H),
                                   batch)) != RECAP_OK) {
    report(w->index, "copy_in", st);
    return 1;
  }
  if ((st = recap_pipeline_run(w->pipeline, batch)) != RECAP_OK) {
    report(w->index, "run", st);
    return 1;
  }
  st = recap_pipeline_copy_out(w->pipeline, "y", y, sizeof(float) * (size_t)(batch * H), batch);
  if (st != RECAP_OK) {
    report(w->index, "copy_out", st);
    return 1;
  }
  for (int r = 0; r < batch; r++) {
    float row_sum = 0.0f;
    for (int k = 0; k < D; k++) row_sum += x[r * D + k];
    float h = fmaxf(0.25f * row_sum - 0.5f, 0.0f);
    for (int c = 0; c < H; c++) {
      float want = h * g[r * H + c];
      if (fabsf(y[r * H + c] - want) > 1e-4f) {
        fprintf(stderr, "FAIL: thread %d run %d: y[%d][%d] = %g, want %g\n", w->index, run, r, c,
                y[r * H + c], want);
        return 1;
      }
    }
  }
  return 0;
}

static void *serve(void *arg) {
  worker *w = arg;
  for (int run = 0; run < RUNS && !w->failed; run++)
    w->failed = run_once(w, run, 1 + (run + w->index) % MAX_BATCH);
  return NULL;
}

int main(void) {
  recap_pipeline_options options = RECAP_PIPELINE_OPTIONS_INIT;
  options.override_device = 1;
  options.device.backend = recap_device_is_available(RECAP_BACKEND_CUDA) ? RECAP_BACKEND_CUDA
                                                                          : RECAP_BACKEND_HOST;
  printf("recap %s on the %s backend\n", recap_version(),
         recap_backend_name(options.device.backend));

  recap_pipeline *weights = NULL;
  recap_status st =
      recap_pipeline_create_string(SPEC, strlen(SPEC), "embed_threads.yaml", &options, &weights);
  if (st != RECAP_OK) {
    fprintf(stderr, "FAIL: create: %s\n%s\n", recap_status_name(st), recap_last_error_full());
    return 1;
  }

  worker workers[THREADS] = {{0}};
  pthread_t threads[THREADS];
  int started = 0, failed = 0;
  for (int i = 0; i < THREADS && !failed; i++) {
    workers[i].index = i;
    if ((st = recap_pipeline_clone(weights, NULL, &workers[i].pipeline)) != RECAP_OK) {
      report(i, "clone", st);
      failed = 1;
    } else if (pthread_create(&threads[i], NULL, serve, &workers[i]) != 0) {
      fprintf(stderr, "FAIL: pthread_create\n");
      failed = 1;
    } else {
      started++;
    }
  }
  for (int i = 0; i < started; i++) pthread_join(threads[i], NULL);

  /* Each clone captured the buckets it ran once and replayed the graphs for every run. */
  unsigned long long replays = 0, captures = 0;
  for (int i = 0; i < THREADS; i++) {
    if (!workers[i].pipeline) continue;
    failed |= workers[i].failed;
    recap_pipeline_stats stats;
    if ((st = recap_pipeline_stats_get(workers[i].pipeline, &stats)) != RECAP_OK) {
      report(i, "stats_get", st);
      failed = 1;
    } else if (stats.eager_runs != 0 || stats.replays != RUNS) {
      fprintf(stderr, "FAIL: thread %d: %llu replays and %llu eager runs, want %d and 0\n", i,
              (unsigned long long)stats.replays, (unsigned long long)stats.eager_runs, RUNS);
      failed = 1;
    } else {
      replays += stats.replays;
      captures += stats.captures;
    }
    if ((st = recap_pipeline_destroy(workers[i].pipeline)) != RECAP_OK) {
      report(i, "destroy", st);
      failed = 1;
    }
  }
  if ((st = recap_pipeline_destroy(weights)) != RECAP_OK) {
    report(-1, "destroy", st);
    failed = 1;
  }
  if (failed) return 1;
  printf("OK: %d threads, %llu replays of %llu captured graphs, every output as computed here\n",
         THREADS, replays, captures);
  return 0;
}
