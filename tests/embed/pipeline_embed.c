/*
 * An embedding program as a user writes it: only recap.h and librecap.so (tests/embed_test.sh
 * compiles it with the system compiler and links nothing else). It creates a pipeline from a
 * string, runs it in graph mode on the host backend for two batch sizes and checks the outputs
 * against the arithmetic done here: y = relu(x W + b) with W = 0.5 everywhere and b = -1.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "recap.h"

static const char SPEC[] =
    "name: embed\n"
    "device: host\n"
    "dtype: f32\n"
    "dims: {B: [2, 4], D: 8, H: 3}\n"
    "tensors:\n"
    "  x: {shape: [B, D], role: input}\n"
    "  w: {shape: [H, D], role: param, init: value, value: 0.5}\n"
    "  b: {shape: [H], role: param, init: value, value: -1.0}\n"
    "ops:\n"
    "  - {op: linear, in: [x, w, b], out: y, act: relu}\n"
    "outputs: [y]\n";

enum { D = 8, H = 3 };

static int fail(const char *what, recap_status st) {
  fprintf(stderr, "FAIL: %s: %s (%s)\n", what, recap_status_name(st), recap_last_error());
  return 1;
}

/* Runs `batch` rows through the pipeline and compares each output with the hand computation. */
static int run_batch(recap_pipeline *p, int batch) {
  float x[4 * D], y[4 * H];
  for (int i = 0; i < batch * D; ++i) x[i] = (float)((i * 7) % 11) - 3.0f;
  recap_status st = recap_pipeline_copy_in(p, "x", x, sizeof(float) * (size_t)(batch * D), batch);
  if (st != RECAP_OK) return fail("copy_in", st);
  if ((st = recap_pipeline_run(p, batch)) != RECAP_OK) return fail("run", st);
  st = recap_pipeline_copy_out(p, "y", y, sizeof(float) * (size_t)(batch * H), batch);
  if (st != RECAP_OK) return fail("copy_out", st);
  for (int r = 0; r < batch; ++r) {
    float row_sum = 0.0f;
    for (int k = 0; k < D; ++k) row_sum += x[r * D + k];
    float want = fmaxf(0.5f * row_sum - 1.0f, 0.0f);
    for (int c = 0; c < H; ++c)
      if (fabsf(y[r * H + c] - want) > 1e-5f) {
        fprintf(stderr, "FAIL: batch %d y[%d][%d] = %g, want %g\n", batch, r, c, y[r * H + c],
                want);
        return 1;
      }
  }
  return 0;
}

int main(void) {
  printf("recap %s (header %s)\n", recap_version(), RECAP_VERSION_STRING);
  /* Options as an embedder writes them: the initializer, then the fields it sets (compiled
   * with -Wall -Wextra -Werror by embed_test.sh). */
  recap_pipeline_options options = RECAP_PIPELINE_OPTIONS_INIT;
  options.override_mode = 1;
  options.mode = RECAP_MODE_GRAPH;
  recap_pipeline *p = NULL;
  recap_status st =
      recap_pipeline_create_string(SPEC, strlen(SPEC), "embed.yaml", &options, &p);
  if (st != RECAP_OK) return fail("create_string", st);
  int failed = run_batch(p, 3) || run_batch(p, 2) || run_batch(p, 3);
  recap_pipeline_stats stats;
  if (!failed && (st = recap_pipeline_stats_get(p, &stats)) != RECAP_OK)
    failed = fail("stats_get", st);
  /* Graph mode: both buckets captured once, every run a replay, nothing eager. */
  if (!failed && (stats.captures != 2 || stats.replays != 3 || stats.eager_runs != 0)) {
    fprintf(stderr, "FAIL: captures %llu replays %llu eager runs %llu, want 2 3 0\n",
            (unsigned long long)stats.captures, (unsigned long long)stats.replays,
            (unsigned long long)stats.eager_runs);
    failed = 1;
  }
  if ((st = recap_pipeline_destroy(p)) != RECAP_OK) failed = fail("destroy", st);
  if (failed) return 1;
  printf("embedded pipeline: 3 replays over 2 captured buckets, outputs as computed by hand\n");
  return 0;
}
